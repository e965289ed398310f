"""The nugget views in headless Chromium: ``ragjudge ui`` over a nugget to-label file and the
LLM's assignments as a real process, driven with the keyboard (Playwright's Python package on
Debian's /usr/bin/chromium; no browser download).

Opens an answer with its nuggets and the model's reasons; assigns nuggets with the keys, blind
(no LLM assignment on the page), undoes, reloads and finds them saved; turns review on (the
model's assignments appear, the choice is in the log and on the next label); assigns every
nugget until the PPI interval of each run shows."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from _nugget_data import make_nugget_workspace

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img" if os.environ.get("RAGJUDGE_SCREENSHOTS") == "docs" else \
    Path(tempfile.gettempdir()) / "ragjudge-ui-screenshots"
CHROMIUM = os.environ.get("RAGJUDGE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

pytestmark = pytest.mark.slow
pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install -e '.[dev]')")
if not Path(CHROMIUM).exists():
    pytest.skip("needs Chromium at /usr/bin/chromium (apt-get install -y chromium chromium-driver)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("uinb")
    ws = make_nugget_workspace(tmp)
    env = {k: v for k, v in os.environ.items() if k != "RAGJUDGE_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "ragjudge", "ui", str(ws["tolabel"]), str(ws["llm"])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
    try:
        url = None
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            lines.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+/ui/#token=\S+)", line)
            if m:
                url = m.group(1)
                break
            if not line and proc.poll() is not None:
                break
        assert url, "".join(lines)
        import httpx

        base = url.split("#")[0]
        for _ in range(200):
            try:
                if httpx.get(base, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url, tmp / "nuggets_to_label.labels.jsonl"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def page(server: tuple[str, Path]):  # type: ignore[no-untyped-def]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        pg = ctx.new_page()
        outside: list[str] = []
        pg.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("http://127.0.0.1", "blob:", "data:")) else None)
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(server[0])
        yield pg
        assert not outside, outside
        assert not errors, errors
        browser.close()


def _shot(pg, name: str) -> None:  # type: ignore[no-untyped-def]
    assert pg.evaluate("document.documentElement.scrollWidth") <= 1280, name
    assert "[object " not in pg.locator("main").inner_text(), name
    IMG.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(IMG / f"ui-{name}.png"), full_page=False)


def _press(pg, key: str, expect: int) -> None:  # type: ignore[no-untyped-def]
    pg.keyboard.press(key)
    sync_api.expect(pg.locator("#progress-text")).to_have_text(re.compile(rf"^{expect} of"))


def _progress(pg) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    words = pg.locator("#progress-text").inner_text().split()
    return int(words[0]), int(words[2])


def _open_first_answer(pg) -> None:  # type: ignore[no-untyped-def]
    """The answers view, then the first answer of topic t1 (a sampled one: seeing its nuggets
    is review, recorded for whoever labels it)."""
    pg.click("nav >> text=Answers")
    pg.wait_for_selector("#answers")
    assert pg.locator("#answers tr").count() == 13  # the header and 12 answers
    pg.locator("#answers a", has_text="t1").first.click()
    pg.wait_for_selector("#answer-nuggets")


def test_answer_view_shows_nuggets_and_the_models_reasons(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    pg.wait_for_selector("text=Views")
    _open_first_answer(pg)
    text = pg.locator("#answer-nuggets").inner_text()
    assert "overlap of" in text and "vital" in text
    assert pg.locator("#answer-nuggets tr").count() == 6  # the header and 5 nuggets
    assert "recorded" in pg.locator("#sampled").inner_text()  # a sampled answer: seeing it is review
    _shot(pg, "nugget-answer")


def test_assign_with_keys_blind_undo_reload_review_and_ppi(page, server) -> None:  # type: ignore[no-untyped-def]
    pg = page
    log: Path = server[1]
    # The test stands alone (xdist may run it on a fresh server): it opens the sampled answer
    # itself; after the first test, on the same server, that is the same answer again.
    _open_first_answer(pg)
    pg.click("nav >> text=Assign nuggets")
    pg.wait_for_selector("#progress-text")
    assert pg.locator("#nuggets .llm").count() == 0 and "overlap of" not in pg.locator("main").inner_text()
    pg.fill("#who", "ana")
    pg.locator("#query").click()  # keys go to the page, not the name field
    assert _progress(pg)[0] == 0
    for n, key in enumerate(["y", "n", "p", "3"], 1):
        _press(pg, key, n)
    _press(pg, "u", 3)  # takes back the last one
    _press(pg, "1", 4)
    pg.reload()
    pg.wait_for_selector("#progress-text")
    assert _progress(pg)[0] == 4  # saved as given, resumed after reload
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["assignment"] for r in recs if r["op"] == "label"] == [
        "support", "not_support", "partial_support", "not_support", "support"]
    # blind: a label carries llm_shown only where the model's assignments were seen (the
    # answers view opened one sampled answer, for whoever labels it)
    seen = {(r["qid"], r["run_id"]) for r in recs if r["op"] == "reveal"}
    assert len(seen) == 1 and all(r["op"] == "label" or r["who"] == "" for r in recs if r["op"] == "reveal")
    assert all(r["who"] == "ana" and r["llm_shown"] == ((r["qid"], r["run_id"]) in seen)
               for r in recs if r["op"] == "label")
    # review: the model's assignments and reasons appear, and the choice is recorded
    pg.locator("#query").click()
    pg.keyboard.press("r")
    pg.wait_for_selector("#nuggets .llm")
    assert "overlap of" in pg.locator("#nuggets").inner_text()
    _shot(pg, "nugget-label")
    done, total = _progress(pg)
    _press(pg, "n", done + 1)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert any(r["op"] == "reveal" and r["who"] == "ana" for r in recs)
    assert [r for r in recs if r["op"] == "label"][-1]["llm_shown"] is True
    # assign every remaining nugget; the next answer starts blind again
    for n in range(done + 2, total + 1):
        _press(pg, "ynp"[n % 3], n)
        if n == done + 8:
            assert pg.locator("#nuggets .llm").count() == 0 and not pg.is_checked("#review")
    pg.wait_for_selector("#ppi-table .ppi-ci")
    cis = pg.locator("#ppi-table .ppi-ci").all_inner_texts()
    assert len(cis) == 3
    for ci in cis:
        lo, hi = (float(x) for x in re.findall(r"-?\d+\.\d+", ci))
        assert lo <= hi
    assert "Estimand" in pg.locator("#ppi").inner_text()
