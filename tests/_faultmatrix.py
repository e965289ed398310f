"""The fault matrix: every LLM command against every fault mode, with one and with several
endpoints, with each cache store, checking the same invariants every time.

A cell is (command, mode, endpoints, store, provider). Each joins with one line in its table:
:data:`COMMANDS` (how to call it and how to count its items), :data:`MODES` (the fault
server's modes and an optional cost cap), :data:`ENDPOINTS` (how the faults spread over the
endpoints), :data:`STORES` (the cache, and what happens to it mid-run) and :data:`PROVIDERS`
(the API the fault server speaks and the flags that choose it). :func:`run_cell` runs one and
returns a :class:`CellResult`; :meth:`CellResult.violations` lists the broken invariants:

* ``bound``: it ended within :data:`BOUND` seconds;
* ``items``: every item is graded or failed with a reason (none lost, none silently empty);
* ``paid_twice``: no request was billed again after a clean reply to it;
* ``reported``: the cost the client reports is at least what the servers billed;
* ``cap``: what the servers billed is within ``--max-cost``;
* ``exit``: a run where most items failed does not exit 0;
* ``budget``: a run the cap cut short does not exit 0;
* ``healthy``: with several endpoints (one faulty), no item fails for want of a server;
* ``other_model``: a reply naming another model is asked again, or named on stderr;
* ``valid``: every request is one the provider's API accepts;
* ``transient``: under faults a retry outlives (5xx, 429, overload on some calls), no item
  fails;
* ``stop``: a spend limit reached on the only endpoint stops the run at once: a non-zero exit,
  one line naming the limit, no request resent for it beyond those already in flight, and
  what was paid for before it written;
* ``rerun``: after a store outage mid-run (``postgres restart``), the same command again
  pays again only for the calls that were in flight at the outage (a request billed in the
  rerun that had already had a clean reply).

:func:`run_replicas` is the replicas scenario: ``ragjudge serve`` replicas on one PostgreSQL
job store and cache, one capped job, the replica running it killed with SIGKILL mid-job:
the job completes on another replica, every item graded or failed with a reason, paid twice
at most the calls in flight at the kill, reported cost >= true spend <= the cap.

Commands run in-process through :func:`ragjudge.cli.main` (``benchmarks/bench_faults.py``
prints the same cells as a table).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _faultserver import PRICES, FaultServer

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
MODEL = "fault-model"
#: Requests a client may have in flight on one endpoint (the default ``--concurrency``).
IN_FLIGHT = 64


@dataclass(frozen=True)
class Provider:
    """An LLM API in the matrix: the fault server's ``api``, the model asked for, the CLI flags
    that choose the provider and the variable its key is read from."""

    api: str
    model: str
    flags: tuple[str, ...]
    key_env: str


PROVIDERS: dict[str, Provider] = {
    "openai": Provider("openai", MODEL, (), "OPENAI_API_KEY"),
    "anthropic": Provider("anthropic", "claude-fault-1", ("--provider", "anthropic"), "ANTHROPIC_API_KEY"),
}
#: Seconds a cell may take (a cell's calls time out after 2 s and give up after 10 s).
BOUND = 60.0
#: Cost cap of a cell without one of its own (never reached by the small inputs).
NO_CAP = 1.0


# ----------------------------------------------------------------------------- inputs
def _inputs(tmp: Path) -> dict[str, Path]:
    """Small inputs: 6 queries x 2 documents, 3 RAG samples, the example corpus."""
    run = tmp / "small.run"
    if not run.exists():
        per: dict[str, int] = {}
        keep = []
        for line in (EX / "runs" / "bm25_raw.run").read_text().splitlines():
            q = line.split()[0]
            if q not in per and len(per) == 6:
                continue
            per[q] = per.get(q, 0) + 1
            if per[q] <= 2:
                keep.append(line)
        run.write_text("\n".join(keep) + "\n")
        (tmp / "samples.jsonl").write_text("".join((EX / "rag_samples.jsonl").read_text().splitlines(True)[:3]))
        # the server's rate names, spelt as a --prices file spells them
        rates = {("cached_input" if k == "cached" else k): v for k, v in PRICES.items()}
        (tmp / "prices.json").write_text(json.dumps({p.model: rates for p in PROVIDERS.values()}))
    return {"run": run, "samples": tmp / "samples.jsonl", "prices": tmp / "prices.json",
            "queries": EX / "queries.jsonl", "corpus": EX / "corpus.jsonl",
            "nuggets": EX / "nuggets" / "nuggets.jsonl", "answers": EX / "nuggets" / "runs" / "run_a.jsonl"}


# ----------------------------------------------------------------------------- item counts
@dataclass
class Items:
    """What a command's outputs say about its items."""

    expected: int
    graded: int = 0
    failed: int = 0  # failed with a reason
    problems: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return max(0, self.expected - self.graded - self.failed)


