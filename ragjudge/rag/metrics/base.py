"""The one interface of a RAG metric, the values it passes around, and the registry.

A RAG metric is one :class:`MetricUnit` in its family's module. The unit says

* which names it answers to and how its spec parses (:meth:`MetricUnit.parse`),
* which sample fields it needs (:attr:`MetricUnit.needs`),
* for an LLM metric, the requests it makes for a sample (:meth:`LLMMetric.requests`), asked
  again with the answers so far until it needs nothing more -- the evaluator *and* the dry-run
  planner both drive this one method, so they cannot disagree -- and how it scores from the
  answers (:meth:`LLMMetric.score`);
* for a deterministic metric, its scores on all samples at once (:meth:`DeterministicMetric.scores`).

Grading scales are never literals: the top grade and the "relevant from" threshold come from
the grading prompt's front-matter (:class:`Setup`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ...errors import MetricError
from ...llm.prompts import load_prompt
from ...measures import Measure, format_spec
from ...measures.grammar import Param
from ..report import Score
from ..samples import DEFAULT_K, Sample

__all__ = [
    "RagMetric",
    "Request",
    "Setup",
    "MetricUnit",
    "LLMMetric",
    "DeterministicMetric",
    "register",
    "unit_of",
    "units",
    "prompt",
    "sized",
    "format_passages",
    "format_numbered",
    "format_context",
    "split_sentences",
    "fraction_true",
    "present",
    "missing_text",
    "REVIEWABLE",
    "reviewed",
    "review_request",
]


@dataclass(frozen=True)
class RagMetric:
    """One RAG metric: ``name``, typed non-default ``params`` (sorted), cutoff ``k``.

    ``measure`` is the ranking measure behind ``hit``/``ndcg``/``context_ndcg``... (its ``k``
    is ``None``: the cutoff is resolved per sample). ``str()`` is the canonical spec, which
    parses back to an equal value.
    """

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    k: int | None = None
    measure: Measure | None = None

    def get(self, key: str, default: Any = None) -> Any:
        for pk, pv in self.params:
            if pk == key:
                return pv
        return default

    @property
    def unit(self) -> MetricUnit:
        return unit_of(self.name)

    @property
    def needs_llm(self) -> bool:
        return isinstance(self.unit, LLMMetric)

    def __str__(self) -> str:
        return format_spec(self.name, self.params, self.k)


# ----------------------------------------------------------------------------- prompts
_SIZED: dict[tuple[str, str, int], Any] = {}


def prompt(name: str, language: str = "en") -> Any:
    """A shipped prompt template by name (``"faithfulness_claims.v2"``), in its ``language``
    variant where one is shipped (``faithfulness_claims.es.v2``)."""
    return load_prompt(name, language=language)


def sized(name: str, array: str, n: int, language: str = "en") -> Any:
    """The prompt with its reply array ``array`` pinned to exactly ``n`` items (``minItems`` =
    ``maxItems``), so strict structured output and local validation both enforce the count."""
    p = prompt(name, language)
    key = (p.sha256, array, n)
    got = _SIZED.get(key)
    if got is None:
        schema = dict(p.output_schema)
        props = dict(schema["properties"])
        props[array] = {**props[array], "minItems": n, "maxItems": n}
        schema["properties"] = props
        got = replace(p, output_schema=schema)
        _SIZED[key] = got
    return got


@dataclass(frozen=True)
class Setup:
    """What a metric needs to know about the run beyond the sample: the chunk grading mode,
    the relevance judge's prompt (pointwise grading through a judge), the embeddings model,
    and ``review``: the run asks both the listwise chunk grades and the passages supporting
    each reference sentence, so a sample with a reference gets both from one call
    (:data:`REVIEW`, see :func:`review_request`)."""

    grading: str = "listwise"
    judge_prompt: Any = None
    embedding_model: str | None = None
    review: bool = False
    #: The samples' language: sentence rules (:func:`split_sentences`) and prompt variants.
    language: str = "en"

    #: Prompts of the two chunk-grading modes.
    LISTWISE: ClassVar[str] = "relevance_listwise.v1"
    POINTWISE: ClassVar[str] = "relevance.v1"
    #: The one call that grades the chunks (listwise's scale) and cites passages per sentence
    #: of the reference.
    REVIEW: ClassVar[str] = "context_review.v3"
    #: Chunks per call of a listwise grading (a longer list is split, and is not reviewed).
    WINDOW: ClassVar[int] = 20

    def prompt(self, name: str) -> Any:
        """Shipped prompt ``name`` in this run's language."""
        return prompt(name, self.language)

    def sized(self, name: str, array: str, n: int) -> Any:
        """:func:`sized` in this run's language."""
        return sized(name, array, n, self.language)

    def sentences(self, text: str) -> list[str]:
        """:func:`split_sentences` with this run's language rules."""
        return split_sentences(text, self.language)

    @property
    def grading_prompt(self) -> Any:
        if self.grading == "pointwise":
            return self.judge_prompt if self.judge_prompt is not None else self.prompt(self.POINTWISE)
        return self.prompt(self.LISTWISE)

    @property
    def top_grade(self) -> int:
        """The top of the grading prompt's label scale (its front-matter ``labels``)."""
        return top_grade(self.grading_prompt)

    @property
    def relevant_from(self) -> int:
        """The lowest grade that counts as relevant: the prompt's ``relevant_from`` front-matter
        key, else the upper half of its scale (``ceil((top + 1) / 2)``: 2 on 0-3, 3 on 0-4)."""
        p = self.grading_prompt
        given = p.meta.get("relevant_from") if isinstance(getattr(p, "meta", None), Mapping) else None
        if isinstance(given, int) and not isinstance(given, bool):
            return given
        return math.ceil((self.top_grade + 1) / 2)


