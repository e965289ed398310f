"""Settings of the HTTP service: one frozen value, passed to worker processes as JSON.

Nothing secret is stored here: the bearer token and provider API keys stay in the server's
environment and are read by name (``token_env``, ``api_key_env``) where they are needed.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from ..errors import InputError

__all__ = ["ServerSettings", "is_loopback", "SETTINGS_ENV"]

#: Environment variable carrying the settings (JSON) to uvicorn worker processes.
SETTINGS_ENV = "RAGJUDGE_SERVER_SETTINGS"


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
    # request limits
    max_body_bytes: int = 32 * 1024 * 1024
    max_pairs: int = 2_000_000
    client_concurrency: int = 16
    cors_origins: tuple[str, ...] = ()
    # the LLM endpoint: only ever from the server's configuration, never from a request
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    azure_endpoint: str | None = None
    azure_api_version: str | None = None
    rpm: float | None = None
    tpm: float | None = None
    timeout: float = 60.0
    max_attempts: int = 6
    concurrency: int = 16
    cache: str | None = None  # None: $RAGJUDGE_CACHE or ~/.cache/ragjudge/judgments.sqlite
    no_cache: bool = False
    prices: str | None = None
    max_cost: float | None = None  # ceiling of any one job's budget
    # jobs
    jobs_db: str | None = None  # None: jobs.sqlite beside the cache
    max_jobs: int = 2
    lease_seconds: float = 10.0
    drain_seconds: float = 60.0

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
        for flag, value in (("--port", self.port), ("--workers", self.workers),
                            ("--max-body-bytes", self.max_body_bytes), ("--max-pairs", self.max_pairs),
                            ("--client-concurrency", self.client_concurrency),
                            ("--concurrency", self.concurrency), ("--max-jobs", self.max_jobs),
                            ("--max-attempts", self.max_attempts)):
            if value < (0 if flag == "--port" else 1):
                raise InputError(f"must be at least 1, got {value}", field=flag)
        for flag, fvalue in (("--rpm", self.rpm), ("--tpm", self.tpm), ("--timeout", self.timeout),
                             ("--max-cost", self.max_cost)):
            if fvalue is not None and fvalue <= 0:
                raise InputError(f"must be positive, got {fvalue}", field=flag)
        if self.no_cache and self.cache:
            raise InputError("--cache and --no-cache contradict each other", field="--no-cache")

    def cache_path(self) -> Path | None:
        if self.no_cache:
            return None
        if self.cache:
            return Path(self.cache).expanduser()
        from ..llm import default_cache_path

        return Path(default_cache_path())

    def jobs_path(self) -> Path:
        """Job state lives beside the cache (or in the cache's default folder)."""
        if self.jobs_db:
            return Path(self.jobs_db).expanduser()
        cache = self.cache_path()
        if cache is None:
            from ..llm import default_cache_path

            cache = Path(default_cache_path())
        return cache.with_name("jobs.sqlite")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerSettings:
        data = json.loads(text)
        data["cors_origins"] = tuple(data.get("cors_origins") or ())
        return cls(**data)
