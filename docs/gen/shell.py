"""Commands run while the docs are built (markdown-exec ``python`` blocks print :func:`sh`), so
the outputs shown in the pages are produced, never typed. Each page's session has its own
working folder with ``examples/`` and ``benchmarks/`` linked in; the simulator, where a page
needs an "LLM", is the project's loopback simulator (deterministic noise, plumbing not quality)."""

from __future__ import annotations

import atexit
import fcntl
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the environment building the docs has ragjudge installed
_DIRS: dict[str, Path] = {}
_PROCS: list[subprocess.Popen] = []
_LOCKS: list[int] = []  # open lock files, one per port this process's simulator holds


def workdir(session: str) -> Path:
    """The working folder of a page's session (``examples`` and ``benchmarks`` linked in)."""
    if session not in _DIRS:
        d = Path(tempfile.mkdtemp(prefix=f"ragjudge-docs-{session}-"))
        for name in ("examples", "benchmarks"):
            (d / name).symlink_to(ROOT / name)
        _DIRS[session] = d
    return _DIRS[session]


def env() -> dict[str, str]:
    """What a reader's shell has after activating the venv (its ``bin`` first on ``PATH``),
    with ``HOME`` and the caches in the build's own folders: the build writes nothing in the
    home folder."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGJUDGE_"))}
    out["PATH"] = f"{BIN}{os.pathsep}{out.get('PATH', '')}"
    out["VIRTUAL_ENV"] = str(BIN.parent)
    out["RAGJUDGE_CACHE"] = str(workdir("cache") / "judgments.sqlite")
    out["HOME"] = str(workdir("home"))
    out["MPLCONFIGDIR"] = str(workdir("home") / ".matplotlib")
    out["XDG_CACHE_HOME"] = str(workdir("home") / ".cache")
    out["COLUMNS"] = "200"
    return out


_env = env


def sh(command: str, session: str = "docs", *, shown: str | None = None, stderr: bool = True,
       ok: tuple[int, ...] = (0,), lines: int | None = None) -> str:
    """Run ``command`` with bash in the session's folder; ``$ command`` and what it wrote
    (stdout, then stderr), as a terminal shows it (the page's block prints it). ``shown`` replaces the command line
    in the page; ``lines`` keeps the first lines of the output ("..." marks the cut). A
    command that fails fails the build."""
    proc = subprocess.run(["bash", "-c", command], cwd=workdir(session), env=_env(),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode not in ok:
        raise RuntimeError(f"docs command failed ({proc.returncode}): {command}\n{proc.stderr}")
    out = proc.stdout + (proc.stderr if stderr else "")
    text = out.rstrip("\n").splitlines()
    if lines is not None and len(text) > lines:
        text = text[:lines] + ["..."]
    return "\n".join(["$ " + (shown or command), *text])


def simulator(port: int = 8765) -> str:
    """Start the loopback simulator once (ended by :func:`stop` or when the build ends); its
    base URL. The pages print the port, so two processes building or testing pages at once (a
    docs build beside the test suite's workers) take turns: each holds a lock on the port from
    here to :func:`stop`, and never leans on a simulator another process may end mid-page."""
    url = f"http://127.0.0.1:{port}/v1"
    if any(getattr(p, "port", None) == port for p in _PROCS):
        return url
    _LOCKS.append(_lock(Path(tempfile.gettempdir()) / f"ragjudge-docs-simulator-{port}.lock"))
    # the command "Try the LLM features offline" gives a reader
    proc = subprocess.Popen([sys.executable, "-m", "ragjudge.testing.simulator", "--port",
                             str(port), "--latency", "0.01"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env())
    proc.port = port  # type: ignore[attr-defined]
    _PROCS.append(proc)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return url
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the loopback simulator did not start")


def _lock(path: Path, wait: float = 1800) -> int:
    """An exclusive lock on ``path`` (released by :func:`stop`, or by the system when the
    process ends, however it ends); waits up to ``wait`` s for another holder, e.g. a whole
    docs build."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise RuntimeError(f"{path}: another process has held the docs simulator's port "
                                   f"for {wait:.0f} s") from None
            time.sleep(0.2)


def quote(*args: str) -> str:
    """Shell-quoted arguments."""
    return " ".join(shlex.quote(a) for a in args)


def recorded(name: str, start: str | None = None) -> str:
    """What a benchmark printed, as ``benchmarks/record.py`` kept it
    (``benchmarks/results/NAME.txt``: the command, when and where it ran, its output). Long
    benchmarks cannot run in a docs build; their pages show a run's own output, never figures
    typed from it. ``start`` shows the output from its first line starting so (its summary),
    after the two header lines. A missing recording or ``start`` fails the build."""
    path = ROOT / "benchmarks" / "results" / f"{name}.txt"
    if not path.is_file():
        raise RuntimeError(f"no recorded benchmark {path} (python benchmarks/record.py ...)")
    lines = path.read_text(encoding="utf-8").rstrip("\n").splitlines()
    if start is not None:
        at = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
        if at is None:
            raise RuntimeError(f"{path}: no line starts with {start!r}")
        lines = lines[:2] + ["[... per-scenario lines left out; the summary:]"] + lines[at:]
    return "\n".join(lines)


@atexit.register
def stop() -> None:
    """End the simulators this process started and free their ports for other processes."""
    while _PROCS:
        proc = _PROCS.pop()
        proc.kill()
        proc.wait()
    while _LOCKS:
        os.close(_LOCKS.pop())  # closing the file releases its lock
