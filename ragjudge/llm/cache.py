"""A persistent answer cache in SQLite, so reruns cost nothing and killed runs resume.

* WAL journal and one transaction per answer: a process killed at any instant (even
  ``kill -9``) loses at most the answers still in flight; SQLite's journal guarantees the
  file is never left half-written. ``synchronous=NORMAL`` is durable across process crashes
  (a power cut may lose the last commits, never corrupt the file).
* The key is the sha256 of exactly what changes the answer (see :func:`cache_key`); the API
  key, timeouts and concurrency are deliberately not part of it.
* Only successful, parsed answers are stored. A failure (unparsable reply, refusal,
  truncation, exhausted retries) is not an answer: storing it would freeze a transient
  problem into every later run, so a rerun retries it.
* Several processes may share one file: WAL allows concurrent readers and serialises
  writers (``busy_timeout`` waits for the lock instead of failing).
* **In-flight claims.** Before paying for an answer, a caller claims its key in the file
  (:meth:`Cache.claim`); a second process (or a second session on the same file) that needs the same answer
  meanwhile waits for it (:meth:`Cache.claim_or_wait`) instead of paying again. A claim is
  kept alive by a heartbeat while its owner runs and dropped when the answer is written or the
  call fails; the claim of a process that died (``kill -9``) is taken over at once when the
  owner was on this machine (its pid is gone), else when its heartbeat lapses (``claim_ttl``
  seconds), so an interrupted run still resumes.

This module is the embedded backend of the one cache interface (:mod:`.cachestore`), and
holds the one way a cache is opened from what names it: :func:`open_cache` reads a target (a
SQLite file path, a ``postgresql://`` URL for the shared Postgres backend, :mod:`.postgres`, an
open store, or ``True`` for the default, :func:`default_cache_path`) and opens that store.
A SQLite cache on a network filesystem (NFS, SMB, Lustre, GPFS, ceph, sshfs) is refused: its
locks are not reliable there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError
from .cachestore import HOST, CacheStore, check_local_filesystem, is_postgres_url, pid_alive
from .postgres import PostgresCache

log = logging.getLogger("ragjudge.llm")

__all__ = ["Cache", "CacheStore", "NullCache", "PostgresCache", "cache_key", "cache_target",
           "default_cache_path", "open_cache"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    model TEXT,
    prompt TEXT,
    created REAL NOT NULL
)
"""
_CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires REAL NOT NULL
)
"""


def cache_target(text: str, *, field: str = "cache") -> Path | str:
    """What a cache named by ``text`` (a flag, a setting, ``$RAGJUDGE_CACHE``) is: a
    ``postgresql://`` URL, kept as the string it is, else a SQLite file path (``~`` expanded).
    Another URL scheme or a libpq ``key=value`` string is an :class:`InputError` naming
    ``field``."""
    if is_postgres_url(text):
        return text.strip()
    _refuse_other_stores(text, field)
    return Path(text).expanduser()


def default_cache_path() -> Path | str:
    """The cache target when none is given: ``$RAGJUDGE_CACHE`` as :func:`cache_target` reads
    it (a ``postgresql://`` URL stays a string), else the SQLite file
    ``$XDG_CACHE_HOME/ragjudge/judgments.sqlite`` (``~/.cache``)."""
    env = os.environ.get("RAGJUDGE_CACHE")
    if env:
        return cache_target(env, field="$RAGJUDGE_CACHE")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragjudge" / "judgments.sqlite"


def cache_key(payload: dict[str, Any]) -> str:
    """sha256 of a canonical JSON encoding (sorted keys, no whitespace, UTF-8)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


#: A URL of another scheme ("mysql://user:pw@host/db"), or a libpq "key=value" connection
#: string: never a SQLite file name (it would be made in the working folder, the password in
#: its name).
_OTHER_URL = re.compile(r"(?i)^\s*([a-z][a-z0-9+.\-]*):/")
_CONNINFO = re.compile(r"(?i)^\s*(?:host|hostaddr|dbname|user|password|port|service)\s*=")


def _refuse_other_stores(text: str, field: str, *, folded: bool = False) -> None:
    """A one-line error for a cache target ``text`` that names no SQLite file. ``folded``: it
    came as a path, and ``Path()`` folds a URL's "//" into "/" (``postgresql:/u@h/db``)."""
    if _CONNINFO.match(text):
        raise InputError("looks like a PostgreSQL connection string: give the cache as a "
                         "postgresql://user@host/db URL (the password in $PGPASSWORD or ~/.pgpass), "
                         "or a SQLite file path", field=field)
    scheme = _OTHER_URL.match(text)
    if "://" not in text and not (folded and scheme is not None and len(scheme.group(1)) > 1):
        return  # a file path (a one-letter "scheme" is a drive: "C:/")
    if folded and scheme is not None and is_postgres_url(scheme.group(1) + "://"):
        raise InputError("a postgresql:// URL given as a path lost its '//': give the URL as a string",
                         field=field)
    raise InputError(f"unknown cache scheme {(scheme.group(1) if scheme else text) + '://'!r}: give a "
                     "SQLite file path or a postgresql:// URL", field=field)


def open_cache(target: Literal[True] | str | os.PathLike[str] | CacheStore | None = True, *,
               claim_ttl: float = 30.0) -> CacheStore:
    """The one opener of the answer cache, from what names it: ``True`` or ``None`` the default
    (:func:`default_cache_path`), an open store as is, a ``postgresql://`` URL a
    :class:`PostgresCache`, a SQLite file path a :class:`Cache`; anything else (another URL
    scheme, a ``key=value`` connection string) is an :class:`InputError`.

    ``claim_ttl``: seconds after its last heartbeat that another machine's claim is
    considered abandoned."""
    if isinstance(target, CacheStore):
        return target
    if target is True or target is None:
        target = default_cache_path()
    if isinstance(target, str) and is_postgres_url(target):
        return PostgresCache(target.strip(), claim_ttl=claim_ttl)
    return Cache(target, claim_ttl=claim_ttl)


class Cache(CacheStore):
    """SQLite-backed ``key -> record`` store (records are JSON objects), at a file path.

    The PostgreSQL backend is its sibling, :class:`PostgresCache`, behind the same interface
    (:class:`CacheStore`, what to test with ``isinstance``); :func:`open_cache` opens either
    from what names it.

    A cache fault never costs the run (one warning line each, naming the file):

    * a damaged file (``database disk image is malformed``, a truncated or foreign file), at
      open or later, is moved aside (``NAME.damaged-TIME``, never deleted) and what is still
      readable is salvaged into a fresh cache at the same path;
    * a write that fails (``database or disk is full``, an I/O error) turns the cache
      read-only for the rest of the run: answers still reach the outputs, only a rerun would
      pay for them again; claims degrade to "not shared" (we pay rather than wait forever);
    * a read that fails is a miss.

    Opening a cache whose folder cannot be written stays an error (before any paid call), and
    so does a file on a network filesystem (unless ``$RAGJUDGE_ALLOW_NETWORK_SQLITE=1``).
    """

    def __init__(self, path: str | os.PathLike[str], *, claim_ttl: float = 30.0) -> None:
        """``path``: the SQLite file (made with its folder if missing). ``claim_ttl``: seconds
        after its last heartbeat that a claim of a process on another machine (or whose
        liveness cannot be checked) is considered abandoned."""
        if is_postgres_url(path):
            raise TypeError("Cache is the SQLite file store: open a postgresql:// URL with "
                            "ragjudge.llm.cache.open_cache(url) (or LLM(cache=url))")
        _refuse_other_stores(os.fspath(path), "cache", folded=not isinstance(path, str))
        super().__init__(claim_ttl=claim_ttl)
        self.path = Path(path).expanduser()
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            check_local_filesystem(self.path, "cache")
            self._db = self._connect()
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise InputError(f"cannot open the cache: {exc}", source=str(self.path)) from None
            self._salvage(exc)
        except OSError as exc:
            raise InputError(f"cannot open the cache: {exc}", source=str(self.path)) from None

    def _connect(self) -> sqlite3.Connection:
        # check_same_thread=False: sync wrappers may drive the session from a worker thread;
        # the lock serialises access.
        db = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=30000")
            db.execute(_SCHEMA)
            db.execute(_CLAIMS)
        except BaseException:
            db.close()
            raise
        return db

    # -- faults ------------------------------------------------------------------------
    def _salvage(self, exc: BaseException) -> None:
        """Move the damaged file aside, start a fresh cache at its path, and copy into it what
        the damaged one still lets us read. Called with the lock held (or before it is used)."""
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        try:
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                extra = Path(f"{self.path}{suffix}")
                if extra.exists():
                    os.replace(extra, Path(f"{aside}{suffix}"))
            self._db = self._connect()
        except (OSError, sqlite3.Error) as again:
            self.writable = False
            self._warn(f"damaged ({_reason(exc)}) and no fresh cache could be made ({_reason(again)}): "
                       "continuing without a cache")
            return
        saved = _copy_readable(aside, self._db)
        self._warn(f"damaged ({_reason(exc)}): moved to {aside.name}; {saved} answer(s) salvaged into "
                   "a fresh cache")

    def _fault(self, exc: sqlite3.Error, *, writing: bool) -> None:
        """React to an error of the running cache: salvage a damaged file, stop writing on a
        full or failing disk. Called with the lock held."""
        if _damaged(exc):
            self._salvage(exc)
        elif writing and self.writable:
            self.writable = False
            self._warn(f"cannot write ({_reason(exc)}): continuing without storing new answers "
                       "(the outputs are complete; a rerun would pay again for them)")

    def _run(self, sql: str, args: tuple[Any, ...] = (), *, writing: bool = False) -> list[Any] | None:
        """One statement under the lock; ``None`` when the cache could not serve it."""
        with self._lock:
            for _ in range(2):  # once more on the fresh file after a salvage
                if self._db is None or (writing and not self.writable):
                    return None
                try:
                    return self._db.execute(sql, args).fetchall()
                except sqlite3.Error as exc:
                    self._fault(exc, writing=writing)
            return None

    # -- answers -----------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        rows = self._run("SELECT record FROM answers WHERE key = ?", (key,))
        if not rows:
            return None
        try:
            record = json.loads(rows[0][0])
        except (json.JSONDecodeError, TypeError):
            return None  # unreadable record: treat as a miss, it will be overwritten
        if not isinstance(record, dict):
            return None
        self.hits += 1
        return record

    def _transaction(self, work: Callable[[sqlite3.Connection], Any]) -> tuple[bool, Any]:
        """``work(db)`` in one write transaction (the caller holds the lock): ``(True, its
        result)``, or ``(False, None)`` when the cache cannot write. A fault is handled (a
        damaged file salvaged, a full disk made read-only) and the work tried once more."""
        for _ in range(2):
            db = self._db
            if db is None or not self.writable:
                return False, None
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    out = work(db)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                self._fault(exc, writing=True)
                continue
            return True, out
        return False, None

    def put(self, key: str, record: dict[str, Any]) -> None:
        blob = json.dumps(record, ensure_ascii=False, separators=(",", ":"))

        def write(db: sqlite3.Connection) -> None:
            # One transaction: the answer lands and our claim on it goes at once.
            db.execute("INSERT OR REPLACE INTO answers (key, record, model, prompt, created) VALUES (?,?,?,?,?)",
                       (key, blob, record.get("model"), record.get("prompt_id"), time.time()))
            db.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))

        with self._lock:
            self._claimed.discard(key)
            if self._transaction(write)[0]:
                self.writes += 1

    # -- in-flight claims ---------------------------------------------------------------
    def claim(self, key: str) -> bool:
        """Take the claim on ``key`` (True), unless another live owner holds it (False). A
        cache that cannot record claims grants every one: paying beats waiting forever."""
        now = time.time()

        def take(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT owner, host, pid, expires FROM claims WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] != self.owner and row[3] > now \
                    and not (row[1] == HOST and not pid_alive(int(row[2]))):
                return False
            db.execute("INSERT OR REPLACE INTO claims (key, owner, host, pid, expires) VALUES (?,?,?,?,?)",
                       (key, self.owner, HOST, os.getpid(), now + self.claim_ttl))
            return True

        with self._lock:
            written, taken = self._transaction(take)
            if not written:
                return True
            if not taken:
                return False
            self._claimed.add(key)
            self._start_heartbeat()
        return True

    def release(self, key: str) -> None:
        """Drop our claim on ``key`` (the call failed or was abandoned: others may try)."""
        with self._lock:
            if key not in self._claimed:
                return
            self._claimed.discard(key)
        self._run("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner), writing=True)

    def renew(self) -> None:
        """Push back the expiry of every claim we hold (the heartbeat)."""
        if self._claimed and not self._stop.is_set():
            self._run("UPDATE claims SET expires = ? WHERE owner = ?",
                      (time.time() + self.claim_ttl, self.owner), writing=True)

    def __contains__(self, key: str) -> bool:
        return bool(self._run("SELECT 1 FROM answers WHERE key = ?", (key,)))

    def __len__(self) -> int:
        rows = self._run("SELECT COUNT(*) FROM answers")
        return int(rows[0][0]) if rows else 0

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._db is None:
                return
            try:
                if self._claimed and self.writable:
                    self._db.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))
                    self._claimed.clear()
            except sqlite3.Error:
                pass
            self._db.close()
            self._db = None

    def __repr__(self) -> str:
        return f"Cache({str(self.path)!r})"


