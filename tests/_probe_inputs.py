"""An outside probe of malformed inputs through the command line (not collected by pytest).

    python tests/_probe_inputs.py [--sim URL] [NAME_SUBSTRING]

Each case writes mutated copies of the bundled examples, runs ``ragjudge.cli.main`` in this
process and classifies the outcome: ``error`` (exit 2, one ``ragjudge: error:`` line, no
traceback), ``ok`` (exit 0 where accepting is right), ``trace`` (an exception escaped),
``silent`` (exit 0 where an error or a warning was due) or ``other`` (to read by hand).
LLM cases need the bundled simulator (``python -m ragjudge.testing.simulator --port P``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples"
Q = (EX / "qrels.txt").read_text()
R = (EX / "runs" / "bm25_raw.run").read_text()
QUERIES = (EX / "queries.jsonl").read_text()
CORPUS = (EX / "corpus.jsonl").read_text()
SAMPLES = (EX / "rag_samples.jsonl").read_text()
NUG = EX / "nuggets"
#: Where the simulator-made judgments (j.jsonl), pool (pool.qrels) and batch output (batch_out.jsonl) are.
BASE = Path(os.environ.get("PROBE_BASE", "/tmp/probe"))


@dataclass
class Case:
    name: str
    argv: Callable[[Path], list[str]]
    expect: str = "error"  # error | ok | warn:TEXT (exit 0 and TEXT on stderr)
    why: str = ""
    result: dict = field(default_factory=dict)


CASES: list[Case] = []


def case(name: str, expect: str = "error", why: str = "") -> Callable:
    def deco(fn: Callable[[Path], list[str]]) -> Callable:
        CASES.append(Case(name, fn, expect, why))
        return fn
    return deco


def w(d: Path, name: str, data: str | bytes) -> str:
    p = d / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(p)


def ev(d: Path, qrels: str | bytes, run: str | bytes = R, *extra: str, qn: str = "q.txt",
       rn: str = "bm25.run") -> list[str]:
    return ["evaluate", w(d, qn, qrels), w(d, rn, run), "-m", "ndcg_cut.10", *extra]


def lines_map(text: str, fn: Callable[[int, str], str | None]) -> str:
    out = []
    for i, line in enumerate(text.splitlines()):
        got = fn(i, line)
        if got is not None:
            out.append(got)
    return "\n".join(out) + "\n"


def set_col(text: str, row: int, col: int, value: str) -> str:
    def fn(i: int, line: str) -> str:
        if i != row:
            return line
        parts = line.split()
        parts[col] = value
        return " ".join(parts)
    return lines_map(text, fn)


# --------------------------------------------------------------- evaluate: qrels
case("qrels BOM", "ok")(lambda d: ev(d, "\ufeff" + Q))
case("qrels CRLF", "ok")(lambda d: ev(d, Q.replace("\n", "\r\n")))
case("qrels mixed tabs and spaces", "ok")(lambda d: ev(d, lines_map(Q, lambda i, l: l.replace(" ", "\t", 1 + i % 2))))
case("qrels empty file")(lambda d: ev(d, ""))
case("qrels only blank lines")(lambda d: ev(d, "\n\n  \n"))
case("qrels grade nan")(lambda d: ev(d, set_col(Q, 3, 3, "nan")))
case("qrels grade inf")(lambda d: ev(d, set_col(Q, 3, 3, "inf")))
case("qrels grade huge int")(lambda d: ev(d, set_col(Q, 3, 3, "99999999999999999999999")))
case("qrels grade 1e400")(lambda d: ev(d, set_col(Q, 3, 3, "1e400")))
case("qrels grade negative", "ok", "trec_eval: judged non-relevant")(lambda d: ev(d, set_col(Q, 3, 3, "-1")))
case("qrels grade float 1.5", "error", "trec_eval reads integers")(lambda d: ev(d, set_col(Q, 3, 3, "1.5")))
case("qrels grade word")(lambda d: ev(d, set_col(Q, 3, 3, "high")))
case("qrels duplicate pair different grade")(lambda d: ev(d, Q + "q01 0 volc-16 0\n"))
case("qrels non-UTF-8 byte in docid")(lambda d: ev(d, Q.encode() + b"q01 0 d\xff\xfe 1\n"))
case("qrels gzip named .gz", "ok")(lambda d: ev(d, gzip.compress(Q.encode()), qn="q.txt.gz"))
case("qrels gzip without .gz name", "ok")(lambda d: ev(d, gzip.compress(Q.encode())))
case("qrels truncated gzip")(lambda d: ev(d, gzip.compress(Q.encode())[:-30], qn="q.gz"))
case("qrels zstd named .zst")(lambda d: ev(d, b"\x28\xb5\x2f\xfd" + b"\x00" * 20, qn="q.zst"))
case("qrels bzip2 bytes")(lambda d: ev(d, b"BZh91AY&SY" + bytes(range(40))))
case("qrels is a directory")(lambda d: ["evaluate", str(d), w(d, "r.run", R)])
case("qrels broken symlink")(lambda d: (os.symlink(d / "nowhere", d / "link"), ["evaluate", str(d / "link"), w(d, "r.run", R)])[1])
case("qrels 3 columns")(lambda d: ev(d, lines_map(Q, lambda i, l: " ".join(l.split()[1:]) if i == 4 else l)))
case("qrels 5 columns")(lambda d: ev(d, lines_map(Q, lambda i, l: l + " x" if i == 4 else l)))
case("qrels truncated last line")(lambda d: ev(d, Q + "q01 0 volc"))
case("qrels unicode ids", "ok")(lambda d: ev(d, Q.replace("q01", "q\u00e9\u4e2d"), R.replace("q01", "q\u00e9\u4e2d")))
case("qrels 1 MB docid line", "ok")(lambda d: ev(d, Q + "q01 0 " + "x" * 1_000_000 + " 1\n"))
case("qrels JSON list for query")(lambda d: ev(d, json.dumps({"q01": ["volc-16"]}), qn="q.json"))
case("qrels JSON grades as strings", "either", "numbers as strings read as numbers, or an error")(lambda d: ev(d, json.dumps({"q01": {"volc-16": "3"}}), qn="q.json"))
case("qrels JSON null query")(lambda d: ev(d, json.dumps({"q01": None, "q02": {"x": 1}}), qn="q.json"))
case("qrels JSON null grade")(lambda d: ev(d, json.dumps({"q01": {"volc-16": None}}), qn="q.json"))
case("qrels JSON NaN grade")(lambda d: ev(d, '{"q01": {"volc-16": NaN}}', qn="q.json"))
case("qrels JSON top-level list")(lambda d: ev(d, json.dumps([["q01", "volc-16", 1]]), qn="q.json"))
case("qrels JSON grade true")(lambda d: ev(d, json.dumps({"q01": {"volc-16": True}}), qn="q.json"))
case("qrels JSON truncated")(lambda d: ev(d, json.dumps({"q01": {"volc-16": 1}})[:-3], qn="q.json"))
case("qrels BEIR TSV score word")(lambda d: ev(d, "query-id\tcorpus-id\tscore\nq01\tvolc-16\tabc\n", qn="q.tsv"))
case("qrels BEIR TSV missing column")(lambda d: ev(d, "query-id\tcorpus-id\tscore\nq01\tvolc-16\n", qn="q.tsv"))
case("qrels BEIR TSV extra column")(lambda d: ev(d, "query-id\tcorpus-id\tscore\nq01\tvolc-16\t1\tzz\n", qn="q.tsv"))
case("qrels missing file")(lambda d: ["evaluate", str(d / "nope.txt"), w(d, "r.run", R)])

# --------------------------------------------------------------- evaluate: runs
case("run BOM", "ok")(lambda d: ev(d, Q, "\ufeff" + R))
case("run CRLF", "ok")(lambda d: ev(d, Q, R.replace("\n", "\r\n")))
case("run mixed tabs", "ok")(lambda d: ev(d, Q, R.replace(" ", "\t", 2)))
case("run 5 columns")(lambda d: ev(d, Q, lines_map(R, lambda i, l: " ".join(l.split()[:5]) if i == 7 else l)))
case("run 7 columns", "warn:more than 6 columns", "read as trec_eval does, said once")(lambda d: ev(d, Q, lines_map(R, lambda i, l: l + " extra" if i == 7 else l)))
case("run score nan")(lambda d: ev(d, Q, set_col(R, 7, 4, "nan")))
case("run score -nan")(lambda d: ev(d, Q, set_col(R, 7, 4, "-nan")))
case("run score inf", "either", "ranked first, as trec_eval's atof")(lambda d: ev(d, Q, set_col(R, 7, 4, "inf")))
case("run score 1e400", "either", "inf, as trec_eval's atof")(lambda d: ev(d, Q, set_col(R, 7, 4, "1e400")))
case("run score word")(lambda d: ev(d, Q, set_col(R, 7, 4, "high")))
case("run rank word", "ok", "trec_eval ignores the rank column")(lambda d: ev(d, Q, set_col(R, 7, 3, "x")))
case("run duplicate doc in a query")(lambda d: ev(d, Q, R + R.splitlines()[0] + "\n"))
case("run empty file")(lambda d: ev(d, Q, ""))
case("run gzip", "ok")(lambda d: ev(d, Q, gzip.compress(R.encode()), rn="r.run.gz"))
case("run is a directory")(lambda d: ["evaluate", w(d, "q", Q), str(d)])
case("run non-UTF-8")(lambda d: ev(d, Q, R.encode() + b"q01 Q0 \xff\xfe 99 0.1 r\n"))
case("run truncated mid-line")(lambda d: ev(d, Q, R + "q01 Q0 volc-99 10"))
case("run msmarco rank word")(lambda d: ev(d, Q, "q01\tvolc-16\t1\nq01\tvolc-15\tx\n", rn="r.tsv", ))
case("run JSON list per query")(lambda d: ev(d, Q, json.dumps({"q01": ["volc-16"]}), rn="r.json"))
case("run JSON scores as strings", "either", "or an error")(lambda d: ev(d, Q, json.dumps({"q01": {"volc-16": "1.5"}}), rn="r.json"))
case("run JSON null score")(lambda d: ev(d, Q, json.dumps({"q01": {"volc-16": None}}), rn="r.json"))
case("run JSON NaN score")(lambda d: ev(d, Q, '{"q01": {"volc-16": NaN}}', rn="r.json"))
case("run JSON Infinity score", "either")(lambda d: ev(d, Q, '{"q01": {"volc-16": Infinity}}', rn="r.json"))
case("run JSON top-level number")(lambda d: ev(d, Q, "42", rn="r.json"))
case("run ids never meet the qrels", "warn:document ids")(lambda d: ev(d, Q, lines_map(R, lambda i, l: " ".join(p if j != 2 else "zz" + p for j, p in enumerate(l.split())))))
case("run ids meet few qrels", "warn:document ids", "90% of each ranking's ids unknown, every query still meets one: below the few-queries rule")(lambda d: ev(d, Q, lines_map(R, lambda i, l: " ".join(p if j != 2 or i % 10 == 0 else "zz" + p for j, p in enumerate(l.split())))))
case("run query ids never meet", "warn:")(lambda d: ev(d, Q, R.replace("q", "Z")))
case("run shorter than cutoff", "warn:fewer")(lambda d: ["evaluate", w(d, "q", Q), w(d, "r.run", R), "-m", "ndcg_cut.1000"])
case("run negative scores", "ok")(lambda d: ev(d, Q, lines_map(R, lambda i, l: l.replace(l.split()[4], "-" + l.split()[4]))))
case("run Q0 column other", "ok")(lambda d: ev(d, Q, R.replace(" Q0 ", " XX ")))
case("run unicode docids", "ok")(lambda d: ev(d, Q.replace("volc", "v\u00f6lc"), R.replace("volc", "v\u00f6lc")))
case("run very long line", "ok", "a 5 MB id is an id")(lambda d: ev(d, Q, R + "q01 Q0 " + "y" * 5_000_000 + " 1 1.0 r\n"))
case("two runs same stem", "either", "names told apart or an error")(lambda d: (os.mkdir(d / "a"), os.mkdir(d / "b"), ["evaluate", w(d, "q", Q), w(d / "a", "r.run", R), w(d / "b", "r.run", R)])[2])
case("same run file twice", "either", "or an error")(lambda d: ["evaluate", w(d, "q", Q), w(d, "r.run", R), str(d / "r.run")])
case("baseline not a run")(lambda d: ["evaluate", w(d, "q", Q), w(d, "a.run", R), w(d, "b.run", R), "--baseline", "zzz"])
case("metric unknown")(lambda d: ev(d, Q, R, "-m", "nope"))
case("metric cutoff word")(lambda d: ev(d, Q, R, "-m", "ndcg@abc"))
case("metric cutoff negative")(lambda d: ev(d, Q, R, "-m", "ndcg@-5"))
case("metric cutoff zero")(lambda d: ev(d, Q, R, "-m", "P.0"))
case("metric cutoff huge", "either")(lambda d: ev(d, Q, R, "-m", "P@99999999999999999999"))
case("--max-depth 0")(lambda d: ev(d, Q, R, "-M", "0"))
case("--max-depth negative")(lambda d: ev(d, Q, R, "-M", "-5"))
case("--digits negative")(lambda d: ev(d, Q, R, "--digits", "-1"))
case("--digits huge")(lambda d: ev(d, Q, R, "--digits", "100000"))
case("--resamples 0")(lambda d: ["evaluate", w(d, "q", Q), w(d, "a.run", R), w(d, "b.run", R), "--resamples", "0"])
case("--alpha 2")(lambda d: ["evaluate", w(d, "q", Q), w(d, "a.run", R), w(d, "b.run", R), "--alpha", "2"])
case("--alpha nan")(lambda d: ["evaluate", w(d, "q", Q), w(d, "a.run", R), w(d, "b.run", R), "--alpha", "nan"])
case("--fail-under value word")(lambda d: ev(d, Q, R, "--fail-under", "ndcg_cut.10=abc"))
case("--fail-under value nan")(lambda d: ev(d, Q, R, "--fail-under", "ndcg_cut.10=nan"))
case("--fail-under unknown metric")(lambda d: ev(d, Q, R, "--fail-under", "zz=0.5"))
case("--fail-under no =")(lambda d: ev(d, Q, R, "--fail-under", "ndcg_cut.10"))
case("-o into missing dir")(lambda d: ev(d, Q, R, "-o", str(d / "no" / "x.txt")))
case("-o is a directory")(lambda d: ev(d, Q, R, "-o", str(d)))
case("--plot .txt")(lambda d: ev(d, Q, R, "--plot", str(d / "x.txt")))
case("--rel word")(lambda d: ev(d, Q, R, "--rel", "x"))
case("--rel nan")(lambda d: ev(d, Q, R, "--rel", "nan"))
case("--scale reversed")(lambda d: ev(d, Q, R, "--human", w(d, "h", Q), "--ppi", "--scale", "3-0"))
case("--scale word")(lambda d: ev(d, Q, R, "--human", w(d, "h", Q), "--ppi", "--scale", "abc"))
case("--human empty")(lambda d: ev(d, Q, R, "--human", w(d, "h", ""), "--ppi"))
case("--human grade outside --scale")(lambda d: ev(d, Q, R, "--human", w(d, "h", Q + "q01 0 zz 9\n"), "--ppi", "--scale", "0-3"))
case("--confidence 1.5")(lambda d: ev(d, Q, R, "--human", w(d, "h", Q), "--ppi", "--confidence", "1.5"))
case("--seed word")(lambda d: ev(d, Q, R, "--seed", "x"))
case("duplicate -m flags", "ok", "measured once")(lambda d: ev(d, Q, R, "-m", "ndcg_cut.10", "-m", "ndcg_cut.10"))
case("--skip-missing with --judged-only", "ok")(lambda d: ev(d, Q, R, "--skip-missing", "-J"))
case("-f trec with several runs", "either", "or an error")(lambda d: ["evaluate", w(d, "q", Q), w(d, "a.run", R), w(d, "b.run", R), "-f", "trec"])


# --------------------------------------------------------------- evaluate --soft / --pool
def judgments(d: Path) -> str:
    return (BASE / "j.jsonl").read_text()


def soft(d: Path, text: str | bytes) -> list[str]:
    return ["evaluate", w(d, "q", Q), w(d, "r.run", R), "--soft", w(d, "s.jsonl", text), "-m", "ndcg_cut.10"]


def jl(d: Path, fn: Callable[[int, dict], dict | list | None]) -> str:
    out = []
    for i, line in enumerate(judgments(d).splitlines()):
        got = fn(i, json.loads(line))
        if got is not None:
            out.append(json.dumps(got))
    return "\n".join(out) + "\n"


def with_probs(probs: dict) -> Callable[[int, dict], dict]:
    def fn(i: int, rec: dict) -> dict:
        if i == 2:
            rec["probs"] = probs
        return rec
    return fn


case("soft baseline", "ok")(lambda d: soft(d, judgments(d)))
case("soft truncated last line")(lambda d: soft(d, judgments(d)[:-40]))
case("soft probs NaN")(lambda d: soft(d, jl(d, with_probs({"0": float("nan"), "1": 1.0}))))
case("soft probs negative")(lambda d: soft(d, jl(d, with_probs({"0": -0.5, "1": 1.5}))))
case("soft probs sum 3", "either", "normalised or an error")(lambda d: soft(d, jl(d, with_probs({"0": 1.0, "1": 1.0, "2": 1.0}))))
case("soft probs key word")(lambda d: soft(d, jl(d, with_probs({"high": 1.0}))))
case("soft probs list")(lambda d: soft(d, jl(d, with_probs([0.5, 0.5]))))  # type: ignore[arg-type]
case("soft probs grade 9")(lambda d: soft(d, jl(d, with_probs({"9": 1.0}))))
case("soft line is a list")(lambda d: soft(d, jl(d, lambda i, r: [r] if i == 1 else r)))
case("soft qid null")(lambda d: soft(d, jl(d, lambda i, r: {**r, "qid": None} if i == 1 else r)))
case("soft qid number", "ok", "ids are strings; a number is its text")(lambda d: soft(d, jl(d, lambda i, r: {**r, "qid": 1} if i == 1 else r)))
case("soft grade string", "either", "or an error")(lambda d: soft(d, jl(d, lambda i, r: {**r, "grade": "2", "probs": None} if i == 1 else r)))
case("soft empty file")(lambda d: soft(d, ""))
case("soft non-UTF-8")(lambda d: soft(d, judgments(d).encode() + b'{"qid": "\xff"}\n'))
case("soft gzip", "ok")(lambda d: ["evaluate", w(d, "q", Q), w(d, "r.run", R), "--soft", w(d, "s.jsonl.gz", gzip.compress(judgments(d).encode())), "-m", "ndcg_cut.10"])
case("soft duplicate pair other grade")(lambda d: soft(d, judgments(d) + json.dumps({**json.loads(judgments(d).splitlines()[0]), "grade": 0, "probs": {"0": 1.0}}) + "\n"))
case("soft --samples 0")(lambda d: soft(d, judgments(d)) + ["--samples", "0"])


def pool(d: Path) -> str:
    return (BASE / "pool.qrels").read_text()


def pool_argv(d: Path, text: str | bytes) -> list[str]:
    return ["evaluate", w(d, "q", Q), w(d, "r.run", R), "--judge", "sim", "--pool", w(d, "p.qrels", text),
            "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"), "--judge-depth", "12",
            "--base-url", SIM, "--no-cache", "-m", "ndcg_cut.10", "--no-progress"]


case("pool grade nan")(lambda d: pool_argv(d, pool(d).replace(" bee-02 0", " bee-02 nan")))
case("pool grade -9", "either", "negative = judged non-relevant, as trec_eval")(lambda d: pool_argv(d, pool(d).replace(" bee-02 0", " bee-02 -9")))
case("pool provenance line broken")(lambda d: pool_argv(d, pool(d).replace('#judge {"model"', '#judge {"model', 1)))
case("pool header missing", "either", "a plain qrels file as pool, or an error")(lambda d: pool_argv(d, "\n".join(l for l in pool(d).splitlines() if not l.startswith("#")) + "\n"))
case("pool 5 columns")(lambda d: pool_argv(d, pool(d).replace(" bee-02 0", " bee-02 0 x")))
case("pool is a directory")(lambda d: [str(d) if a.endswith("p.qrels") else a for a in pool_argv(d, "")])
case("pool non-UTF-8")(lambda d: pool_argv(d, pool(d).encode() + b"q01 0 \xff 1\n"))


# --------------------------------------------------------------- judge: --import-batch, endpoints, prices
def batch(d: Path) -> str:
    return (BASE / "batch_out.jsonl").read_text()


def imp(d: Path, text: str | bytes, *extra: str) -> list[str]:
    return ["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
            "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "1", "--model", "sim", "--no-cache",
            "--import-batch", w(d, "b.jsonl", text), "-o", str(d / "o.qrels"), *extra]


def bmap(d: Path, fn: Callable[[int, dict], object]) -> str:
    out = []
    for i, line in enumerate(batch(d).splitlines()):
        got = fn(i, json.loads(line))
        if got is not None:
            out.append(json.dumps(got) if not isinstance(got, str) else got)
    return "\n".join(out) + "\n"


def body_edit(row: int, edit: Callable[[dict], None]) -> Callable[[int, dict], dict]:
    def fn(i: int, rec: dict) -> dict:
        if i == row:
            edit(rec)
        return rec
    return fn


case("batch baseline", "ok")(lambda d: imp(d, batch(d)))
case("batch truncated last line")(lambda d: imp(d, batch(d)[:-50]))
case("batch gzip named .gz", "ok")(lambda d: [w(d, "b.jsonl.gz", gzip.compress(batch(d).encode())) if a.endswith("b.jsonl") else a for a in imp(d, "")])
case("batch BOM", "ok")(lambda d: imp(d, "\ufeff" + batch(d)))
case("batch CRLF", "ok")(lambda d: imp(d, batch(d).replace("\n", "\r\n")))
case("batch unknown custom_id", "warn:answer no request", "a result for no request: said, not used")(lambda d: imp(d, batch(d) + json.dumps({**json.loads(batch(d).splitlines()[0]), "custom_id": "zzz"}) + "\n"))
case("batch custom_id null")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r.update(custom_id=None)))))
case("batch custom_id number")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r.update(custom_id=5)))))
case("batch content not JSON", "warn:unparsable: 1", "that pair failed with its reason")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"]["choices"][0]["message"].update(content="no json")))))
case("batch status 500", "warn:judgments failed")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"].update(status_code=500)))))
case("batch choices empty", "warn:judgments failed")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"].update(choices=[])))))
case("batch usage strings", "either", "counted, or worst case said")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"].update(usage={"prompt_tokens": "400", "completion_tokens": "20"})))))
case("batch usage NaN", "warn:worst case")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"].update(usage={"prompt_tokens": float("nan"), "completion_tokens": 20})))))
case("batch usage 1e400", "warn:worst case")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"].update(usage={"prompt_tokens": 1e300 * 1e300, "completion_tokens": 20})).replace("Infinity", "1e400")) if False else bmap(d, body_edit(3, lambda r: r["response"]["body"].update(usage={"prompt_tokens": 10**400, "completion_tokens": 20})))))
case("batch usage negative", "warn:worst case")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"].update(usage={"prompt_tokens": -5, "completion_tokens": 20})))))
case("batch response null", "warn:judgments failed")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r.update(response=None)))))
case("batch line is a list")(lambda d: imp(d, bmap(d, lambda i, r: [r] if i == 3 else r)))
case("batch is a directory")(lambda d: imp(d, "")[:-3] + [str(d), "-o", str(d / "o.qrels")])
case("batch empty file")(lambda d: imp(d, ""))
case("batch other model", "warn:judgments failed")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"].update(model="gpt-x")))))
case("batch grade 9", "warn:judgments failed")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"]["choices"][0]["message"].update(content='{"reasoning":"x","grade":9}')))))
case("batch grade as string", "either", "or a failure")(lambda d: imp(d, bmap(d, body_edit(3, lambda r: r["response"]["body"]["choices"][0]["message"].update(content='{"reasoning":"x","grade":"2"}')))))
case("batch non-UTF-8")(lambda d: imp(d, batch(d).encode() + b'{"custom_id": "\xff"}\n'))
case("batch zstd bytes")(lambda d: imp(d, b"\x28\xb5\x2f\xfd" + b"\x00" * 40))
case("batch with --dry-run", "ok", "a dry run prints the estimate and sends nothing")(lambda d: imp(d, batch(d), "--dry-run"))
case("batch with --export-batch")(lambda d: imp(d, batch(d), "--export-batch", str(d / "x.jsonl")))
case("batch with --batch")(lambda d: imp(d, batch(d), "--batch"))


def jdg(d: Path, *extra: str, queries: str | None = None, corpus: str | None = None) -> list[str]:
    return ["judge", "--queries", queries or str(EX / "queries.jsonl"), "--corpus", corpus or str(EX / "corpus.jsonl"),
            "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "1", "--model", "sim", "--no-cache",
            "-o", str(d / "o.qrels"), "--no-progress", *extra]


SIM = "http://127.0.0.1:18734/v1"
case("endpoint not a URL")(lambda d: jdg(d, "--endpoint", "notaurl"))
case("endpoint rpm word")(lambda d: jdg(d, "--endpoint", SIM + ",rpm=abc"))
case("endpoint rpm negative")(lambda d: jdg(d, "--endpoint", SIM + ",rpm=-5"))
case("endpoint rpm nan")(lambda d: jdg(d, "--endpoint", SIM + ",rpm=nan"))
case("endpoint unknown key")(lambda d: jdg(d, "--endpoint", SIM + ",colour=red"))
case("endpoint weight 0")(lambda d: jdg(d, "--endpoint", SIM + ",weight=0"))
case("endpoint weight inf")(lambda d: jdg(d, "--endpoint", SIM + ",weight=inf"))
case("endpoint only comma")(lambda d: jdg(d, "--endpoint", ","))
case("endpoint empty key=value")(lambda d: jdg(d, "--endpoint", SIM + ",,"))
case("endpoint key without =")(lambda d: jdg(d, "--endpoint", SIM + ",rpm"))
case("endpoint ftp scheme")(lambda d: jdg(d, "--endpoint", "ftp://127.0.0.1/v1"))
case("endpoint twice same URL", "either", "or an error")(lambda d: jdg(d, "--endpoint", SIM, "--endpoint", SIM))
case("endpoint with --base-url", "either", "or an error")(lambda d: jdg(d, "--endpoint", SIM, "--base-url", SIM))
case("endpoint provider unknown")(lambda d: jdg(d, "--endpoint", SIM + ",provider=zzz"))
case("endpoint port out of range")(lambda d: jdg(d, "--endpoint", "http://127.0.0.1:99999/v1"))
case("prices not JSON")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", "{model")))
case("prices a list")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", "[1,2]")))
case("prices negative")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", json.dumps({"sim": {"input": -1, "output": 1}}))))
case("prices NaN")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", '{"sim": {"input": NaN, "output": 1}}')))
case("prices strings", "either", "or an error")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", json.dumps({"sim": {"input": "1", "output": "2"}}))))
case("prices missing output")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", json.dumps({"sim": {"input": 1}}))))
case("prices model is a number")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", json.dumps({"sim": 3}))))
case("prices empty file")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", "")))
case("prices directory")(lambda d: jdg(d, "--base-url", SIM, "--prices", str(d)))
case("prices BOM", "ok")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", "\ufeff" + json.dumps({"sim": {"input": 1, "output": 2}}))))
case("prices 1e400")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", '{"sim": {"input": 1e400, "output": 1}}')))
case("--max-cost negative")(lambda d: jdg(d, "--base-url", SIM, "--max-cost", "-1"))
case("--max-cost nan")(lambda d: jdg(d, "--base-url", SIM, "--max-cost", "nan"))
case("--concurrency 0")(lambda d: jdg(d, "--base-url", SIM, "--concurrency", "0"))
case("--timeout 0")(lambda d: jdg(d, "--base-url", SIM, "--timeout", "0"))
case("--timeout nan")(lambda d: jdg(d, "--base-url", SIM, "--timeout", "nan"))
case("--rpm inf")(lambda d: jdg(d, "--base-url", SIM, "--rpm", "inf"))
case("judge --depth 0")(lambda d: jdg(d, "--base-url", SIM, "--depth", "0"))
case("judge queries duplicate id different text")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES + json.dumps({"_id": "q01", "text": "other"}) + "\n")))
case("judge queries empty text")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES.replace('"why were flights cancelled across europe because of a volcano"', '""'))))
case("judge queries missing _id")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES + json.dumps({"text": "x"}) + "\n")))
case("judge queries text null")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES + json.dumps({"_id": "q99", "text": None}) + "\n")))
case("judge queries text a list")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES + json.dumps({"_id": "q99", "text": ["a"]}) + "\n")))
case("judge queries id number", "ok")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES + json.dumps({"_id": 99, "text": "a"}) + "\n")))
case("judge queries BOM", "ok")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", "\ufeff" + QUERIES)))
case("judge queries line is a list")(lambda d: jdg(d, "--base-url", SIM, queries=w(d, "qs.jsonl", QUERIES + "[1, 2]\n")))
case("judge corpus text null")(lambda d: jdg(d, "--base-url", SIM, corpus=w(d, "c.jsonl", CORPUS.replace('"text": "A volcano', '"text": null, "x": "A volcano', 1))))
case("judge corpus duplicate id")(lambda d: jdg(d, "--base-url", SIM, corpus=w(d, "c.jsonl", CORPUS + CORPUS.splitlines()[0].replace("A volcano", "Other") + "\n")))
case("judge corpus TSV extra columns", "either", "or an error")(lambda d: jdg(d, "--base-url", SIM, corpus=w(d, "c.tsv", "".join(f"{json.loads(l)['_id']}\t{json.loads(l)['text']}\textra\n" for l in CORPUS.splitlines()))))
case("judge corpus truncated JSON line")(lambda d: jdg(d, "--base-url", SIM, corpus=w(d, "c.jsonl", CORPUS[:-30])))
case("judge corpus missing a pooled doc")(lambda d: jdg(d, "--base-url", SIM, corpus=w(d, "c.jsonl", "\n".join(l for l in CORPUS.splitlines() if '"volc-16"' not in l) + "\n")))


# --------------------------------------------------------------- rag samples
def sm(d: Path, fn: Callable[[int, dict], object], name: str = "s.jsonl") -> list[str]:
    out = []
    for i, line in enumerate(SAMPLES.splitlines()):
        got = fn(i, json.loads(line))
        if got is not None:
            out.append(got if isinstance(got, str) else json.dumps(got))
    return ["rag", w(d, name, "\n".join(out) + "\n"), "-m", "hit_rate", "-m", "mrr"]


def sample_edit(row: int, **kv: object) -> Callable[[int, dict], dict]:
    return lambda i, r: {**r, **kv} if i == row else r


# What the samples look like to a deterministic metric: each has reference_contexts?
case("rag baseline", "ok")(lambda d: sm(d, lambda i, r: r))
case("rag id NaN")(lambda d: sm(d, lambda i, r: json.dumps({**r, "id": "__NAN__"}).replace('"__NAN__"', "NaN") if i == 2 else r))
case("rag id null", "either", "no id: position stands in, or an error")(lambda d: sm(d, sample_edit(2, id=None)))
case("rag duplicate ids")(lambda d: sm(d, lambda i, r: {**r, "id": "q01"} if i == 2 else r))
case("rag contexts a string")(lambda d: sm(d, sample_edit(2, retrieved_contexts="just text")))
case("rag contexts null", "ok", "ids given: hit/mrr read the ids")(lambda d: sm(d, sample_edit(2, retrieved_contexts=None)))
case("rag contexts with a null")(lambda d: sm(d, lambda i, r: {**r, "retrieved_contexts": [None, *r["retrieved_contexts"]]} if i == 2 else r))
case("rag contexts numbers")(lambda d: sm(d, sample_edit(2, retrieved_contexts=[1, 2])))
case("rag user_input empty", "ok", "deterministic metrics need no text")(lambda d: sm(d, sample_edit(2, user_input="")))
case("rag user_input a dict")(lambda d: sm(d, sample_edit(2, user_input={"a": 1})))
case("rag line a list")(lambda d: sm(d, lambda i, r: [r] if i == 2 else r))
case("rag truncated last line")(lambda d: ["rag", w(d, "s.jsonl", SAMPLES[:-40]), "-m", "hit_rate"])
case("rag empty file")(lambda d: ["rag", w(d, "s.jsonl", ""), "-m", "hit_rate"])
case("rag non-UTF-8")(lambda d: ["rag", w(d, "s.jsonl", SAMPLES.encode() + b'{"id": "\xff"}\n'), "-m", "hit_rate"])
case("rag BOM", "ok")(lambda d: ["rag", w(d, "s.jsonl", "\ufeff" + SAMPLES), "-m", "hit_rate"])
case("rag CRLF", "ok")(lambda d: ["rag", w(d, "s.jsonl", SAMPLES.replace("\n", "\r\n")), "-m", "hit_rate"])
case("rag gzip", "ok")(lambda d: ["rag", w(d, "s.jsonl.gz", gzip.compress(SAMPLES.encode())), "-m", "hit_rate"])
case("rag JSON array wrong", "error")(lambda d: ["rag", w(d, "s.json", json.dumps({"samples": 3})), "-m", "hit_rate"])
case("rag CSV missing column", "warn:ignored", "every sample undetermined, in the table")(lambda d: ["rag", w(d, "s.csv", "id,foo\n1,2\n"), "-m", "hit_rate"])
case("rag CSV BOM", "ok", "read as the JSONL")(lambda d: ["rag", w(d, "s.csv", "\ufeffid,user_input,retrieved_contexts,reference_contexts\nq1,hi,\"[\"\"a\"\"]\",\"[\"\"a\"\"]\"\n"), "-m", "hit_rate"])
case("rag CSV contexts not JSON")(lambda d: ["rag", w(d, "s.csv", "id,user_input,retrieved_contexts,reference_contexts\nq1,hi,[a,\"[\"\"a\"\"]\"\n"), "-m", "hit_rate"])
case("rag parquet truncated")(lambda d: ["rag", w(d, "s.parquet", b"PAR1" + b"\x00" * 50), "-m", "hit_rate"])
case("rag directory")(lambda d: ["rag", str(d), "-m", "hit_rate"])
case("rag -k 0")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate", "-k", "0"])
case("rag -k negative")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate", "-k", "-3"])
case("rag metric cutoff word")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate@x"])
case("rag --trace-fraction 2")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate", "--trace-fraction", "2"])
case("rag --span-scores dir")(lambda d: ["rag", str(EX / "traces" / "langfuse.jsonl"), "-m", "hit_rate", "--span-scores", str(d)])
case("rag --fail-under nan")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate", "--fail-under", "hit_rate=nan"])
case("rag trace JSON broken")(lambda d: ["rag", w(d, "t.json", (EX / "traces" / "openinference_otlp.json").read_text()[:-100]), "-m", "hit_rate"])


def parquet(d: Path, rows: dict) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = d / "s.parquet"
    pq.write_table(pa.table(rows), p)
    return str(p)


case("rag parquet contexts as int column")(lambda d: ["rag", parquet(d, {"id": ["a", "b"], "user_input": ["x", "y"], "retrieved_contexts": [1, 2], "reference_contexts": [[ "a"], ["b"]]}), "-m", "hit_rate"])
case("rag parquet id float NaN")(lambda d: ["rag", parquet(d, {"id": [1.0, float("nan")], "user_input": ["x", "y"], "retrieved_contexts": [["a"], ["b"]], "reference_contexts": [["a"], ["b"]]}), "-m", "hit_rate"])
case("rag parquet null contexts")(lambda d: ["rag", parquet(d, {"id": ["a", "b"], "user_input": ["x", "y"], "retrieved_contexts": [["a"], None], "reference_contexts": [["a"], ["b"]]}), "-m", "hit_rate"])

# --------------------------------------------------------------- fuse / agree / plan-labels
R2 = (EX / "runs" / "bm25_stemmed.run").read_text()
case("fuse one run")(lambda d: ["fuse", w(d, "a.run", R)])
case("fuse weights wrong count")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--method", "wsum", "--weights", "1,2,3"])
case("fuse weights nan")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--method", "wsum", "--weights", "nan,1"])
case("fuse weights word")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--method", "wsum", "--weights", "x,1"])
case("fuse rrf-k negative")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--rrf-k", "-60"])
case("fuse depth 0")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--depth", "0"])
case("fuse run score nan")(lambda d: ["fuse", w(d, "a.run", set_col(R, 3, 4, "nan")), w(d, "b.run", R2)])
case("fuse run score inf", "either", "or an error; never a NaN in the output")(lambda d: ["fuse", w(d, "a.run", set_col(R, 3, 4, "inf")), w(d, "b.run", R2), "--method", "combsum", "-o", str(d / "f.run")])
case("fuse --tune-qrels empty")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--tune-qrels", w(d, "q", "")])
case("fuse --step 0")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--tune-qrels", w(d, "q", Q), "--step", "0"])
case("fuse --step nan")(lambda d: ["fuse", w(d, "a.run", R), w(d, "b.run", R2), "--tune-qrels", w(d, "q", Q), "--step", "nan"])
case("agree disjoint queries")(lambda d: ["agree", w(d, "a", Q), w(d, "b", Q.replace("q", "z"))])
case("agree empty second")(lambda d: ["agree", w(d, "a", Q), w(d, "b", "")])
case("agree grade outside --scale")(lambda d: ["agree", w(d, "a", Q), w(d, "b", Q.replace(" 3\n", " 7\n")), "--scale", "0-3"])
case("agree --resamples 0")(lambda d: ["agree", w(d, "a", Q), w(d, "b", Q), "--resamples", "0"])
case("agree --rel nan")(lambda d: ["agree", w(d, "a", Q), w(d, "b", Q), "--rel", "nan"])
case("plan-labels --width 0")(lambda d: ["plan-labels", w(d, "l", Q), w(d, "r.run", R), "--human", w(d, "h", Q), "--width", "0"])
case("plan-labels --width nan")(lambda d: ["plan-labels", w(d, "l", Q), w(d, "r.run", R), "--human", w(d, "h", Q), "--width", "nan"])
case("plan-labels --width -1")(lambda d: ["plan-labels", w(d, "l", Q), w(d, "r.run", R), "--human", w(d, "h", Q), "--width", "-1"])
case("plan-labels human disjoint")(lambda d: ["plan-labels", w(d, "l", Q), w(d, "r.run", R), "--human", w(d, "h", Q.replace("q", "z")), "--width", "0.1"])
case("plan-labels --sample 0")(lambda d: ["plan-labels", w(d, "l", Q), w(d, "r.run", R), "--sample", "0", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"), "-o", str(d / "t.jsonl")])
case("plan-labels --sample more than queries", "either", "all queries, said; or an error")(lambda d: ["plan-labels", w(d, "l", Q), w(d, "r.run", R), "--sample", "1000", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"), "-o", str(d / "t.jsonl")])


# --------------------------------------------------------------- nuggets
ASG = (NUG / "human_assignments.jsonl").read_text()
NUGGETS = (NUG / "nuggets.jsonl").read_text()
ANS = (NUG / "runs" / "run_a.jsonl").read_text()


def amap(d: Path, fn: Callable[[int, dict], object], text: str = ASG) -> list[str]:
    out = []
    for i, line in enumerate(text.splitlines()):
        got = fn(i, json.loads(line))
        if got is not None:
            out.append(got if isinstance(got, str) else json.dumps(got))
    return ["nuggets", "score", w(d, "a.jsonl", "\n".join(out) + "\n")]


def nug_edit(row: int, key: str, value: object) -> Callable[[int, dict], dict]:
    def fn(i: int, r: dict) -> dict:
        if i == row:
            r["nuggets"][0][key] = value
        return r
    return fn


case("nuggets score baseline", "ok")(lambda d: amap(d, lambda i, r: r))
case("nuggets score assignment maybe")(lambda d: amap(d, nug_edit(1, "assignment", "maybe")))
case("nuggets score importance critical")(lambda d: amap(d, nug_edit(1, "importance", "critical")))
case("nuggets score assignment null")(lambda d: amap(d, nug_edit(1, "assignment", None)))
case("nuggets score nuggets a dict")(lambda d: amap(d, lambda i, r: {**r, "nuggets": {"a": 1}} if i == 1 else r))
case("nuggets score qid missing")(lambda d: amap(d, lambda i, r: {k: v for k, v in r.items() if k != "qid"} if i == 1 else r))
case("nuggets score duplicate run+qid")(lambda d: amap(d, lambda i, r: r) + [])  # placeholder replaced below
CASES[-1].argv = lambda d: ["nuggets", "score", w(d, "a.jsonl", ASG + ASG.splitlines()[0] + "\n")]
case("nuggets score empty file")(lambda d: ["nuggets", "score", w(d, "a.jsonl", "")])
case("nuggets score truncated")(lambda d: ["nuggets", "score", w(d, "a.jsonl", ASG[:-25])])
case("nuggets score non-UTF-8")(lambda d: ["nuggets", "score", w(d, "a.jsonl", ASG.encode() + b'{"qid":"\xff"}\n')])
case("nuggets score BOM", "ok")(lambda d: ["nuggets", "score", w(d, "a.jsonl", "\ufeff" + ASG)])
case("nuggets score line a list")(lambda d: amap(d, lambda i, r: [r] if i == 1 else r))
case("nuggets score --fail-under nan")(lambda d: ["nuggets", "score", str(NUG / "human_assignments.jsonl"), "--fail-under", "vital_strict=nan"])
case("nuggets score qid number", "ok", "its text as id")(lambda d: amap(d, lambda i, r: {**r, "qid": 7} if i == 1 else r))


def asn(d: Path, nuggets: str | bytes = NUGGETS, answers: str | bytes = ANS, *extra: str) -> list[str]:
    return ["nuggets", "assign", w(d, "n.jsonl", nuggets), w(d, "run_a.jsonl", answers), "--model", "sim",
            "--base-url", SIM, "--no-cache", "-o", str(d / "o.jsonl"), "--no-progress", *extra]


def ansmap(fn: Callable[[int, dict], object], text: str = ANS) -> str:
    out = []
    for i, line in enumerate(text.splitlines()):
        got = fn(i, json.loads(line))
        if got is not None:
            out.append(got if isinstance(got, str) else json.dumps(got))
    return "\n".join(out) + "\n"


case("nuggets assign baseline", "ok")(lambda d: asn(d))
case("nuggets assign citation out of range", "either", "said; the citation names no reference")(lambda d: asn(d, NUGGETS, ansmap(lambda i, r: {**r, "answer": [{"text": "x", "citations": [99]}]} if i == 0 else r)))
case("nuggets assign answer a string", "either", "plain text answer, or an error")(lambda d: asn(d, NUGGETS, ansmap(lambda i, r: {**r, "answer": "plain text"} if i == 0 else r)))
case("nuggets assign answer null")(lambda d: asn(d, NUGGETS, ansmap(lambda i, r: {**r, "answer": None} if i == 0 else r)))
case("nuggets assign nuggets missing query", "warn:nugget", "answers of a query without nuggets: said")(lambda d: asn(d, "\n".join(NUGGETS.splitlines()[1:]) + "\n"))
case("nuggets assign nugget text null")(lambda d: asn(d, ansmap(lambda i, r: {**r, "nuggets": [{"text": None, "importance": "vital"}]} if i == 0 else r, NUGGETS)))
case("nuggets assign nuggets empty file")(lambda d: asn(d, ""))
case("nuggets assign duplicate answer")(lambda d: asn(d, NUGGETS, ANS + ANS.splitlines()[0] + "\n"))
case("nuggets assign --assign-window 0")(lambda d: asn(d, NUGGETS, ANS, "--assign-window", "0"))
case("nuggets assign response_length word", "ok", "not read by assign")(lambda d: asn(d, NUGGETS, ansmap(lambda i, r: {**r, "response_length": "x"} if i == 0 else r)))


# --------------------------------------------------------------- retrieve / synth / ui
case("retrieve empty corpus")(lambda d: ["retrieve", "--corpus", w(d, "c.jsonl", ""), "--queries", str(EX / "queries.jsonl"), "-o", str(d / "r.run")])
case("retrieve corpus duplicate ids")(lambda d: ["retrieve", "--corpus", w(d, "c.jsonl", CORPUS + CORPUS.splitlines()[0] + "\n"), "--queries", str(EX / "queries.jsonl"), "-o", str(d / "r.run")])
case("retrieve -k 0")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", str(EX / "queries.jsonl"), "-k", "0", "-o", str(d / "r.run")])
case("retrieve --k1 nan")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", str(EX / "queries.jsonl"), "--k1", "nan", "-o", str(d / "r.run")])
case("retrieve --b 2")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", str(EX / "queries.jsonl"), "--b", "2", "-o", str(d / "r.run")])
case("retrieve empty query text", "either", "no terms: an empty ranking, said; or an error")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", w(d, "q.jsonl", QUERIES.replace('"what is the difference between magma and lava"', '""')), "-o", str(d / "r.run")])
case("retrieve queries non-UTF-8")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", w(d, "q.jsonl", QUERIES.encode() + b'{"_id": "x", "text": "\xff"}\n'), "-o", str(d / "r.run")])
case("retrieve corpus all empty texts")(lambda d: ["retrieve", "--corpus", w(d, "c.jsonl", '{"_id": "a", "text": ""}\n{"_id": "b", "text": ""}\n'), "--queries", str(EX / "queries.jsonl"), "-o", str(d / "r.run")])
case("synth empty corpus")(lambda d: ["synth", "--corpus", w(d, "c.jsonl", ""), "--model", "sim", "--base-url", SIM, "--dry-run", "--no-cache", "-n", "3"])
case("synth -n 0")(lambda d: ["synth", "--corpus", str(EX / "corpus.jsonl"), "--model", "sim", "--base-url", SIM, "--dry-run", "--no-cache", "-n", "0"])
case("synth -n -1")(lambda d: ["synth", "--corpus", str(EX / "corpus.jsonl"), "--model", "sim", "--base-url", SIM, "--dry-run", "--no-cache", "-n", "-1"])
case("synth corpus line a list")(lambda d: ["synth", "--corpus", w(d, "c.jsonl", CORPUS + "[1]\n"), "--model", "sim", "--base-url", SIM, "--dry-run", "--no-cache", "-n", "3"])
case("ui broken result JSON")(lambda d: ["ui", w(d, "res.json", '{"runs": [')])
case("ui directory")(lambda d: ["ui", str(d)])
case("ui unknown role")(lambda d: ["ui", "zzz=" + str(EX / "qrels.txt")])
case("ui labels in missing dir")(lambda d: ["ui", str(EX / "qrels.txt"), "--labels", str(d / "no" / "l.jsonl")])
case("ui non-UTF-8 file")(lambda d: ["ui", w(d, "x.txt", b"q1 0 d\xff 1\n")])
case("ui result JSON a list")(lambda d: ["ui", "result=" + w(d, "res.json", "[1,2]")])
case("ui role with empty path")(lambda d: ["ui", "qrels="])
case("ui gzip qrels", "ok")(lambda d: ["ui", w(d, "q.txt.gz", gzip.compress(Q.encode()))])

# --------------------------------------------------------------- stores and outputs
def jcache(d: Path, cache: str) -> list[str]:
    return [a for a in jdg(d, "--base-url", SIM) if a != "--no-cache"] + ["--cache", cache]


case("judge --cache mysql URL")(lambda d: jcache(d, "mysql://u:S3cretPw99@127.0.0.1:1/db"))
case("judge --cache redis URL")(lambda d: jcache(d, "redis://:S3cretPw99@127.0.0.1:1/0"))
case("judge --cache conninfo string")(lambda d: jcache(d, "host=127.0.0.1 port=1 password=S3cretPw99"))
case("judge --cache postgres bad port")(lambda d: jcache(d, "postgresql://u:S3cretPw99@127.0.0.1:notaport/db"))
case("judge --cache is a directory")(lambda d: jcache(d, str(d)))
case("rag -o a directory")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate", "-o", str(d)])
case("nuggets score -o a directory")(lambda d: ["nuggets", "score", str(NUG / "human_assignments.jsonl"), "-o", str(d)])
case("fuse -o a directory")(lambda d: ["fuse", str(EX / "runs" / "bm25_raw.run"), str(EX / "runs" / "bm25_stemmed.run"), "-o", str(d)])
case("retrieve -o a directory")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", str(EX / "queries.jsonl"), "-o", str(d)])
case("agree -o a directory")(lambda d: ["agree", str(EX / "qrels.txt"), str(EX / "qrels.txt"), "-o", str(d)])
case("synth -o a file")(lambda d: ["synth", "--corpus", str(EX / "corpus.jsonl"), "--model", "sim", "--base-url", SIM, "--no-cache", "-n", "2", "-o", w(d, "f", "x")])
case("evaluate --judgments a directory")(lambda d: ["evaluate", str(EX / "qrels.txt"), str(EX / "runs" / "bm25_raw.run"), "--judge", "sim", "--base-url", SIM, "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"), "--no-cache", "--judgments", str(d), "--no-progress"])

case("qrels and run both stdin")(lambda d: ["evaluate", "-", "-"])
case("qrels bzip2 file")(lambda d: ev(d, __import__("bz2").compress(Q.encode())))
case("run xz file")(lambda d: ev(d, Q, __import__("lzma").compress(R.encode())))
case("rag real Parquet file")(lambda d: ["rag", parquet(d, {"id": ["a"], "user_input": ["x"], "retrieved_contexts": [["a"]], "reference_contexts": [["a"]]}), "-m", "hit_rate"])
case("evaluate the SQLite cache as qrels")(lambda d: ["evaluate", "/tmp/probe/ok.sqlite", str(EX / "runs" / "bm25_raw.run")])
case("rag --junit a directory")(lambda d: ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate", "--junit", str(d), "--fail-under", "hit_rate=0.1"])
case("evaluate --junit in a missing folder")(lambda d: ev(d, Q, R, "--junit", str(d / "no" / "j.xml"), "--fail-under", "ndcg_cut.10=0.1"))
case("batch all results from another export")(lambda d: imp(d, bmap(d, lambda i, r: {**r, "custom_id": f"{i:064x}"})))
case("retrieve all queries without a shared term", "warn:share no term")(lambda d: ["retrieve", "--corpus", str(EX / "corpus.jsonl"), "--queries", w(d, "q.tsv", "q1\tzzzz\nq2\tqqqq\n"), "-o", str(d / "r.run")])

# --------------------------------------------------------------- ppi-samples, simulate-judge
def llm_scores(d: Path) -> str:
    return str(BASE / "pp" / "llm.json")


def pp(d: Path, name: str, rows_edit: Callable[[list[dict]], list]) -> list[str]:
    import json as _json

    data = _json.load(open(BASE / "pp" / "llm.json"))
    rows = [{"id": x["sample"], "hit": x["scores"]["hit"]["value"], "mrr": x["scores"]["mrr"]["value"]} for x in data["samples"]]
    out = rows_edit(rows[:15])
    text = "".join((_json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in out)
    return ["ppi-samples", llm_scores(d), "--human", w(d, name, text)]


case("ppi human baseline", "ok")(lambda d: pp(d, "h.jsonl", lambda r: r))
case("ppi human NaN score")(lambda d: pp(d, "h.jsonl", lambda r: r[:-1] + [{**r[-1], "hit": float("nan")}]))
case("ppi human 1e400 score")(lambda d: pp(d, "h.jsonl", lambda r: r[:-1] + ['{"id": "%s", "hit": 1e400, "mrr": 1}' % r[-1]["id"]]))
case("ppi human duplicate id other value")(lambda d: pp(d, "h.jsonl", lambda r: r + [{**r[0], "hit": 1 - r[0]["hit"]}]))
case("ppi human duplicate line", "ok", "counted once")(lambda d: pp(d, "h.jsonl", lambda r: r + [r[0]]))
case("ppi human null score", "ok", "undetermined: left out, counted in n_human")(lambda d: pp(d, "h.jsonl", lambda r: r[:-1] + [{**r[-1], "hit": None}]))
case("ppi human score 7 on a 0-1 metric", "warn:two scales")(lambda d: pp(d, "h.jsonl", lambda r: r[:-1] + [{**r[-1], "hit": 7.0}]))
case("ppi human line a list")(lambda d: pp(d, "h.jsonl", lambda r: r + ["[1, 2]"]))
case("ppi human unknown id")(lambda d: pp(d, "h.jsonl", lambda r: r + [{"id": "zzz", "hit": 1, "mrr": 1}]))
case("ppi human no id")(lambda d: pp(d, "h.jsonl", lambda r: r + [{"hit": 1, "mrr": 1}]))
case("ppi human score a word")(lambda d: pp(d, "h.jsonl", lambda r: r + [{"id": "q99", "hit": "high"}]))
case("ppi human CSV short row")(lambda d: ["ppi-samples", llm_scores(d), "--human", w(d, "h.csv", "id,hit,mrr\nq01,1,1\nq02,1\n")])
case("ppi human CSV BOM", "either", "BOM read; the ids q06.. are not samples of the example: an error naming them is right")(lambda d: ["ppi-samples", llm_scores(d), "--human", w(d, "h.csv", "\ufeffid,hit,mrr\n" + "".join(f"q{i:02d},1,1\n" for i in range(1, 16)))])
case("ppi human empty")(lambda d: ["ppi-samples", llm_scores(d), "--human", w(d, "h.jsonl", "")])
case("ppi human one item")(lambda d: pp(d, "h.jsonl", lambda r: r[:1]))
case("simulate-judge negative seed")(lambda d: ["simulate-judge", str(EX / "qrels.txt"), "--seed", "-3", "-o", str(d / "o.q")])
case("simulate-judge grade 7")(lambda d: ["simulate-judge", w(d, "q", Q.replace(" 3\n", " 7\n")), "-o", str(d / "o.q")])
case("simulate-judge -o a directory")(lambda d: ["simulate-judge", str(EX / "qrels.txt"), "-o", str(d)])
case("judge --batch with --engine ray")(lambda d: jdg(d, "--base-url", SIM, "--batch", "--engine", "ray"))

# --------------------------------------------------------------- JSON keys twice, huge JSON grades, price fields
case("qrels JSON grade 1e20")(lambda d: ev(d, '{"q01": {"volc-16": 1e20}}', qn="q.json"))
case("qrels JSON query key twice")(lambda d: ev(d, '{"q01": {"volc-16": 3}, "q01": {"volc-15": 1}}', qn="q.json"))
case("qrels JSON doc key twice")(lambda d: ev(d, '{"q01": {"volc-16": 3, "volc-16": 0}}', qn="q.json"))
case("run JSON doc key twice")(lambda d: ev(d, Q, '{"q01": {"volc-16": 1.0, "volc-16": 0.1}}', rn="r.json"))
case("prices misspelt field")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", '{"sim": {"input": 1, "output": 2, "cache_read": 0.1}}')))
case("prices model twice")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", '{"sim": {"input": 1, "output": 2}, "sim": {"input": 9, "output": 9}}')))
case("prices upper-case model", "either", "no price for 'sim' then: said")(lambda d: jdg(d, "--base-url", SIM, "--prices", w(d, "p.json", '{"SIM": {"input": 1, "output": 2}}')))


def run_case(c: Case, root: Path) -> dict:
    from ragjudge.cli import main

    d = Path(tempfile.mkdtemp(dir=root))
    try:
        argv = c.argv(d)
    except Exception as exc:  # noqa: BLE001
        return {"kind": "setup", "err": repr(exc)}
    out, err = io.StringIO(), io.StringIO()
    rc: object
    tb = ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException:  # noqa: BLE001
            rc = "exc"
            tb = traceback.format_exc()
    stderr = err.getvalue()
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ragjudge: error:") or ": error:" in line]
    if rc == "exc" or "Traceback" in stderr:
        kind = "trace"
    elif rc == 2 and errors and len(errors) == 1:
        kind = "error" if c.expect in ("error", "either") else "error?"
    elif rc == 0:
        if c.expect in ("ok", "either"):
            kind = "ok"
        elif c.expect.startswith("warn:"):
            kind = "ok" if (c.expect[5:] in stderr and "warning" in stderr) else "silent?"
        else:
            kind = "silent?"
    else:
        kind = f"rc={rc}"
    return {"kind": kind, "rc": rc, "err": (errors[-1] if errors else (lines[-1] if lines else ""))[:300],
            "tb": tb[-1500:], "stderr": stderr[-1500:]}


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("only", nargs="?", default="")
    p.add_argument("--json", default="")
    a = p.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-probe")
    os.environ["RAGJUDGE_CACHE"] = "/tmp/probe/cache.sqlite"
    root = Path(tempfile.mkdtemp(prefix="probe-", dir="/tmp/probe"))
    # ui must not serve: the probe wants only its checks of the files.
    import ragjudge.server as server

    server.serve = lambda settings, **kw: None  # type: ignore[assignment]
    results = []
    for c in CASES:
        if a.only and a.only not in c.name:
            continue
        res = run_case(c, root)
        results.append({"name": c.name, "expect": c.expect, "why": c.why, **res})
        print(f"{res['kind']:8} {c.name:45} | {res.get('err', '')[:150]}", file=sys.__stdout__, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    counts: dict[str, int] = {}
    for r in results:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    print(len(results), counts, file=sys.__stdout__)


if __name__ == "__main__":
    main()
