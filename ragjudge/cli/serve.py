"""``ragjudge serve``: the HTTP service (needs ``pip install -e '.[server]' in the ragjudge checkout``).

Only argument parsing here; the service is :mod:`ragjudge.server`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from .. import server
from ..server.settings import ANY_MODEL
from ._llm import (
    DEFAULT_PROVIDER,
    add_endpoint_options,
    add_provider_option,
    endpoints_from_args,
)

__all__ = ["register", "settings_from_args"]

#: The defaults of the settings' fields, each stated once, in :class:`ragjudge.server.ServerSettings`.
_D = {f.name: f.default for f in dataclasses.fields(server.ServerSettings)}

_EPILOG = """\
endpoints (JSON, under /v1):
  POST evaluate, compare          scores of runs against qrels (what evaluate / compare print as JSON)
  POST rag                        RAG metrics: the report, or a job when a metric needs the LLM
  POST judge, synth, nuggets      a job: LLM relevance judgments, a synthetic test collection,
                                  nugget evaluation of answers; with dry_run, the estimate only
  GET jobs, GET/DELETE jobs/{id}  recent jobs; a job's state and result; cancel it
  GET metrics, version            the metric catalog; versions
  GET health                      liveness and the job store (open: no token needed)
API docs, served offline: /docs, /redoc, /openapi.json; the web page: /ui/ (with --ui-file).

security: with a token in $RAGJUDGE_TOKEN (or --token-env VAR) every request but
/v1/health, the docs and the /ui/ page's static files needs 'Authorization: Bearer <token>';
without one the server only listens on a loopback address. Provider API keys come from this
environment only (OPENAI_API_KEY or --api-key-env VAR), never from requests; requests cannot
choose the endpoint. CORS is off unless --cors-origin is given.

jobs: /v1/judge, /v1/synth, /v1/nuggets and the LLM metrics of /v1/rag run in the background;
their state is in jobs.sqlite beside the cache (--jobs-db; a postgresql:// URL for several
servers). Stopping the server (Ctrl-C, SIGTERM) lets calls in flight finish and requeues the
job; the next start resumes it without paying again. The job store is checked before the server
listens; while it cannot be reached, jobs keep running and job requests get 503 with Retry-After.

