"""What the explorer and labelling page show, without any web framework: the files the operator
started the server with, read once, and JSON-ready answers built from them by library calls.

Only the files given are read (each by the path the operator gave); requests name files by
their index in that list, queries and documents by id, never by path. The one file written is
the labels log (next to the to-label file, or the path the operator gave), append-only.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ...data import Qrels, Run
from ...errors import InputError
from ...io import format_qrels, read_corpus, read_qrels, read_queries, read_run
from ...io.sniff import is_result, sniff_kind
from ...io.streams import check_output_path, decode_text, open_input
from ...nuggets.data import parse_assignments
from ...nuggets.labelling import parse_nugget_to_label
from ...trust.agreement import cohen_kappa
from ...trust.labelling import (complete_queries, labels_qrels, parse_to_label, replay_labels, shown_header,
                                shown_pairs, undo_target)
from ...trust.ppi import ESTIMAND_TEXT, POPULATION_OF, ppi_evaluate
from .nugget_desk import NuggetDesk

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["Workspace", "ROLES", "MAX_LIMIT"]

#: ``ROLE=PATH`` spellings that override what a file is sniffed as (:func:`ragjudge.io.sniff.sniff_kind`);
#: ``tolabel`` names either kind of to-label file.
ROLES = ("result", "qrels", "llm", "run", "queries", "corpus", "judgments", "tolabel", "labels",
         "assignments")
MAX_LIMIT = 500


def _lock_file(fd: int) -> None:
    if fcntl is not None:  # Windows has none: one worker per log
        fcntl.flock(fd, fcntl.LOCK_EX)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _page(items: Sequence[Any], offset: int, limit: int) -> dict[str, Any]:
    offset = max(0, int(offset))
    limit = max(1, min(MAX_LIMIT, int(limit)))
    return {"total": len(items), "offset": offset, "limit": limit,
            "items": list(items[offset:offset + limit])}


def _split_role(spec: str) -> tuple[str | None, str]:
    """``ROLE=PATH`` as ``(role, path)``, a plain path as ``(None, path)``; an unknown role
    (``zzz=PATH``) is an error listing the known ones, unless a file has that very name."""
    role, sep, path = spec.partition("=")
    if sep and role in ROLES and path:
        return role, path
    if sep and path and role.isidentifier() and not os.path.exists(spec):
        raise InputError(f"unknown kind {role!r}; known kinds: {', '.join(ROLES)}",
                         source=spec)
    return None, spec


def _read(path: str) -> str:
    """A file's text: ``.gz`` read transparently, invalid UTF-8 naming its line."""
    with open_input(path) as stream:
        return decode_text(stream.read(), stream.source)


def _check_labels_log(path: Path, given: bool) -> None:
    """The labels log can be appended to: an error before serving, not on the first label."""
    check_output_path(path)
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK):
        how = "" if given else " (name another with --labels PATH)"
        raise InputError(f"cannot write the labels log here: permission denied{how}", source=str(path))


