"""RAG samples from traces, and scores back onto them.

Teams trace their RAG applications with OpenTelemetry; this module turns exported traces into
sample records (question, retrieved contexts with ids and scores, answer) and a scored report
into span-keyed records to attach back. It reads three exports, recognised by their content:

* **OTLP JSON** (``{"resourceSpans": [...]}``, one document or one per line, as the OpenTelemetry
  collector's file exporter writes) with OpenInference attributes: ``openinference.span.kind``
  (``RETRIEVER``, ``LLM``, ``CHAIN``...), ``input.value`` / ``output.value``,
  ``retrieval.documents.<i>.document.{id,content,score}`` (flattened, or as one array
  attribute) and ``llm.output_messages.<i>.message.{role,content}``;
* **Phoenix span tables** (``get_spans_dataframe()`` written as JSON lines or a JSON array):
  ``context.trace_id``, ``context.span_id``, ``parent_id``, ``span_kind`` and
  ``attributes.*`` columns with the same OpenInference names;
* **Langfuse** exports: a trace downloaded as JSON (the trace with its ``observations``), the
  observations API's ``{"data": [...]}``, or JSON lines of observations or of traces. An
  observation of type ``RETRIEVER`` (or a span whose name says *retriev*) holds the documents
  in its output; a ``GENERATION`` holds the answer.

One sample per answer: the retriever spans before an LLM span in a trace are its contexts (in
order, duplicates by id dropped), its question is the retriever's query (the trace's input
when several retrievers feed one answer) and its answer the LLM span's output (the trace's own
output when no LLM span follows). A trace with no retriever span gives no sample and is
counted. Each sample keeps ``trace_id``, ``span_id`` (the span its scores attach to: the
answer's span, else the retriever's) and ``retriever_span_ids`` in its metadata.

Parsing only: no ragjudge value above plain records is built here (:mod:`ragjudge.rag.samples`
makes samples of them), and nothing is imported from any tracing library.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import InputError

__all__ = ["trace_format", "trace_records", "select_traces", "span_scores", "TraceRecords"]

_DOC_KEY = re.compile(r"^retrieval\.documents\.(\d+)\.document\.(\w+)$")
_OUT_MSG_KEY = re.compile(r"^llm\.output_messages\.(\d+)\.message\.(\w+)$")
_TEXT_KEYS = ("content", "text", "page_content", "pageContent", "document", "chunk")
_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "node_id", "source")
_QUERY_KEYS = ("query", "question", "input", "user_input", "str", "query_str", "text")
_ANSWER_KEYS = ("content", "answer", "output", "text", "response", "result")


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str  # RETRIEVER, LLM, CHAIN... ("" when unknown)
    start: float
    end: float
    attrs: dict[str, Any] = field(default_factory=dict)
    # Langfuse observations carry structured input/output instead of attributes
    input: Any = None
    output: Any = None


@dataclass
class TraceRecords:
    """Sample records read from traces, with what was left out and why."""

    records: list[dict[str, Any]]
    format: str
    traces: int
    without_retriever: int


# ----------------------------------------------------------------------------- recognition


def _first_object(text: str) -> Any:
    head = text.lstrip("\ufeff \t\r\n")
    if not head.startswith(("{", "[")):
        return None
    try:
        return json.loads(head)
    except ValueError:
        pass
    try:  # JSON lines: the first line alone
        return json.loads(head.split("\n", 1)[0])
    except ValueError:
        return None


def _shape(obj: Any) -> str | None:
    if isinstance(obj, list):
        return _shape(obj[0]) if obj and isinstance(obj[0], Mapping) else None
    if not isinstance(obj, Mapping):
        return None
    if "resourceSpans" in obj:
        return "otlp"
    if "context.span_id" in obj or "context.trace_id" in obj:
        return "phoenix"
    if isinstance(obj.get("observations"), list) or (
            isinstance(obj.get("trace"), Mapping) and "observations" in obj):
        return "langfuse"
    if isinstance(obj.get("data"), list):
        return _shape(obj["data"]) or ("langfuse" if not obj["data"] else None)
    if "traceId" in obj and "type" in obj and ("startTime" in obj or "input" in obj):
        return "langfuse"
    return None


def trace_format(text: str) -> str | None:
    """``"otlp"``, ``"phoenix"`` or ``"langfuse"`` when ``text`` is a trace export, else ``None``."""
    return _shape(_first_object(text))


# ----------------------------------------------------------------------------- values


def _any_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(v, Mapping):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "doubleValue" in v:
        try:
            return float(v["doubleValue"])
        except (TypeError, ValueError):
            return v["doubleValue"]
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [_any_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return {kv.get("key"): _any_value(kv.get("value")) for kv in (v["kvlistValue"] or {}).get("values", [])}
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _otlp_id(value: Any) -> str:
    """Trace and span ids as lowercase hex: OTLP JSON writes hex, the protobuf JSON mapping base64."""
    s = str(value or "")
    if s and not re.fullmatch(r"[0-9a-fA-F]+", s):
        try:
            return base64.b64decode(s, validate=True).hex()
        except ValueError:
            return s
    return s.lower()


def _nanos(value: Any) -> float:
    try:
        return float(value) / 1e9
    except (TypeError, ValueError):
        return 0.0


def _time(value: Any) -> float:
    """ISO times (Langfuse, Phoenix) or epoch numbers as seconds; 0 when absent or unreadable."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value) / (1e9 if value > 1e14 else 1e3 if value > 1e11 else 1)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


