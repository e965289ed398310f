"""Execute the example notebooks in place, storing their outputs (what is committed).

``python examples/run_notebooks.py [NAME.ipynb ...]`` from the repository root; the kernel is
``python3`` of this interpreter (``pip install -e '.[plot,pandas]' ipykernel nbclient`` first). LLM answers come
from ``examples/cache/``: no API key, no network. The figure of a cell whose metadata has
``"figure": "NAME.png"`` is also written to ``examples/figures/NAME.png`` (the README shows them).
"""

from __future__ import annotations

import base64
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

EX = Path(__file__).resolve().parent


def execute(path: Path, *, timeout: int = 120) -> nbformat.NotebookNode:
    """Run every cell of ``path`` (working directory: examples/); raises on the first error."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(EX)}}).execute()
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
