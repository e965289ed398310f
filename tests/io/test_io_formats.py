"""Formats that sniff right, inputs that are streams, and the objects peers hand us."""

from __future__ import annotations

import gzip
import io as stdio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ragjudge import io
from ragjudge.cli import main
from ragjudge.data import Qrels, Run
from ragjudge.errors import InputError
from ragjudge.evaluate import compare, evaluate

ROOT = Path(__file__).resolve().parents[2]
RUN = "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq2 Q0 d3 1 5.0 t\n"
QRELS = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 2\n"


def err(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as ei:
        fn(*args, **kwargs)
    return ei.value


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, e = capsys.readouterr()
    return code, out, e


# ----------------------------------------------------------------------------- sniffing
def test_msmarco_qrels_tsv_is_trec(tmp_path):
    path = tmp_path / "qrels.dev.tsv"  # MS MARCO: 4 tab-separated columns, .tsv name
    path.write_text("1102432\t0\t2026790\t1\n1102431\t0\t7066866\t1\n")
    qrels = io.read_qrels(path)
    assert qrels.to_dict() == {"1102431": {"7066866": 1}, "1102432": {"2026790": 1}}


def test_trec_line_with_tabs_is_not_beir(tmp_path):
    # "q1 0<TAB>d1<TAB>1" has 3 tab fields but is a TREC line (qid q1), not BEIR qid "q1 0".
    path = tmp_path / "qrels.tsv"
    path.write_text("q1 0\td1\t1\n")
    assert io.read_qrels(path).to_dict() == {"q1": {"d1": 1}}
    assert evaluate(path, {"q1": {"d1": 1.0}}, "map").mean["map"] == 1.0
    # Forcing BEIR reads it as the user asked.
    assert io.read_qrels(path, format="beir").query_ids == ["q1 0"]


def test_sniff_format_rules():
    s = io.sniff_format
    assert s(b"query-id\tcorpus-id\tscore\nq\td\t1\n", None, io.QRELS_FORMATS) == "beir"
    assert s(b"q1\td1\t1\n", "x.txt", io.QRELS_FORMATS) == "beir"  # no header: content decides
    assert s(b"# c\n\nq 0 d 1\n", "x.tsv", io.QRELS_FORMATS) == "trec"
    assert s(b'\xef\xbb\xbf {"q": {"d": 1}}', "x.txt", io.QRELS_FORMATS) == "json"
    assert s(b"", "x.json", io.QRELS_FORMATS) == "json"  # nothing to read: the name decides
    assert s(b"q Q0 d 1 2.5 t\n", "r.json", io.RUN_FORMATS) == "trec"
    assert s(b"q\td\t1\n", None, io.RUN_FORMATS) == "msmarco"
    assert s(b"q d x\n", None, io.RUN_FORMATS) == "trec"  # the TREC reader names the bad line


def test_beir_without_header_loses_no_row(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\t1\nq1\td2\t0\n")
    assert len(io.read_qrels(path)) == 2
    assert len(io.parse_qrels("query-id\tcorpus-id\tscore\nq1\td1\t1\n", format="beir")) == 1
    # A fractional first score is data (an error), never skipped as if it were a header.
    e = err(io.parse_qrels, "q1\td1\t0.5\nq1\td2\t1\n", format="beir", source="f")
    assert (e.line, e.field) == (1, "score")


@pytest.mark.parametrize("tok", ["1_0", "1_000", "+1_0"])
def test_underscored_numbers_are_refused(tok):
    e = err(io.parse_qrels, f"q 0 d {tok}\n", source="q.txt")
    assert (e.source, e.line, e.field) == ("q.txt", 1, "grade") and tok in str(e)
    e = err(io.parse_run, f"q Q0 d 1 {tok} t\n" * 3, source="r.txt")
    assert (e.line, e.field) == (1, "score")
    e = err(io.parse_qrels, f"q\td\t{tok}\n", format="beir")
    assert e.field == "score"
    e = err(io.parse_run, f"q\td\t{tok}\n", format="msmarco")
    assert e.field == "rank"
    # ids may contain underscores, of course
    assert io.parse_run("q_1 Q0 d_1 1 1.5 t_x\n").query_ids == ["q_1"]


def test_cli_format_flags(tmp_path, capsys):
    q = tmp_path / "q.tsv"
    q.write_text("q1 0\td1\t1\n")
    r = tmp_path / "r.tsv"
    r.write_text("q1\td1\t1\n")
    code, out, _ = cli(capsys, "evaluate", str(q), str(r), "-m", "map", "-f", "json")
    assert code == 0 and json.loads(out)["mean"]["map"] == 1.0
    code, out, e = cli(capsys, "evaluate", str(q), str(r), "-m", "map", "--qrels-format", "beir")
    assert code == 0 and "no query of run" in e  # qid "q1 0" as asked
    code, _, e = cli(capsys, "evaluate", str(q), str(r), "--run-format", "trec")
    assert code == 2 and "expected 6 columns" in e and "Traceback" not in e


# ----------------------------------------------------------------------------- MS MARCO runs
def test_msmarco_run_keeps_rank_order(tmp_path):
    path = tmp_path / "run.dev.small.tsv"
    path.write_text("q1\tdB\t1\nq1\tdA\t2\nq1\tdC\t3\nq2\td9\t1\n")
    run = io.read_run(path)
    assert run.name == "run.dev.small"
    assert [d for d, _ in run.ranked("q1")] == ["dB", "dA", "dC"]
    assert run.ranked("q1")[0][1] == 1.0 and run.ranked("q1")[1][1] == 0.5
    same = io.parse_run("q1 Q0 dB 1 3 t\nq1 Q0 dA 2 2 t\nq1 Q0 dC 3 1 t\nq2 Q0 d9 1 1 t\n")
    qrels = Qrels.from_dict({"q1": {"dA": 1, "dC": 2}, "q2": {"d9": 1}})
    a = evaluate(qrels, run, "map,ndcg@10,mrr").mean
    b = evaluate(qrels, same, "map,ndcg@10,mrr").mean
    assert a == b
    e = err(io.parse_run, "q1\td1\t0\n", format="msmarco", source="m")
    assert (e.line, e.field) == (1, "rank")


# ----------------------------------------------------------------------------- streams
def test_stdin_dash(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "stdin", stdio.TextIOWrapper(stdio.BytesIO(gzip.compress(QRELS.encode()))))
    qrels = io.read_qrels("-")
    assert qrels.source == "<stdin>" and len(qrels) == 3
    run_path = tmp_path / "a.run"
    run_path.write_text(RUN)
    monkeypatch.setattr(sys, "stdin", stdio.TextIOWrapper(stdio.BytesIO(QRELS.encode())))
    code, out, _ = cli(capsys, "evaluate", "-", str(run_path), "-m", "map", "-f", "json")
    assert code == 0 and json.loads(out)["mean"]["map"] == 1.0
    monkeypatch.setattr(sys, "stdin", stdio.TextIOWrapper(stdio.BytesIO(RUN.encode())))
    assert io.read_run("/dev/stdin").name == "stdin"
    code, _, e = cli(capsys, "evaluate", "-", "-")
    assert code == 2 and "only once" in e


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("compress", [False, True])
def test_named_pipe_gzip_stream(tmp_path, compress):
    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    payload = (RUN * 1).encode()
    payload = gzip.compress(payload) if compress else payload

    def feed() -> None:
        with open(fifo, "wb") as f:
            for i in range(0, len(payload), 7):  # dribble: reads come back short
                f.write(payload[i : i + 7])
                f.flush()

    t = threading.Thread(target=feed)
    t.start()
    run = io.read_run(fifo)  # sniffs and reads one pass, never seeks
    t.join(timeout=10)
    assert run == io.parse_run(RUN, name="run")


@pytest.mark.slow  # subprocess
@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash")
def test_process_substitution(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    with gzip.open(tmp_path / "run.gz", "wt") as f:
        f.write(RUN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = (f"{sys.executable} -m ragjudge evaluate qrels.txt <(zcat run.gz) <(cat run.gz) "
           "-m map -f json --no-stats")
    res = subprocess.run(["/bin/bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    reports = json.loads(res.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert [r["mean"]["map"] for r in reports] == [1.0, 1.0]


def test_output_into_directory_is_one_line_before_work(tmp_path, capsys):
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "r").write_text(RUN)
    code, out, e = cli(capsys, "evaluate", str(tmp_path / "q"), str(tmp_path / "r"), "-o", str(tmp_path))
    assert code == 2 and out == "" and "is a directory" in e and e.count("\n") == 1


# ----------------------------------------------------------------------------- records
def test_deeply_nested_json_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    e = err(io.read_qrels, path)
    assert "nested too deeply" in str(e) and e.source == str(path)
    e = err(io.load_json, '{"a": ' * 100_000 + "1" + "}" * 100_000, "x.jsonl", line=3)
    assert e.line == 3


def test_jsonl_bom_and_line_separator(tmp_path):
    text = '\ufeff{"_id": "q1", "text": "a\u2028b"}\n{"_id": "q2", "text": "c\u2029d\x85e"}\r\n'
    path = tmp_path / "queries.jsonl"
    path.write_bytes(text.encode("utf-8"))
    assert io.read_queries(path) == {"q1": "a\u2028b", "q2": "c\u2029d\x85e"}
    assert [n for n, _ in io.jsonl_lines(text)] == [1, 2]
    assert io.parse_corpus(text.encode("utf-8"))["q1"] == "a\u2028b"


def test_csv_cells_over_the_default_limit():
    big = "x" * 200_000
    rows = list(io.csv_dict_reader(f'\ufeffquestion,answer\n"{big}",ok\n'))
    assert rows == [{"question": big, "answer": "ok"}]


# ----------------------------------------------------------------------------- BEIR folders
def _beir(tmp_path: Path) -> Path:
    root = tmp_path / "scifact"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "T" + d, "text": "text " + d}) + "\n"
                for d in ("d1", "d2", "d3")))
    with gzip.open(root / "queries.jsonl.gz", "wt") as f:
        for q in ("q1", "q2", "q3"):
            f.write(json.dumps({"_id": q, "text": "query " + q}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\n")
    (root / "qrels" / "train.tsv").write_text("q3\td2\t1\n")
    return root


def test_read_beir_folder(tmp_path):
    root = _beir(tmp_path)
    ds = io.read_beir(root, split="test")
    assert ds.queries == {"q1": "query q1", "q2": "query q2"}  # judged in the split only
    assert ds.corpus["d1"] == "Td1\ntext d1" and len(ds.corpus) == 3
    assert ds.qrels.to_dict() == {"q1": {"d1": 1}, "q2": {"d3": 2}}
    assert io.read_beir(root, "train", corpus=False).corpus == {}
    assert set(io.read_beir(root, all_queries=True).queries) == {"q1", "q2", "q3"}
    e = err(io.read_beir, root, split="dev")
    assert e.field == "split" and "test, train" in str(e)
    assert "not a folder" in str(err(io.read_beir, root / "corpus.jsonl"))


def test_cli_beir(tmp_path, capsys):
    root = _beir(tmp_path)
    run = tmp_path / "bm25.trec"
    run.write_text("q1 Q0 d1 1 2 t\nq2 Q0 d2 1 2 t\nq2 Q0 d3 2 1 t\n")
    code, out, _ = cli(capsys, "evaluate", "--beir", str(root), "--split", "test", str(run),
                       "-m", "map", "-f", "json")
    assert code == 0 and json.loads(out)["mean"]["map"] == pytest.approx(0.75)
    code, _, e = cli(capsys, "evaluate", "--beir", str(root), "--split", "dev", str(run))
    assert code == 2 and "no qrels/dev.tsv" in e


# ----------------------------------------------------------------------------- peer objects
QD = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
RD = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d3": 5.0, "d4": 4.0}}
METRICS = "map,ndcg@10,recall@2"


@pytest.mark.slow  # peer objects (ranx compiles with numba)
def test_ranx_objects():
    ranx = pytest.importorskip("ranx")
    want = evaluate(QD, RD, METRICS).mean
    got = evaluate(ranx.Qrels(QD), ranx.Run(RD, name="bm25"), METRICS)
    assert got.mean == want and got.run == "bm25"
    cmp_ = compare(ranx.Qrels(QD), [ranx.Run(RD, name="a"), ranx.Run(RD, name="b")], METRICS,
                   n_resamples=100)
    assert set(cmp_.reports) == {"a", "b"}
    with pytest.raises(InputError, match="ranx Run"):
        io.as_qrels(ranx.Run(RD))


@pytest.mark.slow  # peer objects
def test_ir_measures_namedtuples():
    irm = pytest.importorskip("ir_measures")
    qrels = [irm.Qrel(q, d, g) for q, docs in QD.items() for d, g in docs.items()]
    run = (irm.ScoredDoc(q, d, s) for q, docs in RD.items() for d, s in docs.items())  # generator
    assert evaluate(qrels, run, METRICS).mean == evaluate(QD, RD, METRICS).mean
    e = err(io.as_run, [irm.ScoredDoc("q", "d", 1.0), 5])
    assert "record 2" in str(e)
    assert "record 1" in str(err(io.as_run, [irm.Qrel("q", "d", 1)]))  # a Qrel has no score


def test_dataframes():
    pd = pytest.importorskip("pandas")
    q = pd.DataFrame([(q, d, g) for q, docs in QD.items() for d, g in docs.items()],
                     columns=["query_id", "doc_id", "relevance"])
    r = pd.DataFrame([(q, d, s) for q, docs in RD.items() for d, s in docs.items()],
                     columns=["q_id", "doc_id", "score"])  # ranx's column names
    assert evaluate(q, r, METRICS).mean == evaluate(QD, RD, METRICS).mean
    e = err(io.as_run, pd.DataFrame({"a": [1]}))
    assert "query id" in str(e) and "columns are ['a']" in str(e)


def test_as_qrels_and_as_run_refuse_other_things():
    assert "got int" in str(err(io.as_qrels, 3))
    assert "got Qrels" in str(err(io.as_run, Qrels.from_dict(QD)))
    assert isinstance(io.as_run(RD, name="x"), Run) and io.as_run(RD, name="x").name == "x"
    assert np.array_equal(io.as_qrels(Qrels.from_dict(QD)).arrays[0], Qrels.from_dict(QD).arrays[0])


def test_judge_beir_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    root = _beir(tmp_path)
    run = tmp_path / "run.dev.tsv"
    run.write_text("q1\td1\t1\nq1\td2\t2\nq2\td3\t1\nq3\td2\t1\n")  # MS MARCO run; q3 not in test
    base = ["judge", "--run", str(run), "--depth", "2", "--model", "gpt-4o-mini", "--dry-run",
            "--cache", str(tmp_path / "c.sqlite"), "--no-progress"]
    code, out, e = cli(capsys, *base, "--beir", str(root), "--split", "test")
    assert code == 0, e
    assert "4 requests" in out  # q1 x 2, q2, q3: the runs decide which queries are judged
    code, _, e = cli(capsys, *base)
    assert code == 2 and "--queries is required (or --beir DIR)" in e


def test_agree_reads_through_the_same_helper(tmp_path, capsys):
    a = tmp_path / "human.tsv"
    a.write_text("q1 0\td1\t1\n")  # TREC despite the tabs and the name
    b = tmp_path / "llm.qrels"
    b.write_text("q1 0 d1 1\n")
    code, out, e = cli(capsys, "agree", str(a), str(b), "--format", "json")
    assert code == 0, e
    code, _, e = cli(capsys, "agree", str(a), str(b), "-o", str(tmp_path))
    assert code == 2 and "is a directory" in e and "Traceback" not in e