def top_grade(p: Any) -> int:
    """Largest label of a prompt's integer label scale."""
    values = [v for v in p.label_values if isinstance(v, int) and not isinstance(v, bool)]
    if not values:
        raise MetricError(f"prompt {p.name} has no integer label scale")
    return max(values)


# ----------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Request:
    """One LLM request a metric makes for a sample; its answer is stored under ``key``.

    A chat request has ``prompt`` + ``variables`` and ``parse`` (reply object -> value; raise
    ``ValueError`` to have the reply repaired/re-asked by :meth:`ragjudge.llm.LLM.structured`).
    An embeddings request has ``embed`` (texts) and ``model``. ``pair`` marks a pointwise
    (query, passage) relevance grade that a given relevance judge answers itself. ``assume``
    is the answer the dry-run planner supposes when it is not cached (``None``: unknown, the
    plan stops there). ``what`` names the call in failure reasons; ``group`` counts failures
    over a batch of like requests ("2 of 5 chunk grades failed").
    """

    key: str
    what: str
    prompt: Any = field(default=None, compare=False)
    variables: tuple[tuple[str, str], ...] = ()
    parse: Callable[[Any], Any] | None = field(default=None, compare=False)
    embed: tuple[str, ...] | None = None
    model: str | None = None
    pair: bool = False
    group: str | None = None
    assume: Any = field(default=None, compare=False)

    @property
    def identity(self) -> tuple[Any, ...]:
        """Two requests with the same identity are one request (asked once per sample)."""
        schema = None if self.prompt is None else json.dumps(self.prompt.output_schema, sort_keys=True)
        sha = None if self.prompt is None else self.prompt.sha256
        return (sha, schema, self.variables, self.embed, self.model, self.pair)


def chat(key: str, what: str, p: Any, variables: Mapping[str, str], parse: Callable[[Any], Any],
         **kw: Any) -> Request:
    """A chat :class:`Request` (variables sorted, so equal requests have equal identities)."""
    return Request(key, what, p, tuple(sorted(variables.items())), parse, **kw)


