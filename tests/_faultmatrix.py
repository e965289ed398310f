"""The fault matrix: every LLM command against every fault mode, with one and with several
endpoints, with each cache store, checking the same invariants every time.

A cell is (command, mode, endpoints, store). Each joins with one line in its table:
:data:`COMMANDS` (how to call it and how to count its items), :data:`MODES` (the fault
server's modes and an optional cost cap), :data:`ENDPOINTS` (how the faults spread over the
endpoints) and :data:`STORES` (the cache). :func:`run_cell` runs one and returns a
:class:`CellResult`; :meth:`CellResult.violations` lists the broken invariants:

* ``bound``: it ended within :data:`BOUND` seconds;
* ``items``: every item is graded or failed with a reason (none lost, none silently empty);
* ``paid_twice``: no request was billed again after a clean reply to it;
* ``reported``: the cost the client reports is at least what the servers billed;
* ``cap``: what the servers billed is within ``--max-cost``;
* ``exit``: a run where most items failed does not exit 0;
* ``budget``: a run the cap cut short does not exit 0;
* ``healthy``: with several endpoints (one faulty), no item fails for want of a server;
* ``other_model``: a reply naming another model is asked again, or named on stderr.

Commands run in-process through :func:`ragjudge.cli.main` (``benchmarks/bench_faults.py``
prints the same cells as a table).
"""

from __future__ import annotations

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
        (tmp / "prices.json").write_text(json.dumps({MODEL: PRICES}))
    return {"run": run, "samples": tmp / "samples.jsonl", "prices": tmp / "prices.json",
            "queries": EX / "queries.jsonl", "corpus": EX / "corpus.jsonl"}


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
        lambda t, i, llm: ["evaluate", "none", str(i["run"]), "--judge", MODEL, "--queries",
                           str(i["queries"]), "--corpus", str(i["corpus"]), "--judge-depth", "2",
                           "--judgments", str(t / "j.jsonl"), "-m", "p@2", "-f", "json", "--no-progress",
                           *[a for a in llm if a not in ("--model", MODEL)]],
        lambda t: _judgment_items(t / "j.jsonl", 12)),
    "rag": Command(
        lambda t, i, llm: ["rag", str(i["samples"]), "-m", "faithfulness", "-f", "json", "--per-sample",
                           "-o", str(t / "rag.json"), *llm],
        lambda t: _rag_items(t / "rag.json", 3)),
    "synth": Command(
        lambda t, i, llm: ["synth", "--corpus", str(i["corpus"]), "-n", "3", "--allow-fewer",
                           "-o", str(t / "synth"), *llm],
        lambda t: _synth_items(t / "synth", 0)),
    "service judge": Command(
        lambda t, i, llm: [a for a in llm if a not in ("--patience", "10")],
        lambda t: _judgment_items(t / "j.jsonl", 12), service=True, bound=2 * BOUND),
}


def _service_job(tmp: Path, inputs: dict[str, Path], flags: list[str], result: dict[str, Any]) -> None:
    """A judge job through ``ragjudge serve``'s job API; its judgments go to ``j.jsonl`` (the
    pairs it skipped at the cap as failures with that reason) and its cost to ``result``."""
    from _server import ServerProcess, wait_job

    from ragjudge import read_corpus, read_queries

    srv = ServerProcess(tmp, *flags, env={"OPENAI_API_KEY": "sk-fault-matrix"})
    with srv, srv.client() as c:
        body = {"queries": read_queries(inputs["queries"]), "corpus": read_corpus(inputs["corpus"]),
                "runs": {"r": inputs["run"].read_text()}, "depth": 2}
        r = c.post("/v1/judge", json=body)
        if r.status_code != 202:
            result["code"], result["reported"] = 2, None
            return
        state = wait_job(c, r.json()["id"], timeout=BOUND)
    judgments = (state.get("result") or {}).get("judgments") or []
    skipped = int((state.get("counts") or {}).get("skipped_budget") or 0)
    lines = [json.dumps(j) for j in judgments]
    lines += [json.dumps({"qid": f"skipped{k}", "docid": "-", "grade": None, "error": "budget"})
              for k in range(skipped)]
    (tmp / "j.jsonl").write_text("".join(x + "\n" for x in lines))
    # The job's view is its exit status: done with nothing skipped is 0; cut by the budget is
    # the CLI's 4 (the counts say how many pairs); failed is 3, its error the run's reason.
    result["code"] = (4 if skipped else 0) if state["status"] == "done" else 3
    result["reported"] = state.get("cost_usd")
    if state["status"] != "done":
        result["stopped"] = f"ragjudge: error: job {state['status']}: {state.get('error')}"