exit status: 0 stopped; 2 bad options (e.g. a public --host without a token, a job store that
cannot be opened).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP evaluation service (FastAPI + uvicorn)",
        description="Serve evaluate, compare, rag, judge, synth and nuggets over HTTP, with "
                    "background LLM jobs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default=_D["host"], help=f"address to bind (default {_D['host']})")
    p.add_argument("--port", type=int, default=_D["port"], help=f"port (default {_D['port']})")
    p.add_argument("--token-env", default=_D["token_env"], metavar="VAR",
                   help=f"environment variable holding the bearer token (default {_D['token_env']})")
    p.add_argument("--workers", type=int, default=_D["workers"], metavar="N",
                   help=f"uvicorn worker processes (default {_D['workers']}; jobs are shared through the job store)")
    p.add_argument("--cpu-processes", type=int, default=_D["cpu_processes"], metavar="N",
                   help=f"processes computing evaluations and comparisons, per worker (default "
                        f"{_D['cpu_processes']}; 0: in a thread of the worker, sharing its GIL with the "
                        "event loop)")
    p.add_argument("--no-access-log", action="store_true",
                   help="no access log (uvicorn's line per answered request on stdout)")
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-body-bytes", type=int, default=_D["max_body_bytes"], metavar="N",
                     help=f"largest request body (default {_D['max_body_bytes'] / 2**20:g} MiB)")
    lim.add_argument("--max-pairs", type=int, default=_D["max_pairs"], metavar="N",
                     help=f"query-document pairs per request (default {_D['max_pairs']:,})")
    lim.add_argument("--client-concurrency", type=int, default=_D["client_concurrency"], metavar="N",
                     help=f"concurrent requests per client address (default {_D['client_concurrency']})")
    lim.add_argument("--body-seconds", type=float, default=_D["body_seconds"], metavar="S",
                     help=f"a request body must arrive within this many seconds (default {_D['body_seconds']:g}; "
                          "408 after)")
    lim.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                     help="allow browser requests from ORIGIN (repeatable; default: CORS off)")
    llm = p.add_argument_group("LLM endpoint of jobs (the server's, never a request's)")
    llm.add_argument("--model", default=os.environ.get("RAGJUDGE_MODEL"), metavar="M",
                     help="default model (or $RAGJUDGE_MODEL); requests may name another")
    add_provider_option(llm, "the model's API (", f"; default {DEFAULT_PROVIDER}, or $RAGJUDGE_PROVIDER)")
    llm.add_argument("--endpoint", dest="endpoints", action="append", default=[], metavar="URL[,KEY=VALUE...]",
                     help="spread jobs over several endpoints serving the model; repeat (as for judge: "
                          "key_env=, rpm=, tpm=, concurrency=, weight=, provider=)")
    # The endpoint's flags, as every LLM command has them (limits are per job).
    add_endpoint_options(llm, "endpoint")
    add_endpoint_options(llm, "limits")
    llm.add_argument("--cache", metavar="PATH",
                     help="SQLite cache file or postgresql:// URL (default $RAGJUDGE_CACHE or "
                          "~/.cache/ragjudge/judgments.sqlite)")
    llm.add_argument("--no-cache", action="store_true", help="no LLM cache (jobs still keep their judgments)")
    llm.add_argument("--prices", metavar="FILE", help="JSON price overrides (USD per 1M tokens)")
    llm.add_argument("--max-cost", type=float, metavar="USD",
                     help="ceiling of any one job's budget (and the default budget)")
    jobs = p.add_argument_group("jobs")
    jobs.add_argument("--jobs-db", metavar="PATH", help="job state: a SQLite file or a postgresql:// URL shared "
                      "by several servers (default jobs.sqlite beside the cache; with a Postgres "
                      "cache, its database)")
    jobs.add_argument("--max-jobs", type=int, default=_D["max_jobs"], metavar="N",
                      help=f"jobs running at once per worker (default {_D['max_jobs']}; the rest wait)")
    jobs.add_argument("--drain-seconds", type=float, default=_D["drain_seconds"], metavar="S",
                      help=f"on stop, wait this long for calls in flight (default {_D['drain_seconds']:g})")
    jobs.add_argument("--lease-seconds", type=float, default=_D["lease_seconds"], metavar="S",
                      help="a job whose server has not renewed its lease for this long is taken "
                           f"over by another (default {_D['lease_seconds']:g}; a job store outage shorter "
                           "than this never moves a job)")
    ui = p.add_argument_group("web page at /ui/ (as ragjudge ui)")
    ui.add_argument("--ui-file", action="append", default=[], metavar="FILE",
                    help="a file the page shows (repeatable; ROLE=PATH forces its role; "
                         "only these files are readable through it)")
    ui.add_argument("--ui-labels", metavar="PATH",
                    help="labels log of the page (default: beside the to-label file)")
    p.set_defaults(func=_run)


def settings_from_args(args: argparse.Namespace) -> server.ServerSettings:
    """The :class:`ragjudge.server.ServerSettings` of the parsed flags: the LLM endpoint (or one
    per ``--endpoint``) made here, once, as the other LLM commands make theirs; an error names
    its flag."""
    return server.ServerSettings(
        host=args.host, port=args.port, token_env=args.token_env, workers=args.workers,
        cpu_processes=args.cpu_processes,
        max_body_bytes=args.max_body_bytes, max_pairs=args.max_pairs,
        client_concurrency=args.client_concurrency, body_seconds=args.body_seconds,
        cors_origins=tuple(args.cors_origin), access_log=not args.no_access_log,
        model=args.model, endpoints=tuple(endpoints_from_args(args, model=args.model or ANY_MODEL)),
        cache=args.cache, no_cache=args.no_cache,
        prices=args.prices, max_cost=args.max_cost, jobs_db=args.jobs_db,
        max_jobs=args.max_jobs, drain_seconds=args.drain_seconds, lease_seconds=args.lease_seconds,
        ui_files=tuple(args.ui_file), ui_labels=args.ui_labels,
    )


def _run(args: argparse.Namespace) -> int:
    server.serve(settings_from_args(args))  # checks the settings, then the job store, then serves
    return 0