def _judgment_items(path: Path, expected: int) -> Items:
    items = Items(expected)
    if not path.exists():
        items.problems.append("no judgments file")
        return items
    seen = set()
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        seen.add((rec["qid"], rec["docid"]))
        if rec.get("grade") is not None:
            items.graded += 1
        elif rec.get("error"):
            items.failed += 1
        else:
            items.problems.append(f"{rec['qid']}/{rec['docid']}: neither grade nor reason")
    if len(seen) != items.graded + items.failed:
        items.problems.append("a pair judged twice")
    return items


def _rag_items(path: Path, expected: int) -> Items:
    items = Items(expected)
    if not path.exists():
        items.problems.append("no result file")
        return items
    doc = json.loads(path.read_text())
    for s in doc.get("samples", []):
        score = (s.get("scores") or {}).get("faithfulness") or {}
        if score.get("value") is not None:
            items.graded += 1
        elif score.get("reason") or score.get("error") or score.get("undetermined"):
            items.failed += 1
        else:
            items.problems.append(f"sample {s.get('sample')}: no value and no reason ({score})")
    return items


def _nugget_items(path: Path) -> Items:
    """Nugget grades: one per nugget of the query of each answer in the example's run_a."""
    per_query = {}
    for line in (EX / "nuggets" / "nuggets.jsonl").read_text().splitlines():
        rec = json.loads(line)
        per_query[rec["qid"]] = len(rec["nuggets"])
    answers = [json.loads(x) for x in (EX / "nuggets" / "runs" / "run_a.jsonl").read_text().splitlines()]
    items = Items(sum(per_query.get(a["topic_id"], 0) for a in answers))
    if not path.exists():
        items.problems.append("no assignments file")
        return items
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        for n in rec["nuggets"]:
            if n.get("assignment") is not None:
                items.graded += 1
            elif n.get("failure"):
                items.failed += 1
            else:
                items.problems.append(f"{rec['run_id']}/{rec['qid']}: a nugget with neither grade nor reason")
    return items


def _synth_items(out: Path, expected: int) -> Items:
    items = Items(expected)
    summary, records = out / "summary.json", out / "synth.jsonl"
    if not summary.exists():
        items.problems.append("no summary.json")
        return items
    drawn = json.loads(summary.read_text())["sampling"]["drawn"]
    items.expected = drawn
    draws: dict[str, str] = {}
    for line in records.read_text().splitlines() if records.exists() else []:
        rec = json.loads(line)
        if rec["status"] == "kept" or (rec.get("reason") and rec.get("dropped_by") not in ("generation", "budget")):
            draws[rec["draw"]] = "graded"  # a decision: kept, or dropped by a filter
        elif rec.get("reason"):  # the generation call failed, or the cap stopped it: a failure with its reason
            draws.setdefault(rec["draw"], "failed")
        else:
            items.problems.append(f"{rec['id']}: {rec['status']} without a reason")
    items.graded = sum(v == "graded" for v in draws.values())
    items.failed = sum(v == "failed" for v in draws.values())
    return items


# ----------------------------------------------------------------------------- the tables
@dataclass(frozen=True)
class Command:
    """How to run one LLM command: its arguments (``llm``: the model, endpoint, cache and
    cost flags) and how to count its items from its outputs."""

    argv: Callable[[Path, dict[str, Path], list[str]], list[str]]
    items: Callable[[Path], Items]
    #: Run as a job of ``ragjudge serve`` (a process): ``argv`` gives serve's LLM flags.
    service: bool = False
    #: Seconds the cell may take (a service also starts its process).
    bound: float = BOUND


