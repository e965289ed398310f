"""ragjudge.ray: judging as a Ray Data pipeline (a local two-worker cluster on the CPU against the
loopback simulator, slow group; the vLLM engine's request and reply handling without a GPU)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge.errors import InputError
from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _judge(tmp_path: Path) -> LLMRelevanceJudge:
    llm = LLM("m", base_url="http://127.0.0.1:9/v1", api_key="sk-x", cache=str(tmp_path / "c.sqlite"))
    return LLMRelevanceJudge(llm=llm, progress=False)


def test_vllm_rows_are_rendered_and_parsed_by_ragjudge(tmp_path: Path) -> None:
    from ragjudge.ray import vllm_judgment, vllm_request

    judge = _judge(tmp_path)
    row = {"index": 3, "qid": "q1", "docid": "d1", "query": "what is lava", "passage": "Lava is molten rock."}
    req = vllm_request(judge, row)
    assert req["messages"] == judge.prompt.render(query=row["query"], passage=row["passage"])
    assert req["sampling_params"]["guided_decoding"]["json"] == judge.prompt.output_schema
    assert req["sampling_params"]["temperature"] == 0.0
    ok = vllm_judgment(judge, {**row, "generated_text": '{"reasoning": "defines it", "grade": 3}',
                               "num_input_tokens": 120, "num_generated_tokens": 9})
    j = json.loads(ok["judgment"])
    assert ok["index"] == 3 and j["grade"] == 3 and j["error"] is None
    assert j["prompt_sha"] == judge.prompt.sha256 and j["model"] == "m"
    bad = json.loads(vllm_judgment(judge, {**row, "generated_text": '{"reasoning": "x", "grade": 7}'})["judgment"])
    assert bad["grade"] is None and "grade" in bad["error"] and bad["error"].startswith("vllm: ")
    short = json.loads(vllm_judgment(judge, {**row, "generated_text": '{"grade": 2}'})["judgment"])
    assert short["grade"] is None and "reasoning" in short["error"]  # the schema is strict
    gone = json.loads(vllm_judgment(judge, {**row, "generated_text": None,
                                            "__inference_error__": "CUDA out of memory"})["judgment"])
    assert gone["grade"] is None and "CUDA out of memory" in gone["error"]


def test_bad_engine_options_are_one_line(tmp_path: Path) -> None:
    from ragjudge.ray import judge_ray_sync

    llm = _judge(tmp_path).llm
    with pytest.raises(InputError, match="engine"):
        judge_ray_sync([("q", "p")], llm=llm, engine="spark")
    with pytest.raises(InputError, match="workers"):
        judge_ray_sync([("q", "p")], llm=llm, workers=0)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with simulator_thread(latency=0.0, max_lifetime=600.0) as s:
        yield s


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="the ray engine needs Ray Data (pip install -e '.[ray]')")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _pairs() -> list[dict[str, str]]:
    corpus = {json.loads(x)["_id"]: json.loads(x)["text"] for x in (EXAMPLES / "corpus.jsonl").read_text().splitlines()}
    queries = {json.loads(x)["_id"]: json.loads(x)["text"] for x in (EXAMPLES / "queries.jsonl").read_text().splitlines()}
    qids, docids = sorted(queries)[:6], sorted(corpus)[:8]
    return [{"qid": q, "docid": d, "query": queries[q], "passage": corpus[d]} for q in qids for d in docids]


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_a_local_cluster_grades_as_one_process_and_skips_cached_pairs(
        cluster: Any, sim: Any, tmp_path: Path) -> None:
    from ragjudge.ray import judge_ray_sync

    pairs = _pairs()
    one = LLMRelevanceJudge(llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "one.sqlite")),
                            progress=False).judge_many_sync(pairs)
    llm = LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "ray.sqlite"))
    result = judge_ray_sync(pairs, llm=llm, workers=2, batch_size=8)
    assert [(j.qid, j.docid, j.grade) for j in result.judgments] == [(j.qid, j.docid, j.grade) for j in one]
    assert all(j.provenance.prompt_sha == one[0].provenance.prompt_sha for j in result.judgments)
    assert result.summary()["calls"] == len(pairs) and not result.failed
    # everything is in the shared cache now: nothing is scheduled, nothing is paid
    calls = sim.sim.stats()["requests"]
    again = judge_ray_sync(pairs, llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "ray.sqlite")))
    assert all(j.cached for j in again.judgments) and again.summary()["calls"] == 0
    assert sim.sim.stats()["requests"] == calls


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_cli_judge_engine_ray(cluster: Any, sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    argv = ["judge", "--queries", str(EXAMPLES / "queries.jsonl"), "--corpus", str(EXAMPLES / "corpus.jsonl"),
            "--run", str(EXAMPLES / "runs" / "bm25_raw.run"), "--depth", "2", "--model", "sim-model",
            "--base-url", sim.base_url, "--cache", str(tmp_path / "c.sqlite"), "--no-progress"]
    assert main([*argv, "--engine", "ray", "-o", str(tmp_path / "ray.qrels")]) == 0
    assert main([*argv, "-o", str(tmp_path / "local.qrels")]) == 0  # served from the same cache
    err = capsys.readouterr().err
    assert "judged 120/120 pairs (120 from cache)" in err
    assert (tmp_path / "ray.qrels").read_text() == (tmp_path / "local.qrels").read_text()


# ----------------------------------------------------------------------------- RAG metrics
def _rag_samples() -> list[dict[str, Any]]:
    return [json.loads(x) for x in (EXAMPLES / "rag_samples.jsonl").read_text().splitlines() if x.strip()]


def test_a_batch_without_a_field_gets_the_reasons_one_process_gives() -> None:
    """A metric whose input field no sample of a batch has is no usage error in that batch (others
    of the run may have it): each sample gets the reason one process gives it."""
    from ragjudge.llm.fake import FakeLLM
    from ragjudge.rag import as_samples, evaluate_samples_sync
    from ragjudge.rag.metrics import parse_rag_metrics
    from ragjudge.rag.options import RagOptions
    from ragjudge.ray.rag import score_batch

    rows = _rag_samples()[:6]
    for r in rows[3:]:
        r.pop("reference", None)
    samples = as_samples(rows)
    assert all(s.reference is None for s in samples[3:]) and all(s.reference for s in samples[:3])
    fake = FakeLLM({"context_recall": lambda prompt, v: {"attributed": [True] * int(v["count"])}})
    one = evaluate_samples_sync(samples, ["context_recall", "hit@3"], judge=fake)
    metrics = parse_rag_metrics(["context_recall", "hit@3"])
    columns, _usage = asyncio.run(score_batch(list(samples[3:]), metrics, FakeLLM({}), RagOptions()))
    assert columns["context_recall"] == one["context_recall"][3:]
    assert all(s.reason == "no reference" for s in columns["context_recall"])
    assert columns["hit@3"] == one["hit@3"][3:]


def test_rag_engine_options_are_one_line(tmp_path: Path) -> None:
    from ragjudge.ray import rag_ray_sync

    llm = _judge(tmp_path).llm
    with pytest.raises(InputError, match="vllm serve"):
        rag_ray_sync([{"question": "q", "response": "r"}], ["faithfulness"], llm=llm, engine="vllm")
    with pytest.raises(InputError, match="batch_size"):
        rag_ray_sync([{"question": "q", "response": "r"}], ["faithfulness"], llm=llm, batch_size=0)


def test_bad_parquet_is_one_line_before_any_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing column or a file that is not Parquet is named before a cluster is joined."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from ragjudge.ray import cluster, judge_ray_sync, rag_ray_sync

    monkeypatch.setattr(cluster, "connect", lambda address: pytest.fail("a cluster was joined"))
    llm = _judge(tmp_path).llm
    pq.write_table(pa.table({"query_id": ["q"], "doc_id": ["d"], "query_text": ["lava"]}), tmp_path / "p.parquet")
    with pytest.raises(InputError) as err:
        judge_ray_sync(str(tmp_path / "p.parquet"), llm=llm)
    assert str(tmp_path / "p.parquet") in str(err.value) and "'passage'" in str(err.value)
    assert err.value.field == "passage"
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file") as err:
        judge_ray_sync(tmp_path / "bad.parquet", llm=llm)
    assert "\n" not in str(err.value)
    pq.write_table(pa.table({"user_input": ["q"], "response": ["r"]}), tmp_path / "s.parquet")
    with pytest.raises(InputError, match="no 'id' column") as err:
        rag_ray_sync(str(tmp_path / "s.parquet"), ["faithfulness"], llm=llm)
    assert err.value.source == str(tmp_path / "s.parquet")


def test_cli_rag_bad_parquet_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from ragjudge.cli import main

    path = tmp_path / "samples.parquet"
    pq.write_table(pa.table({"user_input": ["q"], "response": ["r"]}), path)
    code = main(["rag", str(path), "-m", "faithfulness", "--model", "gpt-4o-mini", "--base-url", "http://127.0.0.1:9/v1",
                 "--engine", "ray", "--cache", str(tmp_path / "c.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and str(path) in err and "'id'" in err and len(err.strip().splitlines()) == 1


M = ["faithfulness", "context_precision", "context_recall", "answer_relevance", "hit@3"]


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_rag_on_a_local_cluster_equals_one_process_and_skips_cached_samples(
        cluster: Any, sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ragjudge.ray.rag as rayrag
    from ragjudge.rag import evaluate_samples_sync
    from ragjudge.ray import rag_ray_sync

    samples = _rag_samples()
    one = evaluate_samples_sync(samples, M, judge=LLM("sim-model", base_url=sim.base_url,
                                                      cache=str(tmp_path / "one.sqlite")))
    got = rag_ray_sync(samples, M, llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "ray.sqlite")),
                       workers=2, batch_size=8)
    assert got.metrics == one.metrics and got.sample_ids == one.sample_ids
    assert got.scores == one.scores and got.summaries == one.summaries
    for key in ("calls", "requests_asked", "total_tokens"):
        assert got.usage[key] == one.usage[key], key
    # everything is in the cache now: scored in the driver, no cluster, no request
    calls = sim.sim.stats()["requests"]
    monkeypatch.setattr(rayrag, "connect", lambda address: pytest.fail("a cluster was used"))
    again = rag_ray_sync(samples, M, llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "ray.sqlite")))
    assert again.scores == one.scores and again.usage["calls"] == 0
    assert sim.sim.stats()["requests"] == calls


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_parquet_and_ray_datasets_stream_to_the_same_results(cluster: Any, sim: Any, tmp_path: Path,
                                                             recwarn: pytest.WarningsRecorder) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from ragjudge.rag import evaluate_samples_sync
    from ragjudge.ray import judge_ray_sync, rag_ray_sync

    pairs = _pairs()
    half = len(pairs) // 2
    for i, part in enumerate((pairs[:half], pairs[half:])):  # two files: a directory of Parquet
        (tmp_path / "pairs").mkdir(exist_ok=True)
        pq.write_table(pa.table({"query_id": [p["qid"] for p in part], "doc_id": [p["docid"] for p in part],
                                 "query_text": [p["query"] for p in part], "passage": [p["passage"] for p in part],
                                 "unused": ["x" * 100] * len(part)}), tmp_path / "pairs" / f"{i}.parquet")
    one = LLMRelevanceJudge(llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "one.sqlite")),
                            progress=False).judge_many_sync(pairs)
    got = judge_ray_sync(tmp_path / "pairs", llm=LLM("sim-model", base_url=sim.base_url,
                                                     cache=str(tmp_path / "ray.sqlite")), batch_size=8)
    assert [(j.qid, j.docid, j.grade) for j in got.judgments] == [(j.qid, j.docid, j.grade) for j in one]
    ds = cluster.data.from_items(pairs)
    again = judge_ray_sync(ds, llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "ray.sqlite")))
    assert [(j.qid, j.docid, j.grade) for j in again.judgments] == [(j.qid, j.docid, j.grade) for j in one]
    assert all(j.cached for j in again.judgments)  # answered from the cache in the workers

    samples = _rag_samples()
    pq.write_table(pa.Table.from_pylist(samples), tmp_path / "samples.parquet")
    expect = evaluate_samples_sync(samples, M, judge=LLM("sim-model", base_url=sim.base_url,
                                                         cache=str(tmp_path / "one.sqlite")))
    rep = rag_ray_sync(str(tmp_path / "samples.parquet"), M, batch_size=8,
                       llm=LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "ray.sqlite")))
    assert rep.sample_ids == expect.sample_ids and rep.scores == expect.scores
    # one file is cut into blocks of a batch, so every worker gets some (Ray warns otherwise)
    assert not [w for w in recwarn if "fully utilize" in str(w.message)]


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_cli_rag_engine_ray(cluster: Any, sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from ragjudge.cli import main

    pq.write_table(pa.Table.from_pylist(_rag_samples()), tmp_path / "samples.parquet")
    argv = ["-m", "faithfulness,context_precision,context_recall", "--model", "sim-model", "--base-url",
            sim.base_url, "--cache", str(tmp_path / "c.sqlite"), "--no-progress", "-f", "json"]
    samples = str(EXAMPLES / "rag_samples.jsonl")
    assert main(["rag", samples, *argv, "--engine", "ray", "-o", str(tmp_path / "ray.json")]) == 0
    assert main(["rag", str(tmp_path / "samples.parquet"), *argv, "--engine", "ray",
                 "-o", str(tmp_path / "parquet.json")]) == 0
    assert main(["rag", samples, *argv, "-o", str(tmp_path / "local.json")]) == 0  # from the same cache
    ray, local = json.loads((tmp_path / "ray.json").read_text()), json.loads((tmp_path / "local.json").read_text())
    parquet = json.loads((tmp_path / "parquet.json").read_text())
    assert {k: v for k, v in ray.items() if k != "usage"} == {k: v for k, v in local.items() if k != "usage"}
    assert {k: v for k, v in parquet.items() if k != "usage"} == {k: v for k, v in local.items() if k != "usage"}


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_nugget_assignment_on_a_local_cluster_equals_one_process(cluster: Any, sim: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import ragjudge.ray.nuggets as raynuggets
    from ragjudge.nuggets import assign_nuggets_sync, read_answers, read_nuggets
    from ragjudge.ray import assign_nuggets_ray_sync

    nuggets = read_nuggets(EXAMPLES / "nuggets" / "nuggets.jsonl")
    answers = [a for name in ("run_a", "run_b") for a in read_answers(EXAMPLES / "nuggets" / "runs" / f"{name}.jsonl")]
    one = assign_nuggets_sync(nuggets, answers, llm=LLM("sim-model", base_url=sim.base_url,
                                                        cache=str(tmp_path / "one.sqlite")))
    got = assign_nuggets_ray_sync(nuggets, answers, llm=LLM("sim-model", base_url=sim.base_url,
                                                            cache=str(tmp_path / "ray.sqlite")), batch_size=4)
    assert got.assignments == one.assignments and (got.failed, got.total) == (one.failed, one.total)
    assert [a.provenance for a in got.assignments] == [a.provenance for a in one.assignments]
    assert got.usage["calls"] == one.usage["calls"] and got.missing == one.missing
    # a rerun is assigned from the cache in the driver: no cluster, no request
    calls = sim.sim.stats()["requests"]
    monkeypatch.setattr(raynuggets, "connect", lambda address: pytest.fail("a cluster was used"))
    again = assign_nuggets_ray_sync(nuggets, answers, llm=LLM("sim-model", base_url=sim.base_url,
                                                              cache=str(tmp_path / "ray.sqlite")))
    assert again.assignments == one.assignments and again.usage["calls"] == 0
    assert sim.sim.stats()["requests"] == calls


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_nugget_assignment_stopped_by_a_spend_limit_on_the_workers_keeps_what_they_made(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """As one process: the grades made before the limit are written, the rest fail with the
    stop as reason, the exit status is 2, and a rerun pays only for what is missing."""
    from _faultserver import FaultServer

    from ragjudge.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-fault")
    ex = EXAMPLES / "nuggets"

    def assign(server: FaultServer, out: Path, cache: Path) -> int:
        return main(["nuggets", "assign", str(ex / "nuggets.jsonl"), str(ex / "runs" / "run_a.jsonl"),
                     "-o", str(out), "--assign-window", "2", "--concurrency", "1", "--no-progress",
                     "--model", "fault-model", "--base-url", server.base_url, "--cache", str(cache),
                     "--engine", "ray", "--ray-workers", "2"])

    with FaultServer({}) as clean:
        assert assign(clean, tmp_path / "all.jsonl", tmp_path / "all.sqlite") == 0
    whole = clean.billed_calls
    capsys.readouterr()
    out, cache = tmp_path / "a.jsonl", tmp_path / "c.sqlite"
    with FaultServer({"spend_limit": 0.1}, seed=1) as limited:
        assert assign(limited, out, cache) == 2
    err = capsys.readouterr().err
    assert "the run stopped; wrote" in err and "quota" in err
    grades = [n for line in out.read_text().splitlines() for n in json.loads(line)["nuggets"]]
    made = [n for n in grades if n["assignment"] is not None]
    stopped = [n for n in grades if n["assignment"] is None]
    assert stopped and all(n["failure"].startswith("not assigned: the run stopped") for n in stopped)
    assert 0 < len(made) <= 2 * limited.billed_calls  # a paid call grades one or two (the rerun checks none is lost)
    with FaultServer({}) as again:
        assert assign(again, out, cache) == 0
    assert again.billed_calls == whole - limited.billed_calls and again.paid_twice == 0


@pytest.mark.slow  # a local Ray cluster and a loopback server
def test_rag_workers_share_one_budget(cluster: Any, sim: Any, tmp_path: Path) -> None:
    """max_cost split between the workers: the run stops within it, the samples it could not pay
    for are undetermined with the budget as their failure (the CLI's exit status 4)."""
    from ragjudge.llm.provenance import FailureKind
    from ragjudge.ray import rag_ray_sync

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": 1000.0, "output": 1000.0}}))
    llm = LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "c.sqlite"), prices=str(prices), max_cost=4.0)
    report = rag_ray_sync(_rag_samples(), ["faithfulness", "context_precision"], llm=llm, workers=2, batch_size=4)
    cut = [s for col in report.scores.values() for s in col if s.failure is FailureKind.BUDGET]
    assert cut and report.usage["cost_usd"] is not None and 0 < report.usage["cost_usd"] <= 4.0
    assert report.usage["calls"] < 2 * len(report.sample_ids)