# ----------------------------------------------------------------------------- units
class MetricUnit:
    """A RAG metric. Subclass :class:`LLMMetric` or :class:`DeterministicMetric`."""

    #: Spec names this unit answers to.
    names: ClassVar[tuple[str, ...]] = ()
    #: Sample fields it needs (``question``, ``contexts``, ``response``, ``reference``...):
    #: a metric whose field no sample has is a usage error before any call.
    needs: ClassVar[tuple[str, ...]] = ()
    #: Whether the spec takes ``@k``.
    takes_k: ClassVar[bool] = False
    #: The parameters a spec may set, in the measure grammar's terms (default, converter from
    #: text, allowed values): the one source for parsing, errors, the CLI help and the
    #: service's metric catalog.
    params: ClassVar[Mapping[str, Param]] = {}

    def parameters(self, name: str) -> Mapping[str, Param]:
        """The parameters of spec name ``name`` (a unit answering to several names may differ)."""
        return self.params

    def check_names(self, name: str, raw: Mapping[str, str], spec: str) -> None:
        """Refuse a parameter the unit does not declare, naming the ones it does."""
        declared = self.parameters(name)
        bad = sorted(set(raw) - set(declared))
        if bad and not declared:
            raise MetricError(f"metric {name!r} takes no parameters, got {spec!r}")
        if bad:
            raise MetricError(f"unknown parameter {bad[0]!r} for {name} in {spec!r}; "
                              f"allowed: {', '.join(sorted(declared))}")

    def read_params(self, name: str, raw: Mapping[str, str], spec: str) -> dict[str, Any]:
        """Every declared parameter's value (given ones converted, the rest their defaults)."""
        self.check_names(name, raw, spec)
        out: dict[str, Any] = {}
        for key, param in self.parameters(name).items():
            if key not in raw:
                out[key] = param.default
                continue
            try:
                out[key] = param.convert(raw[key])
            except ValueError:
                raise MetricError(f"{key} must be {param.allowed} in {spec!r}") from None
        return out

    def parse(self, name: str, raw: dict[str, str], k: int | None, spec: str) -> list[RagMetric]:
        """The metric(s) a spec reports (a spec may give several columns); by default the
        declared parameters that differ from their defaults, sorted."""
        values = self.read_params(name, raw, spec)
        shown = tuple(sorted((key, v) for key, v in values.items()
                             if v != self.parameters(name)[key].default))
        return [RagMetric(name, shown, k)]

    def fields(self, m: RagMetric) -> tuple[str, ...]:
        """Sample fields ``m`` needs (a parameter may change them)."""
        return self.needs

    def check(self, m: RagMetric, setup: Setup) -> None:
        """Raise :class:`MetricError` when ``m`` cannot run with ``setup`` (before any call)."""
        if self.uses_embeddings(m) and not setup.embedding_model:
            raise MetricError(f"{m} needs an embeddings model: pass embedding_model= "
                              "(CLI: --embedding-model M, e.g. text-embedding-3-small)")

    def uses_embeddings(self, m: RagMetric) -> bool:
        """Whether ``m`` makes an embeddings request (then it needs an embeddings model)."""
        return False

    def shares(self, m: RagMetric) -> frozenset[str]:
        """The answers ``m`` reads that one review call can give (:data:`REVIEWABLE`)."""
        return frozenset()

    def definition(self, m: RagMetric) -> str:
        raise NotImplementedError


class LLMMetric(MetricUnit):
    """A metric scored from LLM answers, one sample at a time."""

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        """The requests for sample ``s`` given the answers ``got`` so far (keyed by
        :attr:`Request.key`), or the reason ``s`` is undetermined. The evaluator asks the ones
        not yet answered and calls again; an answered list means: score now."""
        raise NotImplementedError

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        """The score from the answers (every request of the last :meth:`requests` answered)."""
        raise NotImplementedError


class DeterministicMetric(MetricUnit):
    """A metric computed without an LLM, on all samples at once (batched by the core)."""

    def scores(self, m: RagMetric, samples: Sequence[Sample], *, match: str | None,
               default_k: int = DEFAULT_K) -> list[Score]:
        raise NotImplementedError


_REGISTRY: dict[str, MetricUnit] = {}


def register(unit_class: type[MetricUnit]) -> type[MetricUnit]:
    """Class decorator: add a unit (one instance) under each of its names."""
    unit = unit_class()
    for name in unit.names:
        if name in _REGISTRY:
            raise RuntimeError(f"RAG metric {name!r} registered twice")
        _REGISTRY[name] = unit
    return unit_class


def unit_of(name: str) -> MetricUnit:
    """The unit of a metric name (ranking measures fall back to the ranking unit, ``"*"``)."""
    return _REGISTRY.get(name) or _REGISTRY["*"]


def units() -> dict[str, MetricUnit]:
    return dict(_REGISTRY)


# ----------------------------------------------------------------------------- the review call
#: What one :data:`Setup.REVIEW` call answers: the chunk grades and the passages supporting each reference sentence.
REVIEWABLE = frozenset({"grades", "statements"})


def reviewed(metrics: Sequence[RagMetric], grading: str) -> bool:
    """Whether a run of ``metrics`` asks both answers of a review call (listwise grading)."""
    got: frozenset[str] = frozenset()
    for m in metrics:
        got |= m.unit.shares(m)
    return grading == "listwise" and REVIEWABLE <= got


def _review_prompt(n: int, m: int, language: str = "en") -> Any:
    """The review prompt for ``n`` passages and ``m`` reference sentences: exactly ``n``
    grades and ``m`` source lists of passage numbers 1..n (so strict structured output and
    local validation both enforce them)."""
    p = sized(Setup.REVIEW, "grades", n, language)
    key = (p.sha256, "sources", n, m)
    got = _SIZED.get(key)
    if got is None:
        schema = json.loads(json.dumps(p.output_schema))
        lists = schema["properties"]["sources"]
        lists.update(minItems=m, maxItems=m)
        lists["items"]["items"] = {**lists["items"]["items"], "minimum": 1, "maximum": n}
        got = _SIZED[key] = replace(p, output_schema=schema)
    return got


