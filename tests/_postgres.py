"""A real PostgreSQL server for the tests that need one (Debian's ``postgresql`` package).

:func:`postgres_server` starts one server per test process on first use (``initdb`` into a
temporary folder, a free port on 127.0.0.1 and a unix socket in that folder, ``trust`` auth),
stopped at exit. As root, initdb refuses to run: the server then runs as the ``postgres``
system user (created by the package) through ``runuser``/``su``. :func:`fresh_database` gives
each test its own database. Without the binaries (or without psycopg) the test is skipped with
the reason.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest


def postgres_bin() -> Path | None:
    """The folder of initdb / pg_ctl: ``$PG_BIN``, Debian's newest version, or ``PATH``."""
    env = os.environ.get("PG_BIN")
    if env and (Path(env) / "initdb").is_file():
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("initdb")
    return Path(which).parent if which else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One throwaway PostgreSQL server (see the module's docstring)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="ragjudge-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user: str | None = None  # the system user running the server (None: ourselves)
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no 'postgres' user for initdb") from None
            self.user = "postgres"
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o755)

    def _as_server_user(self, args: list[str]) -> list[str]:
        if self.user is None:
            return args
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", self.user, "--", *args]
        import shlex

        return ["su", self.user, "-s", "/bin/sh", "-c", shlex.join(args)]

    def start(self) -> PostgresServer:
        run = lambda args: subprocess.run(self._as_server_user(args), capture_output=True,  # noqa: E731
                                          text=True, timeout=120, cwd=self.root)
        out = run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                   "--auth=trust", "-E", "UTF8", "--no-sync"])
        if out.returncode:
            raise RuntimeError(f"initdb failed: {out.stderr.strip() or out.stdout.strip()}")
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        out = run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
                   "-o", opts, "-w", "-t", "60", "start"])
        if out.returncode:
            log = (self.root / "log").read_text(errors="replace") if (self.root / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stderr.strip()} {log[-2000:]}")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            subprocess.run(self._as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.data),
                                                 "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60, cwd="/")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_SERVER: list[PostgresServer] = []


def postgres_server() -> PostgresServer:
    """The test process's server (started once); skips the test when it cannot be had."""
    pytest.importorskip("psycopg", reason="the Postgres tests need psycopg (pip install -e '.[dev]')")
    if not _SERVER:
        bindir = postgres_bin()
        if bindir is None:
            pytest.skip("PostgreSQL binaries not found (apt-get install postgresql, or set $PG_BIN "
                        "to the folder of initdb and pg_ctl)")
        try:
            server = PostgresServer(bindir).start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"could not start PostgreSQL from {bindir}: {exc}")
        _SERVER.append(server)
        atexit.register(server.stop)
    return _SERVER[0]


def fresh_database() -> str:
    """The URL of a new, empty database on the test server."""
    return postgres_server().create_database(f"t_{uuid.uuid4().hex[:12]}")


def wait_until(predicate, timeout: float = 10.0, every: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())