@dataclass(frozen=True)
class Mode:
    """Fault modes of the faulty endpoint (``{mode: rate}``) and the cap of the cell
    (a fraction of the clean run's spend; ``None``: no cap reached)."""

    modes: Mapping[str, float]
    cap: float | None = None


MODES: dict[str, Mode] = {
    "clean": Mode({}),
    "5xx": Mode({"5xx": 0.3}),
    "429 retry-after": Mode({"429": 0.3}),
    "429 bare": Mode({"429_bare": 0.3}),
    "stall": Mode({"stall": 0.2}),
    "reset": Mode({"reset": 0.3}),
    "gzip": Mode({"gzip": 0.3}),
    "malformed": Mode({"malformed": 0.3}),
    "empty choices": Mode({"empty_choices": 0.3}),
    "other model": Mode({"other_model": 0.3}),
    "usage huge": Mode({"usage_huge": 0.3}),
    "usage negative": Mode({"usage_negative": 0.3}),
    "usage text": Mode({"usage_text": 0.3}),
    "always 5xx": Mode({"5xx": 1.0}),
    # A cap of 1.5x the clean run's spend: above one worst-case reservation, below the run's
    # worst case, so it binds.
    "mix + cap": Mode({"5xx": 0.1, "reset": 0.1, "gzip": 0.1, "usage_huge": 0.05}, cap=1.5),
}

#: How many endpoints, and which carry the faults: one endpoint with the mode, or three
#: (the first with the mode, two clean).
ENDPOINTS: dict[str, int] = {"one": 1, "several": 3}


def _sqlite(tmp: Path) -> str:
    return str(tmp / "cache.sqlite")


def _postgres(tmp: Path) -> str:
    from _postgres import fresh_database

    return fresh_database()


STORES: dict[str, Callable[[Path], str]] = {"sqlite": _sqlite, "postgres": _postgres}


# ----------------------------------------------------------------------------- one cell
@dataclass
class CellResult:
    cell: tuple[str, str, str, str]
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

    def violations(self) -> list[str]:
        out = []
        if self.code is None:
            out.append(f"bound: still running after {self.bound:.0f} s")
        # A run that stopped as a whole (non-zero exit and one error line: every call to its
        # only endpoint failing, a revoked key) accounts for the items it has no output for
        # with that line; items it did write must still each be graded or failed.
        stopped = self.code not in (None, 0) and "ragjudge: error:" in self.stderr
        if stopped and (not self.items.problems or all(p.startswith("no ") for p in self.items.problems)) \
                and not self.items.graded:
            pass
        elif self.items.problems or self.items.lost:
            out.append(f"items: {self.items.lost} lost of {self.items.expected}"
                       + (f"; {self.items.problems[:2]}" if self.items.problems else ""))
        if self.paid_twice:
            out.append(f"paid_twice: {self.paid_twice}")
        if self.reported is None or self.reported < self.spend - 1e-9:
            out.append(f"reported: ${self.reported} < true ${self.spend:.6f}")
        if self.spend > self.cap + 1e-9:
            out.append(f"cap: true ${self.spend:.6f} > cap ${self.cap:.6f}")
        if self.code == 0 and self.items.expected and self.items.failed * 2 > self.items.expected:
            out.append(f"exit: 0 although {self.items.failed} of {self.items.expected} items failed")
        if self.code == 0 and self.cap < NO_CAP and self.items.failed:
            out.append(f"budget: exit 0 although the cap left {self.items.failed} of {self.items.expected} items undone")
        if self.endpoints > 1 and self.cap >= NO_CAP and self.items.failed:
            out.append(f"healthy: {self.items.failed} items failed while healthy endpoints remained")
        served, asked_again = self.other_model
        if served > asked_again and "another-model" not in self.stderr:
            out.append(f"other_model: {served - asked_again} replies naming another model used without a word")
        return out

    def row(self) -> dict[str, Any]:
        return {"command": self.cell[0], "mode": self.cell[1], "endpoints": self.cell[2],
                "store": self.cell[3], "exit": self.code, "seconds": round(self.seconds, 1),
                "items": self.items.expected, "lost": self.items.lost,
                "undetermined": self.items.failed, "paid_twice": self.paid_twice,
                "reported": self.reported, "spend": round(self.spend, 6),
                "cap": None if self.cap >= NO_CAP else round(self.cap, 6),
                "violations": self.violations()}