def review_request(s: Sample, setup: Setup) -> Request | None:
    """The one call giving a sample's listwise chunk grades and, for each sentence of its
    reference (:func:`split_sentences`), the passages supporting it, when ``setup.review``
    holds and the sample has a question, a reference and at most :data:`Setup.WINDOW` chunk
    texts; else ``None``. Its answer: ``{"grades": [...], "statements": [(sentence,
    passage numbers), ...]}``.

    Every metric that needs either answer returns this same request, so the evaluator asks it
    once per sample (equal identities). The grades use the scale of the review prompt's
    front-matter, which a test keeps equal to the listwise prompt's."""
    texts = s.context_texts
    if (not setup.review or not texts or len(texts) > Setup.WINDOW
            or not present(s.question) or not present(s.reference)):
        return None
    n = len(texts)
    sentences = setup.sentences(s.reference or "")

    def parse(obj: Any) -> dict[str, Any]:
        grades = [int(g) for g in obj["grades"]]
        cited = [tuple(int(j) for j in js) for js in obj["sources"]]
        bad = [j for js in cited for j in js if not 1 <= j <= n]
        if bad:
            raise ValueError(f"sources must be passage numbers 1-{n}, got {bad[0]}")
        return {"grades": grades, "statements": list(zip(sentences, cited, strict=True))}

    return chat("review", "context review", _review_prompt(n, len(sentences), setup.language),
                {"question": s.question or "", "reference": format_numbered(sentences),
                 "passages": format_passages(texts), "count": str(n),
                 "sentences": str(len(sentences))}, parse)


# ----------------------------------------------------------------------------- shared helpers
# A bracketed number (any bracket style) inside a passage, and blank-line runs.
_MARKER = re.compile(r"[\[［【〔(（]\s*(\d+)\s*[\]］】〕)）]")
_BLANK = re.compile(r"\n\s*\n")


def _unnumber(text: str) -> str:
    """Neutralise ``[k]`` markers inside a passage so it cannot forge the listwise numbering:
    ``[2]`` (any brackets, digits, spacing) becomes ``(2)``; blank-line runs inside a passage
    become one newline, so a passage cannot open a block of its own."""
    return _BLANK.sub("\n", _MARKER.sub(r"(\1)", text.strip()))


def format_passages(texts: Sequence[str]) -> str:
    """``[1] text`` blocks separated by blank lines (how prompts number passages and claims);
    numbering inside the texts is neutralised (:func:`_unnumber`)."""
    return "\n\n".join(f"[{i}] {_unnumber(t)}" for i, t in enumerate(texts, start=1))


def format_numbered(items: Sequence[str]) -> str:
    """``1. text`` lines (claims, reference sentences); whitespace inside an item collapses,
    so an item cannot start a numbered line of its own."""
    return "\n".join(f"{i}. {' '.join(c.split())}" for i, c in enumerate(items, start=1))


# A list marker opening a line ("- ", "* ", "• ", "2. ", "3) "): ours replaces it.
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")


def split_sentences(text: str, language: str = "en") -> list[str]:
    """The sentences of ``text``, deterministically: each line on its own (a list marker
    dropped), cut by sentencex's rules for ``language`` (abbreviations such as Spanish "Sra.",
    initials, decimals, quotes; CJK full stops too; a language sentencex does not know falls
    back along its own language chain to English). Whitespace is collapsed; a piece without a
    letter or digit is dropped, and a text of only such pieces is one sentence. Context
    recall's units."""
    from sentencex import segment  # only context recall needs it

    out: list[str] = []
    for line in text.splitlines():
        out.extend(segment(language, _BULLET.sub("", line)))
    kept = [" ".join(p.split()) for p in out if any(ch.isalnum() for ch in p)]
    return kept or ([" ".join(text.split())] if text.strip() else [])


def fraction_true(flags: Sequence[bool]) -> float:
    """sum(flags) / len(flags): faithfulness = supported claims / claims; context_recall =
    attributed statements / statements."""
    return sum(1 for f in flags if f) / len(flags)


def present(text: str | None) -> bool:
    return text is not None and bool(text.strip())


def missing_text(what: str, text: str | None) -> str:
    """``"empty response"`` / ``"no response"``: the reason a text field is unusable."""
    return f"empty {what}" if text is not None else f"no {what}"


def format_context(texts: Sequence[str]) -> str:
    """Unnumbered passages separated by blank lines, for a prompt that reads them as one
    context and never cites them (:func:`_unnumber` still keeps each in one block)."""
    return "\n\n".join(_unnumber(t) for t in texts)