COMMANDS: dict[str, Command] = {
    "judge": Command(
        lambda t, i, llm: ["judge", "--queries", str(i["queries"]), "--corpus", str(i["corpus"]),
                           "--run", str(i["run"]), "--depth", "2", "-o", str(t / "q.txt"),
                           "--judgments", str(t / "j.jsonl"), "--no-progress", *llm],
        lambda t: _judgment_items(t / "j.jsonl", 12)),
    "evaluate --judge": Command(
        lambda t, i, llm: ["evaluate", "none", str(i["run"]), "--judge", _model(llm), "--queries",
                           str(i["queries"]), "--corpus", str(i["corpus"]), "--judge-depth", "2",
                           "--judgments", str(t / "j.jsonl"), "-m", "p@2", "-f", "json", "--no-progress",
                           *[a for a in llm if a not in ("--model", _model(llm))]],
        lambda t: _judgment_items(t / "j.jsonl", 12)),
    "rag": Command(
        lambda t, i, llm: ["rag", str(i["samples"]), "-m", "faithfulness", "-f", "json", "--per-sample",
                           "-o", str(t / "rag.json"), *llm],
        lambda t: _rag_items(t / "rag.json", 3)),
    "synth": Command(
        lambda t, i, llm: ["synth", "--corpus", str(i["corpus"]), "-n", "3", "--allow-fewer",
                           "-o", str(t / "synth"), *llm],
        lambda t: _synth_items(t / "synth", 0)),
    "nuggets assign": Command(
        lambda t, i, llm: ["nuggets", "assign", str(i["nuggets"]), str(i["answers"]), "-o", str(t / "a.jsonl"),
                           "--assign-window", "2", "--no-progress", *llm],
        lambda t: _nugget_items(t / "a.jsonl")),
    "service judge": Command(
        lambda t, i, llm: [a for a in llm if a not in ("--patience", "10")],
        lambda t: _judgment_items(t / "j.jsonl", 12), service=True, bound=2 * BOUND),
}


def _model(llm: list[str]) -> str:
    return llm[llm.index("--model") + 1]


def _service_job(tmp: Path, inputs: dict[str, Path], flags: list[str], result: dict[str, Any]) -> None:
    """A judge job through ``ragjudge serve``'s job API; its judgments go to ``j.jsonl`` (the
    pairs it skipped at the cap as failures with that reason) and its cost to ``result``."""
    from _server import ServerProcess, wait_job

    from ragjudge import read_corpus, read_queries

    srv = ServerProcess(tmp, *flags, env={p.key_env: "sk-fault-matrix" for p in PROVIDERS.values()})
    with srv, srv.client() as c:
        body = {"queries": read_queries(inputs["queries"]), "corpus": read_corpus(inputs["corpus"]),
                "runs": {"r": inputs["run"].read_text()}, "depth": 2}
        r = c.post("/v1/judge", json=body)
        if r.status_code != 202:
            result["code"], result["reported"] = 2, None
            return
        state = wait_job(c, r.json()["id"], timeout=BOUND)
    _job_outcome(tmp, state, result)


def _job_outcome(tmp: Path, state: dict[str, Any], result: dict[str, Any]) -> None:
    """A finished judge job's judgments into ``tmp/j.jsonl``, its exit status and cost into ``result``."""
    judgments = (state.get("result") or {}).get("judgments") or []
    skipped = int((state.get("counts") or {}).get("skipped_budget") or 0)
    lines = [json.dumps(j) for j in judgments]
    # pairs the cap skipped that the result does not list, as failures with that reason
    listed = sum(1 for j in judgments if j.get("grade") is None and j.get("error"))
    lines += [json.dumps({"qid": f"skipped{k}", "docid": "-", "grade": None, "error": "budget"})
              for k in range(max(0, skipped - listed))]
    (tmp / "j.jsonl").write_text("".join(x + "\n" for x in lines))
    # The job's view is its exit status: done with nothing skipped is 0; cut by the budget is
    # the CLI's 4 (the counts say how many pairs); failed is 3, its error the run's reason.
    result["code"] = (4 if skipped else 0) if state["status"] == "done" else 3
    result["reported"] = state.get("cost_usd")
    # What the job said about its numbers (a renamed model...) is in its result, as a client reads it.
    notes = [f"ragjudge: warning: {w}" for w in (state.get("result") or {}).get("warnings") or ()]
    if notes:
        result["stopped"] = "\n".join(notes)
    if state["status"] != "done":
        result["stopped"] = f"ragjudge: error: job {state['status']}: {state.get('error')}"