# ----------------------------------------------------------------------------- readers


def _load_all(text: str, source: str | None) -> list[Any]:
    """Every top-level JSON value: one document, or one per line."""
    head = text.lstrip("\ufeff \t\r\n")
    try:
        return [json.loads(head)]
    except ValueError:
        pass
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip().lstrip("\ufeff")
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError as exc:
            raise InputError(f"not JSON: {exc.msg}", source=source, line=n) from None
    return out


def _otlp_spans(objs: Sequence[Any], source: str | None) -> list[_Span]:
    spans = []
    for obj in objs:
        for rs in obj.get("resourceSpans") or [] if isinstance(obj, Mapping) else []:
            for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []):
                for sp in ss.get("spans") or []:
                    attrs = {kv.get("key"): _any_value(kv.get("value")) for kv in sp.get("attributes") or []
                             if isinstance(kv, Mapping)}
                    tid, sid = _otlp_id(sp.get("traceId")), _otlp_id(sp.get("spanId"))
                    if not tid or not sid:
                        raise InputError("a span without traceId or spanId", source=source, field="spanId")
                    spans.append(_Span(
                        trace_id=tid, span_id=sid, parent_id=_otlp_id(sp.get("parentSpanId")) or None,
                        name=str(sp.get("name") or ""),
                        kind=str(attrs.get("openinference.span.kind") or "").upper(),
                        start=_nanos(sp.get("startTimeUnixNano")), end=_nanos(sp.get("endTimeUnixNano")),
                        attrs=attrs))
    return spans


