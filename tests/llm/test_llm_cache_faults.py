"""A cache fault never costs the run: a damaged file is salvaged into a fresh cache, a full
disk turns the cache read-only, and the run writes its outputs with one warning line."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
import pytest
import respx
from _judge_cli import base_args, files, rule  # noqa: F401 -- the fixture is used by name
from _llm_fakes import URL, grader

from ragjudge.cli import main
from ragjudge.io import read_qrels
from ragjudge.llm import Cache


def _filled(path: Path, n: int = 400) -> list[str]:
    cache = Cache(path)
    keys = [f"{i:064x}" for i in range(n)]
    for k in keys:
        cache.put(k, {"value": {"grade": 1}, "text": "x" * 300, "model": "m", "prompt_id": "p"})
    cache.close()
    return keys


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "warning: cache" in r.getMessage()]


def test_a_truncated_cache_is_salvaged_into_a_fresh_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.sqlite"
    _filled(path)
    data = path.read_bytes()
    path.write_bytes(data[:1000])  # the header survives, the rest is gone
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        cache = Cache(path)
        cache.put("k", {"value": 1})
        assert cache.get("k") == {"value": 1}
    (line,) = _warnings(caplog)
    assert str(path) in line and "damaged" in line and "fresh cache" in line
    assert list(tmp_path.glob("c.sqlite.damaged-*"))  # moved aside, never deleted
    cache.close()


def test_a_file_that_is_not_a_database_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not sqlite at all\n" * 100)
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        cache = Cache(path)
    assert len(cache) == 0 and cache.writable
    (line,) = _warnings(caplog)
    assert "not a database" in line and "0 answer(s) salvaged" in line
    cache.close()


def test_a_corrupted_page_is_salvaged_keeping_the_readable_answers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.sqlite"
    keys = _filled(path)
    page = 4096
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        pages = size // page
        # Scribble over a page in the middle of the answers table.
        f.seek((pages // 2) * page)
        f.write(os.urandom(page))
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        cache = Cache(path)
        found = sum(cache.get(k) is not None for k in keys)
    assert _warnings(caplog), "the damage was found and said"
    assert "malformed" in _warnings(caplog)[0]
    # Most answers survive; the run goes on with the cache (still writable).
    assert found > len(keys) // 2
    cache.put("new", {"value": 2})
    assert cache.get("new") == {"value": 2}
    cache.close()


def test_a_full_disk_turns_the_cache_read_only_without_losing_answers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.sqlite"
    cache = Cache(path)
    cache.put("a", {"value": 1})
    # SQLite's own "database or disk is full": the file may not grow by a page.
    count = cache._db.execute("PRAGMA page_count").fetchone()[0]  # type: ignore[union-attr]
    cache._db.execute(f"PRAGMA max_page_count = {count}")  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        for i in range(50):
            cache.put(f"k{i}", {"value": "y" * 5000})
        assert cache.claim("z") is True  # a cache that cannot record claims grants them
    assert not cache.writable
    (line,) = _warnings(caplog)
    assert "database or disk is full" in line and "continuing without storing" in line
    assert cache.get("a") == {"value": 1}  # reads still work
    cache.close()


def test_the_judge_command_finishes_on_a_damaged_cache(
        httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    httpx2_mock.post(URL).mock(side_effect=grader(rule))
    cache = files["dir"] / "cache.sqlite"
    cache.write_bytes(b"\x00garbage" * 512)
    out = files["dir"] / "o.qrels"
    assert main(base_args(files, "-o", str(out))) == 0
    qrels = read_qrels(out)
    assert len(qrels) == 5
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_the_judge_command_finishes_when_the_cache_cannot_be_written(
        httpx2_mock: respx.Router, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    httpx2_mock.post(URL).mock(side_effect=grader(rule))
    real_connect = Cache._connect

    def full(self: Cache) -> sqlite3.Connection:
        db = real_connect(self)
        count = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {count}")  # no room for one more page...
        try:  # ...and none left in the pages there are
            for i in range(10_000):
                db.execute("INSERT INTO answers VALUES (?, ?, NULL, NULL, 0)", (f"fill{i}", "z" * 64))
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc)
        return db

    monkeypatch.setattr(Cache, "_connect", full)
    out = files["dir"] / "o.qrels"
    judgments = files["dir"] / "j.jsonl"
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        assert main(base_args(files, "-o", str(out), "--judgments", str(judgments))) == 0
    assert len(read_qrels(out)) == 5
    assert len(judgments.read_text().splitlines()) == 5
    lines = _warnings(caplog)
    assert len(lines) == 1 and "database or disk is full" in lines[0]
