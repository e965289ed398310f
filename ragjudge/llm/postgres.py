"""The LLM answer cache on PostgreSQL, for several hosts sharing one cache.

A ``postgresql://user@host/db`` URL (``--cache postgresql://...``, ``LLM(cache=URL)``,
:func:`ragjudge.llm.cache.open_cache`) opens a :class:`PostgresCache`: the interface of :class:`~ragjudge.llm.cachestore.CacheStore` with the
SQLite cache's semantics, on two tables of that database (``ragjudge_cache``,
``ragjudge_claims``; created on first use):

* an answer and the drop of our claim on it are one transaction;
* a claim is a row ``(key, owner, host, pid, expires)``, taken atomically
  (``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the holder is us or its claim has expired),
  renewed by the heartbeat thread; expiry is measured on the database's clock, so hosts whose
  clocks disagree still agree on when a claim lapsed; the claim of a dead process on this
  machine (its pid gone) is taken over at once;
* a lost connection is reopened at once; if the database cannot be reached (a restart, an
  outage), a background thread keeps trying for the whole run with backoff (:data:`RETRY_FIRST`
  doubling to :data:`RETRY_MAX` seconds, each try at most :data:`CONNECT_TIMEOUT`; the run's
  calls never wait on it), one line when it goes and one when it is back. Meanwhile reads are misses, claims are granted (paying beats
  waiting forever) and answers are kept in memory, then stored when the database is back, so a
  restart of a few seconds costs only the calls that were in flight;
* at close (and at exit), answers still kept wait up to :data:`CLOSE_WAIT` seconds for the
  database to come back; if it does not, they are written to a local spill file
  (:func:`spill_path`, SQLite) that the next open of the same database stores first, so an
  answer we paid for is never paid again; one line on stderr says which happened;
* other faults degrade as in SQLite: a read that fails is a miss; a write that fails for
  another reason (no privilege, disk full, read-only replica) turns the cache read-only for the
  run with one warning line.

The driver is psycopg 3, an optional extra (``postgres``), imported when
a URL is opened. :func:`connect` and :func:`ensure_schema` are shared with the service's job
store.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._lazy import optional
from ..errors import InputError
from .cachestore import HOST, CacheStore, pid_alive
from .redaction import redact, remember_url_secrets

log = logging.getLogger("ragjudge.llm")

__all__ = ["PostgresCache", "connect", "ensure_schema", "redact_url", "import_psycopg", "DB_NOW",
           "RETRY_FIRST", "RETRY_MAX", "CONNECT_TIMEOUT", "CLOSE_WAIT", "spill_path",
           "close_kept"]

#: Seconds before the first try to reach a lost database again, the most between two tries,
#: and the connect timeout of each try.
RETRY_FIRST, RETRY_MAX, CONNECT_TIMEOUT = 0.2, 5.0, 3.0

#: Seconds :meth:`PostgresCache.close` waits for a database still away to come back before it
#: spills the answers kept meanwhile to a local file.
CLOSE_WAIT = 30.0

#: The database's clock, as seconds since the epoch (a float8 SQL expression).
DB_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"

# Serialises CREATE TABLE IF NOT EXISTS between processes (it can race in Postgres).
_SCHEMA_LOCK = 0x72_61_67_6A  # "ragj"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ragjudge_cache (
        key TEXT PRIMARY KEY, record TEXT NOT NULL, model TEXT, prompt TEXT,
        created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ragjudge_claims (
        key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
        expires DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ragjudge_claims_owner ON ragjudge_claims (owner)",
)


def import_psycopg() -> Any:
    """The psycopg (3) module, or a one-line :class:`InputError` naming the extra."""
    return optional("psycopg", extra="postgres", what="a postgresql:// store")


def redact_url(url: str) -> str:
    """``url`` without its credentials (``postgresql://***@host/db``), by the one redaction;
    the URL's secrets are registered, so a driver's message quoting them is redacted too."""
    url = url.strip()
    # A database user name is no secret and tells which role failed: kept, and not registered
    # as one (a URL's lone user name is, for APIs taking the key there). The userinfo runs to
    # the last "@" before the path, as URL parsers read it.
    m = re.match(r"(?is)^([a-z][a-z0-9+.\-]*://)([^/\s?#]*)@(.*)$", url)
    if m is None:
        remember_url_secrets(url)
        return redact(url)
    user, colon, password = m.group(2).partition(":")
    remember_url_secrets(f"{m.group(1)}{'x:' + password + '@' if colon else ''}{m.group(3)}")
    rest = redact(f"{m.group(1)}x@{m.group(3)}")[len(m.group(1)) + len("***@"):]
    return f"{m.group(1)}{user}{':***' if colon else ''}@{rest}"


def _reason(exc: BaseException) -> str:
    # libpq quotes the part of a URL it cannot parse, which may be the password.
    text = str(exc).strip().splitlines()
    return redact(text[0]) if text else type(exc).__name__


def connect(url: str, *, what: str = "cache") -> Any:
    """An autocommit psycopg connection to ``url``; failing, a one-line :class:`InputError`
    naming the URL without its password."""
    psycopg = import_psycopg()
    where = redact_url(url)  # registers its secrets before any message can quote them
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10,
                               application_name=f"ragjudge {what}")
    except (psycopg.Error, ValueError) as exc:
        raise InputError(f"cannot open the {what}: {_reason(exc)}", source=where) from None


def ensure_schema(db: Any, statements: Sequence[str]) -> None:
    """Run ``CREATE ... IF NOT EXISTS`` statements in one transaction, one process at a time."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        for sql in statements:
            db.execute(sql)


def _tables_exist(db: Any, names: Sequence[str]) -> bool:
    row = db.execute("SELECT " + " AND ".join("to_regclass(%s) IS NOT NULL" for _ in names),
                     tuple(names)).fetchone()
    return bool(row and row[0])


def spill_path(url: str) -> Path:
    """The local file holding answers that could not be stored in the database at ``url``
    (``$XDG_CACHE_HOME/ragjudge/unstored-<hash>.sqlite``); named by the URL without its
    password, so any role or password reaching the same database finds it."""
    digest = hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragjudge" / f"unstored-{digest}.sqlite"


def _spill(path: Path, records: dict[str, dict[str, Any]]) -> None:
    """Add ``records`` to the spill file at ``path`` (created if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=30) as db:
        db.execute("CREATE TABLE IF NOT EXISTS unstored (key TEXT PRIMARY KEY, record TEXT NOT NULL)")
        db.executemany("INSERT OR REPLACE INTO unstored (key, record) VALUES (?, ?)",
                       [(k, json.dumps(r, ensure_ascii=False, separators=(",", ":")))
                        for k, r in records.items()])
    db.close()


def _read_spill(path: Path) -> dict[str, dict[str, Any]]:
    """The records of the spill file at ``path`` (none if it is absent or unreadable)."""
    if not path.exists():
        return {}
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            rows = db.execute("SELECT key, record FROM unstored").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for key, blob in rows:
        try:
            record = json.loads(blob)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(record, dict):
            out[key] = record
    return out


def _drop_spilled(path: Path, keys: Sequence[str]) -> None:
    """Remove ``keys`` from the spill file, and the file once it is empty."""
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            with db:
                db.executemany("DELETE FROM unstored WHERE key = ?", [(k,) for k in keys])
            left = db.execute("SELECT COUNT(*) FROM unstored").fetchone()[0]
        finally:
            db.close()
        if not left:
            path.unlink(missing_ok=True)
    except (sqlite3.Error, OSError):
        pass  # stored already: a later open stores them again, harmlessly


def _reconnect_in_background(ref: weakref.ReferenceType[PostgresCache], stop: threading.Event) -> None:
    """Try to reach a lost database with backoff until it answers or the cache closes."""
    delay = RETRY_FIRST
    while not stop.wait(delay):
        cache = ref()
        if cache is None:
            return
        try:
            if cache._try_again():
                return
        except Exception:  # noqa: BLE001 - the next try may not see it
            log.debug("cache reconnect failed", exc_info=True)
        del cache
        delay = min(delay * 2.0, RETRY_MAX)


#: Caches holding answers their database has not stored yet: held here so that they outlive
#: the run that made them (the reconnector and the exit hook hold them only weakly).
_KEPT: set[PostgresCache] = set()
_KEPT_LOCK = threading.Lock()


def close_kept(wait: float | None = None) -> None:
    """Close every cache still holding answers its database has not stored (the end of a
    command): each waits for its database, else spills them (see :meth:`PostgresCache.close`)."""
    with _KEPT_LOCK:
        kept = list(_KEPT)
    for cache in kept:
        cache.close(wait)


def _store_kept_at_exit(ref: weakref.ReferenceType[PostgresCache]) -> None:
    """At exit, a cache still holding answers made while the database was away makes one
    last try to store them (a run that ended during an outage)."""
    cache = ref()
    if cache is not None and cache._pending:
        cache.close()


class PostgresCache(CacheStore):
    """The LLM answer cache in a PostgreSQL database (see the module's docstring)."""

    def __init__(self, url: str, *, claim_ttl: float = 30.0) -> None:
        super().__init__(claim_ttl=claim_ttl)
        self.url = url
        #: the URL without its password (messages, ``repr``)
        self.path = redact_url(url)
        self._psycopg = import_psycopg()
        #: answers made while the database could not be reached, stored when it is back
        self._pending: dict[str, dict[str, Any]] = {}
        self._down_since: float | None = None
        self._reconnector: threading.Thread | None = None
        self._closed = False
        #: times the database went away during the run
        self.outages = 0
        self._db: Any = connect(url, what="cache")
        atexit.register(_store_kept_at_exit, weakref.ref(self))
        try:
            ensure_schema(self._db, _SCHEMA)
        except self._psycopg.Error as exc:
            # A role that may not create tables can still use tables someone else created.
            try:
                usable = _tables_exist(self._db, ("ragjudge_cache", "ragjudge_claims"))
            except self._psycopg.Error:
                usable = False
            if not usable:
                self._db.close()
                raise InputError(f"cannot open the cache: {_reason(exc)}", source=self.path) from None
        self._store_spilled()

    def _store_spilled(self) -> None:
        """Store the answers an earlier run spilled while this database was away."""
        path = spill_path(self.url)
        records = _read_spill(path)
        if not records:
            return
        stored: list[str] = []
        for key, record in records.items():
            try:
                self._write(self._db, key, record)
            except self._psycopg.Error:
                break
            stored.append(key)
        _drop_spilled(path, stored)
        log.warning(f"ragjudge: cache {self.path}: stored {len(stored)} of {len(records)} answers "
                    f"an earlier run kept in {path} while the database was away")

    # -- faults ------------------------------------------------------------------------
    def _lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection is gone (reopen it)."""
        code = getattr(getattr(exc, "diag", None), "sqlstate", None) or ""
        return bool(self._db is None or self._db.closed or self._db.broken
                    or code.startswith("08") or code in ("57P01", "57P02", "57P03"))

    def _drop_connection(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # a broken connection may fail to close: it is gone either way
                pass
        self._db = None

    def _connect(self) -> Any:
        return self._psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                     application_name="ragjudge cache")

    def _reconnect(self) -> bool:
        """Reopen a lost connection now (lock held): once when it drops, and at close."""
        try:
            conn = self._connect()
        except self._psycopg.Error as exc:
            self._went_down(exc)
            return False
        return self._install(conn)

    def _install(self, conn: Any) -> bool:
        """Use ``conn`` (lock held); after an outage, store the answers kept meanwhile."""
        self._db = conn
        if self._down_since is not None:
            stored = self._flush()
            if self._db is None:  # lost again while storing: the reconnector keeps trying
                return False
            log.warning(f"ragjudge: cache {self.path}: the database is back after "
                        f"{time.monotonic() - self._down_since:.0f} s; stored the {stored} "
                        "answers made meanwhile")
            self._down_since = None
        return True

    def _went_down(self, exc: BaseException) -> None:
        """The database cannot be reached (lock held): say so once per outage, and let a
        background thread try again with backoff (the run's calls never wait on it)."""
        if self._down_since is None:
            self._down_since = time.monotonic()
            self.outages += 1
            text = (f"ragjudge: warning: cache {self.path}: cannot reach the database "
                    f"({_reason(exc)}): trying again with backoff; answers made meanwhile are kept "
                    "and stored when it is back")
            self.faults.append(text)
            log.warning(text)
        if self._reconnector is None or not self._reconnector.is_alive():
            self._reconnector = threading.Thread(target=_reconnect_in_background,
                                                 args=(weakref.ref(self), self._stop),
                                                 name="ragjudge-cache-reconnect", daemon=True)
            self._reconnector.start()

    def _try_again(self) -> bool:
        """One try of the reconnector: connect outside the lock, install under it. True when
        there is nothing more to do (connected, or closed)."""
        if self._db is not None or self._closed:
            return True
        try:
            conn = self._connect()
        except self._psycopg.Error:
            return False
        with self._lock:
            if self._db is not None or self._closed:
                conn.close()
                return True
            return self._install(conn)

    def _flush(self) -> int:
        """Store the answers kept while the database was away (lock held); those it cannot
        store stay kept."""
        stored = 0
        for key, record in list(self._pending.items()):
            try:
                self._write(self._db, key, record)
            except self._psycopg.Error as exc:
                if self._lost(exc):
                    self._drop_connection()
                    self._went_down(exc)
                return stored
            del self._pending[key]
            self.writes += 1
            stored += 1
        with _KEPT_LOCK:
            _KEPT.discard(self)
        return stored

    def _do(self, work: Callable[[Any], Any], *, writing: bool) -> tuple[bool, Any]:
        """``work(connection)`` under the lock: ``(True, its result)``, or ``(False, None)``
        when the cache could not serve it (a fault, handled: see the module's docstring)."""
        psycopg = self._psycopg
        with self._lock:
            if self._closed or self._db is None or (writing and not self.writable):
                return False, None  # away: the reconnector is at it
            for attempt in range(2):
                try:
                    return True, work(self._db)
                except psycopg.Error as exc:
                    if self._lost(exc):
                        self._drop_connection()
                        if attempt == 0 and self._reconnect():
                            continue  # every operation here may be repeated safely
                        return False, None
                    if writing and self.writable:
                        self.writable = False
                        self._warn(f"cannot write ({_reason(exc)}): continuing without storing new "
                                   "answers (the outputs are complete; a rerun would pay again "
                                   "for them)")
                    return False, None
            return False, None

    # -- answers -----------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            kept = self._pending.get(key)
        if kept is not None:
            self.hits += 1
            return kept
        ok, row = self._do(lambda db: db.execute(
            "SELECT record FROM ragjudge_cache WHERE key = %s", (key,)).fetchone(), writing=False)
        if not ok or row is None:
            return None
        try:
            record = json.loads(row[0])
        except (json.JSONDecodeError, TypeError):
            return None  # unreadable record: treat as a miss, it will be overwritten
        if not isinstance(record, dict):
            return None
        self.hits += 1
        return record

    def _write(self, db: Any, key: str, record: dict[str, Any]) -> None:
        blob = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with db.transaction():  # the answer lands and our claim on it goes at once
            db.execute(
                "INSERT INTO ragjudge_cache (key, record, model, prompt, created) "
                f"VALUES (%s, %s, %s, %s, {DB_NOW}) ON CONFLICT (key) DO UPDATE SET "
                "record = EXCLUDED.record, model = EXCLUDED.model, prompt = EXCLUDED.prompt, "
                "created = EXCLUDED.created",
                (key, blob, record.get("model"), record.get("prompt_id")))
            db.execute("DELETE FROM ragjudge_claims WHERE key = %s AND owner = %s", (key, self.owner))

    def put(self, key: str, record: dict[str, Any]) -> None:
        with self._lock:
            self._claimed.discard(key)
            if self._do(lambda db: self._write(db, key, record), writing=True)[0]:
                self.writes += 1
            elif self._db is None and self.writable and not self._closed:
                self._pending[key] = record  # stored when the database is back
                with _KEPT_LOCK:
                    _KEPT.add(self)

    # -- in-flight claims ---------------------------------------------------------------
    def claim(self, key: str) -> bool:
        """Take the claim on ``key`` (True), unless another live owner holds it (False). A
        cache that cannot record claims grants every one: paying beats waiting forever."""

        def take(db: Any) -> bool:
            for _ in range(4):
                row = db.execute(
                    "INSERT INTO ragjudge_claims AS c (key, owner, host, pid, expires) "
                    f"VALUES (%s, %s, %s, %s, {DB_NOW} + %s) ON CONFLICT (key) DO UPDATE SET "
                    "owner = EXCLUDED.owner, host = EXCLUDED.host, pid = EXCLUDED.pid, "
                    f"expires = EXCLUDED.expires WHERE c.owner = EXCLUDED.owner OR c.expires < {DB_NOW} "
                    "RETURNING 1",
                    (key, self.owner, HOST, os.getpid(), float(self.claim_ttl))).fetchone()
                if row is not None:
                    return True
                holder = db.execute("SELECT owner, host, pid FROM ragjudge_claims WHERE key = %s",
                                    (key,)).fetchone()
                if holder is None:
                    continue  # released meanwhile: try again
                if holder[1] == HOST and not pid_alive(int(holder[2])):
                    # Its owner died on this machine: take it over now, not after the expiry.
                    db.execute("DELETE FROM ragjudge_claims WHERE key = %s AND owner = %s",
                               (key, holder[0]))
                    continue
                return False
            return False

        ok, taken = self._do(take, writing=True)
        if not ok:
            return True
        if not taken:
            return False
        with self._lock:
            self._claimed.add(key)
            self._start_heartbeat()
        return True

    def release(self, key: str) -> None:
        """Drop our claim on ``key`` (the call failed or was abandoned: others may try)."""
        with self._lock:
            if key not in self._claimed:
                return
            self._claimed.discard(key)
        self._do(lambda db: db.execute("DELETE FROM ragjudge_claims WHERE key = %s AND owner = %s",
                                       (key, self.owner)), writing=True)

    def renew(self) -> None:
        """Push back the expiry of every claim we hold (the heartbeat)."""
        if self._claimed and not self._stop.is_set():
            self._do(lambda db: db.execute(
                f"UPDATE ragjudge_claims SET expires = {DB_NOW} + %s WHERE owner = %s",
                (float(self.claim_ttl), self.owner)), writing=True)

    def __contains__(self, key: str) -> bool:
        if key in self._pending:
            return True
        ok, row = self._do(lambda db: db.execute(
            "SELECT 1 FROM ragjudge_cache WHERE key = %s", (key,)).fetchone(), writing=False)
        return bool(ok and row)

    def __len__(self) -> int:
        ok, row = self._do(lambda db: db.execute("SELECT COUNT(*) FROM ragjudge_cache").fetchone(),
                           writing=False)
        return int(row[0]) if ok and row else 0

    def close(self, wait: float | None = None) -> None:
        """Close; answers kept while the database is away first wait up to ``wait`` seconds
        (:data:`CLOSE_WAIT`) for it to come back, else go to the spill file."""
        self._stop.set()  # the heartbeat and the reconnector stop: this thread takes over
        deadline = time.monotonic() + (CLOSE_WAIT if wait is None else wait)
        delay = RETRY_FIRST
        while True:
            with self._lock:
                if self._closed or not self._pending or self._db is not None or not self.writable:
                    break
                if self._reconnect() and not self._pending:
                    break
            if time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2.0, RETRY_MAX)
        with self._lock:
            if self._pending and self._db is not None:
                self._flush()
            if self._pending:
                path = spill_path(self.url)
                try:
                    _spill(path, self._pending)
                    self._warn(f"the database is still unreachable: the {len(self._pending)} answers "
                               f"made while it was away are kept in {path}; the next run with this "
                               "cache stores them first (nothing is paid again)")
                except (sqlite3.Error, OSError) as exc:
                    self._warn(f"the database is still unreachable and the {len(self._pending)} "
                               f"answers made while it was away cannot be kept in {path} ({exc}): "
                               "a rerun would pay again for them")
                self._pending.clear()
            self._closed = True
            with _KEPT_LOCK:
                _KEPT.discard(self)
            if self._db is None:
                return
            try:
                if self._claimed and self.writable:
                    self._db.execute("DELETE FROM ragjudge_claims WHERE owner = %s", (self.owner,))
                    self._claimed.clear()
            except self._psycopg.Error:
                pass
            try:
                self._db.close()
            except self._psycopg.Error:
                pass
            self._db = None

    def __repr__(self) -> str:
        return f"PostgresCache({self.path!r})"
