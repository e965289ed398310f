"""``ragjudge serve``: the HTTP service (needs ``pip install -e '.[server]' in the ragjudge checkout``).

Only argument parsing here; the service is :mod:`ragjudge.server`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .. import server
from ._llm import add_endpoint_options, add_provider_option, endpoint_fields

__all__ = ["register"]

_EPILOG = """\
endpoints (JSON, under /v1): POST evaluate, compare, rag, judge, synth; GET/DELETE jobs/{id};
GET jobs, metrics, health, version; OpenAPI at /docs and /openapi.json.

security: with a token in $RAGJUDGE_TOKEN (or --token-env VAR) every request but
/v1/health and the docs needs 'Authorization: Bearer <token>'; without one the server only
listens on a loopback address. Provider API keys come from this environment only (OPENAI_API_KEY
or --api-key-env VAR), never from requests; requests cannot choose the endpoint. CORS is off
unless --cors-origin is given.

jobs: /v1/judge and LLM metrics of /v1/rag run in the background; their state is in
jobs.sqlite beside the cache (--jobs-db; a postgresql:// URL for several servers). Stopping the
server (Ctrl-C, SIGTERM) lets calls in flight finish and requeues the job; the next start
resumes it without paying again. The job store is checked before the server listens; while it
cannot be reached, jobs keep running and job requests get 503 with Retry-After.

exit status: 0 stopped; 2 bad options (e.g. a public --host without a token, a job store that
cannot be opened).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP evaluation service (FastAPI + uvicorn)",
        description="Serve evaluate/compare/rag/judge over HTTP, with background LLM jobs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token-env", default="RAGJUDGE_TOKEN", metavar="VAR",
                   help="environment variable holding the bearer token (default RAGJUDGE_TOKEN)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="uvicorn worker processes (default 1; jobs are shared through SQLite)")
    p.add_argument("--no-access-log", action="store_true",
                   help="no access log (uvicorn's line per answered request on stdout)")
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024, metavar="N",
                     help="largest request body (default 32 MiB)")
    lim.add_argument("--max-pairs", type=int, default=2_000_000, metavar="N",
                     help="query-document pairs per request (default 2,000,000)")
    lim.add_argument("--client-concurrency", type=int, default=16, metavar="N",
                     help="concurrent requests per client address (default 16)")
    lim.add_argument("--body-seconds", type=float, default=30.0, metavar="S",
                     help="a request body must arrive within this many seconds (default 30; 408 after)")
    lim.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                     help="allow browser requests from ORIGIN (repeatable; default: CORS off)")
    llm = p.add_argument_group("LLM endpoint of jobs (the server's, never a request's)")
    llm.add_argument("--model", default=os.environ.get("RAGJUDGE_MODEL"), metavar="M",
                     help="default model (or $RAGJUDGE_MODEL); requests may name another")
    add_provider_option(llm, "the model's API (", "; default openai)")
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
    jobs.add_argument("--max-jobs", type=int, default=2, metavar="N",
                      help="jobs running at once per worker (default 2; the rest wait)")
    jobs.add_argument("--drain-seconds", type=float, default=60.0, metavar="S",
                      help="on stop, wait this long for calls in flight (default 60)")
    jobs.add_argument("--lease-seconds", type=float, default=10.0, metavar="S",
                      help="a job whose server has not renewed its lease for this long is taken "
                           "over by another (default 10; a job store outage shorter than this "
                           "never moves a job)")
    ui = p.add_argument_group("web page at /ui/ (as ragjudge ui)")
    ui.add_argument("--ui-file", action="append", default=[], metavar="FILE",
                    help="a file the page shows (repeatable; ROLE=PATH forces its role; "
                         "only these files are readable through it)")
    ui.add_argument("--ui-labels", metavar="PATH",
                    help="labels log of the page (default: beside the to-label file)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    settings = server.ServerSettings(
        host=args.host, port=args.port, token_env=args.token_env, workers=args.workers,
        max_body_bytes=args.max_body_bytes, max_pairs=args.max_pairs,
        client_concurrency=args.client_concurrency, body_seconds=args.body_seconds,
        cors_origins=tuple(args.cors_origin), access_log=not args.no_access_log,
        model=args.model, llm=endpoint_fields(args), endpoints=tuple(args.endpoints),
        cache=args.cache, no_cache=args.no_cache,
        prices=args.prices, max_cost=args.max_cost, jobs_db=args.jobs_db,
        max_jobs=args.max_jobs, drain_seconds=args.drain_seconds, lease_seconds=args.lease_seconds,
        ui_files=tuple(args.ui_file), ui_labels=args.ui_labels,
    )
    settings.check()
    server.serve(settings)
    return 0