#: Clean spend of each command on the small inputs (measured once per process, for caps).
_CLEAN: dict[str, float] = {}


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


def run_cell(command: str, mode: str, endpoints: str, store: str, tmp: Path) -> CellResult:
    """Run one cell in ``tmp`` (a fresh folder) and return what it measured."""
    import contextlib
    import io

    from ragjudge.cli import main

    tmp.mkdir(parents=True, exist_ok=True)
    inputs = _inputs(tmp)
    m = MODES[mode]
    cap = NO_CAP
    if m.cap is not None:
        if command not in _CLEAN:
            clean = run_cell(command, "clean", "one", "sqlite", tmp / "clean")
            _CLEAN[command] = clean.spend
        cap = _CLEAN[command] * m.cap
    n = ENDPOINTS[endpoints]
    servers = [FaultServer(m.modes if i == 0 else {}, seed=i, stall_s=20.0).start() for i in range(n)]
    where = (["--base-url", servers[0].base_url] if n == 1
             else [a for s in servers for a in ("--endpoint", s.base_url)])
    llm = ["--model", MODEL, *where, "--cache", STORES[store](tmp), "--prices", str(inputs["prices"]),
           *(["--max-cost", repr(cap)] if m.cap is not None else []), "--timeout", "2", "--patience", "10"]
    argv = COMMANDS[command].argv(tmp, inputs, llm)
    made, undo = _capture_llms()
    result: dict[str, Any] = {}
    err = io.StringIO()
    os.environ.setdefault("OPENAI_API_KEY", "sk-fault-matrix")

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

    start = time.monotonic()
    worker = threading.Thread(target=go, daemon=True)
    try:
        worker.start()
        worker.join(COMMANDS[command].bound)
    finally:
        undo()
        for s in servers:
            s.stop()
    seconds = time.monotonic() - start
    costs = [x.cost for x in made]
    reported = None if not made or any(c is None for c in costs) else float(sum(costs))
    if COMMANDS[command].service:
        reported = result.get("reported")
    return CellResult(
        (command, mode, endpoints, store), result.get("code"), COMMANDS[command].bound, seconds,
        COMMANDS[command].items(tmp),
        sum(s.spend for s in servers), reported, cap, sum(s.paid_twice for s in servers),
        sum(s.billed_calls for s in servers), n,
        (sum(s.outcomes.get("other_model", 0) for s in servers), sum(s.refused_other for s in servers)),
        err.getvalue()[-4000:] + (result.get("stopped") or ""))


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a plain text table."""
    cols = ["command", "mode", "endpoints", "store", "exit", "seconds", "items", "lost",
            "undetermined", "paid_twice", "reported", "spend", "cap", "violations"]
    cells = [[("" if r[c] is None else f"{r[c]:.6f}" if isinstance(r[c], float) and c in ("reported", "spend", "cap")
               else "; ".join(r[c]) if isinstance(r[c], list) else str(r[c])) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
