"""The guides run as written: every shell and Python block of a tutorial, a how-to, a concept
page or the getting-started page is run by the docs build (markdown-exec, or ``<!-- run -->``:
run as written) or says why not (``<!-- not run: REASON -->``); see ``docs/gen/blocks.py``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))

import blocks  # noqa: E402  (docs/gen/blocks.py)
import shell  # noqa: E402  (docs/gen/shell.py)

PAGES = blocks.guide_pages()


@pytest.fixture(autouse=True)
def _simulator_freed():  # type: ignore[no-untyped-def]
    """The pages' simulator listens on the port they print (8765), under a lock other processes
    wait for (the docs build in another test worker): each test frees it as it ends."""
    yield
    shell.stop()


def test_the_check_finds_an_unmarked_block() -> None:
    page = "# x\n\n```sh\nragjudge evaluate a b\n```\n\n<!-- not run -->\n```python\nx = 1\n```\n"
    found = blocks.problems(ROOT / "docs" / "x.md", page)
    assert len(found) == 2 and "neither run" in found[0] and "needs a reason" in found[1]
    ok = "<!-- run -->\n```sh\nls\n```\n\n```python exec=\"on\"\nprint(1)\n```\n```json\n{}\n```\n"
    assert blocks.problems(ROOT / "docs" / "x.md", ok) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT / "docs").as_posix())
def test_every_block_of_a_guide_runs_or_says_why_not(page: Path) -> None:
    assert blocks.problems(page) == []


def test_no_page_installs_the_unrelated_package() -> None:
    # `pip install ragjudge[...]` installs an unrelated project from the package index
    bad = re.compile(r"ragjudge\[")  # extras install from the checkout: pip install -e '.[x]'
    texts = {p: p.read_text("utf-8") for p in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]}
    assert [str(p) for p, t in texts.items() if bad.search(t)] == []


def test_the_venv_is_activated_once_and_used_alike() -> None:
    # the first steps activate the venv; every other guide then types bare commands
    start = (ROOT / "docs" / "getting-started.md").read_text("utf-8")
    assert "source .venv/bin/activate" in start
    others = [p for p in PAGES if p.name != "getting-started.md"]
    assert [str(p) for p in others if ".venv/bin/" in p.read_text("utf-8")] == []


def test_the_offline_page_starts_the_simulator_and_every_llm_tutorial_links_it() -> None:
    offline = ROOT / "docs" / "how-to" / "offline.md"
    assert "python -m ragjudge.testing.simulator" in offline.read_text("utf-8")
    for name in ("llm-judge", "rag-metrics", "synthetic", "label-free"):
        text = (ROOT / "docs" / "tutorials" / f"{name}.md").read_text("utf-8")
        assert "../how-to/offline.md" in text, name


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT / "docs").as_posix())
def test_the_run_blocks_of_a_guide_succeed(page: Path) -> None:
    pytest.importorskip("aiohttp", reason="pages run the loopback simulator (aiohttp)")
    blocks.run_page(page)