def _own_processes(name: str) -> list[int]:
    """Pids of this process's descendants whose command line holds ``name``: the workers of the
    local cluster this test started (never another program's processes)."""
    parents: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
            parents[int(d)] = (ppid, cmd)

    def mine(pid: int) -> bool:
        seen: set[int] = set()
        while pid in parents and pid not in seen:
            seen.add(pid)
            pid = parents[pid][0]
            if pid == os.getpid():
                return True
        return False

    return [p for p, (_, cmd) in parents.items() if name in cmd and mine(p)]


@pytest.mark.slow  # a local Ray cluster, a loopback server and a SIGKILL
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the cluster's workers through /proc")
def test_a_rag_worker_killed_mid_run_loses_nothing_and_repays_only_its_batches(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragjudge.rag import evaluate_samples_sync
    from ragjudge.ray import rag_ray_sync
    from ragjudge.ray.cluster import BATCHES_IN_FLIGHT

    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    metrics = ["faithfulness", "context_precision", "context_recall"]  # 3 requests per sample
    samples = _rag_samples()
    batch = 4
    with simulator_thread(latency=0.3, max_lifetime=600.0) as sim:
        one = evaluate_samples_sync(samples, metrics, judge=LLM("sim-model", base_url=sim.base_url,
                                                                cache=str(tmp_path / "one.sqlite")))
        before = sim.sim.stats()["paid"]
        killed: list[int] = []
        stop = threading.Event()

        def kill() -> None:
            while not stop.is_set():
                if sim.sim.stats()["paid"] - before >= 30:
                    pids = _own_processes("_RagWorker")
                    if pids:
                        os.kill(pids[0], signal.SIGKILL)
                        killed.append(pids[0])
                        return
                time.sleep(0.01)

        t = threading.Thread(target=kill, daemon=True)
        t.start()
        try:
            got = rag_ray_sync(samples, metrics, llm=LLM("sim-model", base_url=sim.base_url,
                                                         cache=str(tmp_path / "ray.sqlite")),
                               workers=2, batch_size=batch)
        finally:
            stop.set()
            t.join()
        paid = sim.sim.stats()["paid"] - before
    assert killed, "no worker was killed mid-run"
    assert got.scores == one.scores  # nothing lost, the same values
    assert one.usage["calls"] <= paid <= one.usage["calls"] + BATCHES_IN_FLIGHT * batch * 3
