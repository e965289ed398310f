"""Execute the example notebooks in place, storing their outputs (what is committed).

``python examples/run_notebooks.py [NAME.ipynb ...]`` from the repository root; the kernel is
``python3`` of this interpreter (``pip install -e '.[plot,pandas]' ipykernel nbclient`` first). LLM answers come
from ``examples/cache/``: no API key, no network. The figure of a cell whose metadata has
``"figure": "NAME.png"`` is also written to ``examples/figures/NAME.png`` (the README shows them).
The kernel runs with a home folder of its own (a temporary one, with matplotlib's, IPython's and
the XDG caches in it), as the docs build does: running the notebooks writes nothing in yours.
"""

from __future__ import annotations

import base64
import os
import re
import site
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

EX = Path(__file__).resolve().parent


def kernel_env(home: Path) -> dict[str, str]:
    """The kernel's environment: this one with ``home`` as its home folder and the folders
    matplotlib, IPython and other libraries keep their caches and settings in under it. Packages
    installed with ``pip install --user`` stay importable (``PYTHONUSERBASE`` keeps the real
    user base)."""
    env = dict(os.environ)
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    env["HOME"] = str(home)
    for var, sub in (("MPLCONFIGDIR", "matplotlib"), ("IPYTHONDIR", "ipython"),
                     ("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"),
                     ("XDG_DATA_HOME", "data")):
        env[var] = str(home / sub)
    return env


def execute(path: Path, *, timeout: int = 120) -> nbformat.NotebookNode:
    """Run every cell of ``path`` (working directory: examples/) in a kernel with a temporary
    home folder (:func:`kernel_env`); raises on the first error."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="ragjudge-notebook-home-") as home:
        env = kernel_env(Path(home))
        saved = dict(os.environ)
        os.environ.update(env)  # this process too: finding the kernel makes IPython's folder
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(EX)}}).execute(env=env)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return nb


def _export_figure(cell: nbformat.NotebookNode) -> None:
    name = cell.get("metadata", {}).get("figure")
    images = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    if name and images:
        (EX / "figures").mkdir(exist_ok=True)
        (EX / "figures" / name).write_bytes(base64.b64decode(images[-1]))


# A warning in a cell's stderr names the kernel's temporary file ("/tmp/ipykernel_1/2.py:3:
# EvaluationWarning: ...") and repeats the source line: kept as the one line that matters.
_WARNING = re.compile(r"^\S+:\d+: (\w+Warning: .*)\n(?:  .*\n)?", re.M)


def _tidy(cell: nbformat.NotebookNode) -> None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            out["text"] = _WARNING.sub(r"\1\n", out["text"])


def main(argv: list[str]) -> int:
    paths = [EX / a for a in argv] if argv else sorted(EX.glob("*.ipynb"))
    for path in paths:
        start = time.perf_counter()
        nb = execute(path)
        for cell in nb.cells:  # execution metadata changes on every run: keep diffs small
            cell.get("metadata", {}).pop("execution", None)
            _tidy(cell)
            _export_figure(cell)
        nbformat.write(nb, path)
        print(f"{path.name}: {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
