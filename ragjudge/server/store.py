"""The job store: one interface, two dialects.

:class:`JobStore` holds every operation the service needs (submission with an
``Idempotency-Key``, atomic claims with a lease, heartbeats, the end of a job, cancellation,
judgments, and each job's money accounts) written once, as SQL with ``?`` placeholders and a
few dialect names (``{jobs}``, ``{now}``...). A backend says only how to reach its database:

* :class:`SqliteJobStore` -- a file (``jobs.sqlite`` beside the LLM cache; WAL; safe for several
  processes on one host);
* :class:`PostgresJobStore` -- a ``postgresql://`` URL shared by ``ragjudge serve`` replicas on
  any hosts (``FOR UPDATE SKIP LOCKED`` claims).

:func:`open_job_store` picks one from the target and refuses anything else. Leases are stamped
and compared on the database's clock, so replicas whose clocks disagree agree on when a lease
ran out.

A store that cannot be reached raises :class:`StoreUnavailable` (the service answers 503 and
jobs keep running); the connection is reopened on a later call, and the store logs one line
when an outage starts and one when it ends, never a traceback per call.
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
import threading
import time
import uuid
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, RagjudgeError
from ..llm.cachestore import check_local_filesystem, is_postgres_url
from ..llm.postgres import DB_NOW, ensure_schema, import_psycopg, redact_url
from ..llm.redaction import redact

__all__ = ["JobStore", "SqliteJobStore", "PostgresJobStore", "StoreUnavailable", "open_job_store", "check_target",
           "MAX_IDEMPOTENCY_KEY", "FINAL"]

log = logging.getLogger("ragjudge.server")

#: States a job never leaves.
FINAL = ("done", "failed", "cancelled")
#: Longest ``Idempotency-Key`` accepted.
MAX_IDEMPOTENCY_KEY = 255
#: Seconds between attempts to reopen a lost connection (calls meanwhile fail at once).
RECONNECT_EVERY = 0.5


class StoreUnavailable(Exception):
    """The job store cannot be reached right now (HTTP 503; a job waits and retries)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _first_line(exc: BaseException) -> str:
    # The driver may quote the URL's password (a space or a bad %-escape in it): redacted.

    text = str(exc).strip().splitlines()
    return redact(text[0]) if text else type(exc).__name__


def _check_idempotency_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise InputError(f"must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters",
                         field="Idempotency-Key")
    return key


