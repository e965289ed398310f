"""OpenAI Batch API mode (``ragjudge judge --batch``): half the price, no rate limits, hours of latency.

One job goes through these steps, each persisted so a run interrupted at any point resumes
instead of paying twice:

1. every item is prepared by the session (:meth:`LLM.prepare`): its cache key and the exact
   ``/v1/chat/completions`` body the online path would send; cached items are done already;
2. the uncached requests are written as JSONL (``custom_id`` = the cache key, so results join
   back without any ordering assumption), uploaded (``purpose="batch"``) and submitted
   (``completion_window="24h"``), in chunks within the API's per-batch limits;
3. the batch is polled with a growing interval until it ends (completed, expired, cancelled or
   failed); the output and error files are downloaded and joined by ``custom_id``;
4. each reply goes through :meth:`LLM.accept` -- the same strict parser, accounting and cache
   write as the online path -- and items with no usable reply become failed outcomes with the
   reason (a rerun submits them again, since failures are never cached).

Resuming: a small state table (``batch_jobs`` / ``batch_items``) in the cache's SQLite file,
or in a file of its own with ``--no-cache``, records the uploaded input file and the batch id
*before* polling starts. A rerun with the same work finds the keys still covered by a live
batch and polls that batch again; if the process died between upload and submission it first
looks for a batch created from the recorded input file before submitting one.

Only the batch-management calls (upload, create, retrieve, download) are made here, on the
session client's ``AsyncOpenAI``; they get the SDK's own small retry budget except
``batches.create``, which is never retried blindly (a second create would be a second bill).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from ..errors import InputError, LLMError
from ..io.streams import decode_text, open_input
from .cache import default_cache_path
from .cachestore import is_postgres_url
from .client import AttemptDeadline, redact, within_deadline
from .budget import worst_case_prompt_tokens
from .cost import Usage
from .prompts import Prompt, load_prompt
from .provenance import FailureKind
from .replies import apply_validate
from .session import LLM
from .values import BUDGET_REASON, Outcome, PreparedCall, Validator

__all__ = [
    "BatchOptions",
    "BatchStore",
    "BatchResult",
    "build_requests",
    "chunk_requests",
    "parse_result_files",
    "run_batch",
    "default_state_path",
    "export_batch",
    "import_batch",
    "ExportedBatch",
]

ENDPOINT = "/v1/chat/completions"
# What a server without the Files/Batches endpoints answers (llama.cpp, vLLM, Ollama...).
NO_BATCH_API = frozenset({404, 405, 501})
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# OpenAI's documented per-batch limits: 50,000 requests and a 200 MB input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 190 * 1024 * 1024


@dataclass(frozen=True)
class BatchOptions:
    """How to submit and wait. ``max_wait=None`` waits until the batch ends (up to its 24 h)."""

    poll_interval: float = 5.0
    max_poll_interval: float = 60.0
    max_wait: float | None = None
    max_requests: int = MAX_REQUESTS
    max_bytes: int = MAX_BYTES
    completion_window: str = "24h"
    resubmit_failed: int = 1  # extra batch rounds for items the batch returned no answer for
    management_retries: int = 3  # SDK retries for upload / retrieve / download (never create)
    #: seconds one management call (upload, create, status, a whole download) may take in all:
    #: the HTTP timeout bounds each read, so a trickling server could otherwise stall the run
    call_deadline: float = 900.0


@dataclass(frozen=True)
class BatchResult:
    """What a batch returned for one ``custom_id``: a reply body, or why there is none."""

    body: dict[str, Any] | None
    error: str | None


def default_state_path() -> Path:
    """Where batch state lives without a cache file: beside the default cache (in the default
    cache folder when ``$RAGJUDGE_CACHE`` is a Postgres URL)."""
    target = default_cache_path()
    if isinstance(target, str):  # a PostgreSQL URL: no folder of its own
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragjudge" / "batches.sqlite"
    return target.parent / "batches.sqlite"


# ----------------------------------------------------------------------------- state
_STATE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS batch_jobs (
        job TEXT PRIMARY KEY,
        input_file_id TEXT,
        batch_id TEXT,
        state TEXT NOT NULL,            -- uploaded | submitted | done
        status TEXT,                    -- last batch status seen
        n INTEGER NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS batch_items (
        key TEXT NOT NULL,
        job TEXT NOT NULL,
        PRIMARY KEY (key, job)
    )""",
    "CREATE INDEX IF NOT EXISTS batch_items_key ON batch_items(key)",
)