@dataclass(frozen=True)
class Mode:
    """Fault modes of the faulty endpoint (``{mode: rate}``), the cap of the cell (a fraction
    of the clean run's spend; ``None``: no cap reached), where in the fault server's sequence
    the endpoint starts (``seed``: 1 puts a rare mode a few requests in) and whether the mode
    must stop the run (a spend limit)."""

    modes: Mapping[str, float]
    cap: float | None = None
    seed: int = 0
    stops: bool = False

    @property
    def transient(self) -> bool:
        """Only faults a retry within the patience outlives, on some of the calls."""
        return bool(self.modes) and self.cap is None and sum(self.modes.values()) < 1 \
            and set(self.modes) <= TRANSIENT


MODES: dict[str, Mode] = {
    "clean": Mode({}),
    "5xx": Mode({"5xx": 0.3}),
    "429 retry-after": Mode({"429": 0.3}),
    "429 bare": Mode({"429_bare": 0.3}),
    "stall": Mode({"stall": 0.2}),
    # what an overloaded provider does: some requests refused, some failing, some stalling
    "429 + 5xx + stall": Mode({"429_bare": 0.1, "5xx": 0.1, "stall": 0.1}),
    "reset": Mode({"reset": 0.3}),
    "gzip": Mode({"gzip": 0.3}),
    "malformed": Mode({"malformed": 0.3}),
    "empty choices": Mode({"empty_choices": 0.3}),
    "other model": Mode({"other_model": 0.3}),
    "usage huge": Mode({"usage_huge": 0.3}),
    "usage negative": Mode({"usage_negative": 0.3}),
    "usage text": Mode({"usage_text": 0.3}),
    "overloaded": Mode({"overloaded": 0.3}),
    "bad content": Mode({"bad_content": 0.3}),
    "usage cache": Mode({"usage_cache": 0.3}),
    # the account's limit from the fifth request on (four answers first)
    "spend limit": Mode({"spend_limit": 0.1}, seed=1, stops=True),
    "spend limit 400": Mode({"spend_limit_400": 0.1}, seed=1, stops=True),
    "always 5xx": Mode({"5xx": 1.0}),
    # A cap of 1.5x the clean run's spend: above one worst-case reservation, below the run's
    # worst case, so it binds.
    "mix + cap": Mode({"5xx": 0.1, "reset": 0.1, "gzip": 0.1, "usage_huge": 0.05}, cap=1.5),
}

#: Fault modes a retry outlives: the server answers the next attempt.
TRANSIENT = frozenset({"5xx", "429", "429_bare", "overloaded"})

#: How many endpoints, and which carry the faults: one endpoint with the mode, or three
#: (the first with the mode, two clean).
ENDPOINTS: dict[str, int] = {"one": 1, "several": 3}


def _sqlite(tmp: Path) -> str:
    return str(tmp / "cache.sqlite")


def _postgres(tmp: Path) -> str:
    from _postgres import fresh_database

    return fresh_database()


RESTART_CONCURRENCY = 2


def _restart_postgres(servers: list[FaultServer], done: threading.Event, log: dict[str, Any],
                      outage: float = 2.0) -> None:
    """Stop the PostgreSQL server for ``outage`` s once the run has been billed for a call, then
    start it again."""
    from _postgres import postgres_server, wait_until

    pg = postgres_server()
    if not wait_until(lambda: done.is_set() or sum(s.billed_calls for s in servers) >= 1, timeout=30):
        return
    if done.is_set():
        return
    # At most --concurrency calls are in flight: sent, or answered and on their way to the store.
    log["in_flight"] = RESTART_CONCURRENCY
    log["at_server"] = sum(s.inflight for s in servers)
    pg_restart(pg, outage=outage)
    log["restarted"] = True


def pg_restart(pg: Any, outage: float) -> None:
    """Stop ``pg`` (a :class:`_postgres.PostgresServer`) at once, wait ``outage`` s, start it."""
    import subprocess

    ctl = str(pg.bindir / "pg_ctl")
    subprocess.run(pg._as_server_user([ctl, "-D", str(pg.data), "-m", "immediate", "-w", "stop"]),
                   capture_output=True, timeout=60, cwd="/", check=False)
    time.sleep(outage)
    opts = (f"-p {pg.port} -k {pg.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    subprocess.run(pg._as_server_user([ctl, "-D", str(pg.data), "-l", str(pg.root / "log"), "-o", opts,
                                       "-w", "-t", "60", "start"]), capture_output=True, timeout=90, cwd="/", check=False)


