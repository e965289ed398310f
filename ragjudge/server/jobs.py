"""Background jobs of the HTTP service (LLM judging, LLM-graded RAG metrics, synthetic test
collections) and the manager that runs them. Their state is in the job store
(:mod:`ragjudge.server.store`): the request, what the job owns (model, budget), status,
progress, every judgment as it arrives, each run's money account, and the result. A job
survives a server restart:

* graceful stop (SIGTERM / Ctrl-C): no new calls start, calls in flight are awaited and
  recorded, and the job goes back to ``queued``; the next server start resumes it;
* a crash: the job's lease (renewed twice a second) runs out and any server process sharing
  the store resumes it.

Resuming never pays twice for what was stored: judged pairs are in the job's own table (and in
the LLM cache), so only what is missing is asked; RAG and synth jobs (one library call each)
replay answered calls from the LLM cache. A job owns its money: its budget is the one stored
with it, less what every earlier run paid, where a run that was cut off (killed, or its lease
lost) counts its calls that may have been in flight at their worst case.

A job survives its store too: while the store cannot be reached, jobs keep running, their
judgments and accounts wait in memory and are written when it is back, and the end of a job
waits for the store. A job fails only by its own work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..data import Qrels
from ..errors import RagjudgeError
from ..io import format_qrels
from ..judges import JudgeResult, Judgment, LLMRelevanceJudge
from ..llm import BUDGET_REASON, Usage, redact
from ..nuggets import evaluate_answers
from ..rag import evaluate_samples, plan_requests
from ..synth import synthesize
from .models import JudgeRequest, ModelSettings, NuggetsRequest, RagRequest, SynthRequest
from .service import (
    build_llm,
    job_spec,
    judge_options,
    judge_pairs,
    load_qrels,
    nuggets_inputs,
    rag_inputs,
    synth_inputs,
    synth_result,
)
from .settings import ServerSettings
from .store import JobStore, StoreUnavailable

__all__ = ["JobManager", "CANCEL_GRACE"]

log = logging.getLogger("ragjudge.server")

#: Seconds a cancelled judge job waits for its calls in flight before it stops.
CANCEL_GRACE = 5.0


async def _off_loop(make: Callable[[], Awaitable[Any]]) -> Any:
    """Await ``make()`` on its own event loop in a worker thread, so CPU-bound steps inside
    it (sampling, BM25) never stall the server's loop (leases, requests). Cancelling the
    caller cancels it there and waits for it to stop."""
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()
    lock = threading.Lock()
    box: dict[str, Any] = {}

    async def main() -> Any:
        with lock:
            if box.get("cancel"):
                raise asyncio.CancelledError
            box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await make()

    def work() -> None:
        try:
            box["result"] = asyncio.run(main())
        except BaseException as exc:  # handed to the caller, cancellation included
            box["error"] = exc
        finally:
            try:
                loop.call_soon_threadsafe(finished.set)
            except RuntimeError:  # the server's loop is gone
                pass

    threading.Thread(target=work, name="ragjudge-job", daemon=True).start()
    try:
        await finished.wait()
    except asyncio.CancelledError:
        with lock:
            box["cancel"] = True
            inner_loop, inner_task = box.get("loop"), box.get("task")
        if inner_loop is not None and inner_task is not None:
            try:
                inner_loop.call_soon_threadsafe(inner_task.cancel)
            except RuntimeError:  # already finished
                pass
        await finished.wait()  # calls in flight are cancelled; answers so far are cached
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


# ----------------------------------------------------------------------------- running jobs
def _add_usage(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two usage dicts summed field by field (a field only one has is kept, never dropped)."""
    return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}