class BatchStore:
    """Persistent record of submitted batch jobs (SQLite, WAL, autocommit per statement).

    It may share the cache's file: its tables are separate from the cache's ``answers``.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        for stmt in _STATE_SCHEMA:
            self._db.execute(stmt)

    def close(self) -> None:
        self._db.close()

    def record_upload(self, input_file_id: str, keys: Sequence[str]) -> str:
        """A new job whose input file is uploaded but not yet submitted; returns its id."""
        job = uuid.uuid4().hex
        now = time.time()
        with self._db:  # one transaction: the job and all its items, or nothing
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT INTO batch_jobs (job, input_file_id, batch_id, state, status, n, created, updated)"
                " VALUES (?, ?, NULL, 'uploaded', NULL, ?, ?, ?)",
                (job, input_file_id, len(keys), now, now),
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO batch_items (key, job) VALUES (?, ?)", [(k, job) for k in keys]
            )
        return job

    def set_batch(self, job: str, batch_id: str, status: str | None = None) -> None:
        self._db.execute(
            "UPDATE batch_jobs SET batch_id = ?, state = 'submitted', status = ?, updated = ? WHERE job = ?",
            (batch_id, status, time.time(), job),
        )

    def set_status(self, job: str, status: str) -> None:
        self._db.execute(
            "UPDATE batch_jobs SET status = ?, updated = ? WHERE job = ?", (status, time.time(), job)
        )

    def finish(self, job: str, status: str | None = None) -> None:
        """The job's results are joined (or it is abandoned): its keys are no longer covered."""
        self._db.execute(
            "UPDATE batch_jobs SET state = 'done', status = COALESCE(?, status), updated = ? WHERE job = ?",
            (status, time.time(), job),
        )

    def live_jobs(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Unfinished jobs covering any of ``keys``: ``{job: {input_file_id, batch_id, keys}}``."""
        wanted = list(dict.fromkeys(keys))
        jobs: dict[str, dict[str, Any]] = {}
        for i in range(0, len(wanted), 500):  # stay far below SQLite's bound-variable limit
            chunk = wanted[i : i + 500]
            rows = self._db.execute(
                "SELECT i.key, j.job, j.input_file_id, j.batch_id FROM batch_items i"
                " JOIN batch_jobs j ON j.job = i.job"
                f" WHERE j.state != 'done' AND i.key IN ({','.join('?' * len(chunk))})"
                " ORDER BY j.created",
                chunk,
            ).fetchall()
            for key, job, file_id, batch_id in rows:
                entry = jobs.setdefault(job, {"input_file_id": file_id, "batch_id": batch_id, "keys": []})
                entry["keys"].append(key)
        return jobs

    def jobs(self) -> list[dict[str, Any]]:
        """Every recorded job (newest first), for ``--batch`` status reports and tests."""
        cur = self._db.execute(
            "SELECT job, input_file_id, batch_id, state, status, n, created, updated"
            " FROM batch_jobs ORDER BY created DESC"
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]


# ----------------------------------------------------------------------------- JSONL in and out
def build_requests(
    calls: Iterable[tuple[str, Mapping[str, Any]]], *, endpoint: str = ENDPOINT
) -> list[bytes]:
    """One JSONL line (bytes, with newline) per ``(custom_id, body)``; ids must be unique."""
    lines: list[bytes] = []
    seen: set[str] = set()
    for custom_id, body in calls:
        if custom_id in seen:
            raise ValueError(f"duplicate custom_id {custom_id!r} in one batch")
        seen.add(custom_id)
        line = {"custom_id": custom_id, "method": "POST", "url": endpoint, "body": dict(body)}
        lines.append((json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    return lines


def chunk_requests(
    lines: Sequence[bytes], *, max_requests: int = MAX_REQUESTS, max_bytes: int = MAX_BYTES
) -> list[list[int]]:
    """Indices of ``lines`` grouped into batches within the request-count and file-size limits."""
    if max_requests < 1 or max_bytes < 1:
        raise ValueError("max_requests and max_bytes must be positive")
    chunks: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, line in enumerate(lines):
        if len(line) > max_bytes:
            raise LLMError(
                f"one batch request is {len(line)} bytes, over the {max_bytes}-byte batch file limit"
            )
        if current and (len(current) >= max_requests or size + len(line) > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append(i)
        size += len(line)
    if current:
        chunks.append(current)
    return chunks


def _error_text(obj: Mapping[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, Mapping):
        return redact(str(err.get("message") or err.get("code") or "error"))
    response = obj.get("response")
    if isinstance(response, Mapping):
        status = response.get("status_code")
        body = response.get("body")
        message = ""
        if isinstance(body, Mapping):
            inner = body.get("error")
            if isinstance(inner, Mapping):
                message = str(inner.get("message") or inner.get("code") or "")
        return redact(f"HTTP {status}: {message}".rstrip(": "))
    return "no response"


def parse_result_files(*texts: str | None, sources: Sequence[str] | None = None) -> dict[str, BatchResult]:
    """Join the output and error files' lines by ``custom_id``.

    A line with ``response.status_code == 200`` gives the reply body; anything else gives the
    error. When a custom id appears in both files, a successful reply wins; a custom id twice
    in one file, or answered in two, is an error (which answer is the model's cannot be told).
    With ``sources`` (the files' names) a bad line is an :class:`InputError` naming file, line
    and field; without, an :class:`LLMError` (a file the Batch API returned).
    """

    def bad(i: int, n: int, message: str, field: str | None = None) -> Exception:
        if sources is not None:
            return InputError(message.removeprefix("is "), source=sources[i], line=n, field=field)
        return LLMError(f"batch result file line {n} {'has no custom_id' if message == 'missing' else message}")

    results: dict[str, BatchResult] = {}
    for i, text in enumerate(texts):
        if not text:
            continue
        seen: set[str] = set()
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise bad(i, n, "is not JSON") from None
            if not isinstance(obj, Mapping):
                raise bad(i, n, f"is not a result object (a JSON {type(obj).__name__})")
            cid = obj.get("custom_id")
            if cid is None:
                raise bad(i, n, "missing", "custom_id")
            if not isinstance(cid, str):
                raise bad(i, n, f"is not a string: {json.dumps(cid)}", "custom_id")
            if cid in seen:
                raise bad(i, n, f"has custom_id {redact(cid)!r} a second time in the file", "custom_id")
            seen.add(cid)
            response = obj.get("response")
            ok = (
                isinstance(response, Mapping)
                and response.get("status_code") == 200
                and isinstance(response.get("body"), Mapping)
                and not obj.get("error")
            )
            if ok:
                if cid in results and results[cid].body is not None:
                    raise bad(i, n, f"answers custom_id {redact(cid)!r} a second time (another file answered it)", "custom_id")
                results[cid] = BatchResult(dict(response["body"]), None)
            elif cid not in results or results[cid].body is None:
                results[cid] = BatchResult(None, "batch: " + _error_text(obj))
    return results


# ----------------------------------------------------------------------------- the job
Progress = Callable[[str], None]


def _state_path(llm: LLM, state_path: str | Path | None) -> Path:
    if state_path is not None:
        return Path(state_path).expanduser()
    cache_path = getattr(llm.cache, "path", None)
    if cache_path is None or is_postgres_url(cache_path):  # a Postgres cache: no file beside it
        return default_state_path()
    return Path(cache_path)


class _Job:
    """One submitted batch: its state row, keys and the last batch object seen."""

    def __init__(self, job: str, keys: list[str], input_file_id: str | None, batch_id: str | None) -> None:
        self.job = job
        self.keys = keys
        self.input_file_id = input_file_id
        self.batch_id = batch_id
        self.batch: Any = None


class _BatchRunner:
    def __init__(self, llm: LLM, store: BatchStore, options: BatchOptions, progress: Progress | None) -> None:
        self.llm = llm
        self.store = store
        self.options = options
        self.progress = progress or (lambda msg: None)
        if "batch" not in llm.spec.features:
            raise LLMError(f"the {llm.spec.name} provider has no Batch API here; run without --batch")
        client = llm.client()  # the session's per-loop client (max_retries=0 on the SDK)
        sdk = client.provider.sdk  # type: ignore[attr-defined]  # the batch capability's SDK
        self.api = sdk.with_options(max_retries=options.management_retries)
        self.create_api = sdk.with_options(max_retries=0)
        self.endpoint = "/chat/completions" if llm.endpoint.azure_endpoint else ENDPOINT

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await within_deadline(self.options.call_deadline, coro, redact(str(self.api.base_url)))
        except AttemptDeadline as exc:
            raise LLMError(redact(f"batch: {what} failed: {exc}")) from None
        except openai.APIStatusError as exc:
            if exc.status_code in NO_BATCH_API and what in ("upload", "create", "list"):
                where = redact(str(self.api.base_url))
                raise LLMError(f"the server at {where} has no Batch API (HTTP {exc.status_code} on "
                               f"{what}); run without --batch") from None
            raise LLMError(redact(f"batch: {what} failed (HTTP {exc.status_code}): {exc.message}")) from None
        except openai.APIConnectionError as exc:
            raise LLMError(redact(f"batch: {what} failed: {exc}")) from None

    async def submit(self, calls: list[PreparedCall]) -> list[_Job]:
        lines = build_requests(((c.key, c.body) for c in calls), endpoint=self.endpoint)
        jobs = []
        for idx in chunk_requests(
            lines, max_requests=self.options.max_requests, max_bytes=self.options.max_bytes
        ):
            data = b"".join(lines[i] for i in idx)
            keys = [calls[i].key for i in idx]
            f = await self._call(
                "upload",
                self.api.files.create(
                    file=("ragjudge-batch.jsonl", data, "application/jsonl"), purpose="batch"
                ),
            )
            job = _Job(self.store.record_upload(f.id, keys), keys, f.id, None)
            self.progress(f"batch: uploaded {len(keys)} requests as {f.id}")
            await self.create(job)
            jobs.append(job)
        return jobs

    async def create(self, job: _Job) -> None:
        assert job.input_file_id is not None
        batch = await self._call(
            "create",
            self.create_api.batches.create(
                input_file_id=job.input_file_id,
                endpoint=self.endpoint,  # type: ignore[arg-type]
                completion_window=self.options.completion_window,  # type: ignore[arg-type]
                metadata={"ragjudge_job": job.job},
            ),
        )
        job.batch_id, job.batch = batch.id, batch
        self.store.set_batch(job.job, batch.id, batch.status)
        self.progress(f"batch: submitted {batch.id} ({len(job.keys)} requests)")

    async def adopt(self, job: _Job) -> None:
        """A job uploaded but with no recorded batch id: find the batch made from its input
        file (the process may have died right after creating it), else create one now."""
        assert job.input_file_id is not None
        page = await self._call("list", self.api.batches.list(limit=100))
        for b in page.data:
            if b.input_file_id == job.input_file_id:
                job.batch_id, job.batch = b.id, b
                self.store.set_batch(job.job, b.id, b.status)
                self.progress(f"batch: resuming {b.id} (found by its input file)")
                return
        await self.create(job)

    async def wait(self, job: _Job) -> Any:
        interval = self.options.poll_interval
        start = time.monotonic()
        last = None
        while True:
            try:
                batch = await self.api.batches.retrieve(job.batch_id)  # type: ignore[arg-type]
            except (
                openai.APIConnectionError,
                openai.APITimeoutError,
                openai.InternalServerError,
                openai.RateLimitError,
            ):
                batch = None  # transient: simply poll again later
            except openai.APIStatusError as exc:
                raise LLMError(
                    redact(f"batch: cannot read {job.batch_id} (HTTP {exc.status_code}): {exc.message}")
                ) from None
            if batch is not None:
                job.batch = batch
                counts = batch.request_counts
                state = (batch.status, getattr(counts, "completed", None), getattr(counts, "failed", None))
                if state != last:
                    self.store.set_status(job.job, batch.status)
                    done = (
                        ""
                        if counts is None
                        else f" {counts.completed}/{counts.total} done, {counts.failed} failed"
                    )
                    self.progress(f"batch: {batch.id} {batch.status}{done}")
                    last = state
                if batch.status in TERMINAL:
                    return batch
            waited = time.monotonic() - start
            if self.options.max_wait is not None and waited >= self.options.max_wait:
                raise TimeoutError(
                    f"batch {job.batch_id} still {getattr(job.batch, 'status', 'unknown')} "
                    f"after {waited:.0f}s; "
                    "run the same command again to resume waiting (nothing is resubmitted)"
                )
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, self.options.max_poll_interval)

    async def download(self, file_id: str | None) -> str | None:
        if not file_id:
            return None
        content = await self._call(f"download of {file_id}", self.api.files.content(file_id))
        return content.text

    async def results(self, job: _Job) -> dict[str, BatchResult]:
        batch = job.batch
        if batch.status == "failed":
            errs = getattr(batch.errors, "data", None) or []
            detail = "; ".join(
                f"{e.code}: {e.message}" + (f" (line {e.line})" if getattr(e, "line", None) else "")
                for e in errs[:3]
            )
            return {
                k: BatchResult(None, redact(f"batch: {batch.id} failed validation: {detail or 'no detail'}"))
                for k in job.keys
            }
        out = parse_result_files(
            await self.download(batch.output_file_id), await self.download(batch.error_file_id)
        )
        missing = BatchResult(None, f"batch: no result for this request (batch {batch.status})")
        return {k: out.get(k, missing) for k in job.keys}


async def run_batch(
    llm: LLM,
    prompt: Prompt | str | Path,
    variables: Iterable[Mapping[str, Any]],
    *,
    validate: Validator | None = None,
    state_path: str | Path | None = None,
    options: BatchOptions | None = None,
    progress: Progress | None = None,
) -> list[Outcome]:
    """Like :meth:`LLM.structured_many`, through the Batch API: one :class:`Outcome` per item,
    in input order. Cached items cost nothing; identical items are sent once; a job already
    submitted for these requests (same state file) is resumed rather than resubmitted.

    ``state_path`` defaults to the cache file (separate tables) or, with no cache,
    :func:`default_state_path`. ``KeyboardInterrupt`` or ``max_wait`` leave the batch running;
    the next call resumes it.
    """
    options = options or BatchOptions()
    prompt = load_prompt(prompt)
    items = list(variables)
    calls = [llm.prepare(prompt, v) for v in items]
    results: dict[str, Outcome] = {}
    pending: dict[str, PreparedCall] = {}
    for call in calls:
        if call.cached is not None:
            llm.stats.cache_hits += 1
        elif call.key not in pending:
            pending[call.key] = call

    # --max-cost: submit only what the budget covers, estimated at the batch price (what the
    # Batch API bills).
    if llm.max_cost is not None and pending:
        spent = llm.cost or 0.0
        within: dict[str, PreparedCall] = {}
        for key, call in pending.items():
            # The worst case, as online: the prompt's upper bound and every token allowed.
            est = Usage(1, worst_case_prompt_tokens(call.messages, call.body.get("response_format")),
                        0, llm.params(call.prompt)["max_tokens"])
            spent += llm.cost_of(est, batch=True) or 0.0
            if spent > llm.max_cost:
                results[key] = llm.failure(call, FailureKind.BUDGET, BUDGET_REASON)
                llm.stats.skipped += 1
            else:
                within[key] = call
        pending = within

    if pending:
        await _submit_and_join(llm, pending, results, validate, _state_path(llm, state_path), options, progress)
    out = []
    for call in calls:
        if call.cached is not None:
            out.append(apply_validate(call.cached, validate))  # same rule as the online path
        else:
            out.append(results[call.key])
    return out


async def _submit_and_join(
    llm: LLM,
    pending: dict[str, PreparedCall],
    results: dict[str, Outcome],
    validate: Validator | None,
    state_path: Path,
    options: BatchOptions,
    progress: Progress | None,
) -> None:
    """Get an outcome into ``results`` for every pending call: resume live jobs, submit the
    rest, wait, join, and resubmit unanswered requests up to ``options.resubmit_failed`` times."""
    store = BatchStore(state_path)
    try:
        runner = _BatchRunner(llm, store, options, progress)
        rounds = 0
        while pending:
            live = store.live_jobs(pending)
            jobs: list[_Job] = []
            covered: set[str] = set()
            for job_id, info in live.items():
                # Every live job is harvested (it is paid for), even if an older one also
                # covers its keys; the first answer for a key wins below.
                covered.update(info["keys"])
                job = _Job(job_id, info["keys"], info["input_file_id"], info["batch_id"])
                if job.batch_id is None:
                    await runner.adopt(job)
                else:
                    runner.progress(f"batch: resuming {job.batch_id} ({len(job.keys)} requests)")
                jobs.append(job)
            fresh = [c for k, c in pending.items() if k not in covered]
            if fresh:
                jobs += await runner.submit(fresh)
            await asyncio.gather(*(runner.wait(j) for j in jobs))
            retry: dict[str, PreparedCall] = {}
            for job in jobs:
                joined = await runner.results(job)
                for key, res in joined.items():
                    call = pending.get(key)
                    if call is None or key in results:  # answered by another job of this round
                        if res.body is not None:  # billed all the same: counted, not used
                            llm.count_unused(res.body, call, batch=True)
                        continue
                    if res.body is not None:
                        results[key] = llm.accept(call, res.body, validate=validate, batch=True)
                    elif rounds < options.resubmit_failed and job.batch.status != "failed":
                        retry[key] = call
                    elif key not in retry:
                        results[key] = llm.failure(call, FailureKind.BATCH, res.error or "batch: no result")
                        llm.stats.failed += 1
                store.finish(job.job, job.batch.status)
            retry = {k: c for k, c in retry.items() if k not in results}
            if retry:
                runner.progress(f"batch: resubmitting {len(retry)} requests the batch did not answer")
            pending = retry
            rounds += 1
    finally:
        store.close()


# ----------------------------------------------------------------------------- files both ways
@dataclass(frozen=True)
class ExportedBatch:
    """What :func:`export_batch` wrote: requests (one per distinct uncached request), and the
    items answered by the cache or sharing a request with another."""

    path: str
    requests: int
    cached: int
    duplicates: int

    def describe(self) -> str:
        return (f"wrote {self.requests} requests to {self.path} ({self.cached} already cached, "
                f"{self.duplicates} duplicates); run them with any OpenAI-compatible batch runner "
                "(OpenAI's Batch API, vllm run-batch, LiteLLM) and bring the output back with "
                "--import-batch")


def export_batch(llm: LLM, prompt: Prompt | str | Path, variables: Iterable[Mapping[str, Any]],
                 path: str | Path) -> ExportedBatch:
    """Write the requests :meth:`LLM.structured_many` would send as an OpenAI batch input file
    (``custom_id`` = the cache key, so the results join back whatever order they come in);
    cached and duplicate requests are left out. Nothing is sent."""
    prompt = load_prompt(prompt)
    pending: dict[str, PreparedCall] = {}
    cached = duplicates = 0
    for v in variables:
        call = llm.prepare(prompt, v)
        if call.cached is not None:
            cached += 1
        elif call.key in pending:
            duplicates += 1
        else:
            pending[call.key] = call
    lines = build_requests((key, call.body) for key, call in pending.items())
    try:
        with open(path, "wb") as f:
            f.writelines(lines)
    except OSError as exc:
        raise InputError(f"cannot write the batch file ({exc.strerror or exc})", source=str(path)) from None
    return ExportedBatch(str(path), len(lines), cached, duplicates)


def import_batch(llm: LLM, prompt: Prompt | str | Path, variables: Iterable[Mapping[str, Any]],
                 paths: Sequence[str | Path], *, validate: Validator | None = None,
                 batch_price: bool = True) -> list[Outcome]:
    """The outcomes of ``variables`` from batch output (and error) files made from an
    :func:`export_batch` file: each reply is checked like an online one, counted
    (``batch_price``: at the Batch API's price) and cached, so importing again, or judging the
    same pairs online later, pays nothing more. An item with no reply in the files fails with
    that reason; a cached item is answered from the cache."""
    prompt = load_prompt(prompt)
    texts, sources = [], []
    for path in paths:
        # One reading path for every input: .gz by its magic bytes, invalid UTF-8 and unreadable
        # files as one line naming the file (and the line).
        with open_input(path) as stream:
            sources.append(stream.source)
            texts.append(decode_text(stream.read(), stream.source))
    results = parse_result_files(*texts, sources=sources)
    where = ", ".join(sources)
    if not results:
        raise InputError("no batch results in the file(s): each line is one result "
                         '{"custom_id": ..., "response": {"status_code": ..., "body": ...}}',
                         source=where)
    done: dict[str, Outcome] = {}
    out: list[Outcome] = []
    asked: set[str] = set()
    for v in variables:
        call = llm.prepare(prompt, v)
        asked.add(call.key)
        if call.cached is not None:
            llm.stats.cache_hits += 1
            out.append(apply_validate(call.cached, validate))
            continue
        if call.key not in done:
            got = results.get(call.key)
            if got is None:
                llm.stats.failed += 1
                done[call.key] = llm.failure(call, FailureKind.OTHER, "not in the batch results")
            elif got.body is None:
                llm.stats.failed += 1
                done[call.key] = llm.failure(call, FailureKind.RETRIES_EXHAUSTED, got.error or "batch error")
            else:
                done[call.key] = llm.accept(call, got.body, validate=validate, batch=batch_price)
        out.append(done[call.key])
    # A result whose custom_id (the cache key) names no request made now comes from another
    # export: another pool, prompt, model or setting. Used silently, nothing would say why
    # the pairs asked for are "not in the batch results".
    foreign = len(set(results) - asked)
    if foreign and foreign == len(results) and done:
        raise InputError(f"none of the {len(results)} results answers a request of this command "
                         "(made by another export: another pool, prompt, model or setting such "
                         "as --max-tokens?); export again with the same arguments", source=where)
    if foreign:
        warnings.warn(f"{where}: {foreign} of {len(results)} results answer no request of this "
                      "command (another export's: another pool, prompt, model or setting); not used",
                      stacklevel=2)
    return out
