"""The one storage interface of the LLM answer cache, and what its backends share.

:class:`CacheStore` is what the session talks to: ``get`` / ``put`` / ``claim`` /
``claim_or_wait`` / ``release`` / ``renew`` / ``close``, the counters (``hits``, ``writes``,
``waited``) and the read-only degradation (``writable``, ``faults``). Two backends implement it:

* :class:`ragjudge.llm.cache.Cache` -- a SQLite file (the embedded default);
* :class:`ragjudge.llm.postgres.PostgresCache` -- a PostgreSQL database, selected by a
  ``postgresql://`` URL (``--cache postgresql://...``, ``LLM(cache=URL)``), for several hosts
  sharing one cache.

:func:`ragjudge.llm.cache.open_cache` opens the one a target names.

Both keep the same claim semantics: a claim has an owner and an expiry pushed back by a
heartbeat thread; another owner's live claim makes :meth:`CacheStore.claim_or_wait` wait for
its answer instead of paying again; a claim whose owner died is taken over (at once when the
owner ran on this machine and its pid is gone, else when its heartbeat lapses).

SQLite's locking is unreliable on network filesystems, so a SQLite cache there is refused
(:func:`check_local_filesystem`) with a pointer to the Postgres backend.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
import weakref
from abc import ABCMeta, abstractmethod
from pathlib import Path
from typing import Any

from ..errors import InputError

log = logging.getLogger("ragjudge.llm")

__all__ = ["CacheStore", "HOST", "pid_alive", "is_postgres_url", "network_filesystem",
           "check_local_filesystem", "NETWORK_FILESYSTEMS", "ALLOW_NETWORK_ENV"]

#: This machine's name, as recorded with every claim.
HOST = socket.gethostname()

#: Set to 1 to open a SQLite cache or job store on a network filesystem anyway.
ALLOW_NETWORK_ENV = "RAGJUDGE_ALLOW_NETWORK_SQLITE"

#: Filesystem types (``/proc/mounts``) on which SQLite's file locks cannot be trusted.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "lustre", "gpfs", "ceph", "fuse.ceph",
    "fuse.cephfs", "fuse.sshfs", "sshfs", "glusterfs", "fuse.glusterfs", "afs", "beegfs",
    "fuse.s3fs", "fuse.rclone", "fuse.juicefs", "fuse.gcsfuse",
})


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` is a ``postgresql://`` (or ``postgres://``) URL string."""
    return isinstance(target, str) and target.strip().lower().startswith(("postgresql://", "postgres://"))


def pid_alive(pid: int) -> bool:
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


def read_mounts() -> str:
    """The text of ``/proc/mounts`` (empty where there is none)."""
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _unescape(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes (\040 ...).
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and all(c in "01234567" for c in field[i + 1:i + 4]):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def network_filesystem(path: str | Path, mounts: str | None = None) -> str | None:
    """The type of the network filesystem holding ``path`` (``"nfs4"``, ``"cifs"``...), or
    ``None`` when it is local (or unknown). ``path`` need not exist: its nearest existing
    folder is looked up, symlinks resolved, against the longest matching mount point."""
    text = read_mounts() if mounts is None else mounts
    if not text:
        return None
    where = Path(os.path.realpath(os.path.expanduser(str(path))))
    best, kind = "", None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point, fstype = _unescape(parts[1]), parts[2].lower()
        inside = point == "/" or str(where) == point or str(where).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fstype
    return kind if kind in NETWORK_FILESYSTEMS else None


def check_local_filesystem(path: str | Path, what: str = "cache") -> None:
    """Refuse (one-line :class:`InputError`) a SQLite ``what`` on a network filesystem, unless
    ``$RAGJUDGE_ALLOW_NETWORK_SQLITE=1``."""
    if os.environ.get(ALLOW_NETWORK_ENV, "").strip() in ("1", "true", "yes"):
        return
    kind = network_filesystem(Path(path).expanduser().parent)
    if kind is not None:
        flag = "--jobs-db" if what == "job store" else "--cache"
        raise InputError(
            f"refusing a SQLite {what} on a network filesystem ({kind}): its file locks are not "
            f"reliable there; use a shared Postgres store ({flag} postgresql://user@host/db), a "
            f"local path, or set {ALLOW_NETWORK_ENV}=1 if you know the locks work",
            source=str(path))


def _heartbeat(ref: weakref.ReferenceType[CacheStore], stop: threading.Event, every: float) -> None:
    """Keep a cache's claims alive while its process runs (a daemon thread: dies with it)."""
    while not stop.wait(every):
        cache = ref()
        if cache is None:
            return
        try:
            cache.renew()
        except Exception:  # never let the heartbeat die on a fault the next beat may not see
            log.debug("cache heartbeat failed", exc_info=True)
        del cache


class CacheStore(metaclass=ABCMeta):
    """The LLM answer cache's interface (``key -> record``, records are JSON objects) with
    in-flight claims. Subclasses store answers and claims; this class keeps the counters, the
    fault list, the heartbeat and the waiting loop, so every backend behaves alike.

    A cache fault never costs the run: a read that fails is a miss; a write that fails turns
    the cache read-only (``writable = False``, one warning line), and claims then degrade to
    "not shared" (every claim is granted: paying beats waiting forever)."""

    #: Where the answers live (a file path, or a URL without its password); None: nowhere.
    path: Any = None

    def __init__(self, *, claim_ttl: float = 30.0) -> None:
        self.claim_ttl = claim_ttl
        self.owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._claimed: set[str] = set()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        # Re-entrant: a backend may hold it across a write and what it does when the write fails.
        self._lock = threading.RLock()
        self.hits = 0
        self.writes = 0
        self.waited = 0  # answers obtained by waiting for another process's claim
        #: False once a write failed: the run goes on without storing new answers
        self.writable = True
        #: the warnings said about this cache (also logged once each)
        self.faults: list[str] = []

    # -- what a backend provides --------------------------------------------------------
    @abstractmethod
    def get(self, key: str) -> dict[str, Any] | None:
        """The stored record of ``key`` (counted in ``hits``), or None."""

    @abstractmethod
    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store ``record`` and drop our claim on ``key``, in one transaction."""

    @abstractmethod
    def claim(self, key: str) -> bool:
        """Take the claim on ``key`` (True), unless another live owner holds it (False)."""

    @abstractmethod
    def release(self, key: str) -> None:
        """Drop our claim on ``key`` (the call failed or was abandoned: others may try)."""

    @abstractmethod
    def renew(self) -> None:
        """Push back the expiry of every claim we hold (the heartbeat)."""

    @abstractmethod
    def __contains__(self, key: str) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    # -- shared ---------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        text = f"ragjudge: warning: cache {self.path}: {message}"
        if text not in self.faults:
            self.faults.append(text)
            log.warning(text)

    def _start_heartbeat(self) -> None:
        """Start the heartbeat thread once (call with the lock held, after a first claim)."""
        if self._beat is None:
            self._beat = threading.Thread(
                target=_heartbeat, args=(weakref.ref(self), self._stop, self.claim_ttl / 3.0),
                name="ragjudge-cache-heartbeat", daemon=True)
            self._beat.start()

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

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
