"""``ragjudge ui``: bad files and paths are one line, exit 2, before anything is served;
gzip files are read as the other readers read them."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import ragjudge.server
from ragjudge.cli import main
from ragjudge.server.ui.workspace import ROLES, Workspace

EX = Path(__file__).resolve().parents[2] / "examples" / "nuggets"
QRELS = EX / "qrels.txt"


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ragjudge ui` runs every check `serve` makes, but never listens."""
    import uvicorn

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("started serving despite a bad argument")

    monkeypatch.setattr(uvicorn, "run", boom)


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ragjudge: error: "), err
    for w in words:
        assert w in lines[0], err
    return lines[0]


def test_gzip_files_are_read(tmp_path: Path) -> None:
    gz = tmp_path / "qrels.txt.gz"
    gz.write_bytes(gzip.compress(QRELS.read_bytes()))
    ws = Workspace([str(gz)])
    assert ws.files[0]["role"] == "qrels" and ws.files[0]["labels"] == len(QRELS.read_text().split("\n")) - 1


def test_gzip_with_a_forced_role(tmp_path: Path) -> None:
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress((EX / "human_assignments.jsonl").read_bytes()))
    ws = Workspace([f"assignments={gz}"])
    assert ws.files[0]["role"] == "assignments" and ws.assignments


def test_invalid_utf8_names_the_line(tmp_path: Path, no_serving: None,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "qrels.txt"
    bad.write_bytes(b"1 0 d1 1\n1 0 d2 0\n2 0 d\xff 1\n")
    assert main(["ui", str(bad)]) == 2
    _one_line(capsys, f"{bad}:3", "UTF-8")


def test_unknown_kind_lists_the_known_ones(no_serving: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", f"zzz={QRELS}"]) == 2
    line = _one_line(capsys, "unknown kind 'zzz'", *ROLES)
    assert "No such file" not in line


def test_a_file_whose_name_has_an_equals_sign_is_still_read(tmp_path: Path) -> None:
    odd = tmp_path / "x=y.txt"
    odd.write_text(QRELS.read_text())
    assert Workspace([str(odd)]).files[0]["role"] == "qrels"


def test_labels_in_a_missing_folder_is_refused_before_serving(
        tmp_path: Path, no_serving: None, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing" / "dir" / "l.jsonl"
    assert main(["ui", "--labels", str(target), str(QRELS)]) == 2
    _one_line(capsys, str(target), "does not exist")


def test_labels_a_folder_is_refused_before_serving(
        tmp_path: Path, no_serving: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--labels", str(tmp_path), str(QRELS)]) == 2
    _one_line(capsys, str(tmp_path), "directory")


def test_the_address_is_printed_once_every_check_passed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    monkeypatch.setenv("RAGJUDGE_TOKEN", "t0ken")  # both restored after: serve writes its settings
    monkeypatch.setenv("RAGJUDGE_SERVER_SETTINGS", "")
    printed = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: printed.append(capsys.readouterr().out))
    monkeypatch.setattr(ragjudge.server, "check_job_store", lambda settings: printed.append("store"))
    assert main(["ui", "--labels", str(tmp_path / "l.jsonl"), str(QRELS)]) == 0
    assert printed[0] == "store" and printed[1].startswith("ragjudge ui: http://127.0.0.1:")
    assert "/ui/#token=t0ken" in printed[1] and len(printed) == 2


def test_a_nugget_to_label_file_is_sniffed_or_forced_as_tolabel(tmp_path: Path) -> None:
    from _nugget_data import make_nugget_workspace

    ws = make_nugget_workspace(tmp_path / "ws")
    for spec in (str(ws["tolabel"]), f"tolabel={ws['tolabel']}"):
        w = Workspace([spec, str(ws["llm"])], labels=str(tmp_path / "labels.jsonl"))
        assert w.nug_to_label is not None and w.to_label is None and w.assignments
        assert [f["role"] for f in w.files] == ["tolabel", "assignments"]
