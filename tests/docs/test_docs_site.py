"""The documentation site: every public name has a reference entry with a docstring, the
README is a landing page that links into the site, committed notebook outputs hold no machine
paths, and the site builds strictly (links, anchors, references, the commands whose outputs
the pages show)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))

import reference  # noqa: E402  (docs/gen/reference.py: the reference pages' entries)


def test_every_public_name_has_a_reference_entry_and_a_docstring() -> None:
    import importlib

    table = reference.entries()
    missing_doc = []
    for page, package in reference.PAGES:
        mod = importlib.import_module(package)
        assert [name for name, _, _ in table[page]] == list(mod.__all__), package
        for name, path, _ in table[page]:
            obj = getattr(mod, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
                missing_doc.append(f"{package}.{name}")
    assert missing_doc == [], f"public names without a docstring: {missing_doc}"
    # and every public subpackage has a page
    pkgs = {p.parent.relative_to(ROOT).as_posix().replace("/", ".")
            for p in (ROOT / "ragjudge").rglob("__init__.py")}
    internal = {"ragjudge.cli", "ragjudge.server.ui", "ragjudge.rag.metrics", "ragjudge.io"}
    covered = {package for _, package in reference.PAGES}
    assert sorted(pkgs - covered - internal - {"ragjudge.measures"}) == []


def test_readme_is_a_landing_page_linking_into_the_site() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 15
    for link in links:
        assert (ROOT / link).is_file(), link
    assert "mkdocs serve" in text


def test_committed_notebook_outputs_hold_no_machine_paths() -> None:
    pattern = re.compile(r"(/work/|/home/|/root/|/tmp/|/Users/|[A-Z]:\\\\)")
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                text = json.dumps(out)
                assert not pattern.search(text), f"{nb.name}: {pattern.search(text).group(0)!r} in an output"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra builds the site (pip install -e '.[docs]')")
    pytest.importorskip("aiohttp", reason="pages run the loopback simulator (aiohttp)")
    site = tmp_path / "site"
    home = tmp_path / "home"  # the build must leave nothing in the home folder
    home.mkdir()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HOME": str(home)}
    for var in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "IPYTHONDIR", "RAGJUDGE_CACHE"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page, _ in reference.PAGES:
        assert (site / "reference" / page / "index.html").is_file(), page
    label_free = (site / "tutorials" / "label-free" / "index.html").read_text(encoding="utf-8")
    for command in ("$ ragjudge agree", "--ppi", "$ ragjudge plan-labels", "--soft sim.jsonl"):
        assert command in label_free, command
    assert "Monte-Carlo draws" in label_free  # an output, not only a command
    for nb in ("quickstart", "label_free", "rag", "synthetic"):
        assert (site / "notebooks" / nb / "index.html").is_file()
    assert not list(site.rglob("*.ipynb"))
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []


def test_the_formats_page_names_runs_as_the_reader_does(tmp_path: Path) -> None:
    import gzip

    import ragjudge

    path = tmp_path / "bm25.trec.gz"
    with gzip.open(path, "wt") as f:
        f.write("q1 Q0 d1 1 1.0 tag\n")
    name = ragjudge.read_run(path).name
    page = (ROOT / "docs" / "how-to" / "formats.md").read_text(encoding="utf-8")
    assert f"`runs/bm25.trec.gz` -> `{name}`" in page and f'run.name == "{name}"' in page


def test_benchmark_figures_are_recorded_runs_not_typed() -> None:
    """The performance page shows what the scripts printed (benchmarks/results/, written by
    benchmarks/record.py), never a table typed from a run; each recording names a script that
    exists and when, where and at which commit it ran, and holds no machine path."""
    results = ROOT / "benchmarks" / "results"
    header = re.compile(r"# recorded \d{4}-\d\d-\d\d \d\d:\d\d UTC, commit \w+.*, \d+ CPUs, load .*")
    pages = [p for p in (ROOT / "docs").rglob("*.md")]
    used = {name for p in pages for name in re.findall(r'shell\.recorded\("([\w-]+)"', p.read_text("utf-8"))}
    # benchmarks/README.md (a page of the site) names its recordings; the docs build inlines them
    scripts = (ROOT / "benchmarks" / "README.md").read_text("utf-8")
    marked = set(re.findall(r"^Recorded run: \[`results/([\w-]+)\.txt`\]\(results/\1\.txt\)\.?$", scripts, re.M))
    assert {"bench_core", "bench_parse", "bench_startup", "bench_dicts"} <= marked
    used |= marked
    assert "printed, on" not in scripts, "a benchmark's output typed into benchmarks/README.md"
    assert {"bench_core", "bench_judge", "bench_rag", "bench_dicts", "bench_server"} <= used
    machine = re.compile(r"(/work/|/home/|/root/|/tmp/|/Users/|[A-Z]:\\\\)")
    for name in sorted(used):
        path = results / f"{name}.txt"
        assert path.is_file(), f"docs show {name}, but {path} was never recorded"
        first, second, *_ = path.read_text("utf-8").splitlines()
        script = re.match(r"\$ python benchmarks/(\w+\.py)", first)
        assert script and (ROOT / "benchmarks" / script.group(1)).is_file(), (name, first)
        assert header.fullmatch(second), (name, second)
        assert not machine.search(path.read_text("utf-8")), (name, machine.search(path.read_text("utf-8")))
    perf = (ROOT / "docs" / "benchmarks.md").read_text("utf-8")
    assert not [line for line in perf.splitlines() if line.startswith("|")], "a typed table on the performance page"


def test_the_readme_names_every_core_dependency() -> None:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["dependencies"]
    names = [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in deps]
    text = (ROOT / "README.md").read_text("utf-8")
    para = text[text.index("Core dependencies:"):].split("\n\n", 1)[0]
    assert [n for n in names if n not in para] == []
