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
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
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

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
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
        except (OSError, sqlite3.Error) as exc:
            raise InputError(f"cannot open the cache: {exc}", source=str(self.path)) from None
        self._lock = threading.Lock()
        self.hits = 0
        self.writes = 0

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
            # autocommit mode: this statement is its own transaction, committed on return.
            self._db.execute(
                "INSERT OR REPLACE INTO answers (key, record, model, prompt, created) VALUES (?,?,?,?,?)",
                (key, blob, record.get("model"), record.get("prompt_id"), time.time()),
            )
        self.writes += 1

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM answers WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
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

    def __contains__(self, key: str) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return "NullCache()"
