"""A SQLite cache (or job store) on a network filesystem is refused with one line pointing to
the Postgres store; ``RAGJUDGE_ALLOW_NETWORK_SQLITE=1`` overrides. ``/proc/mounts`` is faked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragjudge.errors import InputError
from ragjudge.llm import cachestore
from ragjudge.llm.cache import Cache
from ragjudge.llm.cachestore import network_filesystem


def _mounts(tmp: Path, fstype: str) -> str:
    real = os.path.realpath(tmp)
    return ("sysfs /sys sysfs rw 0 0\n"
            "/dev/sda1 / ext4 rw,relatime 0 0\n"
            f"server:/export {real}/shared {fstype} rw,vers=4.2 0 0\n"
            f"//nas/with\\040space {real}/with\\040space cifs rw 0 0\n")


@pytest.mark.parametrize("fstype", ["nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "ceph", "fuse.sshfs"])
def test_network_filesystems_are_recognised(tmp_path: Path, fstype: str) -> None:
    mounts = _mounts(tmp_path, fstype)
    assert network_filesystem(tmp_path / "shared" / "c.sqlite", mounts) == fstype
    assert network_filesystem(tmp_path / "shared" / "not" / "yet" / "c.sqlite", mounts) == fstype
    assert network_filesystem(tmp_path / "local.sqlite", mounts) is None
    assert network_filesystem(tmp_path / "sharedish" / "c.sqlite", mounts) is None  # not a prefix match
    assert network_filesystem(tmp_path / "with space" / "c.sqlite", mounts) == "cifs"


def test_local_filesystems_pass() -> None:
    mounts = "/dev/sda1 / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\noverlay /work overlay rw 0 0\n"
    assert network_filesystem("/tmp/x/c.sqlite", mounts) is None
    assert network_filesystem("/work/c.sqlite", mounts) is None
    assert network_filesystem("/home/u/.cache/c.sqlite", "") is None  # no /proc/mounts: allowed


def test_a_sqlite_cache_on_nfs_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cachestore, "read_mounts", lambda: _mounts(tmp_path, "nfs4"))
    monkeypatch.delenv("RAGJUDGE_ALLOW_NETWORK_SQLITE", raising=False)
    with pytest.raises(InputError) as err:
        Cache(tmp_path / "shared" / "c.sqlite")
    text = str(err.value)
    assert "\n" not in text and "network filesystem (nfs4)" in text
    assert "postgresql://" in text and "RAGJUDGE_ALLOW_NETWORK_SQLITE=1" in text
    assert not (tmp_path / "shared" / "c.sqlite").exists()  # refused before opening anything
    Cache(tmp_path / "local.sqlite").close()  # a local folder is fine

    monkeypatch.setenv("RAGJUDGE_ALLOW_NETWORK_SQLITE", "1")  # people who know
    c = Cache(tmp_path / "shared" / "c.sqlite")
    c.put("k", {"obj": 1})
    assert c.get("k") == {"obj": 1}
    c.close()


def test_the_cli_exits_2_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    monkeypatch.setattr(cachestore, "read_mounts", lambda: _mounts(tmp_path, "cifs"))
    monkeypatch.delenv("RAGJUDGE_ALLOW_NETWORK_SQLITE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "q.tsv").write_text("q1\tquery\n")
    (tmp_path / "c.tsv").write_text("d1\tdoc\n")
    (tmp_path / "r.trec").write_text("q1 Q0 d1 1 1.0 s\n")
    code = main(["judge", "--queries", str(tmp_path / "q.tsv"), "--corpus", str(tmp_path / "c.tsv"),
                 "--run", str(tmp_path / "r.trec"), "--model", "m", "-o", str(tmp_path / "o.qrels"),
                 "--cache", str(tmp_path / "shared" / "c.sqlite"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "network filesystem (cifs)" in err, err


def test_a_sqlite_job_store_on_nfs_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi", reason="the server extra")
    from ragjudge.server.store import open_job_store

    monkeypatch.setattr(cachestore, "read_mounts", lambda: _mounts(tmp_path, "lustre"))
    monkeypatch.delenv("RAGJUDGE_ALLOW_NETWORK_SQLITE", raising=False)
    with pytest.raises(InputError, match=r"SQLite job store on a network filesystem \(lustre\).*--jobs-db"):
        open_job_store(tmp_path / "shared" / "jobs.sqlite")
