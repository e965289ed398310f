"""The small judging collection and the ``judge`` command line shared by the CLI judging tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _llm_fakes import BASE, SECRET


def rule(passage: str) -> int:
    return {"Paris": 3, "France": 1, "Water": 3, "Bananas": 0}[passage.split()[0]]


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("RAGJUDGE_MODEL", raising=False)
    q = tmp_path / "queries.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in [
        {"_id": "q1", "text": "capital of france"},
        {"_id": "q2", "text": "boiling point of water"},
    ]) + "\n")
    c = tmp_path / "corpus.jsonl"
    c.write_text("\n".join(json.dumps(x) for x in [
        {"_id": "d1", "title": "", "text": "Paris is the capital of France."},
        {"_id": "d2", "title": "", "text": "France is in Europe."},
        {"_id": "d3", "title": "", "text": "Water boils at 100 C."},
        {"_id": "d4", "title": "", "text": "Bananas are yellow."},
    ]) + "\n")
    r1 = tmp_path / "bm25.trec"
    r1.write_text("q1 Q0 d1 1 3.0 bm25\nq1 Q0 d2 2 2.0 bm25\nq1 Q0 d4 3 1.0 bm25\n"
                  "q2 Q0 d3 1 2.0 bm25\nq2 Q0 d4 2 1.0 bm25\n")
    r2 = tmp_path / "dense.trec"
    r2.write_text("q1 Q0 d2 1 5.0 dense\nq1 Q0 d1 2 4.0 dense\nq2 Q0 d4 1 9.0 dense\n")
    return {"q": q, "c": c, "r1": r1, "r2": r2, "dir": tmp_path}


def base_args(f: dict[str, Path], *extra: str) -> list[str]:
    return ["judge", "--queries", str(f["q"]), "--corpus", str(f["c"]), "--run", str(f["r1"]),
            "--run", str(f["r2"]), "--depth", "3", "--model", "judge-model", "--base-url", BASE,
            "--api-key-env", "JUDGE_KEY", "--cache", str(f["dir"] / "cache.sqlite"), "--no-progress",
            *extra]