def _phoenix_spans(objs: Sequence[Any], source: str | None) -> list[_Span]:
    rows: list[Any] = []
    for obj in objs:
        rows.extend(obj if isinstance(obj, list) else [obj])
    spans = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise InputError(f"span #{i} is not an object", source=source)
        attrs = {k[len("attributes."):]: v for k, v in row.items() if k.startswith("attributes.")}
        if isinstance(row.get("attributes"), Mapping):
            attrs.update(_flatten(row["attributes"]))
        tid, sid = row.get("context.trace_id"), row.get("context.span_id")
        if not tid or not sid:
            raise InputError(f"span #{i} has no context.trace_id or context.span_id", source=source,
                             field="context.span_id")
        kind = row.get("span_kind") or attrs.get("openinference.span.kind") or ""
        spans.append(_Span(trace_id=str(tid), span_id=str(sid), parent_id=row.get("parent_id") or None,
                           name=str(row.get("name") or ""), kind=str(kind).upper(),
                           start=_time(row.get("start_time")), end=_time(row.get("end_time")), attrs=attrs))
    return spans


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested attribute objects (``{"input": {"value": ...}}``) as dotted keys; lists kept."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _langfuse_spans(objs: Sequence[Any], source: str | None) -> tuple[list[_Span], dict[str, Mapping[str, Any]]]:
    observations: list[Mapping[str, Any]] = []
    traces: dict[str, Mapping[str, Any]] = {}

    def take(obj: Any) -> None:
        if isinstance(obj, list):
            for x in obj:
                take(x)
        elif isinstance(obj, Mapping):
            if isinstance(obj.get("data"), list):
                take(obj["data"])
            elif isinstance(obj.get("observations"), list):
                trace = obj.get("trace") if isinstance(obj.get("trace"), Mapping) else obj
                if trace.get("id") is not None:
                    traces[str(trace["id"])] = trace
                for o in obj["observations"]:
                    if isinstance(o, Mapping) and o.get("traceId") is None and trace.get("id") is not None:
                        o = {**o, "traceId": trace["id"]}
                    observations.append(o)
            elif "traceId" in obj:
                observations.append(obj)

    take(list(objs))
    spans = []
    for i, o in enumerate(observations, 1):
        if not isinstance(o, Mapping) or o.get("id") is None or o.get("traceId") is None:
            raise InputError(f"observation #{i} has no id or traceId", source=source, field="traceId")
        typ = str(o.get("type") or "").upper()
        name = str(o.get("name") or "")
        kind = "LLM" if typ == "GENERATION" else typ
        if typ == "SPAN" and re.search(r"retriev", name, re.I):
            kind = "RETRIEVER"
        spans.append(_Span(trace_id=str(o["traceId"]), span_id=str(o["id"]),
                           parent_id=o.get("parentObservationId") or None, name=name, kind=kind,
                           start=_time(o.get("startTime")), end=_time(o.get("endTime") or o.get("startTime")),
                           input=_maybe_json(o.get("input")), output=_maybe_json(o.get("output"))))
    return spans, traces


# ----------------------------------------------------------------------------- span contents


