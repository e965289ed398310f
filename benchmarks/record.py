"""Run one benchmark script and keep what it printed, so the docs show a run's own output
instead of figures typed from it.

    python benchmarks/record.py bench_dicts.py 9
    python benchmarks/record.py --as bench_judge_busy bench_judge.py --only-busy --burners 24

The script runs as ``python benchmarks/SCRIPT ARGS`` from the checkout's root (its output
streams to the terminal as usual) and its stdout is written to ``benchmarks/results/NAME.txt``
(NAME defaults to the script's stem) under two header lines: the command, and when, at which
commit, on how many CPUs and at what load it ran. Paths of the machine are written as ``.``
(the checkout), ``$TMPDIR`` and ``~``. The docs include these files as they are
(``docs/gen/shell.py: recorded``); a script that fails records nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        # only what runs matters: the package and the benchmark scripts
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "ragjudge", "prompts", "benchmarks/*.py"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return "unknown"
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "") or "unknown"


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--as", dest="name", help="the result's name (default: the script's stem)")
    ap.add_argument("script", help="a script in benchmarks/, e.g. bench_dicts.py")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    opts = ap.parse_args()
    script = HERE / opts.script
    if not script.is_file() or script.parent != HERE:
        print(f"record.py: {opts.script}: no such script in benchmarks/", file=sys.stderr)
        return 2
    name = opts.name or script.stem
    command = " ".join(["python", f"benchmarks/{script.name}", *opts.args])
    started = datetime.now(timezone.utc)
    load_before = _load()
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, str(script), *opts.args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = proc.wait()
    if code != 0:
        print(f"record.py: {command} exited {code}; nothing recorded", file=sys.stderr)
        return code
    minutes = (time.monotonic() - t0) / 60.0
    header = [
        f"$ {command}",
        f"# recorded {started:%Y-%m-%d %H:%M} UTC, commit {_commit()}, {os.cpu_count()} CPUs, "
        f"load {load_before} -> {_load()}, Python {platform.python_version()}, {minutes:.1f} min",
    ]
    # Paths of this machine say nothing to a reader: the checkout is ".", the temp folder $TMPDIR.
    body = "".join(lines).replace(str(ROOT), ".").replace(tempfile.gettempdir(), "$TMPDIR")
    body = body.replace(str(Path.home()), "~")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.txt"
    out.write_text("\n".join(header) + "\n" + body.rstrip("\n") + "\n", encoding="utf-8")
    print(f"record.py: wrote {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
