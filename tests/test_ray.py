"""ragjudge.ray: judging as a Ray Data pipeline (a local two-worker cluster on the CPU against the
loopback simulator, slow group; the vLLM engine's request and reply handling without a GPU)."""

from __future__ import annotations

import json
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
