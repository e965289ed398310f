"""Settings of the HTTP service: one frozen value, passed to worker processes as JSON.

The LLM endpoint is held as :class:`ragjudge.llm.Endpoint` values, built once (by ``ragjudge
serve`` from its flags) and passed down: a job takes them with its own model and limit
(:meth:`ServerSettings.llm_endpoints`), nothing re-reads a flag or parses an ``--endpoint``.

Nothing secret is stored here by ``ragjudge serve``: the bearer token and provider API keys
stay in the server's environment and are read by name (``token_env``, ``api_key_env``) where
they are needed.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import InputError
from ..llm.cache import cache_target, default_cache_path
from ..llm.cachestore import is_postgres_url
from ..llm.endpoint import Endpoint
from ..llm.postgres import import_psycopg
from .store import check_target

__all__ = ["ServerSettings", "is_loopback", "SETTINGS_ENV", "ANY_MODEL"]

#: Environment variable carrying the settings (JSON) to uvicorn worker processes.
SETTINGS_ENV = "RAGJUDGE_SERVER_SETTINGS"

#: The model of the settings' endpoints when the server has no default model: a stand-in,
#: never called (every job takes the endpoints with its own model, the request's).
ANY_MODEL = "(the job's model)"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host.strip().lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


@dataclass(frozen=True)
class ServerSettings:
    """What ``ragjudge serve`` was started with (see ``ragjudge serve --help``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    token_env: str = "RAGJUDGE_TOKEN"
    workers: int = 1
    #: processes computing evaluations and comparisons for each worker (0: a thread of the worker)
    cpu_processes: int = 1
    # request limits
    max_body_bytes: int = 32 * 1024 * 1024
    max_pairs: int = 2_000_000
    client_concurrency: int = 16
    body_seconds: float = 30.0  # a request body must arrive within this (408 after)
    cors_origins: tuple[str, ...] = ()
    access_log: bool = True  # uvicorn's line per answered request on stdout (ragjudge serve)
    # the LLM endpoint: only ever from the server's configuration, never from a request
    model: str | None = None  # the default model; a request may name another
    #: where and how jobs call the model: one :class:`ragjudge.llm.Endpoint` (provider, address,
    #: key variable, timeouts, limits), or several serving it (``--endpoint``), each taken by a
    #: job with the job's model. Empty: one with :class:`~ragjudge.llm.Endpoint`'s defaults.
    endpoints: tuple[Endpoint, ...] = ()
    cache: str | None = None  # None: $RAGJUDGE_CACHE or ~/.cache/ragjudge/judgments.sqlite
    no_cache: bool = False
    prices: str | None = None
    max_cost: float | None = None  # ceiling of any one job's budget
    # jobs
    jobs_db: str | None = None  # None: jobs.sqlite beside the cache
    max_jobs: int = 2
    lease_seconds: float = 10.0
    drain_seconds: float = 60.0
    # the web page at /ui/: the only files it may read (ROLE=PATH or PATH), the labels log
    ui_files: tuple[str, ...] = ()
    ui_labels: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.endpoints, tuple) or not all(isinstance(e, Endpoint) for e in self.endpoints):
            raise TypeError("endpoints must be a tuple of ragjudge.llm.Endpoint values "
                            "(an --endpoint string is read by ragjudge.llm.endpoint.parse_endpoint)")
        if not self.endpoints:
            object.__setattr__(self, "endpoints", (Endpoint(self.model or ANY_MODEL),))

    def token(self) -> str | None:
        """The bearer token from the server's environment (``None``: no authentication)."""
        value = os.environ.get(self.token_env, "") if self.token_env else ""
        return value or None

    def check(self) -> None:
        """Refuse unsafe or impossible settings with a one-line :class:`InputError`."""
        if not is_loopback(self.host) and self.token() is None:
            raise InputError(
                f"refusing to listen on non-loopback address {self.host!r} without a token: "
                f"set ${self.token_env} (or pass --token-env VAR) first",
                field="--host",
            )
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise InputError(f"must be a port number from 0 to 65535, got {self.port!r}", field="--port")
        for flag, value, least in (("--workers", self.workers, 1), ("--cpu-processes", self.cpu_processes, 0),
                                   ("--max-body-bytes", self.max_body_bytes, 1),
                                   ("--max-pairs", self.max_pairs, 1),
                                   ("--client-concurrency", self.client_concurrency, 1),
                                   ("--max-jobs", self.max_jobs, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"must be an integer of at least {least}, got {value!r}", field=flag)
        # NaN passes every "<= 0" test and infinity disables a limit: both are refused.
        for flag, fvalue, optional, zero_ok in (
                ("--max-cost", self.max_cost, True, False),
                ("--body-seconds", self.body_seconds, False, False),
                ("--drain-seconds", self.drain_seconds, False, True),
                ("--lease-seconds", self.lease_seconds, False, False)):
            if fvalue is None and optional:
                continue
            if isinstance(fvalue, bool) or not isinstance(fvalue, (int, float)) or not math.isfinite(fvalue) \
                    or fvalue < 0 or (fvalue == 0 and not zero_ok):
                raise InputError(f"must be a finite number {'>= 0' if zero_ok else '> 0'}, got {fvalue!r}",
                                 field=flag)
        if self.no_cache and self.cache:
            raise InputError("--cache and --no-cache contradict each other", field="--no-cache")
        # The endpoints were checked when they were made (Endpoint.validate).
        for spec in self.ui_files:
            role, sep, rest = spec.partition("=")
            path = rest if sep and rest and role.isalpha() else spec
            if not Path(path).is_file():
                raise InputError(f"not a readable file: {path!r}", field="--ui-file")
        if self.ui_labels and Path(self.ui_labels).is_dir():
            raise InputError(f"is a directory; give a file name, got {self.ui_labels!r}",
                             field="--ui-labels")
        if self.jobs_db:
            check_target(self.jobs_db)
        for flag, path in (("--jobs-db", self.jobs_db), ("--cache", self.cache), ("--prices", None)):
            if path and not is_postgres_url(path) and Path(path).expanduser().is_dir():
                raise InputError(f"is a directory; give a file name, got {path!r}", field=flag)
        if any(is_postgres_url(v) for v in (self.jobs_db, self.cache, os.environ.get("RAGJUDGE_CACHE"))):
            import_psycopg()  # a missing driver is a one-line error before the server starts

    def llm_endpoints(self, model: str, concurrency: int | None = None) -> list[Endpoint]:
        """The endpoints a job calls: :attr:`endpoints` with the job's ``model``, each with at
        most ``concurrency`` requests in flight (a request may lower the server's limit, never
        raise it)."""
        return [e.replace(model=model, concurrency=min(concurrency or e.concurrency, e.concurrency))
                for e in self.endpoints]

    def cache_path(self) -> Path | str | None:
        """The cache target, as the library reads one: a SQLite file, or a ``postgresql://``
        URL (kept as a string); ``None`` with ``--no-cache``."""
        if self.no_cache:
            return None
        return cache_target(self.cache, field="--cache") if self.cache else default_cache_path()

    def jobs_path(self) -> Path | str:
        """Job state lives beside the cache (or in the cache's default folder); with a
        Postgres cache, in the same database; ``--jobs-db`` may be a ``postgresql://`` URL."""
        if self.jobs_db:  # a URL stays a string (a path would fold its "//")
            return self.jobs_db.strip() if "://" in self.jobs_db else Path(self.jobs_db).expanduser()
        cache = self.cache_path()
        if cache is None:
            cache = default_cache_path()
        if isinstance(cache, str):
            return cache
        return cache.with_name("jobs.sqlite")

    def to_json(self) -> str:
        """The settings as JSON (each endpoint as its mapping of fields, :meth:`Endpoint.to_dict`)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["endpoints"] = [e.to_dict() for e in self.endpoints]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ServerSettings:
        """The settings :meth:`to_json` wrote (each endpoint made, and checked, once more in this
        process: its URL's secrets are registered for redaction here too)."""
        data = json.loads(text)
        data["cors_origins"] = tuple(data.get("cors_origins") or ())
        data["endpoints"] = tuple(Endpoint.from_mapping(e) for e in data.get("endpoints") or ())
        data["ui_files"] = tuple(data.get("ui_files") or ())
        return cls(**data)
