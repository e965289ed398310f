"""``ragjudge ui FILES...``: the local web page over results, judgments and labels (needs
``pip install -e '.[server]'`` in the ragjudge checkout).

Only argument parsing here: the page and its API are :mod:`ragjudge.server.ui`, served by the
same service as ``ragjudge serve`` (same token check and limits) on a loopback address.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
import tempfile
from typing import Any

from .. import server  # server.serve looked up when called (a test stands in for it)

__all__ = ["register"]

_EPILOG = """\
files (what each is, is read from its content; force it with ROLE=PATH, ROLE one of result,
qrels, llm, run, queries, corpus, judgments, tolabel, labels, assignments):
  result JSON of `ragjudge evaluate/compare -f json` (--per-query for per-query differences),
  human qrels, LLM qrels (llm=PATH), runs, queries, corpus, judgments JSONL of
  `ragjudge judge --judgments`, a to-label file of `ragjudge plan-labels --sample N -o FILE`
  (or of `plan-labels LLM_ASSIGNMENTS --nuggets --sample N -o FILE`), LLM nugget assignments
  of `ragjudge nuggets assign` (each answer with its nuggets and the model's reasons).

Files may be gzip-compressed (.gz). Only these files can be read through the page. Labels are
appended, as they are given, to
FILE.labels.jsonl beside the to-label file (or --labels PATH); reloading the page resumes.

security: listens on 127.0.0.1 only. Every API request needs the bearer token: the one in
$RAGJUDGE_TOKEN (or --token-env VAR) when set, otherwise a fresh random one; the printed URL
carries it after '#', which the browser never sends to the server.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ui",
        help="a local web page: results, per-query differences, judgments, agreement, labelling",
        description="Serve a local web page over the given files: runs x metrics with intervals "
                    "and significance, per-query differences, each query's ranked passages with "
                    "who labelled them, human vs LLM agreement, and labelling for PPI.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="files to show (ROLE=PATH to force a role)")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.add_argument("--labels", metavar="PATH",
                   help="labels log (default: TO_LABEL.labels.jsonl beside the to-label file)")
    p.add_argument("--token-env", default="RAGJUDGE_TOKEN", metavar="VAR",
                   help="environment variable holding the token (default RAGJUDGE_TOKEN; unset: "
                        "a random token)")
    p.set_defaults(func=_run)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: argparse.Namespace) -> int:
    from ..server.ui.workspace import Workspace  # deferred: it loads numpy, which `ui --help` never needs

    Workspace(args.files, labels=args.labels)  # a bad file is an error before anything starts
    token = os.environ.get(args.token_env) if args.token_env else None
    if not token:
        token = secrets.token_urlsafe(24)
        os.environ[args.token_env] = token
    port = args.port or _free_port()
    state = tempfile.mkdtemp(prefix="ragjudge-ui-")
    settings = server.ServerSettings(host="127.0.0.1", port=port, token_env=args.token_env,
                              no_cache=True, jobs_db=os.path.join(state, "jobs.sqlite"),
                              ui_files=tuple(args.files), ui_labels=args.labels,
                              drain_seconds=1.0,
                              cpu_processes=0)  # its views compute in their own routes: no process to start

    def announce() -> None:
        print(f"ragjudge ui: http://127.0.0.1:{port}/ui/#token={token}", flush=True)
        print("(Ctrl-C stops)", file=sys.stderr, flush=True)

    server.serve(settings, checked=announce)
    return 0
