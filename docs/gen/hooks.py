"""MkDocs hooks: the API reference pages (from ``docs/gen/reference.py``), the executed
notebooks and their figures (from ``examples/``), added to the site at build time so nothing
is copied into ``docs/`` by hand."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference  # noqa: E402  (docs/gen/reference.py, beside this file)


def notebook_page(path: Path) -> str:
    """An executed notebook as a page: its cells and committed outputs as HTML (nbconvert's
    basic template, images inline). Nothing is executed here: the test suite runs them."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    exporter = HTMLExporter(template_name="basic")
    exporter.exclude_input_prompt = exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(nb)
    return (f"*The notebook `examples/{path.name}` with its committed outputs (made by "
            "`python examples/run_notebooks.py`; the test suite executes every notebook "
            "again).*\n\n<div class=\"notebook\" markdown=\"0\">\n"
            + body + "\n</div>\n")


# A line of benchmarks/README.md that names a recording: on GitHub a link to the file, on the
# site the recording itself (a link to a file outside docs/ would not resolve there).
_RECORDING = re.compile(r"^Recorded run: \[`results/([\w-]+)\.txt`\]\(results/\1\.txt\)\.?$", re.M)


def benchmark_scripts_page() -> str:
    """``benchmarks/README.md`` with each ``Recorded run:`` line replaced by what the script
    printed (``benchmarks/results/NAME.txt``, as ``benchmarks/record.py`` kept it)."""
    _gen_on_path()
    import shell

    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    return _RECORDING.sub(lambda m: (f"Recorded run (`benchmarks/results/{m.group(1)}.txt`):\n\n"
                                     f"```text\n{shell.recorded(m.group(1))}\n```"), text)


@event_priority(100)
def on_files(files: Files, config: Any) -> Files:
    table = reference.entries()
    for page, package in reference.PAGES:
        files.append(File.generated(config, f"reference/{page}.md",
                                    content=reference.page_text(page, package, table[page])))
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        files.append(File.generated(config, f"notebooks/{nb.stem}.md", content=notebook_page(nb)))
    # benchmarks/README.md (each script, what it measures, its recorded runs) as a page
    files.append(File.generated(config, "benchmark-scripts.md", content=benchmark_scripts_page()))
    for fig in sorted((ROOT / "examples" / "figures").glob("*.png")):
        files.append(File.generated(config, f"figures/{fig.name}", abs_src_path=str(fig)))
    return files


def _gen_on_path() -> None:
    """Put this folder (``shell``, ``reference``) on sys.path again: a plugin may have reset it
    since this module was loaded."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)


def on_config(config: Any) -> Any:
    """The build's own caches (matplotlib, Jupyter, IPython) in a temporary folder: building
    the site writes nothing in the home folder."""
    import os
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="ragjudge-docs-home-"))
    for var, sub in (("MPLCONFIGDIR", "matplotlib"), ("XDG_CACHE_HOME", "cache"),
                     ("IPYTHONDIR", "ipython")):
        os.environ[var] = str(home / sub)
    return config


def on_page_markdown(markdown: str, page: Any = None, **kwargs: Any) -> str:
    _gen_on_path()  # the pages' executed blocks import ``shell`` from here
    import blocks

    src = getattr(getattr(page, "file", None), "abs_src_path", None)
    if src and Path(src).resolve() in {p.resolve() for p in blocks.guide_pages()}:
        # every shell and Python block of a guide runs as written, or says why not
        found = blocks.problems(Path(src))
        if found:
            raise RuntimeError("\n".join(found))
        blocks.run_page(Path(src))
    return markdown