def _text_of(value: Any, keys: Sequence[str]) -> str | None:
    """A string from a string, or the first string under ``keys`` in a mapping (one level of
    lists and chat messages: the last message's content)."""
    value = _maybe_json(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if isinstance(value.get("choices"), list) and value["choices"]:  # an OpenAI response body
            return _text_of(value["choices"][0].get("message") or value["choices"][0], keys)
        for k in keys:
            if isinstance(value.get(k), str):
                return value[k]
        for k in ("messages", "kwargs", "inputs", "outputs"):
            if k in value:
                got = _text_of(value[k], keys)
                if got is not None:
                    return got
        return None
    if isinstance(value, list) and value:
        return _text_of(value[-1], keys)
    return None


def _doc(d: Any) -> dict[str, Any] | None:
    """One retrieved document as ``{"id", "text", "score"}`` (keys absent when unknown)."""
    if isinstance(d, str):
        return {"text": d}
    if not isinstance(d, Mapping):
        return None
    d = {(k[len("document."):] if isinstance(k, str) and k.startswith("document.") else k): v for k, v in d.items()}
    meta = _maybe_json(d.get("metadata"))
    out: dict[str, Any] = {}
    for k in _TEXT_KEYS:
        if isinstance(d.get(k), str):
            out["text"] = d[k]
            break
    for src in (d, meta if isinstance(meta, Mapping) else {}):
        for k in _ID_KEYS:
            if src.get(k) is not None and not isinstance(src.get(k), (dict, list)):
                out["id"] = str(src[k])
                break
        if "id" in out:
            break
    score = d.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        out["score"] = float(score)
    return out or None


def _span_documents(span: _Span) -> list[dict[str, Any]]:
    if span.attrs:
        whole = span.attrs.get("retrieval.documents")
        if isinstance(whole, (list, str)):
            docs = _maybe_json(whole)
            if isinstance(docs, list):
                return [x for x in (_doc(d) for d in docs) if x]
        indexed: dict[int, dict[str, Any]] = {}
        for k, v in span.attrs.items():
            m = _DOC_KEY.match(str(k))
            if m:
                indexed.setdefault(int(m.group(1)), {})[m.group(2)] = v
        return [x for x in (_doc(indexed[i]) for i in sorted(indexed)) if x]
    out = span.output
    if isinstance(out, Mapping):
        for k in ("documents", "nodes", "results", "source_nodes", "context", "contexts"):
            if isinstance(out.get(k), list):
                out = out[k]
                break
    if isinstance(out, list):
        return [x for x in (_doc(d.get("node", d) if isinstance(d, Mapping) else d) for d in out) if x]
    return []


def _span_input(span: _Span) -> str | None:
    if span.attrs:
        return _text_of(span.attrs.get("input.value"), _QUERY_KEYS)
    return _text_of(span.input, _QUERY_KEYS)


def _span_output(span: _Span) -> str | None:
    if span.attrs:
        msgs: dict[int, dict[str, Any]] = {}
        for k, v in span.attrs.items():
            m = _OUT_MSG_KEY.match(str(k))
            if m:
                msgs.setdefault(int(m.group(1)), {})[m.group(2)] = v
        whole = span.attrs.get("llm.output_messages")
        if isinstance(whole, list):
            for i, msg in enumerate(whole):
                if isinstance(msg, Mapping):
                    msgs[i] = {str(k).rsplit(".", 1)[-1]: v for k, v in msg.items()}
        for i in sorted(msgs, reverse=True):
            if isinstance(msgs[i].get("content"), str):
                return msgs[i]["content"]
        return _text_of(span.attrs.get("output.value"), _ANSWER_KEYS)
    return _text_of(span.output, _ANSWER_KEYS)


# ----------------------------------------------------------------------------- samples


def _samples_of_trace(spans: list[_Span], trace: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    spans = sorted(spans, key=lambda s: (s.start, s.end))
    roots = [s for s in spans if s.parent_id is None or s.parent_id not in {x.span_id for x in spans}]
    root = roots[0] if roots else None
    trace_input = _text_of(trace.get("input"), _QUERY_KEYS) if trace else None
    trace_output = _text_of(trace.get("output"), _ANSWER_KEYS) if trace else None
    if root is not None and root.kind not in ("RETRIEVER", "LLM"):
        trace_input = trace_input or _span_input(root)
        trace_output = trace_output or _span_output(root)
    groups: list[tuple[list[_Span], _Span | None]] = []
    pending: list[_Span] = []
    for s in spans:
        if s.kind == "RETRIEVER":
            pending.append(s)
        elif s.kind == "LLM" and pending:
            groups.append((pending, s))
            pending = []
    if pending:
        groups.append((pending, None))
    out = []
    for retrievers, llm in groups:
        contexts: list[dict[str, Any]] = []
        seen: set[str] = set()
        for r in retrievers:
            for d in _span_documents(r):
                key = d.get("id") or d.get("text") or ""
                if key in seen:
                    continue
                seen.add(key)
                contexts.append(d)
        question = _span_input(retrievers[0]) if len(retrievers) == 1 else None
        question = question or trace_input or _span_input(retrievers[0])
        answer = _span_output(llm) if llm is not None else trace_output
        anchor = llm or retrievers[-1]
        trace_id = anchor.trace_id
        record: dict[str, Any] = {
            "id": trace_id if len(groups) == 1 else f"{trace_id}/{anchor.span_id}",
            "metadata": {"trace_id": trace_id, "span_id": anchor.span_id,
                         "retriever_span_ids": [r.span_id for r in retrievers]},
        }
        if question is not None:
            record["question"] = question
        if contexts:
            record["retrieved"] = [{k: d[k] for k in ("id", "text") if k in d} for d in contexts]
            record["metadata"]["context_scores"] = [d.get("score") for d in contexts]
        else:
            record["retrieved"] = []
        if answer is not None:
            record["answer"] = answer
        out.append(record)
    return out


def trace_records(text: str, *, source: str | None = None, format: str | None = None) -> TraceRecords:
    """Sample records (the id+text contract of :mod:`ragjudge.rag.samples`) from a trace export.

    ``format`` is ``"otlp"``, ``"phoenix"`` or ``"langfuse"``; recognised from the content when
    not given. Traces keep the order of their first span's start time.
    """
    objs = _load_all(text, source)
    fmt = format or _shape(objs[0] if len(objs) == 1 else objs)
    trace_meta: dict[str, Mapping[str, Any]] = {}
    if fmt == "otlp":
        spans = _otlp_spans(objs, source)
    elif fmt == "phoenix":
        spans = _phoenix_spans(objs, source)
    elif fmt == "langfuse":
        spans, trace_meta = _langfuse_spans(objs, source)
    else:
        raise InputError("not a trace export (expected OTLP JSON with resourceSpans, a Phoenix span "
                         "table or a Langfuse export)", source=source)
    by_trace: dict[str, list[_Span]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    for tid in trace_meta:
        by_trace.setdefault(tid, [])
    order = sorted(by_trace, key=lambda t: min((s.start for s in by_trace[t]), default=_time(
        trace_meta.get(t, {}).get("timestamp"))))
    records: list[dict[str, Any]] = []
    without = 0
    for tid in order:
        got = _samples_of_trace(by_trace[tid], trace_meta.get(tid))
        if not got:
            without += 1
        records.extend(got)
    return TraceRecords(records=records, format=fmt, traces=len(order), without_retriever=without)


def _share(trace_id: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def select_traces(records: Sequence[dict[str, Any]], *, fraction: float | None = None,
                  limit: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """A sample of the traces for online evaluation: each trace kept with probability
    ``fraction``, decided by a hash of its id and ``seed`` (so a rerun over a grown export keeps
    the same traces and the cache serves them), then the first ``limit`` traces. All samples of
    a trace stay together."""
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise InputError(f"must be in (0, 1], got {fraction}", field="fraction")
    if limit is not None and limit < 1:
        raise InputError(f"must be at least 1, got {limit}", field="limit")
    kept: list[dict[str, Any]] = []
    traces: set[str] = set()
    for r in records:
        tid = r["metadata"]["trace_id"]
        if fraction is not None and _share(tid, seed) >= fraction:
            continue
        if limit is not None and tid not in traces and len(traces) >= limit:
            continue
        traces.add(tid)
        kept.append(r)
    return kept


def span_scores(report: Any, samples: Iterable[Any], *, prefix: str = "ragjudge.") -> list[dict[str, Any]]:
    """One record per scored sample read from traces, ready to attach to its span:
    ``{"trace_id", "span_id", "retriever_span_ids", "sample_id", "attributes":
    {"ragjudge.<metric>": value}, "undetermined": {metric: reason}}``.

    ``report`` is a :class:`~ragjudge.rag.RagReport` (its ``sample_ids`` and ``scores``),
    ``samples`` the samples it scored; samples without a trace id are left out. An
    undetermined score is not an attribute (never a 0): its reason is under ``undetermined``.
    """
    meta = {s.id: s.metadata for s in samples}
    out = []
    for i, sid in enumerate(report.sample_ids):
        md = meta.get(sid) or {}
        if not md.get("trace_id"):
            continue
        attrs: dict[str, Any] = {}
        reasons: dict[str, str] = {}
        for m in report.metrics:
            score = report.scores[m][i]
            if score.value is None:
                reasons[m] = score.reason or "undetermined"
            else:
                attrs[f"{prefix}{m}"] = score.value
        rec: dict[str, Any] = {"trace_id": md["trace_id"], "span_id": md.get("span_id"),
                               "retriever_span_ids": list(md.get("retriever_span_ids") or []),
                               "sample_id": sid, "attributes": attrs}
        if reasons:
            rec["undetermined"] = reasons
        out.append(rec)
    return out
