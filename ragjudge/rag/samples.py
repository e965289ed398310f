"""RAG samples: one question, its retrieved contexts, the answer, and whatever gold exists.

Samples come in the shapes people already have:

* RAGAS names: ``user_input``, ``retrieved_contexts``, ``retrieved_context_ids``, ``reference``,
  ``reference_contexts``, ``reference_context_ids``, ``response``;
* DeepEval names: ``input``, ``actual_output``, ``expected_output``, ``retrieval_context``,
  ``context`` (the gold context);
* the id+text contract: ``{"retrieved": [{"id": ..., "text": ...}, ...]}`` or a bare list of ids,
  with ``expected_output`` (or ``relevant``) as a list of relevant ids or an ``{id: gain}`` map,
  and an optional ``metadata.k``.

``expected_output`` is the reference answer when it is a string and the gold ids when it is a
list or a map. DeepEval's camelCase JSON keys (``actualOutput``, ``retrievalContext``,
``expectedOutput``...) are read as their snake_case names. Files are JSONL, a JSON array (or
``{"samples": [...]}``) or CSV (list cells as JSON or Python literals, as ``DataFrame.to_csv``
writes them). Objects are read by duck typing, with no dependency on their libraries: pandas
and polars DataFrames, Hugging Face ``datasets.Dataset``, RAGAS ``EvaluationDataset`` /
``SingleTurnSample``, DeepEval ``EvaluationDataset`` / ``LLMTestCase``, and any pydantic model
(``model_dump()``), dataclass (``asdict``) or mapping. Keys that no accepted name matches are
ignored, with one warning listing them (descriptive fields of generated test sets, such as
``ragjudge synth``'s ``style``, without one). A bad value raises :class:`~ragjudge.errors.InputError` naming the
source, line, sample and field; with ``skip_invalid=True`` bad samples are collected in
:attr:`SampleSet.invalid` instead.
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
import math
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io.records import csv_dict_reader, jsonl_lines, load_json
from ..io.streams import decode_text, open_input
from .options import DEFAULT_K
from .traces import select_traces, trace_format, trace_records

__all__ = [
    "Context",
    "Sample",
    "SampleSet",
    "DEFAULT_K",
    "parse_samples",
    "read_samples",
    "read_traces",
    "samples_from_records",
    "samples_from_dataframe",
    "as_samples",
]

#: Cutoff used when neither the sample (``metadata.k``) nor the metric (``@k``) gives one.

_ID_FIELDS = ("id", "sample_id", "query_id", "qid")
_QUESTION_FIELDS = ("user_input", "input", "question", "query")
_RESPONSE_FIELDS = ("response", "actual_output", "answer")
_REFERENCE_FIELDS = ("reference", "ground_truth", "expected_answer")
_CONTEXT_TEXT_FIELDS = ("retrieved_contexts", "retrieval_context", "contexts")
_GOLD_TEXT_FIELDS = ("reference_contexts", "context")
_GOLD_ID_FIELDS = ("reference_context_ids", "relevant", "relevant_ids")
_KNOWN = set(
    _ID_FIELDS + _QUESTION_FIELDS + _RESPONSE_FIELDS + _REFERENCE_FIELDS + _CONTEXT_TEXT_FIELDS
    + _GOLD_TEXT_FIELDS + _GOLD_ID_FIELDS
    + ("expected_output", "retrieved", "retrieved_context_ids", "answers", "metadata")
)
#: Descriptive fields that test-set generators write beside the sample and that no metric
#: reads: ``style`` (``ragjudge synth``'s samples.jsonl) and ``synthesizer_name`` (RAGAS's
#: test-set generator). Accepted without the unrecognised-field warning, and otherwise ignored.
_DESCRIPTIVE = frozenset({"style", "synthesizer_name"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _snake(key: str) -> str:
    """``actualOutput`` -> ``actual_output`` (DeepEval's JSON keys)."""
    return _CAMEL.sub("_", key).lower()


def _record(item: Any) -> Any:
    """One sample as a mapping with accepted key names: a mapping, a pydantic model
    (``model_dump()``, v1 ``dict()``), a dataclass (``asdict``) or a namedtuple; camelCase keys
    that are accepted names in snake_case are renamed. Anything else is returned as is (and
    rejected by :func:`_build`)."""
    if not isinstance(item, Mapping):
        if callable(getattr(item, "model_dump", None)):
            item = item.model_dump()
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            item = dataclasses.asdict(item)
        elif callable(getattr(item, "_asdict", None)):
            item = item._asdict()
        elif callable(getattr(item, "dict", None)) and hasattr(item, "__fields__"):
            item = item.dict()
        else:
            return item
    if all(key in _KNOWN for key in item if isinstance(key, str)):
        return item
    out: dict[Any, Any] = {}
    for key, value in item.items():
        name = key
        if isinstance(key, str) and key not in _KNOWN and _snake(key) in _KNOWN:
            name = _snake(key)
            if name in item:
                continue  # both spellings: the snake_case one wins
        out[name] = value
    return out


def _unrecognised(record: Any) -> set[str]:
    """Keys of a record that no accepted name matches and that hold a value."""
    if not isinstance(record, Mapping):
        return set()
    return {str(k) for k, v in record.items()
            if k not in _KNOWN and k not in _DESCRIPTIVE and not _missing(v) and v != [] and v != {} and v != ""}


@dataclass(frozen=True)
class Context:
    """One retrieved chunk: an id, a text, or both (rank = position in the sample)."""

    id: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class Sample:
    """One RAG interaction. Absent fields are ``None`` (an empty string is a given, empty value).

    ``relevant`` maps gold document ids to gains; ``reference_contexts`` are gold texts (for
    content matching); ``answers`` are acceptable answer strings (``containment@k``; defaults
    to ``[reference]``); ``k`` is the sample's own cutoff (``metadata.k``).
    """

    id: str
    question: str | None = None
    contexts: tuple[Context, ...] | None = None
    response: str | None = None
    reference: str | None = None
    relevant: Mapping[str, int] | None = None
    reference_contexts: tuple[str, ...] | None = None
    answers: tuple[str, ...] | None = None
    k: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def context_texts(self) -> list[str] | None:
        """Texts of the retrieved chunks, ``None`` when the sample has none or some lack text."""
        if self.contexts is None or any(c.text is None for c in self.contexts):
            return None
        return [c.text for c in self.contexts]  # type: ignore[misc]

    @property
    def context_ids(self) -> list[str] | None:
        """Ids of the retrieved chunks, ``None`` when the sample has none or some lack an id."""
        if self.contexts is None or any(c.id is None for c in self.contexts):
            return None
        return [c.id for c in self.contexts]  # type: ignore[misc]

    def cutoff(self, metric_k: int | None, default: int = DEFAULT_K) -> int:
        """The cutoff for this sample: ``metadata.k``, else the metric's ``@k``, else ``default``."""
        if self.k is not None:
            return self.k
        if metric_k is not None:
            return metric_k
        return default


class SampleSet(Sequence[Sample]):
    """The valid samples of a source plus the errors of the ones skipped (``skip_invalid``)."""

    def __init__(
        self,
        samples: Iterable[Sample],
        invalid: Iterable[InputError] = (),
        *,
        source: str | None = None,
    ) -> None:
        self._samples = tuple(samples)
        self.invalid: tuple[InputError, ...] = tuple(invalid)
        self.source = source

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i):  # type: ignore[override]
        return self._samples[i]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self._samples)

    def __repr__(self) -> str:
        src = f", source={self.source!r}" if self.source else ""
        bad = f", {len(self.invalid)} invalid" if self.invalid else ""
        return f"SampleSet({len(self._samples)} samples{bad}{src})"


