"""What a synthesis run produced: kept queries, qrels, RAG samples, and the full accounting."""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data import Qrels
from ..errors import InputError
from ..io import format_qrels
from ..llm.cost import Usage
from ..render import ResultSurface, render_table
from .filters import Candidate, FilterLine, accounting
from .sampling import SamplingReport
from .._lazy import optional

__all__ = ["SynthResult", "OUTPUT_FILES"]

OUTPUT_FILES = ("queries.jsonl", "qrels.txt", "samples.jsonl", "synth.jsonl", "summary.json")


@dataclass
class SynthResult(ResultSurface):
    """A synthetic test collection and the record of how it was made.

    ``queries`` ``{qid: text}``, ``styles`` ``{qid: style}``, ``qrels`` (sources at grade 3,
    plus judged pool documents with ``judge_pool``), ``samples`` (RAGAS field names),
    ``candidates`` (every candidate, kept or not), ``filters`` (the accounting), ``sampling``
    (how passages were chosen), ``usage``/``cost`` of the LLM calls. ``ok`` is False when
    fewer than ``requested`` queries survived.
    """

    requested: int
    candidates: list[Candidate]
    qrels: Qrels
    corpus: Mapping[str, str]
    sampling: SamplingReport
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    model: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    pool: dict[str, Any] | None = None  # summary of the --judge-pool judging

    # -- views ---------------------------------------------------------------------------
    @property
    def kept(self) -> list[Candidate]:
        return [c for c in self.candidates if c.kept]

    @property
    def queries(self) -> dict[str, str]:
        return {c.qid: c.query for c in self.kept if c.qid and c.query}

    @property
    def styles(self) -> dict[str, str]:
        return {c.qid: c.style for c in self.kept if c.qid}

    @property
    def ok(self) -> bool:
        return len(self.kept) >= self.requested

    @property
    def filters(self) -> list[FilterLine]:
        return accounting(self.candidates)

    @property
    def samples(self) -> list[dict[str, Any]]:
        """One RAGAS-style sample per kept query (``user_input``, ``reference``,
        ``reference_context_ids``, ``reference_contexts``)."""
        return [
            {"id": c.qid, "user_input": c.query, "reference": c.reference,
             "reference_context_ids": list(c.sources),
             "reference_contexts": [self.corpus[s] for s in c.sources], "style": c.style}
            for c in self.kept
        ]

    def summary(self) -> dict[str, Any]:
        calls = self.usage.calls
        kept = len(self.kept)
        status = Counter(c.status for c in self.candidates)
        return {
            "requested": self.requested,
            "generated": sum(1 for c in self.candidates if c.query is not None),
            "generation_calls": len({c.draw or c.id for c in self.candidates if c.generation
                                     and not (c.dropped_by == "budget" and c.query is None)}),
            "candidates": len(self.candidates),
            "kept": kept,
            "dropped": status.get("dropped", 0),
            "unused": status.get("unused", 0),
            "ok": self.ok,
            "styles_kept": dict(Counter(c.style for c in self.kept)),
            "calls": calls,
            "calls_per_kept_query": round(calls / kept, 3) if kept else None,
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "tokens_per_kept_query": round(self.usage.total_tokens / kept, 1) if kept else None,
            "cost_usd": self.cost,
            "model": self.model,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: counts, the accounting, sampling, parameters (no candidates;
        those are :meth:`write`'s ``synth.jsonl``)."""
        return {
            "summary": self.summary(),
            "filters": [f.to_dict() for f in self.filters],
            "sampling": self.sampling.to_dict(),
            "params": dict(self.params),
            "pool": self.pool,
        }

    # -- renderers ------------------------------------------------------------------------
    def _headline(self) -> str:
        s = self.summary()
        line = (f"synth: {s['kept']}/{s['requested']} queries kept from {s['generated']} candidates "
                f"generated in {s['generation_calls']} calls ({s['unused']} not needed)")
        if not self.ok:
            line += f" -- FEWER THAN REQUESTED ({self.requested - s['kept']} short)"
        return line

    def __str__(self) -> str:
        s = self.summary()
        sp = self.sampling
        lines = [self._headline(),
                 f"passages: {sp.corpus} in corpus, {sp.eligible} eligible ({sp.too_short} too short, "
                 f"{sp.boilerplate} boilerplate, {sp.duplicates} duplicates), {sp.near_duplicates} "
                 f"near-duplicates skipped, {sp.drawn} drawn"
                 + (f", stratified by {' x '.join(sp.stratified_by)}" if sp.stratified_by else "")]
        width = max(len(n) for n in (f.name for f in self.filters))
        for f in self.filters:
            ex = f"  e.g. {f.examples[0]}" if f.examples else ""
            lines.append(f"  {f.name:<{width}}  seen {f.seen:>5}  dropped {f.dropped:>5}{ex}")
        cost = "unknown price" if s["cost_usd"] is None else f"${s['cost_usd']:.4f}"
        per = "-" if s["calls_per_kept_query"] is None else s["calls_per_kept_query"]
        lines.append(f"{s['calls']} LLM calls ({per} per kept query), {s['prompt_tokens']} prompt + "
                     f"{s['completion_tokens']} completion tokens, {cost}")
        if self.pool:
            lines.append(f"judge pool: {self.pool.get('judged', 0)}/{self.pool.get('pairs', 0)} pooled "
                         f"pairs judged, {self.pool.get('qrels_pairs', 0)} qrels lines")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{e(f.name)}</td><td>{e(f.description)}</td><td>{f.seen}</td><td>{f.dropped}</td>"
            f"<td>{e('; '.join(f.examples))}</td></tr>" for f in self.filters)
        kept = "".join(f"<tr><td>{e(c.qid or '')}</td><td>{e(c.style)}</td><td>{e(c.query or '')}</td>"
                       f"<td>{e(', '.join(c.sources))}</td></tr>" for c in self.kept[:10])
        return (f"<div><p><b>{e(self._headline())}</b></p>"
                "<table><thead><tr><th>filter</th><th>drops</th><th>seen</th><th>dropped</th>"
                f"<th>examples</th></tr></thead><tbody>{rows}</tbody></table>"
                "<table><thead><tr><th>qid</th><th>style</th><th>query</th><th>sources</th></tr></thead>"
                f"<tbody>{kept}</tbody></table><pre>{e(str(self).splitlines()[-1])}</pre></div>")

    def __repr__(self) -> str:
        return f"<SynthResult {self._headline()}>"

    def to_dataframe(self) -> Any:
        """One row per candidate, kept or dropped: id, qid, status, style, query, reference,
        sources, the filter that dropped it and why, and its filter scores (``score.*``)."""
        pd = optional("pandas", extra="pandas", what="to_dataframe()")
        rows = []
        for c in self.candidates:
            d = c.to_dict()
            row = {k: d[k] for k in ("id", "qid", "status", "style", "query", "reference",
                                     "dropped_by", "reason")}
            row["sources"] = ", ".join(d["source_ids"])
            row.update({f"score.{k}": v for k, v in d["scores"].items()})
            rows.append(row)
        return pd.DataFrame(rows)

    def to_latex(self) -> str:
        """The filter accounting as a booktabs LaTeX table (``\\usepackage{booktabs}``)."""
        rows = [[f.name, f.seen, f.dropped, f.description] for f in self.filters]
        return render_table(["filter", "seen", "dropped", "drops"], rows, "latex")

    # -- files ------------------------------------------------------------------------------
    def write(self, directory: str | Path) -> list[Path]:
        """Write ``queries.jsonl``, ``qrels.txt``, ``samples.jsonl``, ``synth.jsonl`` (every
        candidate) and ``summary.json`` into ``directory`` (created if needed)."""
        out = Path(directory)
        try:
            out.mkdir(parents=True, exist_ok=True)
            # The run's settings on every line, so one line is a self-contained record.
            run = {k: v for k, v in self.params.items() if k not in ("prompts", "judge_prompt")}
            run["judge_prompt"] = self.params.get("judge_prompt")
            files = {
                "queries.jsonl": _jsonl({"_id": c.qid, "text": c.query, "style": c.style}
                                        for c in self.kept),
                "qrels.txt": format_qrels(self.qrels, "trec") if len(self.qrels) else "",
                "samples.jsonl": _jsonl(self.samples),
                "synth.jsonl": _jsonl({**c.to_dict(), "synth": run} for c in self.candidates),
                "summary.json": json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n",
            }
            paths = []
            for name, text in files.items():
                path = out / name
                tmp = path.with_suffix(path.suffix + ".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)  # never a half-written output next to a finished one
                paths.append(path)
        except OSError as exc:
            raise InputError(f"cannot write output: {exc.strerror}", source=str(out)) from None
        return paths


def _jsonl(rows: Any) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
