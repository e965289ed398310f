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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["Cache", "NullCache", "cache_key", "default_cache_path"]

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
_HOST = socket.gethostname()


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (POSIX; elsewhere: assume it does)."""
    if os.name != "posix" or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


def _heartbeat(ref: weakref.ReferenceType[Cache], stop: threading.Event, every: float) -> None:
    """Keep a cache's claims alive while its process runs (a daemon thread: dies with it)."""
    while not stop.wait(every):
        cache = ref()
        if cache is None:
            return
        cache.renew()
        del cache


def default_cache_path() -> Path:
    """``$RAGJUDGE_CACHE``, else ``$XDG_CACHE_HOME/ragjudge/judgments.sqlite`` (``~/.cache``)."""
    env = os.environ.get("RAGJUDGE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragjudge" / "judgments.sqlite"


def cache_key(payload: dict[str, Any]) -> str:
    """sha256 of a canonical JSON encoding (sorted keys, no whitespace, UTF-8)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Cache:
    """SQLite-backed ``key -> record`` store (records are JSON objects)."""

    def __init__(self, path: str | Path, *, claim_ttl: float = 30.0) -> None:
        """``claim_ttl``: seconds after its last heartbeat that a claim of a process on another
        machine (or whose liveness cannot be checked) is considered abandoned."""
        self.path = Path(path).expanduser()
        self.claim_ttl = claim_ttl
        self.owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._claimed: set[str] = set()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # check_same_thread=False: sync wrappers may drive the session from a worker thread;
            # the lock below serialises access.
            self._db = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.execute(_SCHEMA)
            self._db.execute(_CLAIMS)
        except (OSError, sqlite3.Error) as exc:
            raise InputError(f"cannot open the cache: {exc}", source=str(self.path)) from None
        self._lock = threading.Lock()
        self.hits = 0
        self.writes = 0
        self.waited = 0  # answers obtained by waiting for another process's claim

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM answers WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            record = json.loads(row[0])
        except json.JSONDecodeError:
            return None  # unreadable record: treat as a miss, it will be overwritten
        self.hits += 1
        return record

    def put(self, key: str, record: dict[str, Any]) -> None:
        blob = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            # One transaction: the answer lands and our claim on it goes at the same instant.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO answers (key, record, model, prompt, created) VALUES (?,?,?,?,?)",
                    (key, blob, record.get("model"), record.get("prompt_id"), time.time()),
                )
                if key in self._claimed:
                    self._db.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._claimed.discard(key)
        self.writes += 1

    # -- in-flight claims ---------------------------------------------------------------
    def claim(self, key: str) -> bool:
        """Take the claim on ``key`` (True), unless another live owner holds it (False)."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT owner, host, pid, expires FROM claims WHERE key = ?",
                                       (key,)).fetchone()
                if row is not None and row[0] != self.owner and row[3] > now \
                        and not (row[1] == _HOST and not _pid_alive(int(row[2]))):
                    self._db.execute("COMMIT")
                    return False
                self._db.execute("INSERT OR REPLACE INTO claims (key, owner, host, pid, expires) "
                                 "VALUES (?,?,?,?,?)", (key, self.owner, _HOST, os.getpid(), now + self.claim_ttl))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._claimed.add(key)
            if self._beat is None:
                self._beat = threading.Thread(
                    target=_heartbeat, args=(weakref.ref(self), self._stop, self.claim_ttl / 3.0),
                    name="ragjudge-cache-heartbeat", daemon=True)
                self._beat.start()
        return True

    def release(self, key: str) -> None:
        """Drop our claim on ``key`` (the call failed or was abandoned: others may try)."""
        with self._lock:
            if key not in self._claimed:
                return
            self._claimed.discard(key)
            self._db.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))

    def renew(self) -> None:
        """Push back the expiry of every claim we hold (the heartbeat)."""
        with self._lock:
            if self._claimed and not self._stop.is_set():
                self._db.execute("UPDATE claims SET expires = ? WHERE owner = ?",
                                 (time.time() + self.claim_ttl, self.owner))

    async def claim_or_wait(self, key: str, *, poll: float = 0.05) -> dict[str, Any] | None:
        """Claim ``key`` and return None (the caller makes the call, then :meth:`put` or
        :meth:`release`), or -- while another owner holds it -- wait and return its answer.
        If that owner fails or dies, the claim passes to us."""
        while True:
            if self.claim(key):
                record = self.get(key)  # answered between the caller's lookup and our claim?
                if record is not None:
                    self.release(key)
                return record
            await asyncio.sleep(poll)
            poll = min(poll * 2.0, 1.0)
            record = self.get(key)
            if record is not None:
                self.waited += 1
                return record

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM answers WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            try:
                if self._claimed:
                    self._db.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))
                    self._claimed.clear()
            except sqlite3.Error:
                pass
            self._db.close()

    def __repr__(self) -> str:
        return f"Cache({str(self.path)!r})"


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