class _Job:
    """One run of a job by this process. ``load()`` reads what earlier runs left (money,
    judgments); ``run()`` does the work; ``flush()`` writes what waits for the store."""

    #: One library call: cancelled as a whole, not between requests.
    atomic = False

    def __init__(self, manager: JobManager, row: Mapping[str, Any]) -> None:
        self.manager = manager
        self.store = manager.store
        self.settings = manager.settings
        self.id: str = row["id"]
        self.request: dict[str, Any] = json.loads(row["request"])
        self.ms = ModelSettings.model_validate(self.request.get("settings") or {})
        spec = json.loads(row["spec"]) if row.get("spec") else {}
        if not spec:  # a job stored before jobs owned their spec: its pinned model, this budget
            try:
                spec = job_spec(self.settings, self.ms)
            except RagjudgeError:  # no model at all: the run fails with the reason
                spec = {"model": "", "max_cost": None}
        self.spec: dict[str, Any] = spec
        self.model: str = spec["model"]
        self.total = int(row["total"])
        self.row_cost: float | None = row["cost"]
        self.row_usage: dict[str, Any] = json.loads(row["usage"])
        #: the stored progress, renewed as it is until load() has read what earlier runs left
        self.row_snap = {"done": int(row["done"]), "total": self.total,
                         "counts": json.loads(row["counts"]), "cost": self.row_cost,
                         "usage": self.row_usage}
        self.loaded = False
        #: this run's account in the store (one per run: a run never overwrites another's)
        self.account_id = f"{manager.owner}/{uuid.uuid4().hex[:8]}"
        self.prior_cost: float | None = 0.0
        self.prior_usage: dict[str, Any] = {}
        self.llm: Any = None
        self.calling = False  # run() is under way (calls may be in flight)
        self._per_call = 0.0  # the largest worst case of one call seen in flight
        self.stop_new = asyncio.Event()  # graceful stop: start nothing new
        self.interrupted = False
        self.cancelling = False
        self.task: asyncio.Task[Any] | None = None
        self.cancel_at_start = bool(row["cancel"])
        self._write_lock = asyncio.Lock()
        # Set (from whichever thread the calls run on) when a call's cost settled: one library
        # call's job stores its account then, not only at heartbeats, so a replica killed
        # between two heartbeats has left every call it paid for in the store.
        self.account_dirty = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop (tests): accounts are written at heartbeats
            pass

    def load(self) -> None:
        """What earlier runs paid: every other run's account, its calls that may have been in
        flight (``reserved``) at their worst case. (A job stored before accounts: its row.)"""
        accounts = [a for a in self.store.accounts(self.id) if a["owner"] != self.account_id]
        if not accounts:  # a fresh job (nothing paid), or one stored before accounts
            self.prior_cost, self.prior_usage = self.row_cost or 0.0, dict(self.row_usage)
        else:
            cost: float | None = 0.0
            usage: dict[str, Any] = {}
            for a in accounts:
                cost = None if cost is None or a["spent"] is None else cost + a["spent"] + a["reserved"]
                usage = _add_usage(usage, a["usage"])
            self.prior_cost, self.prior_usage = cost, usage
        self.load_own()
        self.loaded = True

    def load_own(self) -> None:
        """What earlier runs of this kind of job stored besides money (none by default)."""

    async def run(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def partial(self) -> Any:
        return None

    def make_llm(self) -> Any:
        llm = build_llm(self.settings, self.ms, spec=self.spec, spent=self.prior_cost or 0.0)
        if self.atomic and self._loop is not None:
            llm.accounts.on_settle(self._mark_account)
        return llm

    def with_notices(self, result: Any) -> Any:
        """``result`` with what the run said about its numbers (a server that renamed the model,
        a price taken from a prefix) under ``warnings``: a client reads the JSON, not our log."""
        notes = self.llm.accounts.all_notices() if self.llm is not None else []
        if not notes or not isinstance(result, dict):
            return result
        return {**result, "warnings": [*result.get("warnings", ()), *notes]}

    def _mark_account(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self.account_dirty.set)  # type: ignore[union-attr]
        except RuntimeError:  # the server's loop has closed (shutting down)
            pass

    async def write_accounts(self) -> None:
        """Store this run's account whenever a call's cost settled (writes coalesce: one at a
        time, each with the latest figures) until cancelled."""
        while True:
            await self.account_dirty.wait()
            self.account_dirty.clear()
            try:
                await self.flush()
            except StoreUnavailable:  # the heartbeat writes it once the store is back
                pass

    def _cost(self) -> float | None:
        if self.llm is None:
            return self.prior_cost
        now = self.llm.cost
        if now is None or self.prior_cost is None:
            return None
        return self.prior_cost + now

    def _usage(self) -> dict[str, Any]:
        if self.llm is None:
            return dict(self.prior_usage)
        return _add_usage(self.prior_usage, self.llm.usage.to_dict())

    def reserved(self) -> float:
        """The worst case of this run's calls that may be in flight: while it runs, every slot
        of its endpoints at the largest worst case of one call seen (a call may start the
        moment after this is stored); once it stopped, what its budget still holds."""
        if self.llm is None:
            return 0.0
        budget = self.llm.budget
        held = float(budget.reserved)
        if budget.in_flight:
            self._per_call = max(self._per_call, held / budget.in_flight)
        if not self.calling:
            return held
        slots = sum(c.runner.concurrency for c in getattr(self.llm, "callers", [])) \
            or self.llm.runner.concurrency
        return max(held, slots * self._per_call)

    def write_account(self) -> None:
        """Store this run's account (a store call: run it off the event loop)."""
        if self.llm is None:
            return
        self.store.account(self.id, self.account_id, self.llm.cost, self.reserved(),
                           self.llm.usage.to_dict())

    async def flush(self) -> None:
        """Write what waits for the store (this run's account; subclasses: judgments too).
        :class:`StoreUnavailable` when the store is away (nothing is lost: it waits)."""
        async with self._write_lock:
            await asyncio.to_thread(self.write_account)

    def _session_snapshot(self, *, finished: bool = False) -> dict[str, Any]:
        """Progress from the LLM session's counters (jobs that are one library call): the
        requests taken against the planned total; once ``finished``, those requests are the
        total (the plan is an upper bound)."""
        done, total, counts = 0, self.total, {}
        if self.llm is not None:
            st = self.llm.stats
            taken = st.calls + st.cache_hits + st.failed + st.skipped
            done, total = (taken, taken) if finished else (min(self.total, taken), self.total)
            counts = {"calls": st.calls, "cache_hits": st.cache_hits, "retries": st.retries,
                      "failed": st.failed, "skipped_budget": st.skipped}
        return {"done": done, "total": total, "counts": counts, "cost": self._cost(),
                "usage": self._usage()}


class JudgeJob(_Job):
    """Grade pairs one by one; every judgment is stored the moment it arrives (or, while the
    store is away, as soon as it is back)."""

    def __init__(self, manager: JobManager, row: Mapping[str, Any]) -> None:
        super().__init__(manager, row)
        self.req = JudgeRequest.model_validate(self.request)
        self.latest: dict[int, dict[str, Any]] = {}
        self.unsaved: deque[tuple[int, dict[str, Any]]] = deque()

    def load_own(self) -> None:
        for idx, rec in self.store.judgments(self.id):
            self.latest[idx] = rec

    def _write_unsaved(self) -> None:
        while self.unsaved:
            idx, rec = self.unsaved[0]
            self.store.add_judgment(self.id, idx, rec)
            self.unsaved.popleft()
        self.write_account()

    async def flush(self) -> None:
        async with self._write_lock:
            await asyncio.to_thread(self._write_unsaved)

    async def run(self) -> Any:
        def prepare() -> tuple[list[Any], Any, Any]:
            # off the event loop: pooling takes long enough on a busy host to hold up lease
            # renewals
            pairs = judge_pairs(self.req, self.settings.max_pairs)
            llm = self.make_llm()
            return pairs, llm, LLMRelevanceJudge(llm=llm, prompt=judge_options(self.req).prompt,
                                                 progress=False)

        pairs, self.llm, judge = await asyncio.to_thread(prepare)
        self.total = len(pairs)
        todo = deque(i for i in range(len(pairs))
                     if i not in self.latest or self.latest[i].get("error") is not None)

        async def worker() -> None:
            while todo and not self.stop_new.is_set():
                i = todo.popleft()
                p = pairs[i]
                j = await judge.judge(p.query, p.passage, qid=p.qid, docid=p.docid)
                rec = j.to_dict()
                self.latest[i] = rec
                self.unsaved.append((i, rec))
                try:
                    await self.flush()
                except StoreUnavailable:  # kept in memory; written when the store is back
                    pass

        n = min(len(todo), self.llm.runner.concurrency * 2 + 8)
        tasks = [asyncio.create_task(worker()) for _ in range(n)]
        try:
            if tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    if t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.llm.aclose()
        if todo:
            self.interrupted = True
            return None
        return self.partial()

    def _counts(self) -> dict[str, Any]:
        recs = list(self.latest.values())
        ok = [r for r in recs if r.get("error") is None]
        return {
            "pairs": self.total,
            "judged": len(ok),
            "cached": sum(1 for r in ok if r.get("cached")),
            "failed": sum(1 for r in recs if r.get("error") not in (None, BUDGET_REASON)),
            "skipped_budget": sum(1 for r in recs if r.get("error") == BUDGET_REASON),
        }

    def snapshot(self) -> dict[str, Any]:
        return {"done": len(self.latest), "total": self.total, "counts": self._counts(),
                "cost": self._cost(), "usage": self._usage()}

    def partial(self) -> Any:
        """``{qrels (TREC text), judgments, summary}`` from what is judged so far."""
        import numpy as np

        judgments = [Judgment.from_dict(self.latest[i]) for i in sorted(self.latest)]
        ok = [j for j in judgments if j.grade is not None]
        qrels = Qrels.from_arrays([j.qid for j in ok], [j.docid for j in ok],
                                  np.array([j.grade for j in ok], dtype=np.int64),
                                  source=f"llm:{self.model}:{self.req.prompt}", dedup="first")
        human = None
        if self.req.fill is not None:
            human = load_qrels(self.req.fill, "fill")
            qrels = human.merge(qrels)
        snap = self.snapshot()
        result = JudgeResult(qrels, judgments, Usage.from_dict(snap["usage"]), snap["cost"],
                             human_pairs=frozenset((q, d) for q, d, _ in human.rows())
                             if human is not None else frozenset())
        return {"qrels": format_qrels(qrels) if len(qrels) else "",
                "judgments": [j.to_dict() for j in judgments],
                "summary": result.summary()}


class RagJob(_Job):
    """LLM-graded RAG metrics over all samples (one report); resumes through the LLM cache."""

    atomic = True

    async def run(self) -> Any:
        req = RagRequest.model_validate(self.request)

        def prepare() -> tuple[Any, ...]:  # off the event loop, as for judge jobs
            samples, metrics, options = rag_inputs(req, self.settings.max_pairs)
            llm = self.make_llm()
            return samples, metrics, options, llm, len(plan_requests(samples, metrics, llm=llm,
                                                                     options=options))

        samples, metrics, options, self.llm, self.total = await asyncio.to_thread(prepare)
        try:
            report = await evaluate_samples(samples, metrics, judge=self.llm, options=options)
        finally:
            await self.llm.aclose()
        return report.to_dict(per_sample=req.per_sample)

    def snapshot(self) -> dict[str, Any]:
        return self._session_snapshot()


class SynthJob(_Job):
    """A synthetic test collection: one :func:`ragjudge.synth.synthesize` call, run off the
    server's event loop; resumes through the LLM cache (a rerun replays answered calls).
    Progress counts requests against the dry run's upper bound (every draw generated, every
    candidate judged); the job usually stops earlier, once ``n`` queries are kept."""

    atomic = True

    def __init__(self, manager: JobManager, row: Mapping[str, Any]) -> None:
        super().__init__(manager, row)
        self.outcome: dict[str, Any] | None = None  # summary of the finished run

    async def run(self) -> Any:
        req = SynthRequest.model_validate(self.request)
        options = synth_inputs(req, self.settings.max_pairs)
        llm = self.llm = await asyncio.to_thread(self.make_llm)

        async def main() -> dict[str, Any]:
            try:
                result = await synthesize(req.corpus, req.n, llm=llm, progress=False, options=options)
                return synth_result(result)
            finally:
                await llm.aclose()

        out = await _off_loop(main)
        self.outcome = out["summary"]
        return out

    def snapshot(self) -> dict[str, Any]:
        snap = self._session_snapshot(finished=self.outcome is not None)
        if self.outcome is not None:
            snap["counts"].update(kept=self.outcome["kept"], requested=self.outcome["requested"])
        return snap


class NuggetsJob(_Job):
    """Nugget evaluation of answers: one :func:`ragjudge.nuggets.evaluate_answers` call
    (nuggets created or given, assigned, scored per run with intervals; citation support and
    agreement when asked), run off the server's event loop (the bootstrap is CPU work);
    resumes through the LLM cache. Progress counts requests against the dry run's total."""

    atomic = True

    def __init__(self, manager: JobManager, row: Mapping[str, Any]) -> None:
        super().__init__(manager, row)
        self.finished = False

    async def run(self) -> Any:
        req = NuggetsRequest.model_validate(self.request)
        inputs = await asyncio.to_thread(nuggets_inputs, req, self.settings.max_pairs)
        llm = self.llm = await asyncio.to_thread(self.make_llm)

        async def main() -> dict[str, Any]:
            try:
                ev = await evaluate_answers(inputs.answers, llm=llm, cite=req.cite, human=inputs.human,
                                            metric=req.metric, n_resamples=req.resamples,
                                            seed=req.seed, **inputs.keywords())
            finally:
                await llm.aclose()
            # failures are data: each unassigned nugget keeps its reason, undetermined scores
            # theirs, and the result says when most requests failed
            return {**ev.to_dict(), "mostly_failed": ev.mostly_failed}

        out = await _off_loop(main)
        self.finished = True
        return out

    def snapshot(self) -> dict[str, Any]:
        return self._session_snapshot(finished=self.finished)


_KINDS: dict[str, type[_Job]] = {"judge": JudgeJob, "rag": RagJob, "synth": SynthJob,
                                 "nuggets": NuggetsJob}


class JobManager:
    """Claims jobs from the store, runs them on this event loop, renews their leases and
    passes cancellations on. ``start()`` at server start, ``stop()`` at shutdown. Every store
    call runs in a worker thread; a store that is away delays these, never a job."""

    def __init__(self, store: JobStore, settings: ServerSettings, *, poll: float = 0.5) -> None:
        self.store = store
        self.settings = settings
        self.poll = poll
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.running: dict[str, _Job] = {}
        self.stopping = False
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop())

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        # Runs until stopped *and* drained: leases are renewed while calls in flight land, so
        # another worker cannot take a job this one is still finishing.
        while not (self.stopping and not self.running):
            try:
                await self._tick()
            except StoreUnavailable:  # the store logs the outage once; the next tick retries
                pass
            except Exception:  # never let the scheduler die
                log.exception("job scheduler tick failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _tick(self) -> None:
        for job in list(self.running.values()):
            flag = await asyncio.to_thread(self._beat, job, job.snapshot() if job.loaded else job.row_snap)
            if flag is None and job.task is not None:
                job.task.cancel()  # no longer ours (taken over after a lost lease)
            elif flag and not job.cancelling:
                self._cancel(job)
        while not self.stopping and len(self.running) < self.settings.max_jobs:
            row = await asyncio.to_thread(self.store.claim, self.owner, self.settings.lease_seconds)
            if row is None:
                break
            if row["id"] in self.running:  # ours still (our lease lapsed while the store was away)
                continue
            job = _KINDS[row["kind"]](self, row)
            self.running[job.id] = job
            job.task = asyncio.create_task(self._drive(job))

    def _beat(self, job: _Job, snap: Mapping[str, Any]) -> bool | None:
        """Renew a job's lease and store its progress and account (in a worker thread; its
        judgments are written by the job as they arrive)."""
        flag = self.store.heartbeat(job.id, self.owner, snap)
        job.write_account()
        return flag

    def _cancel(self, job: _Job) -> None:
        """Cancelled by a request: start nothing new; what is in flight may land (and is kept)
        for a few seconds, then the job stops."""
        job.cancelling = True
        job.stop_new.set()
        if job.task is not None:
            if job.atomic:
                job.task.cancel()  # one library call: cannot stop between requests
            else:
                asyncio.get_running_loop().call_later(CANCEL_GRACE, job.task.cancel)

    async def _stored(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` (a store call) off the event loop, retried until the store answers."""
        while True:
            try:
                return await asyncio.to_thread(fn)
            except StoreUnavailable:
                await asyncio.sleep(self.poll)

    async def _drive(self, job: _Job) -> None:
        try:
            await self._stored(job.load)
            end = await self._outcome(job)
            await self._stored(lambda: None)  # wait for the store before the last writes
            while True:
                try:
                    await job.flush()
                    break
                except StoreUnavailable:
                    await asyncio.sleep(self.poll)
            if end is None:
                await self._stored(lambda: self.store.release(job.id, self.owner, job.snapshot()))
            else:
                status, kw = end
                await self._stored(lambda: self.store.finish(job.id, self.owner, status,
                                                             self._snapshot(job), **kw))
        except asyncio.CancelledError:
            pass  # stopped while waiting for the store: the lease runs out, another run resumes
        except Exception:  # never an exception nobody retrieves
            log.exception("job %s: could not record its end", job.id)
        finally:
            self.running.pop(job.id, None)

    async def _outcome(self, job: _Job) -> tuple[str, dict[str, Any]] | None:
        """Run the job: ``(final status, finish arguments)``, or None to requeue it."""
        try:
            if job.cancel_at_start:
                raise asyncio.CancelledError
            job.calling = True
            writer = asyncio.create_task(job.write_accounts()) if job.atomic else None
            try:
                result = await job.run()
            finally:
                job.calling = False
                if writer is not None:
                    writer.cancel()
            if job.cancelling:
                return "cancelled", {"result": self._partial(job)}
            if job.interrupted:
                return None
            return "done", {"result": job.with_notices(result)}
        except asyncio.CancelledError:
            if job.cancelling or job.cancel_at_start:
                return "cancelled", {"result": self._partial(job)}
            return None  # shutdown, or taken over: resumed later
        except StoreUnavailable:  # not the job's own fault: resumed later
            return None
        except RagjudgeError as exc:
            return "failed", {"error": _redact(str(exc))}
        except Exception as exc:  # never a stack trace to clients; the log has it
            log.exception("job %s failed", job.id)
            return "failed", {"error": f"internal error ({type(exc).__name__})"}

    def _partial(self, job: _Job) -> Any:
        try:
            return job.partial()
        except Exception:
            log.exception("partial result of job %s", job.id)
            return None

    @staticmethod
    def _snapshot(job: _Job) -> dict[str, Any]:
        try:
            return job.snapshot()
        except Exception:
            return {"done": 0, "total": job.total, "counts": {}, "cost": None, "usage": {}}

    async def stop(self) -> None:
        """Graceful stop: no new calls; calls in flight finish (up to ``drain_seconds``) and
        are recorded; unfinished jobs go back to the queue for the next start."""
        self.stopping = True
        self._wake.set()
        jobs = list(self.running.values())
        for job in jobs:
            job.stop_new.set()
            if job.atomic and job.task is not None:
                job.task.cancel()  # one library call: cannot stop between requests
        tasks = [j.task for j in jobs if j.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.settings.drain_seconds)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._loop_task is not None:
            self._wake.set()
            await asyncio.gather(self._loop_task, return_exceptions=True)


def _redact(text: str) -> str:
    return redact(text)
