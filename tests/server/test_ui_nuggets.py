"""The page's nugget views over HTTP (FastAPI's TestClient, a fake LLM's assignments): each
answer with its nuggets and the LLM's reasons; blind labelling (the LLM's assignments reach the
page only in review, a choice the log records); undo of the same assessor's last label only; a
torn log line moved aside; every acknowledged label reloads; and plan -> label -> PPI end to
end, equal to the library's estimate from the same human assignments."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.nuggets import nugget_agreement, read_assignments  # noqa: E402
from ragjudge.nuggets.labelling import (  # noqa: E402
    human_from_files,
    parse_nugget_to_label,
    replay_nugget_labels,
)
from ragjudge.server import ServerSettings, create_app  # noqa: E402

from _nugget_data import make_nugget_workspace, truth  # noqa: E402

ENV = "RAGJUDGE_UIN_TOKEN"


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_nugget_workspace(tmp_path_factory.mktemp("uin"))


def _client(ws: dict[str, Path], tmp: Path, labels: Path | None = None) -> TestClient:
    settings = ServerSettings(no_cache=True, jobs_db=str(tmp / "jobs.sqlite"), token_env=ENV,
                              ui_files=(str(ws["tolabel"]), str(ws["llm"])),
                              ui_labels=str(labels or tmp / "labels.jsonl"))
    settings.check()
    return TestClient(create_app(settings))


def test_answer_view_has_nuggets_llm_assignments_and_reasons(ws: dict[str, Path], tmp_path: Path) -> None:
    with _client(ws, tmp_path) as c:
        o = c.get("/ui/api/overview").json()
        assert o["nuggets"] == {"answers": 12, "labelling": True, "runs": ["run_a", "run_b", "run_c"]}
        roles = {f["name"]: f["role"] for f in o["files"]}
        assert roles == {"nuggets_to_label.jsonl": "tolabel", "llm_assignments.jsonl": "assignments"}
        page = c.get("/ui/api/nuggets/answers", params={"run": "run_b"}).json()
        assert page["total"] == 4 and {r["run_id"] for r in page["items"]} == {"run_b"}
        a = c.get("/ui/api/nuggets/answer", params={"run": "run_a", "qid": "t1"}).json()
        assert a["answer"].startswith("The northern lights") and len(a["nuggets"]) == 5
        n0 = a["nuggets"][0]
        assert n0["llm"]["assignment"] in ("support", "partial_support", "not_support")
        assert n0["llm"]["reason"].startswith("overlap of") and n0["human"] is None
        assert a["provenance"]["prompt_id"] == "nugget_assign"
        assert c.get("/ui/api/nuggets/answer", params={"run": "nope", "qid": "t1"}).status_code == 404
        # the answer is in the sample people assign: seeing it here is review, for whoever labels it
        assert a["sampled"] is True
        i = parse_nugget_to_label(ws["tolabel"].read_text()).index_of("t1", "run_a")
        assert c.post("/ui/api/nuggets/label", json={"answer": i, "nugget": 0, "assignment": "support",
                                                     "who": "ana"}).status_code == 200
    recs = [json.loads(x) for x in (tmp_path / "labels.jsonl").read_text().splitlines()]
    assert recs[0]["op"] == "reveal" and recs[0]["who"] == "" and recs[-1]["llm_shown"] is True


def test_labelling_is_blind_unless_review_and_review_is_recorded(ws: dict[str, Path], tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    with _client(ws, tmp_path, labels) as c:
        s = c.get("/ui/api/nuggets/label/state").json()
        assert s["next"] == 0 and s["labelled"] == 0 and s["labels"] == ["support", "partial_support", "not_support"]
        blind = c.get("/ui/api/nuggets/label/answer/0").json()
        text = json.dumps(blind)
        assert all("llm" not in n for n in blind["nuggets"]) and "overlap of" not in text
        assert c.post("/ui/api/nuggets/label", json={"answer": 0, "nugget": 0, "assignment": "support",
                                                     "who": "ana"}).status_code == 200
        seen = c.get("/ui/api/nuggets/label/answer/0", params={"review": 1, "who": "ana"}).json()
        assert all(n["llm"]["reason"].startswith("overlap of") for n in seen["nuggets"])
        assert seen["nuggets"][0]["label"]["assignment"] == "support"
        assert c.post("/ui/api/nuggets/label", json={"answer": 0, "nugget": 1, "assignment": "not_support",
                                                     "who": "ana"}).status_code == 200
        bad = c.post("/ui/api/nuggets/label", json={"answer": 0, "nugget": 1, "assignment": "maybe", "who": "ana"})
        assert bad.status_code in (400, 422) and "maybe" in bad.text
        assert c.post("/ui/api/nuggets/label", json={"answer": 0, "nugget": 99, "assignment": None,
                                                     "who": "ana"}).status_code == 404
    recs = [json.loads(x) for x in labels.read_text().splitlines()]
    assert [r["op"] for r in recs] == ["label", "reveal", "label"]
    assert recs[0]["llm_shown"] is False and recs[2]["llm_shown"] is True


def test_undo_only_the_same_assessors_last_label_torn_line_and_reload(ws: dict[str, Path], tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    acked = []
    with _client(ws, tmp_path, labels) as c:
        for j, who in enumerate(["ana", "bo", "ana"]):
            body = {"answer": 0, "nugget": j, "assignment": "partial_support", "who": who}
            assert c.post("/ui/api/nuggets/label", json=body).status_code == 200
            acked.append((j, who))
        s = c.post("/ui/api/nuggets/label/undo", json={"who": "bo"}).json()
        assert s["undone"] == [0, 1] and s["labelled"] == 2
        s = c.post("/ui/api/nuggets/label/undo", json={"who": "bo"}).json()
        assert s["undone"] is None and s["labelled"] == 2  # ana's labels stay
    # a crash mid-write leaves a torn last line: moved aside before the next append
    with labels.open("ab") as f:
        f.write(b'{"op": "label", "qid": "t')
    with _client(ws, tmp_path, labels) as c:
        assert c.post("/ui/api/nuggets/label", json={"answer": 1, "nugget": 0, "assignment": "support",
                                                     "who": "cy"}).status_code == 200
        s = c.get("/ui/api/nuggets/label/state").json()
        assert s["labelled"] == 3 and s["per_answer"][0]["done"] == 2
    assert (tmp_path / "labels.jsonl.torn-1").read_bytes() == b'{"op": "label", "qid": "t'
    tl = parse_nugget_to_label(ws["tolabel"].read_text())
    now = replay_nugget_labels(json.loads(x) for x in labels.read_text().splitlines())
    a0, a1 = tl.answers[0], tl.answers[1]
    assert set(now) == {(a0["qid"], a0["run_id"], 0), (a0["qid"], a0["run_id"], 2), (a1["qid"], a1["run_id"], 0)}


def test_plan_label_ppi_end_to_end(ws: dict[str, Path], tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    said = truth()
    tl = parse_nugget_to_label(ws["tolabel"].read_text())
    with _client(ws, tmp_path, labels) as c:
        assert c.get("/ui/api/nuggets/label/ppi").json()["status"].startswith("needs")
        # label in the page's order: next answer, each nugget, as the tests' assessor says
        while True:
            s = c.get("/ui/api/nuggets/label/state").json()
            if s["next"] is None:
                break
            a = c.get(f"/ui/api/nuggets/label/answer/{s['next']}").json()
            for n in a["nuggets"]:
                lab = said[(a["qid"], a["run_id"], n["index"])]
                assert c.post("/ui/api/nuggets/label", json={"answer": a["index"], "nugget": n["index"],
                                                             "assignment": lab, "who": "ana"}).status_code == 200
        assert s["labelled"] == tl.items and s["complete_queries"] == 4
        ppi = c.get("/ui/api/nuggets/label/ppi").json()
        exported = c.get("/ui/api/nuggets/label/assignments").text
    assert ppi["status"] == "ok" and {e["run"] for e in ppi["estimates"]} == {"run_a", "run_b", "run_c"}
    human = human_from_files(ws["tolabel"], labels)
    assert len(human) == 12 and len(exported.splitlines()) == 12
    lib = nugget_agreement(read_assignments(ws["llm"]), human, metric="all", n_resamples=200)
    for e in ppi["estimates"]:
        ref = lib.ppi[e["run"]]
        assert e["mean"] == pytest.approx(ref.mean) and e["ci"] == pytest.approx([ref.ci_low, ref.ci_high])
        assert e["ci"][0] <= e["mean"] <= e["ci"][1] and e["n_human"] == 4 and e["n_llm"] == 4


def test_cli_plan_labels_nuggets_and_agree_from_the_log(ws: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    out = tmp_path / "tl.jsonl"
    assert main(["plan-labels", str(ws["llm"]), "--nuggets", "--sample", "4", "-o", str(out)]) == 0
    assert out.read_text() == ws["tolabel"].read_text().replace(str(ws["llm"]), str(ws["llm"]))
    assert "nugget assignments of 12 answers to 4 queries" in capsys.readouterr().err
    assert main(["plan-labels", str(ws["llm"]), "--nuggets", "-o", str(out)]) == 2
    assert main(["plan-labels", str(ws["llm"])]) == 2
    # how many queries to assign for a target width, from a pilot of human assignments
    pilot = Path(__file__).resolve().parents[2] / "examples" / "nuggets" / "human_assignments.jsonl"
    assert main(["plan-labels", str(ws["llm"]), "--nuggets", "--human", str(pilot), "--width", "0.2",
                 "-f", "json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert [p["run"] for p in plans] == ["run_a", "run_b", "run_c"] and all(p["n_ppi"] >= 2 for p in plans)
    assert main(["plan-labels", str(ws["llm"]), "--nuggets", "-m", "recall", "--sample", "2", "-o", str(out)]) == 2
    said = truth()
    tl = parse_nugget_to_label(out.read_text())
    log = tmp_path / "tl.labels.jsonl"
    log.write_text("".join(json.dumps({"op": "label", "qid": a["qid"], "run_id": a["run_id"], "nugget": i,
                                       "assignment": said[(a["qid"], a["run_id"], i)], "who": "ana"}) + "\n"
                           for a in tl.answers[:6] for i in range(len(a["nuggets"]))))
    assert main(["nuggets", "agree", str(ws["llm"]), "--to-label", str(out), "--labels", str(log),
                 "-f", "json", "--resamples", "50"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert "answers assigned by hand" in captured.err and data["assignments"] is not None
    # PPI on a few answers of a run says so
    assert any("PPI on only 2 human-labelled answers" in n for n in data["notes"]), data["notes"]
    assert main(["nuggets", "agree", str(ws["llm"]), "--labels", str(log)]) == 2


def test_a_nugget_log_never_breaks_the_passage_views(ws: dict[str, Path], tmp_path: Path) -> None:
    with _client(ws, tmp_path) as c:
        assert c.post("/ui/api/nuggets/label", json={"answer": 0, "nugget": 0, "assignment": "support",
                                                     "who": ""}).status_code == 200
        assert c.get("/ui/api/overview").status_code == 200
        assert c.get("/ui/api/label/state").status_code == 404  # no passage to-label file
    assert os.path.exists(tmp_path / "labels.jsonl")