class JobStore(metaclass=ABCMeta):
    """The job state (see the module's docstring). Rows are dicts (``row["status"]``)."""

    #: where the jobs live (a file path, or a URL without its password)
    path: Any = None
    #: dialect names substituted into every statement
    names: Mapping[str, str] = {}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: when the current outage started (``time.monotonic()``), or None
        self.down_since: float | None = None
        self.down_reason: str | None = None

    # -- what a dialect provides ---------------------------------------------------------
    @abstractmethod
    def _execute(self, sql: str, args: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
        """Run one statement (autocommit): its rows and row count; a connection fault is
        :class:`StoreUnavailable` (after one reconnect where that may help)."""

    @abstractmethod
    def _close(self) -> None: ...

    # -- shared --------------------------------------------------------------------------
    def _q(self, sql: str, args: Sequence[Any] = ()) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            try:
                out = self._execute(sql.format(**self.names), tuple(args))
            except StoreUnavailable as exc:
                if self.down_since is None:  # one line per outage, not one per call
                    self.down_since = time.monotonic()
                    log.warning("job store %s unavailable (%s): answering 503 and keeping jobs "
                                "running until it is back", self.path, exc.reason)
                self.down_reason = exc.reason
                raise
            if self.down_since is not None:
                log.warning("job store %s is back after %.1f s", self.path,
                            time.monotonic() - self.down_since)
                self.down_since = self.down_reason = None
            return out

    def _one(self, sql: str, args: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self._q(sql, args)[0]
        return rows[0] if rows else None

    def check(self) -> None:
        """Reach the database (:class:`StoreUnavailable` if it cannot be reached)."""
        self._q("SELECT 1 AS ok")

    def close(self) -> None:
        with self._lock:
            self._close()

    def create(self, kind: str, request: Mapping[str, Any], total: int, *,
               spec: Mapping[str, Any] | None = None, idempotency_key: str | None = None) -> str:
        """A new queued job's id. ``request`` is the body as the client sent it; ``spec`` what
        the job owns whichever replica runs it (model, budget). With ``idempotency_key``: the
        job first submitted with that key (the same request again, e.g. a client retrying after
        a lost reply), never a second one -- a failed one is queued again (what it judged is
        kept, nothing is paid twice); the key reused for another request is a one-line
        :class:`InputError`."""
        key = _check_idempotency_key(idempotency_key)
        job_id = uuid.uuid4().hex
        body = json.dumps(request)
        self._q("INSERT INTO {jobs} (id, kind, status, request, spec, created, updated, total, "
                "idem_key) VALUES (?, ?, 'queued', ?, ?, {now}, {now}, ?, ?) "
                "ON CONFLICT (idem_key) DO NOTHING",
                (job_id, kind, body, json.dumps(dict(spec or {})), total, key))
        if key is None:
            return job_id
        row = self._one("SELECT id, kind, request, status FROM {jobs} WHERE idem_key = ?", (key,))
        if row is None:  # pragma: no cover - the insert or an earlier one stored it
            raise RagjudgeError(f"no job stored under Idempotency-Key {key!r}")
        if row["kind"] != kind or json.loads(row["request"]) != json.loads(body):
            raise InputError(f"already used for another request (job {row['id']}); use a new key",
                             field="Idempotency-Key")
        if row["status"] == "failed":
            self._q("UPDATE {jobs} SET status = 'queued', error = NULL, result = NULL, owner = NULL, "
                    "cancel = 0, updated = {now} WHERE id = ? AND status = 'failed'", (row["id"],))
        return str(row["id"])

    def get(self, job_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM {jobs} WHERE id = ?", (job_id,))

    def list(self, limit: int = 100) -> builtins.list[dict[str, Any]]:
        return self._q("SELECT * FROM {jobs} ORDER BY created DESC LIMIT ?", (limit,))[0]

    def claim(self, owner: str, lease_seconds: float) -> dict[str, Any] | None:
        """Take the oldest queued job, or a running one whose owner has not renewed its lease
        for ``lease_seconds`` (one statement: two claimers never get the same job)."""
        return self._one(
            "UPDATE {jobs} SET status = 'running', owner = ?, heartbeat = {now}, updated = {now} "
            "WHERE id = (SELECT id FROM {jobs} WHERE status = 'queued' OR (status = 'running' "
            "AND heartbeat < {now} - ?) ORDER BY created LIMIT 1{skip_locked}) RETURNING *",
            (owner, float(lease_seconds)))

    def heartbeat(self, job_id: str, owner: str, snap: Mapping[str, Any]) -> bool | None:
        """Renew the lease and store progress; the job's cancel flag, or ``None`` if the job is
        no longer ours."""
        row = self._one(
            "UPDATE {jobs} SET heartbeat = {now}, updated = {now}, done = ?, total = ?, counts = ?, "
            "cost = ?, usage = ? WHERE id = ? AND owner = ? AND status = 'running' RETURNING cancel",
            (snap["done"], snap["total"], json.dumps(snap["counts"]), snap["cost"],
             json.dumps(snap["usage"]), job_id, owner))
        return None if row is None else bool(row["cancel"])

    def finish(self, job_id: str, owner: str, status: str, snap: Mapping[str, Any], *,
               result: Any = None, error: str | None = None) -> None:
        self._q("UPDATE {jobs} SET status = ?, updated = {now}, done = ?, total = ?, counts = ?, "
                "cost = ?, usage = ?, result = ?, error = ?, owner = NULL WHERE id = ? AND owner = ?",
                (status, snap["done"], snap["total"], json.dumps(snap["counts"]), snap["cost"],
                 json.dumps(snap["usage"]), None if result is None else json.dumps(result), error,
                 job_id, owner))

    def release(self, job_id: str, owner: str, snap: Mapping[str, Any]) -> None:
        """Give a job back (graceful stop): queued again, resumed by the next claim."""
        self._q("UPDATE {jobs} SET status = 'queued', owner = NULL, updated = {now}, done = ?, "
                "counts = ?, cost = ?, usage = ? WHERE id = ? AND owner = ?",
                (snap["done"], json.dumps(snap["counts"]), snap["cost"], json.dumps(snap["usage"]),
                 job_id, owner))

    def request_cancel(self, job_id: str) -> dict[str, Any] | None:
        """Flag a job for cancellation; a queued job is cancelled at once."""
        self._q("UPDATE {jobs} SET cancel = 1, updated = {now}, status = CASE WHEN status = "
                "'queued' THEN 'cancelled' ELSE status END WHERE id = ? AND status IN "
                "('queued', 'running')", (job_id,))
        return self.get(job_id)

    def add_judgment(self, job_id: str, idx: int, record: Mapping[str, Any]) -> None:
        self._q("INSERT INTO {judgments} (job, idx, record) VALUES (?, ?, ?)",
                (job_id, idx, json.dumps(record)))

    def judgments(self, job_id: str) -> builtins.list[tuple[int, dict[str, Any]]]:
        """Every stored judgment attempt of a job, oldest first (a retried pair appears twice)."""
        rows = self._q("SELECT idx, record FROM {judgments} WHERE job = ? ORDER BY seq", (job_id,))[0]
        return [(int(r["idx"]), json.loads(r["record"])) for r in rows]

    def account(self, job_id: str, owner: str, spent: float | None, reserved: float,
                usage: Mapping[str, Any]) -> None:
        """What ``owner`` has paid for the job (``spent``; None: price unknown) and the worst
        case of its calls that may be in flight (``reserved``): counted by whoever takes the
        job over, so its budget holds across kills."""
        self._q("INSERT INTO {accounts} (job, owner, spent, reserved, usage, updated) "
                "VALUES (?, ?, ?, ?, ?, {now}) ON CONFLICT (job, owner) DO UPDATE SET "
                "spent = excluded.spent, reserved = excluded.reserved, usage = excluded.usage, "
                "updated = excluded.updated",
                (job_id, owner, spent, float(reserved), json.dumps(dict(usage))))

    def accounts(self, job_id: str) -> builtins.list[dict[str, Any]]:
        """Every owner's account of a job (``owner``, ``spent``, ``reserved``, ``usage``)."""
        rows = self._q("SELECT owner, spent, reserved, usage FROM {accounts} WHERE job = ? "
                       "ORDER BY updated", (job_id,))[0]
        return [{**r, "usage": json.loads(r["usage"] or "{}")} for r in rows]

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ----------------------------------------------------------------------------- SQLite
_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, request TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, owner TEXT, heartbeat REAL,
    cancel INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0, counts TEXT NOT NULL DEFAULT '{}', cost REAL,
    usage TEXT NOT NULL DEFAULT '{}', error TEXT, result TEXT, idem_key TEXT, spec TEXT
);
CREATE TABLE IF NOT EXISTS judgments (
    job TEXT NOT NULL, idx INTEGER NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS judgments_job ON judgments (job, idx);
CREATE TABLE IF NOT EXISTS job_accounts (
    job TEXT NOT NULL, owner TEXT NOT NULL, spent REAL, reserved REAL NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}', updated REAL NOT NULL, PRIMARY KEY (job, owner)
);
"""


class SqliteJobStore(JobStore):
    """The job state in a SQLite file (WAL; atomic claims; several processes on one host)."""

    names = {"jobs": "jobs", "judgments": "judgments", "accounts": "job_accounts",
             # seconds since the epoch, in milliseconds, on this host's clock
             "now": "((julianday('now') - 2440587.5) * 86400.0)", "skip_locked": ""}

    def __init__(self, path: str | Path) -> None:
        super().__init__()

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_local_filesystem(self.path, "job store")
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SQLITE_SCHEMA)
            # A store made by an earlier version: add the newer columns (NULL for old jobs).
            have = {r["name"] for r in self._db.execute("PRAGMA table_info(jobs)")}
            for column in ("idem_key", "spec"):
                if column not in have:
                    try:
                        self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")
                    except sqlite3.OperationalError:  # another process added it meanwhile
                        pass
            self._db.execute("CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs (idem_key)")
        except sqlite3.Error as exc:
            raise InputError(f"cannot open the job store: {_first_line(exc)}", source=str(self.path)) from None

    def _execute(self, sql: str, args: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
        try:
            cur = self._db.execute(sql, args)
            rows = [dict(r) for r in cur.fetchall()]
            return rows, cur.rowcount
        except sqlite3.OperationalError as exc:  # locked, disk I/O, file gone: not the request's
            raise StoreUnavailable(_first_line(exc)) from None

    def _close(self) -> None:
        self._db.close()


# ----------------------------------------------------------------------------- PostgreSQL
_PG_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ragjudge_jobs (
        id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, request TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL, owner TEXT,
        heartbeat DOUBLE PRECISION, cancel INTEGER NOT NULL DEFAULT 0,
        done BIGINT NOT NULL DEFAULT 0, total BIGINT NOT NULL DEFAULT 0,
        counts TEXT NOT NULL DEFAULT '{}', cost DOUBLE PRECISION,
        usage TEXT NOT NULL DEFAULT '{}', error TEXT, result TEXT, idem_key TEXT UNIQUE)""",
    "ALTER TABLE ragjudge_jobs ADD COLUMN IF NOT EXISTS spec TEXT",
    "CREATE INDEX IF NOT EXISTS ragjudge_jobs_status ON ragjudge_jobs (status, created)",
    "CREATE INDEX IF NOT EXISTS ragjudge_jobs_created ON ragjudge_jobs (created)",
    """CREATE TABLE IF NOT EXISTS ragjudge_judgments (
        job TEXT NOT NULL, idx BIGINT NOT NULL, seq BIGSERIAL PRIMARY KEY, record TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ragjudge_judgments_job ON ragjudge_judgments (job, idx)",
    """CREATE TABLE IF NOT EXISTS ragjudge_job_accounts (
        job TEXT NOT NULL, owner TEXT NOT NULL, spent DOUBLE PRECISION,
        reserved DOUBLE PRECISION NOT NULL DEFAULT 0, usage TEXT NOT NULL DEFAULT '{}',
        updated DOUBLE PRECISION NOT NULL, PRIMARY KEY (job, owner))""",
)


class PostgresJobStore(JobStore):
    """The job state in PostgreSQL (tables ``ragjudge_jobs``, ``ragjudge_judgments``,
    ``ragjudge_job_accounts``), shared by replicas on any hosts. A lost connection is reopened
    (at once, then at most every :data:`RECONNECT_EVERY` seconds while the server is away)."""

    def __init__(self, url: str) -> None:
        super().__init__()

        self.names = {"jobs": "ragjudge_jobs", "judgments": "ragjudge_judgments",
                      "accounts": "ragjudge_job_accounts", "now": DB_NOW,
                      "skip_locked": " FOR UPDATE SKIP LOCKED"}
        self.url = url
        self.path = redact_url(url)
        self._psycopg = import_psycopg()
        self._retry_at = 0.0
        try:
            self._db: Any = self._connect()
            ensure_schema(self._db, _PG_SCHEMA)
        except (self._psycopg.Error, ValueError) as exc:
            raise InputError(f"cannot open the job store: {_first_line(exc)}", source=self.path) from None

    def _connect(self) -> Any:
        from psycopg.rows import dict_row  # deferred: psycopg is an extra, loaded by import_psycopg

        return self._psycopg.connect(self.url, autocommit=True, connect_timeout=5,
                                     application_name="ragjudge job store", row_factory=dict_row)

    def _lost(self, exc: BaseException) -> bool:
        code = getattr(getattr(exc, "diag", None), "sqlstate", None) or ""
        return bool(isinstance(exc, (self._psycopg.OperationalError, self._psycopg.InterfaceError))
                    or self._db is None or self._db.closed or self._db.broken
                    or code.startswith("08") or code in ("57P01", "57P02", "57P03"))

    def _execute(self, sql: str, args: Sequence[Any]) -> tuple[list[dict[str, Any]], int]:
        psycopg = self._psycopg
        sql = sql.replace("?", "%s")
        for attempt in range(2):
            if self._db is None:
                if time.monotonic() < self._retry_at:
                    raise StoreUnavailable(self.down_reason or "reconnecting")
                try:
                    self._db = self._connect()
                except psycopg.Error as exc:
                    self._retry_at = time.monotonic() + RECONNECT_EVERY
                    raise StoreUnavailable(_first_line(exc)) from None
            try:
                cur = self._db.execute(sql, args)
                rows = cur.fetchall() if cur.description else []
                return [dict(r) for r in rows], cur.rowcount
            except psycopg.Error as exc:
                if not self._lost(exc):
                    raise
                try:
                    self._db.close()
                except psycopg.Error:  # pragma: no cover - closing a broken connection
                    pass
                self._db = None
                if attempt:  # reopened once already: the server is away
                    self._retry_at = time.monotonic() + RECONNECT_EVERY
                    raise StoreUnavailable(_first_line(exc)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except self._psycopg.Error:  # pragma: no cover
                pass
            self._db = None


# ----------------------------------------------------------------------------- opening
def check_target(target: str | Path) -> str | Path:
    """``target`` as :func:`open_job_store` reads it: a ``postgresql://`` URL (a string) or a
    SQLite file (a path; ``sqlite:///path`` too). Any other scheme is a one-line
    :class:`InputError`."""
    if isinstance(target, Path):
        return target
    text = target.strip()
    if is_postgres_url(text):
        return text
    if text.lower().startswith("sqlite:///"):
        return Path(text[len("sqlite://"):]).expanduser()
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise InputError(f"unknown job store scheme {scheme + '://'!r}: give a SQLite file path "
                         "or a postgresql:// URL", field="--jobs-db")
    return Path(text).expanduser()


def open_job_store(target: str | Path) -> JobStore:
    """The job store at ``target`` (see :func:`check_target`): a :class:`PostgresJobStore`
    for a ``postgresql://`` URL, else a :class:`SqliteJobStore`."""
    where = check_target(target)
    return PostgresJobStore(where) if isinstance(where, str) else SqliteJobStore(where)