def _json(text: str, path: str) -> Any:
    """``text`` as JSON; a broken document is one line naming the file and the line."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = getattr(exc, "msg", None) or "nested too deeply"
        raise InputError(f"not valid JSON ({msg})", source=path,
                         line=getattr(exc, "lineno", None), field="json") from None


def _kind(role: str | None, text: str, path: str) -> str:
    """What a file is (one of :data:`ragjudge.io.sniff.KINDS`): its forced role, else what
    :func:`~ragjudge.io.sniff.sniff_kind` reads in it; a forced ``tolabel`` is a to-label file of
    nugget answers when its content says so."""
    if role is None:
        return sniff_kind(text, path)
    if role == "tolabel":
        try:
            return "nugget_tolabel" if sniff_kind(text, path) == "nugget_tolabel" else role
        except InputError:  # not readable as any kind: the to-label parser names what is wrong
            return role
    return role


def _result_runs(obj: Any) -> dict[str, Any]:
    """A result JSON as ``{"runs": [...], "comparisons": [...], "meta": {...}}``."""
    if isinstance(obj, list):
        return {"runs": obj, "comparisons": [], "meta": {}}
    if "runs" in obj:
        return {"runs": obj["runs"], "comparisons": obj.get("comparisons") or [],
                "meta": obj.get("meta") or {}}
    return {"runs": [obj], "comparisons": [], "meta": {}}


class Workspace:
    """The files a server was started with and the labels log."""

    def __init__(self, files: Sequence[str], *, labels: str | None = None) -> None:
        self.files: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.human: list[tuple[str, Qrels]] = []
        self.llm_files: list[tuple[str, Qrels]] = []
        self.runs: dict[str, Run] = {}
        self.queries: dict[str, str] = {}
        self.corpus: dict[str, str] = {}
        self.judgments: dict[tuple[str, str], dict[str, Any]] = {}
        self.judgment_files: list[str] = []
        self.to_label: Any = None
        #: a nugget to-label file (``plan-labels --nuggets``) and the LLM nugget assignments
        self.nug_to_label: Any = None
        self.assignments: list[Any] = []
        self.labels_path: Path | None = Path(labels) if labels else None
        self._lock = threading.Lock()
        self._log: list[dict[str, Any]] = []
        self._log_size = -1
        self._ppi_cache: tuple[Any, Any] | None = None
        #: torn last lines of the labels log moved aside (file names), newest last
        self.torn: list[str] = []
        specs = [_split_role(f) for f in files]
        for i, (role, path) in enumerate(specs):
            text = _read(path)
            kind = _kind(role, text, path)
            role = "tolabel" if kind == "nugget_tolabel" else kind  # both shown as to-label files
            name = Path(path).name
            info: dict[str, Any] = {}
            if role == "result":
                whole = _json(text.lstrip("\ufeff"), path)
                if not is_result(whole):
                    raise InputError("not a result of evaluate/compare -f json (runs with a 'run' "
                                     "and a 'mean' object)", source=path, field="result")
                res = _result_runs(whole)
                res["name"] = name
                self.results.append(res)
                info = {"runs": len(res["runs"])}
            elif role in ("qrels", "llm"):
                q = read_qrels(path)
                (self.human if role == "qrels" else self.llm_files).append((name, q))
                info = {"labels": len(q), "queries": q.num_queries}
            elif role == "run":
                r = read_run(path)
                nm = r.name
                k = 2
                while nm in self.runs:
                    nm, k = f"{r.name}#{k}", k + 1
                self.runs[nm] = r.with_name(nm) if nm != r.name else r
                info = {"run": nm, "queries": r.num_queries}
            elif role == "queries":
                self.queries.update(read_queries(path))
                info = {"queries": len(self.queries)}
            elif role == "corpus":
                before = len(self.corpus)
                self.corpus.update(read_corpus(path))
                info = {"documents": len(self.corpus) - before}
            elif role == "judgments":
                n = self._read_judgments(path, text)
                info = {"judgments": n}
            elif role == "assignments":
                got = parse_assignments(text, source=path)
                self.assignments.extend(got)
                info = {"answers": len(got)}
            elif role == "tolabel":
                if self.to_label is not None or self.nug_to_label is not None:
                    raise InputError("only one to-label file per server", source=path)
                if kind == "nugget_tolabel":
                    self.nug_to_label = parse_nugget_to_label(text, source=path)
                else:
                    self.to_label = parse_to_label(text, source=path)
                if self.labels_path is None:
                    p = Path(path)
                    stem = p.name[:-len(".jsonl")] if p.name.endswith(".jsonl") else p.name
                    self.labels_path = p.with_name(stem + ".labels.jsonl")
                tl = self.to_label or self.nug_to_label
                info = ({"pairs": len(tl.pairs), "queries": len(tl.queries)} if self.to_label is not None
                        else {"answers": len(tl.answers), "items": tl.items, "queries": len(tl.queries)})
            elif role == "labels":
                self.labels_path = Path(path)
            self.files.append({"id": i, "role": role, "name": name, **info})
        # A qrels file named by the to-label file as its LLM qrels is the LLM's, not a human's.
        if self.to_label is not None:
            llm_name = Path(str(self.to_label.meta.get("llm_qrels") or "")).name
            for item in list(self.human):
                if item[0] == llm_name:
                    self.human.remove(item)
                    self.llm_files.append(item)
                    for f in self.files:
                        if f["name"] == llm_name and f["role"] == "qrels":
                            f["role"] = "llm"
        self._pair_index = {(p["qid"], p["docid"]): i
                            for i, p in enumerate(self.to_label.pairs)} if self.to_label else {}
        if self.labels_path is not None:
            _check_labels_log(self.labels_path, given=labels is not None)
            self._reload()
        self.nuggets = NuggetDesk(self.nug_to_label, self.assignments, records=self._records,
                                  append=self._append, lock=self._lock)

    def _records(self) -> list[dict[str, Any]]:
        """The labels log's records as they are now (call under the lock)."""
        if self.labels_path is None:
            return []
        self._reload()
        return self._log

    def _read_judgments(self, path: str, text: str) -> int:
        n = 0
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                key = (str(rec["qid"]), str(rec["docid"]))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise InputError(f"not a judgment record ({exc})", source=path, line=i) from None
            if rec.get("grade") is None:
                continue  # a failed judgment
            rec["file"] = Path(path).name
            self.judgments[key] = rec
            n += 1
        self.judgment_files.append(Path(path).name)
        return n

    # ------------------------------------------------------------------------- labels
    def _reload(self) -> None:
        """Read the labels log again when it changed (another worker, or a restart)."""
        path = self.labels_path
        assert path is not None
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size == self._log_size:
            return
        records = []
        if size:
            with path.open(encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        try:
                            records.append(json.loads(line))
                        except json.JSONDecodeError:
                            continue  # a torn last line from a crash
        self._log, self._log_size = records, size

    def labels_now(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self.labels_path is None or self.nug_to_label is not None:
            return {}  # a nugget labels log holds no passage labels
        with self._lock:
            self._reload()
            return replay_labels(self._log)

    def _append(self, rec: dict[str, Any]) -> None:
        """Append one record, durably. A torn last line (a crash mid-write) is first moved
        aside to ``LOG.torn-N`` and cut off, so the new record never merges into it."""
        assert self.labels_path is not None
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode()
        fd = os.open(self.labels_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _lock_file(fd)  # other workers append to the same log
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                self._set_aside(fd, size)
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock

    def _set_aside(self, fd: int, size: int) -> None:
        assert self.labels_path is not None
        start, chunk = size, 65536
        while start > 0:
            lo = max(0, start - chunk)
            block = os.pread(fd, start - lo, lo)
            nl = block.rfind(b"\n")
            if nl >= 0:
                start = lo + nl + 1
                break
            start = lo
        torn = os.pread(fd, size - start, start)
        n = 1
        while True:
            aside = self.labels_path.with_name(f"{self.labels_path.name}.torn-{n}")
            try:
                with open(aside, "xb") as f:
                    f.write(torn)
                    f.flush()
                    os.fsync(f.fileno())
                break
            except FileExistsError:
                n += 1
        os.ftruncate(fd, start)
        self.torn.append(aside.name)

    def _need_to_label(self) -> Any:
        if self.to_label is None:
            raise LookupError("no to-label file was given (ragjudge plan-labels --sample N -o FILE)")
        return self.to_label

    def label_state(self) -> dict[str, Any]:
        tl = self._need_to_label()
        now = self.labels_now()
        done = [self._pair_index[k] for k in now if k in self._pair_index]
        nxt = next((i for i, p in enumerate(tl.pairs) if (p["qid"], p["docid"]) not in now), None)

        meta = tl.meta
        return {
            "total": len(tl.pairs), "labelled": len(done),
            "skipped": sum(1 for k, r in now.items() if k in self._pair_index and r.get("grade") is None),
            "next": nxt, "labels": meta.get("labels") or {"0": "not relevant", "1": "relevant"},
            "prompt": meta.get("prompt"), "queries": len(tl.queries),
            "complete_queries": len(complete_queries(tl, now)),
            "done": {str(self._pair_index[k]): {"grade": r.get("grade"), "who": r.get("who"),
                                                "at": r.get("at")}
                     for k, r in now.items() if k in self._pair_index},
            "labels_file": self.labels_path.name if self.labels_path else None,
            "meta": {k: meta.get(k) for k in ("seed", "sample", "depth", "frame", "metric", "estimand")},
        }

    def label_pair(self, index: int, reveal: bool = False, who: str = "") -> dict[str, Any]:
        """One pair to label; ``reveal``: also the LLM's grade, a choice recorded in the labels
        log (a label of that pair by ``who`` then says it was given with the grade in view)."""
        tl = self._need_to_label()
        if not 0 <= index < len(tl.pairs):
            raise KeyError(f"no pair {index}")
        p = tl.pairs[index]
        if reveal:
            with self._lock:
                self._append({"op": "reveal", "qid": p["qid"], "docid": p["docid"], "who": who,
                              "at": _now()})
        now = self.labels_now().get((p["qid"], p["docid"]))
        out = {"index": index, "qid": p["qid"], "docid": p["docid"], "query": p["query"],
               "passage": p["passage"], "label": now and {"grade": now.get("grade"),
                                                          "who": now.get("who"), "at": now.get("at")}}
        if reveal:
            out["llm_grade"] = p.get("llm_grade")
        return out

    def add_label(self, index: int, grade: int | None, who: str) -> dict[str, Any]:
        tl = self._need_to_label()
        if not 0 <= index < len(tl.pairs):
            raise KeyError(f"no pair {index}")
        scale = tl.meta.get("labels") or {"0": "", "1": ""}
        if grade is not None and str(grade) not in scale:
            raise InputError(f"grade {grade} is not on the scale {', '.join(scale)}", field="grade")
        p = tl.pairs[index]

        with self._lock:
            self._reload()
            seen = shown_pairs(self._log)  # an unnamed reveal counts for whoever labels the pair
            shown = any((p["qid"], p["docid"], w) in seen for w in (who, ""))
            rec = {"op": "label", "qid": p["qid"], "docid": p["docid"], "grade": grade,
                   "who": who, "at": _now(), "llm_grade_shown": shown}
            self._append(rec)
        return self.label_state()

    def undo(self, who: str) -> dict[str, Any]:
        """Take back ``who``'s latest label still in force (never another assessor's)."""
        self._need_to_label()
        with self._lock:
            self._reload()
            last = undo_target(self._log, who)
            if last is not None:
                self._append({"op": "undo", "who": who, "at": _now()})
        state = self.label_state()
        state["undone"] = self._pair_index.get(last) if last else None
        return state

    def labels_trec(self) -> str:
        now = self.labels_now()
        text = format_qrels(labels_qrels(now), format="trec")
        shown = sum(1 for r in now.values() if r.get("grade") is not None and r.get("llm_grade_shown"))
        if shown:
            text = shown_header(shown) + text
        return text

    # ------------------------------------------------------------------------- PPI
    def llm_qrels(self) -> Qrels | None:
        """The LLM's labels: LLM qrels files, then judgments (a judgment wins for its pair)."""
        data: dict[str, dict[str, int]] = {}
        for _, q in self.llm_files:
            for qid, docid, g in q.rows():
                data.setdefault(qid, {})[docid] = g
        for (qid, docid), rec in self.judgments.items():
            data.setdefault(qid, {})[docid] = int(rec["grade"])
        return Qrels.from_dict(data, source="LLM labels") if data else None

    def ppi(self) -> dict[str, Any]:
        tl = self._need_to_label()
        meta = tl.meta
        estimand = meta.get("estimand") or "collection"
        metric = meta.get("metric") or "ndcg@10"
        now = self.labels_now()
        done = complete_queries(tl, now)
        out: dict[str, Any] = {
            "metric": metric, "estimand": estimand, "estimand_text": ESTIMAND_TEXT.get(estimand, ""),
            "complete_queries": len(done), "sampled_queries": len(tl.queries),
            "method": "ppi++", "confidence": 0.95, "estimates": [], "differences": [],
            "note": ("queries count once every pair is labelled or skipped; a skipped pair counts "
                     "as unjudged (not relevant); queries are labelled in their random order, so "
                     "the completed ones are a simple random sample"),
        }
        llm = self.llm_qrels()
        if llm is None or not self.runs:
            out["status"] = ("needs the LLM labels on every query and the runs: ragjudge ui "
                             "to_label.jsonl LLM_QRELS RUN...")
            return out
        if len(done) < 2:
            out["status"] = f"needs at least 2 completed queries ({len(done)} so far)"
            return out
        key = (tuple(sorted((k, r.get("grade"), bool(r.get("llm_grade_shown"))) for k, r in now.items())))
        if self._ppi_cache is not None and self._ppi_cache[0] == key:
            return self._ppi_cache[1]
        human = labels_qrels(now, done, source="human labels")
        try:
            rep = ppi_evaluate(llm, self.runs, [metric], human,
                               population=POPULATION_OF.get(estimand, "finite"),  # type: ignore[arg-type]
                               rel=meta.get("rel"))
        except InputError as exc:
            out["status"] = str(exc)
            return out

        def est(e: Any) -> dict[str, Any]:
            return {"mean": e.mean, "ci": [e.ci_low, e.ci_high], "n_human": e.n_human,
                    "n_llm": e.n_llm, "lambda": e.lam, "clipped": e.clipped,
                    "small_sample": e.small_sample(),
                    "llm_only": [e.llm_only.value, e.llm_only.ci_low, e.llm_only.ci_high],
                    "human_only": [e.human_only.value, e.human_only.ci_low, e.human_only.ci_high]}

        out["status"] = "ok"
        out["estimates"] = [{"run": r, **est(rep.estimates[r][metric])} for r in rep.runs]
        out["differences"] = [{"run": r, "baseline": rep.baseline, **est(d[metric])}
                              for r, d in rep.differences.items()]
        out["notes"] = rep.all_notes()
        in_ppi = [r for (q, _), r in now.items() if q in set(done) and r.get("grade") is not None]
        shown = sum(1 for r in in_ppi if r.get("llm_grade_shown"))
        out["llm_grade_shown"] = {"labels": shown, "of": len(in_ppi)}
        if shown:
            out["notes"].append(
                f"{shown} of the {len(in_ppi)} labels were given with the LLM's grade in view: PPI "
                "assumes human labels independent of the LLM's, so these may lean toward it and "
                "the interval may be too narrow")
        self._ppi_cache = (key, out)
        return out

    # ------------------------------------------------------------------------- explorer
    def overview(self) -> dict[str, Any]:
        qids = self.query_ids()
        return {
            "files": self.files,
            "results": [{"id": i, "name": r["name"], "runs": [x["run"] for x in r["runs"]],
                         "metrics": list(r["runs"][0]["mean"]) if r["runs"] else [],
                         "per_query": any("per_query" in x for x in r["runs"])}
                        for i, r in enumerate(self.results)],
            "runs": list(self.runs), "queries": len(qids), "documents": len(self.corpus),
            "judgments": len(self.judgments), "human_qrels": [n for n, _ in self.human],
            "agreement": bool(self._human_labels()) and self.llm_qrels() is not None,
            "labelling": self.to_label is not None,
            "nuggets": self.nuggets.overview(),
        }

    def result_table(self, rid: int) -> dict[str, Any]:
        if not 0 <= rid < len(self.results):
            raise KeyError(f"no result {rid}")
        res = self.results[rid]
        metrics = list(res["runs"][0]["mean"]) if res["runs"] else []
        rows = []
        for r in res["runs"]:
            cells = {}
            for m in metrics:
                ci = (r.get("ci") or {}).get(m)
                cmp = next((c for c in res["comparisons"] if c.get("run") == r["run"]
                            and c.get("metric") == m), None)
                cells[m] = {"mean": r["mean"].get(m), "ci": ci, "comparison": cmp and {
                    k: cmp.get(k) for k in ("baseline", "delta", "delta_ci", "p_value", "p_adjusted",
                                            "significant", "wins", "ties", "losses", "effect_size",
                                            "test", "note")}}
            rows.append({"run": r["run"], "cells": cells,
                         "num_q": (r.get("meta") or {}).get("num_q")})
        meta = res["meta"]
        return {"name": res["name"], "metrics": metrics, "rows": rows,
                "baseline": meta.get("baseline"),
                "meta": {k: meta.get(k) for k in ("test", "alpha", "correction", "confidence",
                                                   "n_resamples", "ci_method", "family")}}

    def _per_query(self, rid: int, run: str, metric: str) -> dict[str, float]:
        res = self.results[rid]
        r = next((x for x in res["runs"] if x["run"] == run), None)
        if r is None:
            raise KeyError(f"no run {run!r} in result {rid}")
        pq = r.get("per_query")
        if pq is None:
            raise LookupError("this result has no per-query values: write it with --per-query")
        return {q: v.get(metric) for q, v in pq.items() if v.get(metric) is not None}

    def diff(self, rid: int, metric: str, a: str, b: str, *, order: str = "desc",
             search: str = "", offset: int = 0, limit: int = 50) -> dict[str, Any]:
        if not 0 <= rid < len(self.results):
            raise KeyError(f"no result {rid}")
        va, vb = self._per_query(rid, a, metric), self._per_query(rid, b, metric)
        rows = [{"qid": q, "a": va[q], "b": vb[q], "delta": va[q] - vb[q],
                 "query": self.queries.get(q)} for q in va if q in vb]
        s = search.strip().lower()
        if s:
            rows = [r for r in rows if s in r["qid"].lower() or s in (r["query"] or "").lower()]
        key = {"desc": lambda r: -r["delta"], "asc": lambda r: r["delta"],
               "abs": lambda r: -abs(r["delta"])}.get(order)
        if key is None:
            raise InputError("order must be desc, asc or abs", field="order")
        rows.sort(key=lambda r: (key(r), r["qid"]))
        wins = sum(r["delta"] > 0 for r in rows)
        losses = sum(r["delta"] < 0 for r in rows)
        return {"metric": metric, "a": a, "b": b, "wins": wins, "losses": losses,
                "ties": len(rows) - wins - losses, **_page(rows, offset, limit)}

    def query_ids(self) -> list[str]:
        seen: dict[str, None] = dict.fromkeys(self.queries)
        for r in self.runs.values():
            seen.update(dict.fromkeys(r.query_ids))
        for _, q in self.human:
            seen.update(dict.fromkeys(q.query_ids))
        for res in self.results:
            for r in res["runs"]:
                seen.update(dict.fromkeys(r.get("per_query") or {}))
        return list(seen)

    def query_list(self, search: str = "", offset: int = 0, limit: int = 50) -> dict[str, Any]:
        s = search.strip().lower()
        rows = [{"qid": q, "query": self.queries.get(q)} for q in self.query_ids()]
        if s:
            rows = [r for r in rows if s in r["qid"].lower() or s in (r["query"] or "").lower()]
        return _page(rows, offset, limit)

    def _human_labels(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Human grades: qrels files, then the labels log (a label given here wins)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for name, q in self.human:
            for qid, docid, g in q.rows():
                out[(qid, docid)] = {"grade": g, "source": name, "who": None}
        for key, rec in self.labels_now().items():
            if rec.get("grade") is not None:
                out[key] = {"grade": rec["grade"], "source": self.labels_path.name if self.labels_path
                            else "labels", "who": rec.get("who"), "at": rec.get("at")}
        return out

    def _llm_label(self, key: tuple[str, str]) -> dict[str, Any] | None:
        rec = self.judgments.get(key)
        if rec is not None:
            prompt = rec.get("prompt_id") and f"{rec.get('prompt_id')}.v{rec.get('prompt_version')}"
            return {"grade": rec.get("grade"), "model": rec.get("model"), "prompt": prompt,
                    "probs": rec.get("probs"), "expected": rec.get("expected"),
                    "reasoning": rec.get("reasoning"), "source": rec.get("file")}
        for name, q in self.llm_files:
            g = q.get(key[0]).get(key[1])
            if g is not None:
                return {"grade": g, "source": name}
        return None

    def query(self, qid: str, depth: int = 10) -> dict[str, Any]:
        depth = max(1, min(1000, int(depth)))
        if qid not in set(self.query_ids()) and not any(k[0] == qid for k in self.judgments):
            raise KeyError(f"no query {qid!r}")
        human = self._human_labels()
        runs = []
        for name, run in self.runs.items():
            items = []
            for rank, (docid, score) in enumerate(run.ranked(qid, depth), 1):
                items.append({"rank": rank, "docid": docid, "score": score,
                              "text": self.corpus.get(docid), "human": human.get((qid, docid)),
                              "llm": self._llm_label((qid, docid))})
            runs.append({"run": name, "items": items})
        values = []
        for i, res in enumerate(self.results):
            for r in res["runs"]:
                pq = (r.get("per_query") or {}).get(qid)
                if pq:
                    values.append({"result": i, "run": r["run"], "values": pq})
        return {"qid": qid, "query": self.queries.get(qid), "runs": runs, "values": values,
                "depth": depth}

    def agreement(self, *, human_grade: int | None = None, llm_grade: int | None = None,
                  offset: int = 0, limit: int = 50) -> dict[str, Any]:
        human = self._human_labels()
        pairs = []
        for key, h in human.items():
            llm = self._llm_label(key)
            if llm is None or llm.get("grade") is None:
                continue
            pairs.append((key, h, llm))
        if not pairs:
            raise LookupError("agreement needs human labels (qrels or labels given here) and LLM "
                              "labels (judgments JSONL or LLM qrels) on the same pairs")
        grades = sorted({int(h["grade"]) for _, h, _ in pairs} | {int(x["grade"]) for _, _, x in pairs})
        lo, hi = min(0, grades[0]), grades[-1]
        size = hi - lo + 1
        matrix = np.zeros((size, size), dtype=np.int64)
        for _, h, x in pairs:
            matrix[int(h["grade"]) - lo, int(x["grade"]) - lo] += 1

        def distance(h: Mapping[str, Any], x: Mapping[str, Any]) -> float:
            probs = x.get("probs")
            if probs:  # expected distance under the judge's grade distribution
                return sum(abs(int(g) - int(h["grade"])) * float(p) for g, p in probs.items())
            return float(abs(int(x["grade"]) - int(h["grade"])))

        rows = []
        for (qid, docid), h, x in pairs:
            if human_grade is not None and int(h["grade"]) != human_grade:
                continue
            if llm_grade is not None and int(x["grade"]) != llm_grade:
                continue
            rows.append({"qid": qid, "docid": docid, "human": h, "llm": x,
                         "distance": distance(h, x), "query": self.queries.get(qid),
                         "text": self.corpus.get(docid)})
        rows.sort(key=lambda r: (-r["distance"], r["qid"], r["docid"]))
        n = int(matrix.sum())
        return {"grades": list(range(lo, hi + 1)), "matrix": matrix.tolist(), "n": n,
                "exact": float(np.trace(matrix)) / n if n else None,
                "kappa": cohen_kappa(matrix), "kappa_linear": cohen_kappa(matrix, weights="linear"),
                **_page(rows, offset, limit)}