# Messages of SQLite's "this file is damaged" errors (SQLITE_CORRUPT, SQLITE_NOTADB): matched on
# the text because the error codes are only exposed from Python 3.11.
_DAMAGE_WORDS = ("malformed", "not a database", "file is encrypted")


def _damaged(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and any(w in str(exc).lower() for w in _DAMAGE_WORDS)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _copy_readable(damaged: Path, into: sqlite3.Connection) -> int:
    """Copy the answers still readable in ``damaged`` into ``into``; returns how many. Reads
    in rowid order and steps over ranges that fail (a damaged page), so one bad page costs
    the rows on it, not those after it."""
    saved = 0
    try:
        old = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return 0
    try:
        last, step, misses = 0, 1, 0
        while misses < 2000:
            try:
                rows = old.execute("SELECT rowid, key, record, model, prompt, created FROM answers "
                                   "WHERE rowid > ? ORDER BY rowid LIMIT 256", (last,)).fetchall()
            except sqlite3.Error:
                misses += 1
                last += step
                step = min(step * 2, 64)
                continue
            if not rows:
                break
            step = 1
            good = [r[1:] for r in rows if isinstance(r[1], str) and isinstance(r[2], str)]
            try:
                into.execute("BEGIN IMMEDIATE")
                into.executemany("INSERT OR IGNORE INTO answers (key, record, model, prompt, created) "
                                 "VALUES (?,?,?,?,?)", good)
                into.execute("COMMIT")
            except sqlite3.Error:
                if into.in_transaction:
                    into.execute("ROLLBACK")
                break
            saved += len(good)
            last = rows[-1][0]
    finally:
        old.close()
    return saved


class NullCache:
    """No caching (``--no-cache``): every lookup misses, nothing is written."""

    path = None
    hits = 0
    writes = 0

    def get(self, key: str) -> dict[str, Any] | None:
        return None

    def put(self, key: str, record: dict[str, Any]) -> None:
        return None

    def claim(self, key: str) -> bool:
        return True

    def release(self, key: str) -> None:
        return None

    async def claim_or_wait(self, key: str, *, poll: float = 0.05) -> dict[str, Any] | None:
        return None

    def __contains__(self, key: str) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return "NullCache()"