# ----------------------------------------------------------------------------- values
def _missing(value: Any) -> bool:
    # pandas writes NaN (or None / pd.NA) for an absent cell.
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def _listish(value: Any) -> Any:
    """numpy arrays / pandas Series (parquet round trips) and tuples become lists."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


class _Bad(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _str(value: Any, fld: str) -> str:
    if isinstance(value, str):
        return value
    raise _Bad(fld, f"must be a string, got {type(value).__name__}")


def _id(value: Any, fld: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Bad(fld, f"ids must be strings or integers, got {type(value).__name__} {value!r}")
    text = str(value)
    if not text.strip():
        raise _Bad(fld, "ids must not be empty")
    return text


def _str_list(value: Any, fld: str) -> list[str]:
    value = _listish(value)
    if not isinstance(value, list):
        raise _Bad(fld, f"must be a list of strings, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _Bad(f"{fld}[{i}]", f"must be a string, got {type(item).__name__}")
    return value


def _id_list(value: Any, fld: str) -> list[str]:
    value = _listish(value)
    if not isinstance(value, list):
        raise _Bad(fld, f"must be a list of ids, got {type(value).__name__}")
    return [_id(item, f"{fld}[{i}]") for i, item in enumerate(value)]


def _gains(value: Any, fld: str) -> dict[str, int]:
    value = _listish(value)
    if isinstance(value, Mapping):
        out: dict[str, int] = {}
        for key, gain in value.items():
            doc = _id(key, fld)
            if isinstance(gain, float) and math.isfinite(gain) and gain == int(gain):
                gain = int(gain)
            if isinstance(gain, bool) or not isinstance(gain, int):
                raise _Bad(f"{fld}[{doc!r}]", f"gain must be an integer, got {gain!r}")
            out[doc] = gain
        return out
    if isinstance(value, list):
        return {doc: 1 for doc in _id_list(value, fld)}
    raise _Bad(fld, f"must be a list of relevant ids or an {{id: gain}} map, got {type(value).__name__}")


def _contexts(value: Any, fld: str, *, bare: str) -> list[Context]:
    """``[{"id":..,"text":..}]`` items, or bare items that are ids (``bare="id"``) or texts."""
    value = _listish(value)
    if not isinstance(value, list):
        raise _Bad(fld, f"must be a list, got {type(value).__name__}")
    out: list[Context] = []
    for i, item in enumerate(value):
        where = f"{fld}[{i}]"
        item = _listish(item)
        if isinstance(item, Mapping):
            unknown = set(item) - {"id", "text", "content", "score", "title", "metadata"}
            if unknown:
                raise _Bad(where, f"unknown keys {sorted(unknown)} (expected id, text)")
            cid = item.get("id")
            text = item.get("text", item.get("content"))
            if _missing(cid) and _missing(text):
                raise _Bad(where, "needs an 'id' or a 'text'")
            out.append(
                Context(
                    id=None if _missing(cid) else _id(cid, f"{where}.id"),
                    text=None if _missing(text) else _str(text, f"{where}.text"),
                )
            )
        elif bare == "id":
            out.append(Context(id=_id(item, where)))
        elif isinstance(item, str):
            out.append(Context(text=item))
        else:
            raise _Bad(where, f"must be a string, got {type(item).__name__}")
    return out


def _first(record: Mapping[str, Any], names: Sequence[str]) -> tuple[str | None, Any]:
    for name in names:
        if name in record and not _missing(record[name]):
            return name, record[name]
    return None, None


def _k(value: Any, fld: str) -> int:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(fld, f"k must be a positive integer, got {value!r}")
    return value


def _build(record: Mapping[str, Any], index: int) -> Sample:
    if not isinstance(record, Mapping):
        raise _Bad("sample", f"must be an object, got {type(record).__name__}")
    if not _KNOWN.intersection(record):
        raise _Bad(
            "sample",
            "no recognised field (expected e.g. user_input/input/question, retrieved_contexts/"
            "retrieval_context/retrieved, response/actual_output, reference/expected_output)",
        )
    for name in _ID_FIELDS:
        if name in record and _missing(record[name]):
            # An id given as null (or NaN) is a broken record, not "no id": numbering it silently
            # would pair its judgments with whatever sample later takes that number.
            raise _Bad(name, "the sample id is null" if record[name] is None
                       else f"the sample id is {record[name]!r}, not an id")
    name, raw = _first(record, _ID_FIELDS)
    sid = _id(raw, name) if name else str(index)

    name, raw = _first(record, _QUESTION_FIELDS)
    question = _str(raw, name) if name else None
    name, raw = _first(record, _RESPONSE_FIELDS)
    response = _str(raw, name) if name else None
    name, raw = _first(record, _REFERENCE_FIELDS)
    reference = _str(raw, name) if name else None

    relevant: dict[str, int] | None = None
    if "expected_output" in record and not _missing(record["expected_output"]):
        eo = _listish(record["expected_output"])
        if isinstance(eo, str):
            if reference is None:
                reference = eo
        else:
            relevant = _gains(eo, "expected_output")
    name, raw = _first(record, _GOLD_ID_FIELDS)
    if name:
        if relevant is not None:
            raise _Bad(name, "gold ids given twice (also in expected_output)")
        relevant = _gains(raw, name)

    contexts: list[Context] | None = None
    if "retrieved" in record and not _missing(record["retrieved"]):
        contexts = _contexts(record["retrieved"], "retrieved", bare="id")
    name, raw = _first(record, _CONTEXT_TEXT_FIELDS)
    if name:
        if contexts is not None:
            raise _Bad(name, "retrieved contexts given twice (also in 'retrieved')")
        contexts = _contexts(raw, name, bare="text")
    if "retrieved_context_ids" in record and not _missing(record["retrieved_context_ids"]):
        ids = _id_list(record["retrieved_context_ids"], "retrieved_context_ids")
        if contexts is None:
            contexts = [Context(id=i) for i in ids]
        elif len(ids) != len(contexts):
            raise _Bad(
                "retrieved_context_ids",
                f"has {len(ids)} ids but there are {len(contexts)} retrieved contexts",
            )
        else:
            if any(c.id is not None for c in contexts):
                raise _Bad("retrieved_context_ids", "ids given twice (also inside the contexts)")
            contexts = [Context(id=i, text=c.text) for i, c in zip(ids, contexts)]

    name, raw = _first(record, _GOLD_TEXT_FIELDS)
    gold_texts = tuple(_str_list(raw, name)) if name else None

    answers: tuple[str, ...] | None = None
    if "answers" in record and not _missing(record["answers"]):
        a = _listish(record["answers"])
        answers = (a,) if isinstance(a, str) else tuple(_str_list(a, "answers"))

    metadata: dict[str, Any] = {}
    k: int | None = None
    if "metadata" in record and not _missing(record["metadata"]):
        md = record["metadata"]
        if not isinstance(md, Mapping):
            raise _Bad("metadata", f"must be an object, got {type(md).__name__}")
        metadata = dict(md)
        if "k" in md and not _missing(md["k"]):
            k = _k(md["k"], "metadata.k")

    return Sample(
        id=sid,
        question=question,
        contexts=None if contexts is None else tuple(contexts),
        response=response,
        reference=reference,
        relevant=relevant,
        reference_contexts=gold_texts,
        answers=answers,
        k=k,
        metadata=metadata,
    )


def _error(exc: _Bad, record: Any, index: int, source: str | None, line: int | None) -> InputError:
    sid = None
    if isinstance(record, Mapping):
        for name in _ID_FIELDS:
            if name in record and not _missing(record[name]):
                sid = record[name]
                break
    label = f"sample {sid!r}" if sid is not None else f"sample #{index}"
    return InputError(f"{label}: {exc.message}", source=source, line=line, field=exc.field)


def samples_from_records(
    records: Iterable[Any],
    *,
    source: str | None = None,
    line_numbers: Sequence[int] | None = None,
    skip_invalid: bool = False,
) -> SampleSet:
    """Samples from dicts (any of the accepted field names). Sample ids default to ``1, 2, ...``.

    Raises :class:`InputError` on the first bad sample, or collects them with ``skip_invalid``.
    Duplicate sample ids are an error (they would merge two samples' judgments).
    """
    good: list[Sample] = []
    bad: list[InputError] = []
    seen: dict[str, int | None] = {}
    ignored: set[str] = set()
    for i, record in enumerate(records):
        index = i + 1
        line = line_numbers[i] if line_numbers is not None else None
        record = _record(record)
        ignored |= _unrecognised(record)
        try:
            sample = _build(record, index)
            if sample.id in seen:
                prior = seen[sample.id]
                where = f" (first at line {prior})" if prior is not None else ""
                raise _Bad("id", f"duplicate sample id{where}")
        except _Bad as exc:
            err = _error(exc, record, index, source, line)
            if not skip_invalid:
                raise err from None
            bad.append(err)
            continue
        seen[sample.id] = line
        good.append(sample)
    if ignored:
        where = f" in {source}" if source else ""
        warnings.warn(f"ignored unrecognised sample field(s){where}: {', '.join(sorted(ignored))}",
                      UserWarning, stacklevel=2)
    return SampleSet(good, bad, source=source)


# ----------------------------------------------------------------------------- text formats
def _cell(value: str) -> Any:
    """A CSV cell: JSON or Python-literal lists/maps are decoded, empty cells are absent."""
    text = value.strip()
    if text == "":
        return None
    if text[0] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            try:
                # DataFrame.to_csv writes Python reprs: "['a', 'b']".
                return ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return value
    return value


def parse_samples(
    text: str,
    *,
    format: str = "jsonl",
    source: str | None = None,
    skip_invalid: bool = False,
) -> SampleSet:
    """Samples from text: ``format`` is ``jsonl``, ``json`` (array or ``{"samples": [...]}``) or ``csv``."""
    records: list[Any] = []
    lines: list[int] = []
    bad: list[InputError] = []
    # A byte-order mark is dropped by load_json, jsonl_lines and csv_dict_reader alike.
    if format == "jsonl":
        # jsonl_lines splits at "\n" only: U+2028/U+2029 are valid inside JSON strings.
        for n, raw in jsonl_lines(text):
            try:
                records.append(load_json(raw, source, line=n))
                lines.append(n)
            except InputError as err:
                if not skip_invalid:
                    raise
                bad.append(err)
    elif format == "json":
        data = load_json(text, source)
        if isinstance(data, Mapping) and "samples" in data:
            data = data["samples"]
        if not isinstance(data, list):
            raise InputError("expected a JSON array of samples (or {\"samples\": [...]})", source=source)
        records = data
        lines = []
    elif format == "csv":
        reader = csv_dict_reader(text)  # contexts can be long: cells of any size
        try:
            header = reader.fieldnames
        except csv.Error as exc:
            raise InputError(f"invalid CSV ({exc})", source=source, line=1) from None
        if header is None:
            raise InputError("empty CSV file (no header)", source=source, line=1)
        rows = iter(reader)
        while True:
            try:
                row = next(rows)
            except StopIteration:
                break
            except csv.Error as exc:
                raise InputError(f"invalid CSV ({exc})", source=source, line=reader.line_num) from None
            rec: dict[str, Any] = {}
            for key, value in row.items():
                if key is None:
                    raise InputError("row has more cells than the header", source=source,
                                     line=reader.line_num)
                cell = _cell(value) if isinstance(value, str) else None
                if key.startswith("metadata.") and cell is not None:
                    rec.setdefault("metadata", {})[key[len("metadata."):]] = cell
                else:
                    rec[key] = cell
            records.append(rec)
            lines.append(reader.line_num)
    else:
        raise InputError(f"unknown samples format {format!r} (jsonl, json or csv)", source=source)
    if not records and not bad:
        raise InputError("no samples found", source=source)
    got = samples_from_records(
        records, source=source, line_numbers=lines or None, skip_invalid=skip_invalid
    )
    return SampleSet(got, bad + list(got.invalid), source=source)


_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}


def _sniff(text: str) -> str:
    """The format of samples text whose name says nothing (a pipe, ``/dev/stdin``): a JSON
    array or ``{"samples": ...}`` document, JSONL (one object per line), else CSV."""
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("["):
        return "json"
    if head.startswith("{"):
        first = head.split("\n", 1)[0].strip()
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):
            return "json"  # an object spread over several lines
        return "json" if isinstance(obj, dict) and isinstance(obj.get("samples"), list) else "jsonl"
    return "csv"


def read_samples(
    path: str | Path, *, format: str | None = None, skip_invalid: bool = False
) -> SampleSet:
    """Samples from a file; the format follows the extension (``.jsonl``, ``.json``, ``.csv``,
    each optionally ``.gz``) unless given, else the content. ``-`` is standard input; named
    pipes and process substitution (``<(zcat s.jsonl.gz)``) are read as streams."""
    p = str(path)
    name = p[:-3] if p.lower().endswith(".gz") else p
    with open_input(path) as stream:  # one pass, no seeking: pipes, stdin and .gz by magic bytes
        p = stream.source
        text = decode_text(stream.read(), p)
    if format in _TRACE_FORMATS or (format is None and Path(name).suffix.lower() != ".csv"
                                    and trace_format(text)):
        return _from_traces(text, p, format, skip_invalid=skip_invalid)
    fmt = format or _EXTENSIONS.get(Path(name).suffix.lower()) or _sniff(text)
    return parse_samples(text, format=fmt, source=p, skip_invalid=skip_invalid)


_TRACE_FORMATS = ("otlp", "phoenix", "langfuse")


def _from_traces(text: str, source: str, format: str | None, *, fraction: float | None = None,
                 limit: int | None = None, seed: int = 0, skip_invalid: bool = False) -> SampleSet:
    got = trace_records(text, source=source, format=format)
    records = select_traces(got.records, fraction=fraction, limit=limit, seed=seed)
    if got.without_retriever:
        warnings.warn(f"{got.without_retriever} of {got.traces} trace(s) in {source} have no "
                      "retriever span and give no sample", UserWarning, stacklevel=3)
    if not records and not got.without_retriever:
        raise InputError("no trace with a retriever span", source=source)
    return samples_from_records(records, source=source, skip_invalid=skip_invalid)


def read_traces(path: str | Path, *, format: str | None = None, fraction: float | None = None,
                limit: int | None = None, seed: int = 0, skip_invalid: bool = False) -> SampleSet:
    """RAG samples from exported traces (:mod:`ragjudge.rag.traces`): OTLP JSON with
    OpenInference attributes, a Phoenix span table, or a Langfuse export, recognised from the
    content. Each sample keeps its ``trace_id`` and ``span_id`` in ``metadata``, so
    :func:`~ragjudge.rag.traces.span_scores` can put the scores back on the spans.

    ``fraction`` keeps each trace with that probability (stable per trace id and ``seed``, so a
    rerun over a grown export picks the same traces and pays only for new ones); ``limit`` keeps
    the first traces only. Both are the way to evaluate a sample of production traffic.
    """
    with open_input(path) as stream:
        source = stream.source
        text = decode_text(stream.read(), source)
    return _from_traces(text, source, format, fraction=fraction, limit=limit, seed=seed,
                        skip_invalid=skip_invalid)


def samples_from_dataframe(df: Any, *, skip_invalid: bool = False) -> SampleSet:
    """Samples from a pandas DataFrame (one row per sample; RAGAS/DeepEval column names)."""
    records = df.to_dict(orient="records")
    return samples_from_records(
        records, source="<DataFrame>", line_numbers=None, skip_invalid=skip_invalid
    )


def as_samples(data: Any, *, skip_invalid: bool = False) -> SampleSet:
    """Whatever the API was given as samples: a SampleSet, Samples, a path, a pandas or polars
    DataFrame, a Hugging Face ``Dataset``, a RAGAS ``EvaluationDataset`` (``.samples``), a
    DeepEval ``EvaluationDataset`` (``.test_cases``, else ``.goldens``), or an iterable of
    dicts, pydantic models, dataclasses or namedtuples (RAGAS ``SingleTurnSample``, DeepEval
    ``LLMTestCase``...). Duck typed: none of those libraries is imported."""
    if isinstance(data, SampleSet):
        return data
    if isinstance(data, (str, Path)):
        return read_samples(data, skip_invalid=skip_invalid)
    if hasattr(data, "to_dict") and hasattr(data, "columns") and hasattr(data, "iloc"):
        return samples_from_dataframe(data, skip_invalid=skip_invalid)
    if callable(getattr(data, "to_dicts", None)) and hasattr(data, "columns"):  # polars
        return samples_from_records(data.to_dicts(), source="<DataFrame>", skip_invalid=skip_invalid)
    if isinstance(data, Sample):
        return SampleSet([data])
    for attr in ("samples", "test_cases", "goldens"):  # RAGAS / DeepEval datasets
        inner = getattr(data, attr, None)
        if isinstance(inner, Sequence) and not isinstance(inner, (str, bytes)) and (
                inner or attr == "goldens"):
            data = inner
            break
    if isinstance(data, Mapping) or not isinstance(data, Iterable) or hasattr(data, "model_dump") \
            or (dataclasses.is_dataclass(data) and not isinstance(data, type)):
        data = [data]  # one sample object (a dict, a SingleTurnSample, an LLMTestCase...)
    items = list(data)
    if items and all(isinstance(s, Sample) for s in items):
        ids = [s.id for s in items]
        if len(set(ids)) != len(ids):
            raise InputError("duplicate sample ids", field="id")
        return SampleSet(items)
    return samples_from_records(items, skip_invalid=skip_invalid)
