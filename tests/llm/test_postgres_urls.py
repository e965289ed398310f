"""``postgresql://`` URLs where a cache or job store is named, without a server: the optional
driver's one-line error, passwords kept out of messages, and the URL surviving
``$RAGJUDGE_CACHE`` and the service's settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ragjudge.llm.cache as cache_module
import ragjudge.llm.session as session_module
from ragjudge.errors import InputError
from ragjudge.llm.cache import Cache, default_cache_path, open_cache
from ragjudge.llm.fake import MemoryCache
from ragjudge.llm.postgres import redact_url

URL = "postgresql://judge:s3cret@db.internal:5432/ragjudge"


def test_a_missing_driver_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(InputError) as err:
        open_cache(URL)
    assert str(err.value) == ("a postgresql:// store needs psycopg: pip install -e '.[postgres]' "
                              "in the ragjudge checkout")


def test_the_cli_exits_2_without_the_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "q.tsv").write_text("q1\tquery\n")
    (tmp_path / "c.tsv").write_text("d1\tdoc\n")
    (tmp_path / "r.trec").write_text("q1 Q0 d1 1 1.0 s\n")
    code = main(["judge", "--queries", str(tmp_path / "q.tsv"), "--corpus", str(tmp_path / "c.tsv"),
                 "--run", str(tmp_path / "r.trec"), "--model", "m", "-o", str(tmp_path / "o.qrels"),
                 "--cache", URL, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install -e '.[postgres]'" in err, err


def test_passwords_are_redacted() -> None:
    assert redact_url(URL) == "postgresql://judge:***@db.internal:5432/ragjudge"
    assert redact_url("postgresql://h/db?user=u&password=p&sslmode=require") == \
        "postgresql://h/db?user=u&password=***&sslmode=require"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"


class _Opened(MemoryCache):
    """Stands in for PostgresCache: records the URL it was opened with, connects nowhere."""

    def __init__(self, url: str, *, claim_ttl: float = 30.0) -> None:
        super().__init__()
        self.url, self.claim_ttl = url, claim_ttl


def _record_opens(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every target the one opener is given, with PostgresCache replaced by :class:`_Opened`."""
    seen: list[object] = []

    def opener(target: object = True, **kw: object) -> object:
        seen.append(target)
        return open_cache(target, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_module, "PostgresCache", _Opened)
    monkeypatch.setattr(session_module, "open_cache", opener)
    return seen


def test_a_url_in_the_environment_stays_a_url_down_to_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragjudge.llm import LLM

    monkeypatch.setenv("RAGJUDGE_CACHE", "postgresql://u@h/db")
    assert default_cache_path() == "postgresql://u@h/db" and isinstance(default_cache_path(), str)
    seen = _record_opens(monkeypatch)
    llm = LLM("m", check_key=False)  # cache=True: the default target
    assert seen == [True] and isinstance(llm.cache, _Opened) and llm.cache.url == "postgresql://u@h/db"
    llm = LLM("m", cache="postgresql://v@h/db", check_key=False)
    assert seen[-1] == "postgresql://v@h/db" and llm.cache.url == "postgresql://v@h/db"
    monkeypatch.setenv("RAGJUDGE_CACHE", "~/c.sqlite")
    assert default_cache_path() == Path("~/c.sqlite").expanduser()


def test_cache_is_the_sqlite_store_only(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="open_cache"):
        Cache(URL)
    assert isinstance(open_cache(tmp_path / "c.sqlite"), Cache)
    assert isinstance(open_cache(str(tmp_path / "d.sqlite")), Cache)
    with pytest.raises(InputError, match="lost its '//'") as err:  # Path() folded the URL
        Cache(Path("postgresql://u@h/db"))
    assert err.value.field == "cache" and not (tmp_path / "postgresql:").exists()


