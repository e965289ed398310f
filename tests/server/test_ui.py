"""The web page's API (``ragjudge ui``, ``/ui/`` of ``ragjudge serve --ui-file``) through
FastAPI's TestClient: views, labelling and PPI, escaping, the token, and that no file but
those given can be read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.cli import main  # noqa: E402
from ragjudge.server import ServerSettings, create_app  # noqa: E402
from ragjudge.trust.labelling import parse_to_label, replay_labels  # noqa: E402

from _ui_data import HOSTILE, SCRIPT, make_workspace  # noqa: E402

STATIC = Path(__file__).resolve().parents[2] / "ragjudge" / "server" / "ui" / "static"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_workspace(tmp_path_factory.mktemp("ui"))


def _client(ws: dict[str, Path], tmp: Path, *, token_env: str = "RAGJUDGE_UI_TEST_TOKEN",
            files: list[str] | None = None, labels: Path | None = None) -> TestClient:
    files = files if files is not None else [str(ws[k]) for k in
                                             ("result", "qrels", "run1", "run2", "queries", "corpus",
                                              "judgments", "tolabel", "llm")]
    settings = ServerSettings(no_cache=True, jobs_db=str(tmp / "jobs.sqlite"), token_env=token_env,
                              ui_files=tuple(files), ui_labels=str(labels or tmp / "labels.jsonl"))
    settings.check()
    return TestClient(create_app(settings))


@pytest.fixture()
def client(ws: dict[str, Path], tmp_path: Path) -> TestClient:
    with _client(ws, tmp_path) as c:
        yield c


def test_overview_classifies_every_file(client: TestClient) -> None:
    o = client.get("/ui/api/overview").json()
    roles = {f["name"]: f["role"] for f in o["files"]}
    assert roles == {"compare.json": "result", "qrels.txt": "qrels", "bm25_raw.run": "run",
                     "bm25_stemmed.run": "run", "queries.jsonl": "queries", "corpus.jsonl": "corpus",
                     "judgments.jsonl": "judgments", "to_label.jsonl": "tolabel", "llm.qrels": "llm"}
    assert o["runs"] == ["bm25_raw", "bm25_stemmed"] and o["agreement"] and o["labelling"]
    assert all("/" not in f["name"] for f in o["files"])  # names, never paths


def test_results_table_and_sorted_paged_differences(client: TestClient) -> None:
    t = client.get("/ui/api/results/0").json()
    assert t["metrics"] == ["ndcg@10", "recall@5"] and t["baseline"] == "bm25_raw"
    stem = next(r for r in t["rows"] if r["run"] == "bm25_stemmed")["cells"]["ndcg@10"]
    assert stem["ci"][0] < stem["mean"] < stem["ci"][1]
    assert stem["comparison"]["significant"] is True and stem["comparison"]["delta"] > 0
    d = client.get("/ui/api/results/0/diff", params={"metric": "ndcg@10", "a": "bm25_stemmed",
                                                      "b": "bm25_raw", "limit": 7}).json()
    deltas = [r["delta"] for r in d["items"]]
    assert d["total"] == 60 and len(deltas) == 7 and deltas == sorted(deltas, reverse=True)
    page2 = client.get("/ui/api/results/0/diff", params={"metric": "ndcg@10", "a": "bm25_stemmed",
                                                          "b": "bm25_raw", "limit": 7, "offset": 7}).json()
    assert page2["items"][0]["delta"] <= deltas[-1]
    asc = client.get("/ui/api/results/0/diff", params={"metric": "ndcg@10", "a": "bm25_stemmed",
                                                        "b": "bm25_raw", "order": "asc"}).json()
    assert asc["items"][0]["delta"] == min(r["delta"] for r in asc["items"])
    f = client.get("/ui/api/results/0/diff", params={"metric": "ndcg@10", "a": "bm25_stemmed",
                                                      "b": "bm25_raw", "q": "volcano"}).json()
    assert f["total"] >= 1 and all("volcano" in r["query"] for r in f["items"])
    assert client.get("/ui/api/results/0/diff", params={"metric": "ndcg@10", "a": "nope",
                                                         "b": "bm25_raw"}).status_code == 404
    assert client.get("/ui/api/results/9").status_code == 404
    assert client.get("/ui/api/queries", params={"limit": 100000}).status_code == 422


def test_query_page_has_who_labelled_and_reasoning(client: TestClient) -> None:
    q = client.get("/ui/api/query", params={"qid": "q01", "depth": 3}).json()
    assert q["query"].startswith("why were flights") and len(q["runs"]) == 2
    items = q["runs"][0]["items"]
    assert [i["rank"] for i in items] == [1, 2, 3]
    judged = next(i for i in items if i["docid"] != HOSTILE)
    assert judged["human"]["source"] == "qrels.txt"
    assert judged["llm"]["model"] == "sim-judge" and judged["llm"]["prompt"] == "relevance.v1"
    assert set(judged["llm"]["probs"]) == {"0", "1", "2", "3"} and judged["llm"]["reasoning"]
    assert q["values"] and "ndcg@10" in q["values"][0]["values"]
    assert client.get("/ui/api/query", params={"qid": "no-such"}).status_code == 404


def test_untrusted_text_is_data_and_the_page_never_parses_it(client: TestClient) -> None:
    q = client.get("/ui/api/query", params={"qid": "q01", "depth": 1}).json()
    top = q["runs"][0]["items"][0]
    assert top["docid"] == HOSTILE and SCRIPT in top["text"] and top["llm"]["reasoning"] == SCRIPT
    r = client.get("/ui/api/query", params={"qid": "q01", "depth": 1})
    assert r.headers["content-type"].startswith("application/json")
    js = "\n".join(line for line in (STATIC / "app.js").read_text(encoding="utf-8").splitlines()
                   if not line.lstrip().startswith("//"))
    # the DOM is built from text nodes (createTextNode, as textContent): no HTML parsing at all
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "DOMParser"):
        assert sink not in js, sink
    assert "createTextNode" in js
    html = client.get("/ui/")
    csp = html.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert html.headers["x-content-type-options"] == "nosniff"
    assert not re.search(r"(src|href)=\"(https?:)?//", html.text)  # nothing from elsewhere
    assert not re.search(r"https?://", js)


def test_agreement_matrix_and_filters(client: TestClient) -> None:
    a = client.get("/ui/api/agreement", params={"limit": 5}).json()
    assert a["grades"] == [0, 1, 2, 3] and a["n"] == sum(map(sum, a["matrix"])) == 710
    dist = [r["distance"] for r in a["items"]]
    assert dist == sorted(dist, reverse=True)
    f = client.get("/ui/api/agreement", params={"human": 0, "llm": 2}).json()
    assert f["total"] == a["matrix"][0][2]
    assert all(r["human"]["grade"] == 0 and r["llm"]["grade"] == 2 for r in f["items"])


def test_labelling_saves_each_label_resumes_undoes_and_exports(ws: dict[str, Path], tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    with _client(ws, tmp_path, labels=labels) as c:
        s = c.get("/ui/api/label/state").json()
        assert s["labelled"] == 0 and s["next"] == 0 and s["labels"]["3"].startswith("Dedicated")
        p = c.get("/ui/api/label/pair/0").json()
        assert "llm_grade" not in p  # hidden unless asked for
        assert "llm_grade" in c.get("/ui/api/label/pair/0", params={"reveal": 1}).json()
        for i, g in enumerate([3, 0, None, 2]):
            s = c.post("/ui/api/label", json={"index": i, "grade": g, "who": "ana"}).json()
        assert s["labelled"] == 4 and s["skipped"] == 1 and s["next"] == 4
        lines = [json.loads(x) for x in labels.read_text().splitlines()]
        assert lines[0]["op"] == "reveal"  # the choice to see the LLM's grade is recorded
        lines = [x for x in lines if x["op"] == "label"]
        assert len(lines) == 4 and lines[0]["who"] == "ana" and lines[0]["at"] and lines[2]["grade"] is None
        assert [x["llm_grade_shown"] for x in lines] == [True, False, False, False]
        s = c.post("/ui/api/label/undo", json={"who": "ana"}).json()
        assert s["labelled"] == 3 and s["undone"] == 3 and s["next"] == 3
        assert c.post("/ui/api/label", json={"index": 0, "grade": 7, "who": "ana"}).status_code == 400
        assert c.post("/ui/api/label", json={"index": 10**6, "grade": 1}).status_code == 404
        assert c.post("/ui/api/label", json={"index": 0, "grade": 1, "who": "x" * 101}).status_code == 422
    # a new server on the same files: the labels are there
    with _client(ws, tmp_path, labels=labels) as c:
        s = c.get("/ui/api/label/state").json()
        assert s["labelled"] == 3 and s["done"]["0"] == {"grade": 3, "who": "ana", "at": s["done"]["0"]["at"]}
        text = c.get("/ui/api/label/qrels")
        assert "attachment" in text.headers["content-disposition"]
        todo = parse_to_label(ws["tolabel"].read_text())
        p0, p1 = todo.pairs[0], todo.pairs[1]
        body = text.text.splitlines()
        assert body[0].startswith("# 1 of these labels were given with the LLM's grade in view")
        assert body[1:] == sorted([f"{p0['qid']} 0 {p0['docid']} 3", f"{p1['qid']} 0 {p1['docid']} 0"])


def test_ppi_updates_as_queries_complete(ws: dict[str, Path], tmp_path: Path) -> None:
    todo = parse_to_label(ws["tolabel"].read_text())
    with _client(ws, tmp_path) as c:
        r = c.get("/ui/api/label/ppi").json()
        assert r["status"].startswith("needs at least 2") and r["estimand"] == "collection"
        assert r["estimand_text"] == "the mean over this collection's queries"
        first3 = todo.queries[:3]
        n = sum(1 for p in todo.pairs if p["qid"] in first3)
        for i in range(n):
            c.post("/ui/api/label", json={"index": i, "grade": todo.pairs[i]["llm_grade"] or 0, "who": "t"})
        r = c.get("/ui/api/label/ppi").json()
        assert r["status"] == "ok" and r["complete_queries"] == 3
        e = r["estimates"][0]
        assert e["n_human"] == 3 and e["n_llm"] == 60 and e["ci"][0] <= e["mean"] <= e["ci"][1]
        assert r["differences"][0]["baseline"] == "bm25_raw"


def test_replay_labels_undo_and_relabel() -> None:
    log = [{"qid": "q", "docid": "a", "grade": 1}, {"qid": "q", "docid": "b", "grade": 2},
           {"qid": "q", "docid": "a", "grade": 3}, {"op": "undo"}]
    now = replay_labels(log)
    assert {k: v["grade"] for k, v in now.items()} == {("q", "a"): 1, ("q", "b"): 2}
    assert replay_labels(log + [{"op": "undo"}, {"op": "undo"}, {"op": "undo"}]) == {}


def test_token_is_required_for_the_api_but_not_the_page(ws: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGJUDGE_UI_TOKEN_T", "s3cret-token")
    with _client(ws, tmp_path, token_env="RAGJUDGE_UI_TOKEN_T") as c:
        assert c.get("/ui/").status_code == 200 and c.get("/ui/app.js").status_code == 200
        for path in ("/ui/api/overview", "/ui/api/label/state", "/ui/api/label/qrels",
                     "/ui/api/query?qid=q01"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/ui/api/label", json={"index": 0, "grade": 1}).status_code == 401
        ok = {"Authorization": "Bearer s3cret-token"}
        assert c.get("/ui/api/overview", headers=ok).status_code == 200


@pytest.mark.parametrize("path", [
    "/ui/../etc/passwd", "/ui/%2e%2e/%2e%2e/etc/passwd", "/ui/static/../routes.py",
    "/ui/routes.py", "/ui/workspace.py", "/ui/static/app.js", "/ui/app.js/../../pyproject.toml",
    "/ui/api/file?path=/etc/passwd", "/ui/api/query?qid=../../etc/passwd",
    "/ui/api/results/..%2f..%2fpyproject.toml", "/ui/api/label/pair/..%2f..%2fetc%2fpasswd",
    "/ui/..%2f..%2fpyproject.toml", "/ui/index.html/..%2f..%2f..%2fsettings.py",
])
def test_nothing_outside_the_given_files_is_readable(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code in (403, 404, 422), (path, r.status_code)
    assert "root:" not in r.text and "[project]" not in r.text and "import" not in r.text


def test_ui_is_off_unless_files_are_given(tmp_path: Path) -> None:
    settings = ServerSettings(no_cache=True, jobs_db=str(tmp_path / "j.sqlite"), cpu_processes=0)
    with TestClient(create_app(settings)) as c:
        assert c.get("/ui/api/overview").status_code == 404
        assert c.get("/ui/").status_code == 404


def test_settings_refuse_a_missing_ui_file(tmp_path: Path) -> None:
    from ragjudge.errors import InputError

    with pytest.raises(InputError, match="--ui-file"):
        ServerSettings(ui_files=(str(tmp_path / "nope.json"),)).check()
    settings = ServerSettings(ui_files=("run=" + str(tmp_path),))
    with pytest.raises(InputError):
        settings.check()
    assert ServerSettings.from_json(ServerSettings(ui_files=("a",)).to_json()).ui_files == ("a",)


def test_plan_labels_sample_writes_a_seeded_to_label_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ex = Path(__file__).resolve().parents[2] / "examples"
    outs = []
    for name in ("a.jsonl", "b.jsonl"):
        out = tmp_path / name
        assert main(["plan-labels", str(ex / "qrels.txt"), str(ex / "runs" / "bm25_raw.run"),
                     str(ex / "runs" / "term_overlap.run"), "--sample", "5", "--depth", "3",
                     "--seed", "7", "--queries", str(ex / "queries.jsonl"), "--corpus",
                     str(ex / "corpus.jsonl"), "-o", str(out)]) == 0
        outs.append(out.read_text())
    assert outs[0] == outs[1]  # seeded
    todo = parse_to_label(outs[0])
    assert todo.meta["sample"] == 5 and len(todo.queries) == 5 and todo.meta["labels"]["0"]
    assert {p["qid"] for p in todo.pairs} == set(todo.queries)
    assert all(p["query"] and p["passage"] for p in todo.pairs)
    assert 5 <= len(todo.pairs) <= 5 * 6
    assert "ragjudge ui" in capsys.readouterr().err
    assert main(["plan-labels", str(ex / "qrels.txt"), str(ex / "runs" / "bm25_raw.run"),
                 "--sample", "5", "-o", str(tmp_path / "c.jsonl")]) == 2  # texts needed
    assert main(["plan-labels", str(ex / "qrels.txt"), str(ex / "runs" / "bm25_raw.run")]) == 2
