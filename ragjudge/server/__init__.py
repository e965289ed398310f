"""The HTTP service (``ragjudge serve``; optional extra ``ragjudge[server]``).

A thin FastAPI layer over the library: ``/v1/evaluate``, ``/v1/compare`` and ``/v1/rag`` return
the library's own JSON; ``/v1/judge``, ``/v1/synth`` and LLM-graded ``/v1/rag`` run as
background jobs whose state lives in SQLite beside the LLM cache and that resume after a
restart without paying again. FastAPI and uvicorn are imported only here, never by the core.

    from ragjudge.server import ServerSettings, create_app
    app = create_app(ServerSettings(model="gpt-4o-mini"))
"""

from __future__ import annotations

from typing import Any

from .settings import ServerSettings, is_loopback

__all__ = ["ServerSettings", "create_app", "serve", "is_loopback"]


def _require() -> None:
    from ..errors import RagjudgeError

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


def serve(settings: ServerSettings) -> None:
    """Run the service with uvicorn until interrupted (graceful stop: jobs are requeued)."""
    import copy
    import os

    _require()
    import uvicorn.config

    from .app import ACCESS_LOG
    from .settings import SETTINGS_ENV

    settings.check()
    # Worker processes (and the single-process case alike) build the app from the environment,
    # so every process runs the same settings; secrets stay in their own variables.
    os.environ[SETTINGS_ENV] = settings.to_json()
    # The access log is the app's (AccessLog: written after each answer is sent), in uvicorn's
    # format and on its stream; uvicorn's own would write the same line before answering.
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["loggers"][ACCESS_LOG] = {
        "handlers": ["access"], "propagate": False,
        "level": "INFO" if settings.access_log else "WARNING"}
    uvicorn.run("ragjudge.server.app:app_from_env", factory=True, host=settings.host,
                port=settings.port, workers=settings.workers, log_level="info",
                log_config=log_config, access_log=False,
                timeout_graceful_shutdown=max(5, int(settings.drain_seconds)),
                server_header=False, proxy_headers=False)