@dataclass(frozen=True)
class Store:
    """A cache store: its location for a cell, and what happens to it during the run
    (``during(servers, done, log)`` in a thread; the command then runs again and may pay only
    for the calls in flight at the event)."""

    url: Callable[[Path], str]
    during: Callable[[list[FaultServer], threading.Event, dict[str, Any]], None] | None = None
    #: Seconds each reply takes and flags added to the command: a run slow enough that the
    #: event falls in its middle.
    latency: float = 0.0
    flags: tuple[str, ...] = ()


STORES: dict[str, Store] = {
    "sqlite": Store(_sqlite),
    "postgres": Store(_postgres),
    # stopped for 2 s once a call is billed, in a run of 6-12 s (2 calls in flight, 2 s each)
    "postgres restart": Store(_postgres, _restart_postgres, latency=2.0,
                              flags=("--concurrency", str(RESTART_CONCURRENCY))),
    # stopped for 6 s once a call is billed, in a run of ~3 s: the run ends while it is away
    "postgres away at exit": Store(_postgres, functools.partial(_restart_postgres, outage=6.0), latency=0.5,
                                   flags=("--concurrency", str(RESTART_CONCURRENCY))),
}


# ----------------------------------------------------------------------------- one cell
Cell = tuple[str, str, str, str, str]


@dataclass
class CellResult:
    cell: Cell
    code: int | None
    bound: float
    seconds: float
    items: Items
    spend: float
    reported: float | None
    cap: float
    paid_twice: int
    billed_calls: int
    endpoints: int = 1
    other_model: tuple[int, int] = (0, 0)  # replies naming another model, of them asked again
    stderr: str = ""
    invalid: list[str] = field(default_factory=list)  # requests the API refused as malformed
    stops: bool = False  # the mode must stop the run (a spend limit on every endpoint)
    transient: bool = False  # only faults a retry within the patience outlives
    resent_after_stop: int = 0  # requests sent again after the limit refused them
    rerun: tuple[int, int] | None = None  # (calls the rerun paid again, calls in flight at the outage)
    twice_allowed: int = 0  # requests that may be paid twice (in flight at a kill)
    notes: str = ""

    def violations(self) -> list[str]:
        out = []
        if self.code is None:
            out.append(f"bound: still running after {self.bound:.0f} s")
        # A run that stopped as a whole (non-zero exit and one error line: every call to its
        # only endpoint failing, a revoked key, a spend limit) accounts for the items it has no
        # output for with that line; items it did write must still each be graded or failed.
        stopped = self.code not in (None, 0) and "ragjudge: error:" in self.stderr
        written_ok = not self.items.problems or all(p.startswith("no ") for p in self.items.problems)
        if stopped and written_ok and (not self.items.graded or self.stops):
            pass
        elif self.items.problems or self.items.lost:
            out.append(f"items: {self.items.lost} lost of {self.items.expected}"
                       + (f"; {self.items.problems[:2]}" if self.items.problems else ""))
        if self.paid_twice > self.twice_allowed:
            out.append(f"paid_twice: {self.paid_twice}" + (f" > {self.twice_allowed} in flight" if self.twice_allowed else ""))
        if self.reported is None or self.reported < self.spend - 1e-9:
            out.append(f"reported: ${self.reported} < true ${self.spend:.6f}")
        if self.spend > self.cap + 1e-9:
            out.append(f"cap: true ${self.spend:.6f} > cap ${self.cap:.6f}")
        if self.code == 0 and self.items.expected and self.items.failed * 2 > self.items.expected:
            out.append(f"exit: 0 although {self.items.failed} of {self.items.expected} items failed")
        if self.code == 0 and self.cap < NO_CAP and self.items.failed:
            out.append(f"budget: exit 0 although the cap left {self.items.failed} of {self.items.expected} items undone")
        if self.transient and self.items.failed:
            out.append(f"transient: {self.items.failed} items failed although a retry within the "
                       "patience outlives every fault of the mode")
        if self.endpoints > 1 and self.cap >= NO_CAP and self.items.failed:
            out.append(f"healthy: {self.items.failed} items failed while healthy endpoints remained")
        served, asked_again = self.other_model
        if served > asked_again and "another-model" not in self.stderr and "claude-other" not in self.stderr:
            out.append(f"other_model: {served - asked_again} replies naming another model used without a word")
        if self.invalid:
            out.append(f"valid: {len(self.invalid)} requests refused as malformed: {self.invalid[0]}")
        if self.stops and self.endpoints == 1:
            said = any(w in self.stderr.lower() for w in ("spend limit", "quota", "usage limit"))
            if self.code in (None, 0) or not stopped or not said:
                out.append(f"stop: a spend limit did not stop the run with one line (exit {self.code})")
        if self.stops and self.billed_calls and any(p.startswith("no ") for p in self.items.problems):
            out.append(f"stop: {self.billed_calls} replies paid for before the limit, and no output written")
        if self.resent_after_stop:
            out.append(f"stop: {self.resent_after_stop} requests sent again after a spend limit refused them")
        if self.rerun is not None and self.rerun[0] > self.rerun[1]:
            out.append(f"rerun: paid {self.rerun[0]} calls again, {self.rerun[1]} were in flight at the outage")
        return out

    def row(self) -> dict[str, Any]:
        return {"command": self.cell[0], "mode": self.cell[1], "endpoints": self.cell[2],
                "store": self.cell[3], "provider": self.cell[4], "exit": self.code,
                "seconds": round(self.seconds, 1), "items": self.items.expected, "lost": self.items.lost,
                "undetermined": self.items.failed, "paid_twice": self.paid_twice,
                "reported": self.reported, "spend": round(self.spend, 6),
                "cap": None if self.cap >= NO_CAP else round(self.cap, 6),
                "violations": self.violations()}


