"""The HTTP service (``ragjudge serve``; optional extra ``ragjudge[server]``).

A thin FastAPI layer over the library: ``/v1/evaluate``, ``/v1/compare`` and ``/v1/rag`` return
the library's own JSON; ``/v1/judge``, ``/v1/synth``, ``/v1/nuggets`` and LLM-graded ``/v1/rag``
run as background jobs whose state lives in a job store (SQLite beside the LLM cache, or a shared
PostgreSQL database) and that resume after a restart without paying again. FastAPI and uvicorn are imported only here, never by the core.

    from ragjudge.server import ServerSettings, create_app
    app = create_app(ServerSettings(model="gpt-4o-mini"))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import InputError, RagjudgeError
from .settings import SETTINGS_ENV, ServerSettings, is_loopback
from .store import StoreUnavailable, open_job_store

# Deferred imports: ragjudge.server.app, which imports FastAPI. Importing this package (the
# parsers of `serve` and `ui`, the settings' checks) loads no web stack: FastAPI and uvicorn
# load when the app is built or served, after _require() checked that the extra is installed.

__all__ = ["ServerSettings", "create_app", "serve", "is_loopback"]


def _require() -> None:
    try:
        import fastapi  # noqa: F401
        import fastapi_offline  # noqa: F401  (the /docs assets, served locally)
        import uvicorn  # noqa: F401
    except ImportError:
        raise RagjudgeError("the HTTP service needs its extra: pip install -e '.[server]' in the ragjudge checkout") from None


def create_app(settings: ServerSettings | None = None) -> Any:
    """The ASGI application (FastAPI) for ``settings``."""
    _require()
    from .app import create_app as _create

    return _create(settings)


def check_job_store(settings: ServerSettings) -> None:
    """Open the job store and reach it, once: a wrong password, a missing database, no
    server or an unknown scheme is a one-line :class:`ragjudge.errors.InputError` before the
    service starts listening."""
    with open_job_store(settings.jobs_path()) as store:
        try:
            store.check()
        except StoreUnavailable as exc:
            raise InputError(f"cannot reach the job store: {exc.reason}", source=str(store.path),
                             field="--jobs-db") from None


def serve(settings: ServerSettings, *, checked: Callable[[], None] | None = None) -> None:
    """Check ``settings`` and the job store, then run the service with uvicorn until
    interrupted (graceful stop: jobs are requeued). ``checked`` is called between the two,
    once nothing can refuse the settings any more (``ragjudge ui`` prints its address there)."""
    settings.check()  # a bad option is its one-line error whether or not the extra is installed
    _require()
    import uvicorn

    check_job_store(settings)
    if checked is not None:
        checked()
    # Worker processes (and the single-process case alike) build the app from the environment,
    # so every process runs the same settings; secrets stay in their own variables.
    os.environ[SETTINGS_ENV] = settings.to_json()
    uvicorn.run("ragjudge.server.app:app_from_env", factory=True, host=settings.host,
                port=settings.port, workers=settings.workers, log_level="info",
                access_log=settings.access_log,
                timeout_graceful_shutdown=max(5, int(settings.drain_seconds)),
                server_header=False, proxy_headers=False)
