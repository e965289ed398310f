"""Background jobs of the HTTP service: LLM judging, LLM-graded RAG metrics, synthetic test
collections.

State lives in SQLite (``jobs.sqlite`` beside the LLM cache), or in PostgreSQL for several
server processes on several hosts (``--jobs-db postgresql://...``, :class:`PostgresJobStore`):
the request, status, progress, cost, every judgment as it arrives, and the result. A
submission with an ``Idempotency-Key`` returns the job first submitted with that key. A job survives a server restart:

* graceful stop (SIGTERM / Ctrl-C): no new calls start, calls in flight are awaited and
  recorded, and the job goes back to ``queued``; the next server start resumes it;
* a crash: the job's lease (refreshed twice a second) runs out and any server process sharing
  the state resumes it.

Resuming never pays twice: judged pairs are in the job's own table (and in the LLM cache),
so only what is missing is asked; RAG and synth jobs (one library call each) replay answered
calls from the LLM cache; the budget (``max_cost``) counts what earlier runs spent.
Several worker processes share the store safely: a job is claimed atomically by one of them.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import math
import os
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, RagjudgeError
from .models import JudgeRequest, ModelSettings, RagRequest, SynthRequest
from .service import check_pairs, load_qrels, load_run
from .settings import ServerSettings

if TYPE_CHECKING:
    from ..judges.options import JudgeOptions
    from ..rag.options import RagOptions
    from ..synth.options import SynthOptions

__all__ = ["JobStore", "PostgresJobStore", "JobManager", "build_llm", "judge_options", "judge_pairs", "rag_inputs", "synth_inputs",
           "synth_plan", "synth_result", "job_view"]

log = logging.getLogger("ragjudge.server")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, request TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, owner TEXT, heartbeat REAL,
    cancel INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0, counts TEXT NOT NULL DEFAULT '{}', cost REAL,
    usage TEXT NOT NULL DEFAULT '{}', error TEXT, result TEXT, idem_key TEXT
);
CREATE TABLE IF NOT EXISTS judgments (
    job TEXT NOT NULL, idx INTEGER NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS judgments_job ON judgments (job, idx);
"""
FINAL = ("done", "failed", "cancelled")
#: Seconds a cancelled judge job waits for its calls in flight before it stops.
CANCEL_GRACE = 5.0


# ----------------------------------------------------------------------------- store
#: Longest ``Idempotency-Key`` accepted.
MAX_IDEMPOTENCY_KEY = 255


def _check_idempotency_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise InputError(f"must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters",
                         field="Idempotency-Key")
    return key


def _same_request(row: Mapping[str, Any] | None, kind: str, body: str, key: str) -> str:
    """The id of the job stored under an idempotency key, if it is the same request."""
    if row is None:  # pragma: no cover - the insert or an earlier one stored it
        raise RagjudgeError(f"no job stored under Idempotency-Key {key!r}")
    if row["kind"] != kind or json.loads(row["request"]) != json.loads(body):
        raise InputError(f"already used for another request (job {row['id']}); use a new key",
                         field="Idempotency-Key")
    return str(row["id"])


