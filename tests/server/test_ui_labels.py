"""Labels are data: an assessor's undo touches only their own labels, a torn log line is moved
aside before the next append, every acknowledged label reloads, the choice to see the LLM's
grade is recorded and said by the PPI view; the page's icon and its file sniffing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.server import ServerSettings, create_app  # noqa: E402
from ragjudge.trust.labelling import parse_to_label, replay_labels, undo_target  # noqa: E402

from _ui_data import make_workspace  # noqa: E402


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_workspace(tmp_path_factory.mktemp("uil"))


def _client(ws: dict[str, Path], tmp: Path, labels: Path, token_env: str = "RAGJUDGE_UIL_TOKEN") -> TestClient:
    files = [str(ws[k]) for k in ("result", "qrels", "run1", "run2", "queries", "corpus",
                                  "judgments", "tolabel", "llm")]
    settings = ServerSettings(no_cache=True, jobs_db=str(tmp / "jobs.sqlite"), token_env=token_env,
                              ui_files=tuple(files), ui_labels=str(labels))
    settings.check()
    return TestClient(create_app(settings))


def test_undo_takes_back_only_the_same_assessors_last_label() -> None:
    log = [{"op": "label", "qid": "q", "docid": "a", "grade": 1, "who": "ana"},
           {"op": "label", "qid": "q", "docid": "b", "grade": 2, "who": "bo"},
           {"op": "label", "qid": "q", "docid": "c", "grade": 3, "who": "ana"}]
    assert undo_target(log, "bo") == ("q", "b")
    now = replay_labels([*log, {"op": "undo", "who": "bo"}])
    assert set(now) == {("q", "a"), ("q", "c")}
    # bo has nothing left to undo: ana's labels stay
    assert undo_target([*log, {"op": "undo", "who": "bo"}], "bo") is None
    now = replay_labels([*log, {"op": "undo", "who": "bo"}, {"op": "undo", "who": "bo"}])
    assert set(now) == {("q", "a"), ("q", "c")}
    # ana relabelled by bo: ana's label there is no longer in force, her undo takes the one before
    log2 = [*log, {"op": "label", "qid": "q", "docid": "c", "grade": 0, "who": "bo"}]
    assert undo_target(log2, "ana") == ("q", "a")
    assert replay_labels([*log2, {"op": "undo", "who": "ana"}])[("q", "c")]["grade"] == 0
    # a reveal record changes no label
    assert replay_labels([*log, {"op": "reveal", "qid": "q", "docid": "a", "who": "ana"}]) == replay_labels(log)


def test_undo_over_http_never_takes_another_assessors_label(ws: dict[str, Path], tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    with _client(ws, tmp_path, labels) as c:
        for i, who in enumerate(["ana", "bo", "ana"]):
            assert c.post("/ui/api/label", json={"index": i, "grade": 1, "who": who}).status_code == 200
        s = c.post("/ui/api/label/undo", json={"who": "bo"}).json()
        assert s["undone"] == 1 and s["labelled"] == 2
        s = c.post("/ui/api/label/undo", json={"who": "bo"}).json()
        assert s["undone"] is None and s["labelled"] == 2  # ana's labels stay
        assert set(s["done"]) == {"0", "2"}


def test_a_torn_last_line_is_moved_aside_and_every_acknowledged_label_reloads(
        ws: dict[str, Path], tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    todo = parse_to_label(ws["tolabel"].read_text())
    p0 = todo.pairs[0]
    good = json.dumps({"op": "label", "qid": p0["qid"], "docid": p0["docid"], "grade": 2,
                       "who": "ana", "at": "2026-01-01T00:00:00+00:00"})
    torn = '{"op": "label", "qid": "q1", "docid": "d'
    labels.write_text(good + "\n" + torn)  # a crash in the middle of a write
    with _client(ws, tmp_path, labels) as c:
        assert c.get("/ui/api/label/state").json()["labelled"] == 1
        r = c.post("/ui/api/label", json={"index": 1, "grade": 3, "who": "ana"})
        assert r.status_code == 200 and r.json()["labelled"] == 2
        r = c.post("/ui/api/label", json={"index": 2, "grade": 0, "who": "ana"})
        assert r.status_code == 200 and r.json()["labelled"] == 3
    lines = labels.read_text().splitlines()
    assert all(json.loads(x) for x in lines) and len(lines) == 3  # nothing merged into the torn line
    aside = tmp_path / "labels.jsonl.torn-1"
    assert aside.read_text() == torn
    with _client(ws, tmp_path, labels) as c:  # a restart: every label answered 200 is there
        s = c.get("/ui/api/label/state").json()
        assert s["labelled"] == 3 and s["done"]["1"]["grade"] == 3 and s["done"]["2"]["grade"] == 0


def test_seeing_the_llms_grade_is_recorded_and_the_ppi_view_says_so(ws: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    todo = parse_to_label(ws["tolabel"].read_text())
    first3 = todo.queries[:3]
    n = sum(1 for p in todo.pairs if p["qid"] in first3)
    with _client(ws, tmp_path, labels) as c:
        assert "llm_grade" not in c.get("/ui/api/label/pair/0").json()
        shown = c.get("/ui/api/label/pair/0", params={"reveal": 1, "who": "t"}).json()
        assert "llm_grade" in shown
        for i in range(n):
            c.post("/ui/api/label", json={"index": i, "grade": todo.pairs[i]["llm_grade"] or 0, "who": "t"})
        r = c.get("/ui/api/label/ppi").json()
    assert r["status"] == "ok"
    assert r["llm_grade_shown"] == {"labels": 1, "of": n}
    assert any("1 of the" in x and "with the LLM's grade in view" in x for x in r["notes"])
    assert any("only 3 human-labelled" in x for x in r["notes"])  # a small sample, said
    recs = [json.loads(x) for x in labels.read_text().splitlines()]
    assert recs[0]["op"] == "reveal" and recs[0]["who"] == "t"
    assert [x["llm_grade_shown"] for x in recs if x["op"] == "label"][:2] == [True, False]


def test_the_page_has_an_icon_at_the_sites_root(ws: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGJUDGE_UIL_TOKEN_T", "tok-123")
    with _client(ws, tmp_path, tmp_path / "l.jsonl", token_env="RAGJUDGE_UIL_TOKEN_T") as c:
        for path in ("/favicon.ico", "/ui/favicon.svg"):
            r = c.get(path)  # no token: a browser asks for it before the page has one
            assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
            assert r.content.startswith(b"<svg")
        assert 'rel="icon"' in c.get("/ui/").text
        assert c.get("/ui/api/overview").status_code == 401


def test_the_workspace_asks_io_sniff(ws: dict[str, Path]) -> None:
    import ragjudge.server.ui.workspace as workspace
    from ragjudge.io.sniff import sniff_kind

    assert not hasattr(workspace, "sniff_role")
    kinds = {k: sniff_kind(Path(ws[k]).read_text(encoding="utf-8"), str(ws[k]))
             for k in ("result", "qrels", "run1", "queries", "corpus", "judgments", "tolabel")}
    assert kinds == {"result": "result", "qrels": "qrels", "run1": "run", "queries": "queries",
                     "corpus": "corpus", "judgments": "judgments", "tolabel": "tolabel"}
    assert sniff_kind('{"op": "label", "qid": "q", "docid": "d", "grade": 1}\n') == "labels"
    from ragjudge.errors import InputError

    with pytest.raises(InputError, match="cannot tell"):
        sniff_kind("just some words\n", "x.txt")


def test_ppi_from_exported_labels_says_some_saw_the_llms_grade(ws: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    labels = tmp_path / "labels.jsonl"
    todo = parse_to_label(ws["tolabel"].read_text())
    first3 = todo.queries[:3]
    n = sum(1 for p in todo.pairs if p["qid"] in first3)
    with _client(ws, tmp_path, labels) as c:
        c.get("/ui/api/label/pair/1", params={"reveal": 1, "who": "t"})
        for i in range(n):
            c.post("/ui/api/label", json={"index": i, "grade": todo.pairs[i]["llm_grade"] or 0, "who": "t"})
        exported = c.get("/ui/api/label/qrels").text
    human = tmp_path / "human.qrels"
    human.write_text(exported)
    assert main(["evaluate", str(ws["llm"]), str(ws["run1"]), "-m", "ndcg@10", "--human", str(human),
                 "--ppi"]) == 0
    assert "1 of the human labels were given with the LLM's grade in view" in capsys.readouterr().out