def test_server_settings_resolve_the_cache_as_the_library_does(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    import ragjudge.server.settings as settings_module
    from ragjudge.server.models import ModelSettings
    from ragjudge.server.service import build_llm
    from ragjudge.server.settings import ServerSettings

    assert settings_module.default_cache_path is cache_module.default_cache_path
    assert settings_module.cache_target is cache_module.cache_target
    for env in ("postgresql://u@h/db", str(tmp_path / "env.sqlite"), None):
        if env is None:
            monkeypatch.delenv("RAGJUDGE_CACHE", raising=False)
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        else:
            monkeypatch.setenv("RAGJUDGE_CACHE", env)
        assert ServerSettings().cache_path() == default_cache_path()
    monkeypatch.setenv("RAGJUDGE_CACHE", "postgresql://u@h/db")
    seen = _record_opens(monkeypatch)
    llm = build_llm(ServerSettings(model="m"), ModelSettings(), check_key=False)
    assert seen == ["postgresql://u@h/db"] and llm.cache.url == "postgresql://u@h/db"
    with pytest.raises(InputError, match="unknown cache scheme 'mysql://'") as err:
        ServerSettings(cache="mysql://u:S3cretPw99@h/db").cache_path()
    assert err.value.field == "--cache" and "S3cretPw99" not in str(err.value)
    monkeypatch.setenv("RAGJUDGE_CACHE", "mysql://u:S3cretPw99@h/db")
    with pytest.raises(InputError) as err:
        ServerSettings().jobs_path()
    assert err.value.field == "$RAGJUDGE_CACHE" and "S3cretPw99" not in str(err.value)


def test_server_settings_keep_urls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ragjudge.server.settings import ServerSettings

    monkeypatch.delenv("RAGJUDGE_CACHE", raising=False)
    s = ServerSettings(cache=URL)
    assert s.cache_path() == URL and s.jobs_path() == URL  # jobs beside the cache: same database
    s = ServerSettings(cache=str(tmp_path / "c.sqlite"), jobs_db=URL)
    assert s.cache_path() == tmp_path / "c.sqlite" and s.jobs_path() == URL
    assert ServerSettings(cache=str(tmp_path / "c.sqlite")).jobs_path() == tmp_path / "jobs.sqlite"
    monkeypatch.setenv("RAGJUDGE_CACHE", URL)
    assert ServerSettings().cache_path() == URL and ServerSettings().jobs_path() == URL
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(InputError, match=r"pip install -e '\.\[postgres\]'"):
        ServerSettings(jobs_db=URL).check()  # before the server starts


@pytest.mark.parametrize("password", ["Sup3r S3cretPw", "Sup3r%ZZS3cretPw", "Sup3r@S3cretPw"],
                         ids=["space", "bad-percent", "bare-at"])
def test_a_password_the_driver_quotes_is_not_in_the_error(password: str) -> None:
    # libpq quotes the part of the URL it cannot parse: the password itself, or what follows
    # a bare "@" in it (read as the host).
    pytest.importorskip("psycopg")
    with pytest.raises(InputError) as err:
        open_cache(f"postgresql://judge:{password}@127.0.0.1:9/db")
    assert "S3cretPw" not in str(err.value) and "@127.0.0.1:9/db" in str(err.value), str(err.value)


@pytest.mark.parametrize("target", ["mysql://u:S3cretPw99@127.0.0.1/db", "redis://:S3cretPw99@h:6379/0",
                                    "host=127.0.0.1 port=5432 password=S3cretPw99"])
def test_a_target_of_another_store_is_refused_not_made_a_file(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It used to become a SQLite file under ./mysql:/..., the password in its name.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        Cache(target)
    assert "S3cretPw99" not in str(err.value) and not list(tmp_path.iterdir())
    monkeypatch.setenv("RAGJUDGE_CACHE", target)
    with pytest.raises(InputError) as err:
        open_cache()
    assert err.value.field == "$RAGJUDGE_CACHE"
    assert "S3cretPw99" not in str(err.value) and not list(tmp_path.iterdir())


def test_a_password_the_driver_quotes_is_not_in_the_job_store_error() -> None:
    pytest.importorskip("psycopg")
    from ragjudge.server.store import open_job_store

    with pytest.raises(InputError) as err:
        open_job_store("postgresql://judge:Sup3r S3cretPw@127.0.0.1:9/db")
    assert "S3cretPw" not in str(err.value) and "cannot open the job store" in str(err.value)