class JobStore:
    """SQLite job state; safe from several threads and processes (WAL, atomic claims).

    ``JobStore("postgresql://user@host/db")`` returns a :class:`PostgresJobStore` instead: the
    same operations on a database several ``ragjudge serve`` processes (on any hosts) share."""

    def __new__(cls, path: str | Path) -> Any:
        from ..llm.cachestore import is_postgres_url

        if cls is JobStore and is_postgres_url(path):
            return super().__new__(PostgresJobStore)
        return super().__new__(cls)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        from ..llm.cachestore import check_local_filesystem

        check_local_filesystem(self.path, "job store")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            # A store made before idempotency keys: add the column (NULL for old jobs).
            if "idem_key" not in {r["name"] for r in self._db.execute("PRAGMA table_info(jobs)")}:
                try:
                    self._db.execute("ALTER TABLE jobs ADD COLUMN idem_key TEXT")
                except sqlite3.OperationalError:  # another process added it meanwhile
                    pass
            self._db.execute("CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs (idem_key)")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _one(self, sql: str, args: tuple = ()) -> sqlite3.Row | None:
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    def _run(self, sql: str, args: tuple = ()) -> int:
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def create(self, kind: str, request: Mapping[str, Any], total: int, *,
               idempotency_key: str | None = None) -> str:
        """A new queued job's id. With ``idempotency_key``: the job first submitted with that
        key, if any (the same request again, e.g. a client retrying after a lost reply), never a
        second one; the key reused for another request is a one-line :class:`InputError`."""
        key = _check_idempotency_key(idempotency_key)
        job_id = uuid.uuid4().hex
        now = time.time()
        body = json.dumps(request)
        self._run("INSERT INTO jobs (id, kind, status, request, created, updated, total, idem_key) "
                  "VALUES (?, ?, 'queued', ?, ?, ?, ?, ?) ON CONFLICT (idem_key) DO NOTHING",
                  (job_id, kind, body, now, now, total, key))
        if key is None:
            return job_id
        return _same_request(self._one("SELECT id, kind, request FROM jobs WHERE idem_key = ?", (key,)),
                             kind, body, key)

    def get(self, job_id: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))

    def list(self, limit: int = 100) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute("SELECT * FROM jobs ORDER BY created DESC LIMIT ?",
                                    (limit,)).fetchall()

    def claim(self, owner: str, stale_before: float) -> sqlite3.Row | None:
        """Take the oldest queued job, or a running one whose owner stopped renewing its lease."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT id FROM jobs WHERE status = 'queued' OR "
                    "(status = 'running' AND heartbeat < ?) ORDER BY created LIMIT 1",
                    (stale_before,)).fetchone()
                if row is None:
                    self._db.execute("COMMIT")
                    return None
                self._db.execute("UPDATE jobs SET status = 'running', owner = ?, heartbeat = ?, "
                                 "updated = ? WHERE id = ?", (owner, now, now, row["id"]))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self._db.execute("SELECT * FROM jobs WHERE id = ?", (row["id"],)).fetchone()

    def heartbeat(self, job_id: str, owner: str, snap: Mapping[str, Any]) -> bool | None:
        """Renew the lease and store progress; the job's cancel flag, or ``None`` if the job is
        no longer ours."""
        now = time.time()
        n = self._run(
            "UPDATE jobs SET heartbeat = ?, updated = ?, done = ?, total = ?, counts = ?, "
            "cost = ?, usage = ? WHERE id = ? AND owner = ? AND status = 'running'",
            (now, now, snap["done"], snap["total"], json.dumps(snap["counts"]), snap["cost"],
             json.dumps(snap["usage"]), job_id, owner))
        if not n:
            return None
        row = self._one("SELECT cancel FROM jobs WHERE id = ?", (job_id,))
        return bool(row and row["cancel"])

    def finish(self, job_id: str, owner: str, status: str, snap: Mapping[str, Any], *,
               result: Any = None, error: str | None = None) -> None:
        now = time.time()
        self._run(
            "UPDATE jobs SET status = ?, updated = ?, done = ?, total = ?, counts = ?, cost = ?, "
            "usage = ?, result = ?, error = ?, owner = NULL WHERE id = ? AND owner = ?",
            (status, now, snap["done"], snap["total"], json.dumps(snap["counts"]), snap["cost"],
             json.dumps(snap["usage"]), None if result is None else json.dumps(result), error,
             job_id, owner))

    def release(self, job_id: str, owner: str, snap: Mapping[str, Any]) -> None:
        """Give a job back (graceful stop): queued again, resumed by the next claim."""
        self._run("UPDATE jobs SET status = 'queued', owner = NULL, updated = ?, done = ?, "
                  "counts = ?, cost = ?, usage = ? WHERE id = ? AND owner = ?",
                  (time.time(), snap["done"], json.dumps(snap["counts"]), snap["cost"],
                   json.dumps(snap["usage"]), job_id, owner))

    def request_cancel(self, job_id: str) -> sqlite3.Row | None:
        """Flag a job for cancellation; a queued job is cancelled at once."""
        now = time.time()
        with self._lock:
            self._db.execute("UPDATE jobs SET cancel = 1, updated = ? WHERE id = ? AND status "
                             "IN ('queued', 'running')", (now, job_id))
            self._db.execute("UPDATE jobs SET status = 'cancelled', updated = ? WHERE id = ? "
                             "AND status = 'queued'", (now, job_id))
            return self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()

    def add_judgment(self, job_id: str, idx: int, record: Mapping[str, Any]) -> None:
        self._run("INSERT INTO judgments (job, idx, record) VALUES (?, ?, ?)",
                  (job_id, idx, json.dumps(record)))

    # ``builtins.list``: inside this class ``list`` is the method above.
    def judgments(self, job_id: str) -> builtins.list[tuple[int, dict[str, Any]]]:
        """Every stored judgment attempt of a job, oldest first (a retried pair appears twice)."""
        with self._lock:
            rows = self._db.execute("SELECT idx, record FROM judgments WHERE job = ? ORDER BY seq",
                                    (job_id,)).fetchall()
        return [(r["idx"], json.loads(r["record"])) for r in rows]


_PG_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ragjudge_jobs (
        id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, request TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL, owner TEXT,
        heartbeat DOUBLE PRECISION, cancel INTEGER NOT NULL DEFAULT 0,
        done BIGINT NOT NULL DEFAULT 0, total BIGINT NOT NULL DEFAULT 0,
        counts TEXT NOT NULL DEFAULT '{}', cost DOUBLE PRECISION,
        usage TEXT NOT NULL DEFAULT '{}', error TEXT, result TEXT, idem_key TEXT UNIQUE)""",
    "CREATE INDEX IF NOT EXISTS ragjudge_jobs_status ON ragjudge_jobs (status, created)",
    "CREATE INDEX IF NOT EXISTS ragjudge_jobs_created ON ragjudge_jobs (created)",
    """CREATE TABLE IF NOT EXISTS ragjudge_judgments (
        job TEXT NOT NULL, idx BIGINT NOT NULL, seq BIGSERIAL PRIMARY KEY, record TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ragjudge_judgments_job ON ragjudge_judgments (job, idx)",
)


class PostgresJobStore(JobStore):
    """The job state in PostgreSQL (``--jobs-db postgresql://...``), shared by several
    ``ragjudge serve`` processes on any hosts: the same operations as :class:`JobStore`, on the
    tables ``ragjudge_jobs`` and ``ragjudge_judgments``.

    A job is claimed with ``FOR UPDATE SKIP LOCKED`` (one replica gets it, the others skip it);
    leases are stamped and compared on the database's clock, so replicas whose clocks disagree
    still agree on when a lease ran out, and a killed replica's job is taken over by another.
    Rows are dicts (``row["status"]``), like the SQLite store's rows."""

    def __init__(self, path: str | Path) -> None:
        from ..llm.postgres import ensure_schema, import_psycopg, redact_url

        self.url = str(path)
        self.path = redact_url(self.url)  # type: ignore[assignment]
        self._psycopg = import_psycopg()
        self._lock = threading.Lock()
        self._db = self._connect()
        try:
            ensure_schema(self._db, _PG_SCHEMA)
        except self._psycopg.Error as exc:
            self._db.close()
            raise InputError(f"cannot open the job store: {str(exc).strip().splitlines()[0]}",
                             source=self.path) from None

    def _connect(self) -> Any:
        from psycopg.rows import dict_row

        from ..llm.postgres import connect

        db = connect(self.url, what="job store")
        db.row_factory = dict_row
        return db

    def _cursor(self) -> Any:
        """The connection, reopened first if it was lost (the statement that found it lost
        failed; the scheduler retries on its next tick)."""
        if self._db.closed or self._db.broken:
            try:
                self._db.close()
            finally:
                self._db = self._connect()
        return self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _one(self, sql: str, args: tuple = ()) -> Any:  # type: ignore[override]
        with self._lock:
            return self._cursor().execute(sql, args).fetchone()

    def _run(self, sql: str, args: tuple = ()) -> int:
        with self._lock:
            return int(self._cursor().execute(sql, args).rowcount)

    def create(self, kind: str, request: Mapping[str, Any], total: int, *,
               idempotency_key: str | None = None) -> str:
        from ..llm.postgres import DB_NOW

        key = _check_idempotency_key(idempotency_key)
        job_id = uuid.uuid4().hex
        body = json.dumps(request)
        self._run("INSERT INTO ragjudge_jobs (id, kind, status, request, created, updated, total, "
                  f"idem_key) VALUES (%s, %s, 'queued', %s, {DB_NOW}, {DB_NOW}, %s, %s) "
                  "ON CONFLICT (idem_key) DO NOTHING", (job_id, kind, body, total, key))
        if key is None:
            return job_id
        return _same_request(self._one("SELECT id, kind, request FROM ragjudge_jobs "
                                       "WHERE idem_key = %s", (key,)), kind, body, key)

    def get(self, job_id: str) -> Any:
        return self._one("SELECT * FROM ragjudge_jobs WHERE id = %s", (job_id,))

    def list(self, limit: int = 100) -> Any:
        with self._lock:
            return self._cursor().execute("SELECT * FROM ragjudge_jobs ORDER BY created DESC "
                                          "LIMIT %s", (limit,)).fetchall()

    def claim(self, owner: str, stale_before: float) -> Any:
        """Take the oldest queued job, or a running one whose owner stopped renewing its lease
        (``time.time() - stale_before`` seconds ago, measured on the database's clock)."""
        from ..llm.postgres import DB_NOW

        lease = max(0.0, time.time() - stale_before)
        return self._one(
            f"UPDATE ragjudge_jobs SET status = 'running', owner = %s, heartbeat = {DB_NOW}, "
            f"updated = {DB_NOW} WHERE id = (SELECT id FROM ragjudge_jobs WHERE status = 'queued' "
            f"OR (status = 'running' AND heartbeat < {DB_NOW} - %s) ORDER BY created LIMIT 1 "
            "FOR UPDATE SKIP LOCKED) RETURNING *", (owner, lease))

    def heartbeat(self, job_id: str, owner: str, snap: Mapping[str, Any]) -> bool | None:
        from ..llm.postgres import DB_NOW

        row = self._one(
            f"UPDATE ragjudge_jobs SET heartbeat = {DB_NOW}, updated = {DB_NOW}, done = %s, "
            "total = %s, counts = %s, cost = %s, usage = %s WHERE id = %s AND owner = %s AND "
            "status = 'running' RETURNING cancel",
            (snap["done"], snap["total"], json.dumps(snap["counts"]), snap["cost"],
             json.dumps(snap["usage"]), job_id, owner))
        return None if row is None else bool(row["cancel"])

    def finish(self, job_id: str, owner: str, status: str, snap: Mapping[str, Any], *,
               result: Any = None, error: str | None = None) -> None:
        from ..llm.postgres import DB_NOW

        self._run(
            f"UPDATE ragjudge_jobs SET status = %s, updated = {DB_NOW}, done = %s, total = %s, "
            "counts = %s, cost = %s, usage = %s, result = %s, error = %s, owner = NULL "
            "WHERE id = %s AND owner = %s",
            (status, snap["done"], snap["total"], json.dumps(snap["counts"]), snap["cost"],
             json.dumps(snap["usage"]), None if result is None else json.dumps(result), error,
             job_id, owner))

    def release(self, job_id: str, owner: str, snap: Mapping[str, Any]) -> None:
        from ..llm.postgres import DB_NOW

        self._run(f"UPDATE ragjudge_jobs SET status = 'queued', owner = NULL, updated = {DB_NOW}, "
                  "done = %s, counts = %s, cost = %s, usage = %s WHERE id = %s AND owner = %s",
                  (snap["done"], json.dumps(snap["counts"]), snap["cost"],
                   json.dumps(snap["usage"]), job_id, owner))

    def request_cancel(self, job_id: str) -> Any:
        from ..llm.postgres import DB_NOW

        with self._lock:
            db = self._cursor()
            with db.transaction():
                db.execute(f"UPDATE ragjudge_jobs SET cancel = 1, updated = {DB_NOW} WHERE id = %s "
                           "AND status IN ('queued', 'running')", (job_id,))
                db.execute(f"UPDATE ragjudge_jobs SET status = 'cancelled', updated = {DB_NOW} "
                           "WHERE id = %s AND status = 'queued'", (job_id,))
                return db.execute("SELECT * FROM ragjudge_jobs WHERE id = %s", (job_id,)).fetchone()

    def add_judgment(self, job_id: str, idx: int, record: Mapping[str, Any]) -> None:
        self._run("INSERT INTO ragjudge_judgments (job, idx, record) VALUES (%s, %s, %s)",
                  (job_id, idx, json.dumps(record)))

    def judgments(self, job_id: str) -> builtins.list[tuple[int, dict[str, Any]]]:
        with self._lock:
            rows = self._cursor().execute("SELECT idx, record FROM ragjudge_judgments WHERE job = %s "
                                          "ORDER BY seq", (job_id,)).fetchall()
        return [(int(r["idx"]), json.loads(r["record"])) for r in rows]


def job_view(row: sqlite3.Row, *, with_result: bool = True) -> dict[str, Any]:
    """The public state of a job (``GET /v1/jobs/{id}``)."""
    total, done = int(row["total"]), int(row["done"])
    return {
        "id": row["id"],
        "kind": row["kind"],
        "status": row["status"],
        "created": row["created"],
        "updated": row["updated"],
        "progress": {"done": done, "total": total,
                     "fraction": (done / total) if total else (1.0 if row["status"] == "done" else 0.0)},
        "counts": json.loads(row["counts"]),
        "cost_usd": row["cost"],
        "usage": json.loads(row["usage"]),
        "cancel_requested": bool(row["cancel"]),
        "error": row["error"],
        "result": json.loads(row["result"]) if with_result and row["result"] else None,
    }


# ----------------------------------------------------------------------------- inputs
def build_llm(settings: ServerSettings, ms: ModelSettings, *, spent: float = 0.0,
              check_key: bool = True) -> Any:
    """The job's :class:`ragjudge.llm.LLM`: endpoint, key, limits and prices from the server;
    model choices from the request; the budget less what earlier runs of the job spent."""
    from ..llm import LLM

    model = ms.model or settings.model
    if not model:
        raise InputError("no model given: set settings.model, or start the server with --model",
                         field="settings.model")
    budget = ms.max_cost
    if settings.max_cost is not None:
        budget = settings.max_cost if budget is None else min(budget, settings.max_cost)
    if budget is not None:
        budget = max(0.0, budget - spent)
    cache = settings.cache_path()
    endpoints = settings.llm_endpoints(model, ms.concurrency)
    return LLM(
        endpoints if len(endpoints) > 1 else endpoints[0],
        cache=False if cache is None else cache,
        prices=settings.prices,
        max_cost=budget,
        seed=ms.seed,
        max_tokens=ms.max_tokens,
        logprobs=ms.logprobs,
        check_key=check_key,  # an estimate sends nothing and needs no key
    )


def _check_prompt(name: str) -> None:
    from ..llm import list_prompts

    shipped = list_prompts()
    if name not in shipped:  # never a path: a request must not read the server's files
        raise InputError(f"unknown prompt {name!r}; this server offers {', '.join(shipped)}",
                         field="prompt")


def _options_of(options: Any, req: Any) -> Any:
    """The options value (``options``: its class) of a request: the request fields named like
    its parameters (a field the service does not offer keeps the library's default)."""
    fields = type(req).model_fields
    return options.from_mapping({name: getattr(req, name) for name in options.names() if name in fields})


def judge_options(req: JudgeRequest) -> JudgeOptions:
    """The :class:`ragjudge.judges.JudgeOptions` of a judge request (shipped prompts only)."""
    from ..judges.options import JudgeOptions

    _check_prompt(req.prompt)
    return _options_of(JudgeOptions, req)


def judge_pairs(req: JudgeRequest, limit: int) -> list[Any]:
    """The pairs a judge job grades, in a deterministic order (so a resumed job lines up)."""
    from ..judges import Pair, pool_pairs

    options = judge_options(req)
    if req.pairs is not None:
        if req.runs is not None or req.fill is not None:
            raise InputError("give either pairs or runs (with queries and corpus), not both",
                             field="pairs")
        check_pairs(len(req.pairs), limit)
        return [Pair(p.qid, p.docid, p.query, p.passage) for p in req.pairs]
    if not req.runs:
        raise InputError("nothing to judge: give runs (with queries and corpus) or pairs",
                         field="runs")
    for name in ("queries", "corpus"):
        if getattr(req, name) is None:
            raise InputError("required with runs", field=name)
    runs = [load_run(v, f"runs.{name}", name) for name, v in req.runs.items()]
    check_pairs(sum(r.num_queries for r in runs) * options.depth, limit,
                "queries x depth to pool")
    human = load_qrels(req.fill, "fill") if req.fill is not None else None
    if options.all_queries and human is None:
        raise InputError("only makes sense with fill", field="all_queries")
    return pool_pairs(req.queries or {}, req.corpus or {}, runs, options.depth, skip=human,
                      all_queries=options.all_queries if human is not None else True)


def rag_inputs(req: RagRequest, limit: int) -> tuple[Any, list[Any], RagOptions]:
    """Samples, parsed metrics and :class:`ragjudge.rag.RagOptions` of a RAG request (errors
    name ``samples`` / ``metrics`` / the option's field)."""
    from ..rag import parse_rag_metrics, samples_from_records
    from ..rag.evaluate import check_embedding_model
    from ..rag.options import RagOptions

    options = _options_of(RagOptions, req)
    metrics = parse_rag_metrics(req.metrics)
    check_embedding_model(metrics, options.embedding_model)
    samples = samples_from_records(req.samples, source="samples", skip_invalid=options.skip_invalid)
    size = sum(max(1, len(s.context_texts or s.context_ids or [])) for s in samples)
    check_pairs(size, limit, "sample-context pairs")
    return samples, metrics, options


def synth_inputs(req: SynthRequest, limit: int) -> SynthOptions:
    """The :class:`ragjudge.synth.SynthOptions` of a request (its fields carry the options'
    names, so a bad value is reported under the request field), after the checks that cost
    nothing: the size limit (documents x draws: every candidate query is ranked against the
    whole corpus) and docids that TREC qrels can hold."""
    from ..synth.options import SynthOptions

    options = _options_of(SynthOptions, req)
    check_pairs(len(req.corpus) * math.ceil(req.n * options.oversample), limit,
                "corpus documents x draws (n x oversample)")
    for docid in req.corpus:
        if not docid or docid.split() != [docid] or "\x00" in docid:
            shown = docid if len(docid) <= 60 else docid[:57] + "..."
            raise InputError(f"doc id {shown!r} cannot be written to TREC qrels (it is empty "
                             "or contains whitespace)", field="corpus")
    return options


def synth_plan(req: SynthRequest, options: SynthOptions, llm: Any) -> Any:
    """The request's :class:`ragjudge.synth.SynthPlan` (dry run; checks every input, sends
    nothing). CPU work: sampling and the BM25 index over the corpus."""
    from ..synth import estimate_synth

    return estimate_synth(req.corpus, req.n, llm=llm, options=options)


def synth_result(result: Any) -> dict[str, Any]:
    """A :class:`ragjudge.synth.SynthResult` as a job result: ``to_dict()`` plus the outputs
    (``queries``, ``qrels`` as TREC text, ``samples``, every candidate)."""
    from ..io import format_qrels

    return {**result.to_dict(), "queries": result.queries,
            "qrels": format_qrels(result.qrels) if len(result.qrels) else "",
            "samples": result.samples, "candidates": [c.to_dict() for c in result.candidates]}


async def _off_loop(make: Callable[[], Awaitable[Any]]) -> Any:
    """Await ``make()`` on its own event loop in a worker thread, so CPU-bound steps inside
    it (sampling, BM25) never stall the server's loop (leases, requests). Cancelling the
    caller cancels it there and waits for it to stop."""
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()
    lock = threading.Lock()
    box: dict[str, Any] = {}

    async def main() -> Any:
        with lock:
            if box.get("cancel"):
                raise asyncio.CancelledError
            box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await make()

    def work() -> None:
        try:
            box["result"] = asyncio.run(main())
        except BaseException as exc:  # handed to the caller, cancellation included
            box["error"] = exc
        finally:
            try:
                loop.call_soon_threadsafe(finished.set)
            except RuntimeError:  # the server's loop is gone
                pass

    threading.Thread(target=work, name="ragjudge-job", daemon=True).start()
    try:
        await finished.wait()
    except asyncio.CancelledError:
        with lock:
            box["cancel"] = True
            inner_loop, inner_task = box.get("loop"), box.get("task")
        if inner_loop is not None and inner_task is not None:
            try:
                inner_loop.call_soon_threadsafe(inner_task.cancel)
            except RuntimeError:  # already finished
                pass
        await finished.wait()  # calls in flight are cancelled; answers so far are cached
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


# ----------------------------------------------------------------------------- running jobs
class _Job:
    """One job being run by this process."""

    #: One library call: cancelled as a whole, not between requests.
    atomic = False

    def __init__(self, manager: JobManager, row: sqlite3.Row) -> None:
        self.manager = manager
        self.store = manager.store
        self.settings = manager.settings
        self.id: str = row["id"]
        self.request: dict[str, Any] = json.loads(row["request"])
        self.total = int(row["total"])
        self.prior_cost: float | None = row["cost"]
        self.prior_usage: dict[str, Any] = json.loads(row["usage"])
        self.llm: Any = None
        self.stop_new = asyncio.Event()  # graceful stop: start nothing new
        self.interrupted = False
        self.cancelling = False
        self.task: asyncio.Task[Any] | None = None
        self.cancel_at_start = bool(row["cancel"])

    async def run(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def partial(self) -> Any:
        return None

    def _cost(self, spent_before: float | None) -> float | None:
        if self.llm is None:
            return spent_before
        now = self.llm.cost
        if now is None:
            return None
        return (spent_before or 0.0) + now

    def _session_snapshot(self) -> dict[str, Any]:
        """Progress from the LLM session's counters (jobs that are one library call)."""
        done, counts, usage = 0, {}, dict(self.prior_usage)
        if self.llm is not None:
            st = self.llm.stats
            done = min(self.total, st.calls + st.cache_hits + st.failed + st.skipped)
            counts = {"calls": st.calls, "cache_hits": st.cache_hits, "retries": st.retries,
                      "failed": st.failed, "skipped_budget": st.skipped}
            # Earlier runs' usage plus this run's, field by field: a field only one of them has
            # (the "unknown" count of calls cut off by a stop) is kept, never dropped.
            u = self.llm.usage.to_dict()
            usage = {k: usage.get(k, 0) + u.get(k, 0) for k in {**usage, **u}}
        return {"done": done, "total": self.total, "counts": counts,
                "cost": self._cost(self.prior_cost), "usage": usage}


class JudgeJob(_Job):
    """Grade pairs one by one; every judgment is stored the moment it arrives."""

    def __init__(self, manager: JobManager, row: sqlite3.Row) -> None:
        super().__init__(manager, row)
        self.req = JudgeRequest.model_validate(self.request)
        self.latest: dict[int, dict[str, Any]] = {}
        self.spent_usage: Any = None
        self.model = self.req.settings.model or self.settings.model or ""
        for idx, rec in self.store.judgments(self.id):
            self.latest[idx] = rec
            self.spent_usage = self._usage(rec) if self.spent_usage is None else (
                self.spent_usage + self._usage(rec))

    @staticmethod
    def _usage(rec: Mapping[str, Any]) -> Any:
        from ..llm import Usage

        return Usage.from_dict(rec.get("usage") or {})

    def _prices(self) -> Any:
        from ..llm import PriceTable

        return PriceTable.load(self.settings.prices) if self.settings.prices else PriceTable.default()

    def _spent_before(self) -> float | None:
        if self.spent_usage is None:
            return 0.0
        return self._prices().cost(self.model, self.spent_usage)

    async def run(self) -> Any:
        from ..judges import LLMRelevanceJudge

        pairs = judge_pairs(self.req, self.settings.max_pairs)
        self.total = len(pairs)
        self.before = self._spent_before()
        self.llm = build_llm(self.settings, self.req.settings, spent=self.before or 0.0)
        judge = LLMRelevanceJudge(llm=self.llm, prompt=judge_options(self.req).prompt, progress=False)
        todo = deque(i for i in range(len(pairs))
                     if i not in self.latest or self.latest[i].get("error") is not None)

        async def worker() -> None:
            while todo and not self.stop_new.is_set():
                i = todo.popleft()
                p = pairs[i]
                j = await judge.judge(p.query, p.passage, qid=p.qid, docid=p.docid)
                rec = j.to_dict()
                self.store.add_judgment(self.id, i, rec)
                self.latest[i] = rec

        n = min(len(todo), self.llm.runner.concurrency * 2 + 8)
        tasks = [asyncio.create_task(worker()) for _ in range(n)]
        try:
            if tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    if t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.llm.aclose()
        if todo:
            self.interrupted = True
            return None
        return self.partial()

    def _counts(self) -> dict[str, Any]:
        from ..llm import BUDGET_REASON

        recs = list(self.latest.values())
        ok = [r for r in recs if r.get("error") is None]
        return {
            "pairs": self.total,
            "judged": len(ok),
            "cached": sum(1 for r in ok if r.get("cached")),
            "failed": sum(1 for r in recs if r.get("error") not in (None, BUDGET_REASON)),
            "skipped_budget": sum(1 for r in recs if r.get("error") == BUDGET_REASON),
        }

    def snapshot(self) -> dict[str, Any]:
        usage = self.spent_usage
        if self.llm is not None:
            usage = self.llm.usage if usage is None else usage + self.llm.usage
        before = getattr(self, "before", self._spent_before())
        return {"done": len(self.latest), "total": self.total, "counts": self._counts(),
                "cost": self._cost(before), "usage": usage.to_dict() if usage is not None else {}}

    def partial(self) -> Any:
        """``{qrels (TREC text), judgments, summary}`` from what is judged so far."""
        import numpy as np

        from ..data import Qrels
        from ..io import format_qrels
        from ..judges import Judgment, JudgeResult

        judgments = [Judgment.from_dict(self.latest[i]) for i in sorted(self.latest)]
        ok = [j for j in judgments if j.grade is not None]
        qrels = Qrels.from_arrays([j.qid for j in ok], [j.docid for j in ok],
                                  np.array([j.grade for j in ok], dtype=np.int64),
                                  source=f"llm:{self.model}:{self.req.prompt}", dedup="first")
        human = None
        if self.req.fill is not None:
            human = load_qrels(self.req.fill, "fill")
            qrels = human.merge(qrels)
        snap = self.snapshot()
        from ..llm import Usage

        result = JudgeResult(qrels, judgments, Usage.from_dict(snap["usage"]), snap["cost"],
                             human_pairs=frozenset((q, d) for q, d, _ in human.rows())
                             if human is not None else frozenset())
        return {"qrels": format_qrels(qrels) if len(qrels) else "",
                "judgments": [j.to_dict() for j in judgments],
                "summary": result.summary()}


class RagJob(_Job):
    """LLM-graded RAG metrics over all samples (one report); resumes through the LLM cache."""

    atomic = True

    async def run(self) -> Any:
        from ..rag import evaluate_samples, plan_requests

        req = RagRequest.model_validate(self.request)
        samples, metrics, options = rag_inputs(req, self.settings.max_pairs)
        self.llm = build_llm(self.settings, req.settings, spent=self.prior_cost or 0.0)
        self.total = len(plan_requests(samples, metrics, llm=self.llm, options=options))
        try:
            report = await evaluate_samples(samples, metrics, judge=self.llm, options=options)
        finally:
            await self.llm.aclose()
        return report.to_dict(per_sample=req.per_sample)

    def snapshot(self) -> dict[str, Any]:
        return self._session_snapshot()


class SynthJob(_Job):
    """A synthetic test collection: one :func:`ragjudge.synth.synthesize` call, run off the
    server's event loop; resumes through the LLM cache (a rerun replays answered calls).
    Progress counts requests against the dry run's upper bound (every draw generated, every
    candidate judged); the job usually stops earlier, once ``n`` queries are kept."""

    atomic = True

    def __init__(self, manager: JobManager, row: sqlite3.Row) -> None:
        super().__init__(manager, row)
        self.outcome: dict[str, Any] | None = None  # summary of the finished run

    async def run(self) -> Any:
        from ..synth import synthesize

        req = SynthRequest.model_validate(self.request)
        options = synth_inputs(req, self.settings.max_pairs)
        llm = self.llm = build_llm(self.settings, req.settings, spent=self.prior_cost or 0.0)

        async def main() -> dict[str, Any]:
            try:
                result = await synthesize(req.corpus, req.n, llm=llm, progress=False, options=options)
                return synth_result(result)
            finally:
                await llm.aclose()

        out = await _off_loop(main)
        self.outcome = out["summary"]
        return out

    def snapshot(self) -> dict[str, Any]:
        snap = self._session_snapshot()
        if self.outcome is not None:  # finished: the requests it took are the total
            snap["done"] = snap["total"] = (self.llm.stats.calls + self.llm.stats.cache_hits
                                            + self.llm.stats.failed + self.llm.stats.skipped)
            snap["counts"].update(kept=self.outcome["kept"], requested=self.outcome["requested"])
        return snap


_KINDS: dict[str, type[_Job]] = {"judge": JudgeJob, "rag": RagJob, "synth": SynthJob}


class JobManager:
    """Claims jobs from the store, runs them on this event loop, renews their leases and
    passes cancellations on. ``start()`` at server start, ``stop()`` at shutdown."""

    def __init__(self, store: JobStore, settings: ServerSettings, *, poll: float = 0.5) -> None:
        self.store = store
        self.settings = settings
        self.poll = poll
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.running: dict[str, _Job] = {}
        self.stopping = False
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop())

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        # Runs until stopped *and* drained: leases are renewed while calls in flight land, so
        # another worker cannot take a job this one is still finishing.
        while not (self.stopping and not self.running):
            try:
                self._tick()
            except Exception:  # a locked database must not kill the scheduler
                log.exception("job scheduler tick failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    def _tick(self) -> None:
        for job in list(self.running.values()):
            flag = self.store.heartbeat(job.id, self.owner, job.snapshot())
            if flag is None and job.task is not None:
                job.task.cancel()  # no longer ours (taken over after a lost lease)
            elif flag and not job.cancelling:
                self._cancel(job)
        stale = time.time() - self.settings.lease_seconds
        while not self.stopping and len(self.running) < self.settings.max_jobs:
            row = self.store.claim(self.owner, stale)
            if row is None:
                break
            job = _KINDS[row["kind"]](self, row)
            self.running[job.id] = job
            job.task = asyncio.create_task(self._drive(job))

    def _cancel(self, job: _Job) -> None:
        """Cancelled by a request: start nothing new; what is in flight may land (and is kept)
        for a few seconds, then the job stops."""
        job.cancelling = True
        job.stop_new.set()
        if job.task is not None:
            if job.atomic:
                job.task.cancel()  # one library call: cannot stop between requests
            else:
                asyncio.get_running_loop().call_later(CANCEL_GRACE, job.task.cancel)

    async def _drive(self, job: _Job) -> None:
        try:
            if job.cancel_at_start:
                raise asyncio.CancelledError
            result = await job.run()
            if job.cancelling:
                self._finish_quietly(job, "cancelled", result=self._partial(job))
            elif job.interrupted:
                self.store.release(job.id, self.owner, job.snapshot())
            else:
                self.store.finish(job.id, self.owner, "done", job.snapshot(), result=result)
        except asyncio.CancelledError:
            if job.cancelling or job.cancel_at_start:
                self._finish_quietly(job, "cancelled", result=self._partial(job))
            else:  # shutdown: resume later
                self.store.release(job.id, self.owner, job.snapshot())
        except RagjudgeError as exc:
            self._finish_quietly(job, "failed", error=_redact(str(exc)))
        except Exception as exc:  # never a stack trace to clients; the log has it
            log.exception("job %s failed", job.id)
            self._finish_quietly(job, "failed", error=f"internal error ({type(exc).__name__})")
        finally:
            self.running.pop(job.id, None)

    def _partial(self, job: _Job) -> Any:
        try:
            return job.partial()
        except Exception:
            log.exception("partial result of job %s", job.id)
            return None

    def _finish_quietly(self, job: _Job, status: str, **kw: Any) -> None:
        try:
            snap = job.snapshot()
        except Exception:
            snap = {"done": 0, "total": job.total, "counts": {}, "cost": None, "usage": {}}
        self.store.finish(job.id, self.owner, status, snap, **kw)

    async def stop(self) -> None:
        """Graceful stop: no new calls; calls in flight finish (up to ``drain_seconds``) and
        are recorded; unfinished jobs go back to the queue for the next start."""
        self.stopping = True
        self._wake.set()
        jobs = list(self.running.values())
        for job in jobs:
            job.stop_new.set()
            if job.atomic and job.task is not None:
                job.task.cancel()  # one library call: cannot stop between requests
        tasks = [j.task for j in jobs if j.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.settings.drain_seconds)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._loop_task is not None:
            self._wake.set()
            await asyncio.gather(self._loop_task, return_exceptions=True)


def _redact(text: str) -> str:
    from ..llm import redact

    return redact(text)