#: Clean spend of each (command, provider) on the small inputs (measured once per process, for caps).
_CLEAN: dict[tuple[str, str], float] = {}


def _capture_llms() -> tuple[list[Any], Callable[[], None]]:
    """Every :class:`ragjudge.llm.LLM` made while the returned undo is pending."""
    from ragjudge.llm import LLM

    made: list[Any] = []
    init = LLM.__init__

    def wrapped(self: Any, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        made.append(self)

    LLM.__init__ = wrapped  # type: ignore[method-assign]

    def undo() -> None:
        LLM.__init__ = init  # type: ignore[method-assign]

    return made, undo


def _run_once(command: str, tmp: Path, inputs: dict[str, Path], argv: list[str], key_env: str,
              bound: float) -> tuple[dict[str, Any], str, float | None]:
    """Run ``argv`` once (in-process, or as a service job): its result, stderr and reported cost."""
    import contextlib
    import io

    from ragjudge.cli import main

    made, undo = _capture_llms()
    result: dict[str, Any] = {}
    err = io.StringIO()
    os.environ.setdefault(key_env, "sk-fault-matrix")

    def go() -> None:
        if COMMANDS[command].service:
            try:
                _service_job(tmp, inputs, argv, result)
            except BaseException as exc:
                result["code"] = -1
                err.write(f"crash: {type(exc).__name__}: {exc}")
            return
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                result["code"] = main(argv)
        except SystemExit as exc:
            result["code"] = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # a crash is a finding, not the harness's failure
            result["code"] = -1
            err.write(f"crash: {type(exc).__name__}: {exc}")

    worker = threading.Thread(target=go, daemon=True)
    try:
        worker.start()
        worker.join(bound)
    finally:
        undo()
    costs = [x.cost for x in made]
    reported = None if not made or any(c is None for c in costs) else float(sum(costs))
    if COMMANDS[command].service:
        reported = result.get("reported")
    return result, err.getvalue()[-4000:] + (result.get("stopped") or ""), reported


def run_cell(command: str, mode: str, endpoints: str, store: str, provider: str, tmp: Path) -> CellResult:
    """Run one cell in ``tmp`` (a fresh folder) and return what it measured."""
    tmp.mkdir(parents=True, exist_ok=True)
    inputs = _inputs(tmp)
    m = MODES[mode]
    prov = PROVIDERS[provider]
    cap = NO_CAP
    if m.cap is not None:
        if (command, provider) not in _CLEAN:
            clean = run_cell(command, "clean", "one", "sqlite", provider, tmp / "clean")
            _CLEAN[(command, provider)] = clean.spend
        cap = _CLEAN[(command, provider)] * m.cap
    n = ENDPOINTS[endpoints]
    st = STORES[store]
    servers = [FaultServer(m.modes if i == 0 else {}, seed=i + m.seed, stall_s=20.0, api=prov.api,
                           model=prov.model, latency=st.latency).start() for i in range(n)]
    where = (["--base-url", servers[0].base_url] if n == 1
             else [a for s in servers for a in ("--endpoint", s.base_url)])
    llm = [*prov.flags, "--model", prov.model, *where, "--cache", st.url(tmp), "--prices", str(inputs["prices"]),
           *(["--max-cost", repr(cap)] if m.cap is not None else []), "--timeout", str(2 + st.latency),
           "--patience", "10", *st.flags]
    argv = COMMANDS[command].argv(tmp, inputs, llm)
    # a store event slows the run on purpose (each reply takes st.latency s)
    bound = COMMANDS[command].bound * (2 if st.during else 1)
    start = time.monotonic()
    done, log = threading.Event(), {}  # type: ignore[var-annotated]
    disrupt = threading.Thread(target=st.during, args=(servers, done, log), daemon=True) if st.during else None
    rerun = None
    paid_twice_before = 0
    first_spend = first_billed = 0
    resent = None
    try:
        if disrupt is not None:
            disrupt.start()
        result, stderr, reported = _run_once(command, tmp, inputs, argv, prov.key_env, bound)
        done.set()
        if disrupt is not None:
            disrupt.join(120)
            if log.get("restarted"):
                # The same command again on the same store: it may pay only for the calls that
                # were in flight when the store went away.
                paid_twice_before = sum(s.paid_twice for s in servers)
                first_spend, first_billed = sum(s.spend for s in servers), sum(s.billed_calls for s in servers)
                # A rerun after a spend limit asks again, as a user's rerun would: the first
                # run's requests are what must stop at the refusal.
                resent = sum(s.resent_after_stop for s in servers)
                rerun_tmp = tmp / "rerun"
                rerun_tmp.mkdir()
                _run_once(command, rerun_tmp, inputs, COMMANDS[command].argv(rerun_tmp, inputs, llm),
                          prov.key_env, bound)
                # paid again: requests billed in the rerun that already had a clean reply
                rerun = (sum(s.paid_twice for s in servers) - paid_twice_before, int(log.get("in_flight", 0)))
    finally:
        done.set()
        for s in servers:
            s.stop()
    seconds = time.monotonic() - start
    # a second bill of the same request in the rerun is checked against the calls in flight
    paid_twice = paid_twice_before if rerun else sum(s.paid_twice for s in servers)
    if rerun is None:  # the invariants on money are the first run's (the rerun has its own cap)
        first_spend, first_billed = sum(s.spend for s in servers), sum(s.billed_calls for s in servers)
    return CellResult(
        (command, mode, endpoints, store, provider), result.get("code"), bound, seconds,
        COMMANDS[command].items(tmp),
        first_spend, reported, cap, paid_twice, first_billed, n,
        (sum(s.outcomes.get("other_model", 0) for s in servers), sum(s.refused_other for s in servers)),
        stderr, [r for s in servers for r in s.invalid_reasons], m.stops, m.transient,
        sum(s.resent_after_stop for s in servers) if resent is None else resent, rerun)


# ----------------------------------------------------------------------------- replicas
#: Seconds the replicas scenario may take (three server starts, a takeover after the lease).
REPLICAS_BOUND = 240.0


def _owner_pid(url: str, job: str) -> int | None:
    import psycopg

    with psycopg.connect(url) as db:
        row = db.execute("SELECT owner FROM ragjudge_jobs WHERE id = %s", (job,)).fetchone()
    return int(row[0].split("-")[0]) if row and row[0] else None


def run_replicas(provider: str, tmp: Path, *, replicas: int = 3, depth: int = 2, cap_share: float = 1.5,
                 concurrency: int = 4) -> CellResult:
    """The replicas scenario (see the module's docstring) for ``provider``: ``replicas`` serve
    processes on one PostgreSQL database (job store and cache), a judge job of every query's
    top ``depth`` documents with a budget of ``cap_share`` of its clean spend (measured first on
    a clean server), the replica running it killed with SIGKILL once a fifth of it is done."""
    import contextlib
    import io
    import signal

    from _postgres import fresh_database
    from _server import ServerProcess, wait_job

    from ragjudge import read_corpus, read_queries
    from ragjudge.cli import main
    from ragjudge.server.store import open_job_store

    tmp.mkdir(parents=True, exist_ok=True)
    inputs = _inputs(tmp)
    prov = PROVIDERS[provider]
    run = tmp / "all.run"
    run.write_text((EX / "runs" / "bm25_raw.run").read_text())
    for k in {prov.key_env for prov in PROVIDERS.values()}:
        os.environ.setdefault(k, "sk-fault-matrix")
    # The clean spend of the same pairs, for a cap that binds near the end.
    with FaultServer({}, api=prov.api, model=prov.model) as clean:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            main(["judge", "--queries", str(inputs["queries"]), "--corpus", str(inputs["corpus"]), "--run", str(run),
                  "--depth", str(depth), "-o", str(tmp / "clean.txt"), "--no-progress", *prov.flags,
                  "--model", prov.model, "--base-url", clean.base_url, "--cache", str(tmp / "clean.sqlite"),
                  "--prices", str(inputs["prices"])])
        cap = clean.spend * cap_share
        pairs = clean.billed_calls
    url = fresh_database()
    result: dict[str, Any] = {}
    log: dict[str, Any] = {}
    procs: list[ServerProcess] = []
    start = time.monotonic()
    with FaultServer({}, api=prov.api, model=prov.model, latency=0.3, seed=3) as server:
        try:
            for k in range(replicas):
                (tmp / f"r{k}").mkdir()
                procs.append(ServerProcess(
                    tmp / f"r{k}", *prov.flags, "--base-url", server.base_url, "--model", prov.model,
                    "--jobs-db", url, "--cache", url, "--prices", str(inputs["prices"]), "--max-cost", "10",
                    "--timeout", "5",
                    env={p.key_env: "sk-fault-matrix" for p in PROVIDERS.values()}).start())
            body = {"queries": read_queries(inputs["queries"]), "corpus": read_corpus(inputs["corpus"]),
                    "runs": {"r": run.read_text()}, "depth": depth,
                    "settings": {"max_cost": cap, "concurrency": concurrency}}
            with procs[0].client() as c:
                r = c.post("/v1/judge", json=body, headers={"Idempotency-Key": "replicas-1"})
                if r.status_code != 202:
                    raise RuntimeError(f"submit: HTTP {r.status_code}: {r.text[:300]}")
                job = r.json()["id"]
                wait_job(c, job, until=lambda st: st["progress"]["done"] >= max(4, pairs // 5), timeout=90)
            owner = _owner_pid(url, job)
            runner = next((p for p in procs if p.proc is not None and p.proc.pid == owner), None)
            if runner is None:
                raise RuntimeError(f"no replica owns job {job} (owner pid {owner})")
            runner.stop(signal.SIGKILL)
            # Calls in flight at the kill: sent, and their answers not in the store (still at
            # the server, or paid and on their way back).
            store = open_job_store(url)
            try:
                stored = {i for i, rec in store.judgments(job) if rec.get("grade") is not None}
            finally:
                store.close()
            log["in_flight"] = server.requests - len(stored)
            other = next(p for p in procs if p is not runner)
            with other.client() as c:
                state = wait_job(c, job, timeout=REPLICAS_BOUND - (time.monotonic() - start))
            _job_outcome(tmp, state, result)
            store = open_job_store(url)
            try:
                log["owners"] = [(a["owner"], a["spent"], a["reserved"]) for a in store.accounts(job)]
            finally:
                store.close()
        except BaseException as exc:  # a crash is a finding, not the harness's failure
            result["code"] = -1
            result["stopped"] = f"crash: {type(exc).__name__}: {exc}"
        finally:
            for p in procs:
                p.stop()
    stderr = (result.get("stopped") or "") + "\n" + "\n".join(p.log()[-1500:] for p in procs)
    items = _judgment_items(tmp / "j.jsonl", pairs)
    return CellResult(
        ("service judge", "replica killed", f"{replicas} replicas", "postgres", provider), result.get("code"),
        REPLICAS_BOUND, time.monotonic() - start, items, server.spend, result.get("reported"), cap,
        server.paid_twice, server.billed_calls, 1, (0, 0), stderr,
        list(server.invalid_reasons), twice_allowed=int(log.get("in_flight") or 0),
        notes=f"in flight at the kill: {log.get('in_flight')} (concurrency {concurrency}); "
              f"accounts: {log.get('owners')}")


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a plain text table."""
    cols = ["command", "mode", "endpoints", "store", "provider", "exit", "seconds", "items", "lost",
            "undetermined", "paid_twice", "reported", "spend", "cap", "violations"]
    cells = [[("" if r[c] is None else f"{r[c]:.6f}" if isinstance(r[c], float) and c in ("reported", "spend", "cap")
               else "; ".join(r[c]) if isinstance(r[c], list) else str(r[c])) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
