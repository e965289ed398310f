"""End to end in headless Chromium: ``ragjudge ui`` as a real process, the page driven with the
keyboard (Playwright's Python package on Debian's /usr/bin/chromium; no browser download).

Opens a result, drills into a query (a hostile passage stays text), looks at agreement, labels
five pairs with the keys, reloads and finds them saved, labels on until the PPI interval shows,
and times 50 labels. Screenshots of every view go to a temporary folder, or to docs/img/ui-*.png
(the ones the docs show) when RAGJUDGE_SCREENSHOTS=docs: a test run leaves the checkout as it was."""

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
from _ui_data import make_workspace

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
    tmp = tmp_path_factory.mktemp("uib")
    ws = make_workspace(tmp, sample=12, depth=5)
    files = [str(ws[k]) for k in ("result", "qrels", "run1", "run2", "queries", "corpus",
                                  "judgments", "tolabel")]
    env = {k: v for k, v in os.environ.items() if k != "RAGJUDGE_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "ragjudge", "ui", *files], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
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
        # the API itself wants the token printed in the URL
        assert httpx.get(base + "api/overview").status_code == 401
        yield url, tmp / "to_label.labels.jsonl"
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
        icons: list[int] = []
        pg.on("response", lambda r: icons.append(r.status) if "favicon" in r.url else None)
        pg.goto(server[0])
        yield pg
        assert not outside, outside  # no CDN, no third party
        assert not errors, errors
        assert all(s == 200 for s in icons), icons  # the icon, never a 401 or 404
        browser.close()


def _shot(pg, name: str) -> None:  # type: ignore[no-untyped-def]
    # every view fits the 1280-px window (no sideways scrolling) and shows no stringified node
    assert pg.evaluate("document.documentElement.scrollWidth") <= 1280, name
    assert "[object " not in pg.locator("main").inner_text(), name
    IMG.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(IMG / f"ui-{name}.png"), full_page=False)


def test_explore_result_diff_query_agreement(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    pg.wait_for_selector("text=Views")
    assert "#token" not in pg.url  # the token left the address bar
    _shot(pg, "files")
    pg.click("nav >> text=Results")
    pg.wait_for_selector("#results")
    assert pg.locator("#results .sig").count() >= 1  # the significant difference is marked
    _shot(pg, "results")
    pg.locator("#results a", has_text="per query").first.click()
    pg.wait_for_selector("#diff")
    deltas = [float(x) for x in pg.locator("#diff td.num:nth-child(5)").all_inner_texts()]
    assert deltas == sorted(deltas, reverse=True) and len(deltas) == 50
    _shot(pg, "diff")
    pg.goto(pg.url.split("#")[0] + "#/query/q01")
    pg.wait_for_selector(".run .card")
    first = pg.locator(".run").first.locator(".card").first
    assert "<script>window.__pwned = 1</script>" in first.locator(".passage").first.inner_text()
    assert pg.evaluate("window.__pwned === undefined")
    assert pg.locator(".run script, .run img").count() == 0
    assert "human: 3" in pg.locator(".run").first.inner_text()
    pg.locator(".run details summary").nth(1).click()
    _shot(pg, "query")
    pg.click("nav >> text=Agreement")
    pg.wait_for_selector("#confusion")
    # a disagreeing cell that holds pairs (human 0 / LLM 3 is empty with this judge)
    off = pg.locator("#confusion td[title]:not(.diag)")
    cell = next(i for i in range(off.count()) if off.nth(i).inner_text() not in ("0", ""))
    want = int(off.nth(cell).inner_text())
    off.nth(cell).click()
    pg.wait_for_selector("#confusion td.sel")
    pg.wait_for_selector("text=Most disagreeing pairs")
    # the list has items, each a card with its pair (not "[object HTMLDivElement],...")
    pg.wait_for_selector("#disagreeing .card")
    cards = pg.locator("#disagreeing > .card")
    assert cards.count() == min(25, want)
    assert cards.first.locator("a").first.inner_text().startswith("q")
    assert pg.locator("#confusion td.sel").count() == 1
    _shot(pg, "agreement")
    pg.click("nav >> text=Agreement")  # unfiltered: the 25 most disagreeing pairs and a pager
    pg.wait_for_selector("#disagreeing .card")
    assert pg.locator("#disagreeing > .card").count() == 25
    assert "[object " not in pg.locator("main").inner_text()


def _progress(pg) -> int:  # type: ignore[no-untyped-def]
    return int(pg.locator("#progress-text").inner_text().split()[0])


def _press(pg, key: str, expect: int) -> None:  # type: ignore[no-untyped-def]
    pg.keyboard.press(key)
    # locators, not wait_for_function: the page's CSP forbids evaluating strings
    sync_api.expect(pg.locator("#progress-text")).to_have_text(re.compile(rf"^{expect} of"))


def test_label_with_keys_reload_resume_and_see_ppi(page, server) -> None:  # type: ignore[no-untyped-def]
    pg = page
    labels_file: Path = server[1]
    pg.click("nav >> text=Label")
    pg.wait_for_selector("#progress-text")
    assert pg.locator("#llm-grade").count() == 0  # the LLM's grade is hidden by default
    pg.fill("#who", "ana")
    pg.locator("#query").click()  # keys go to the page, not the name field
    assert _progress(pg) == 0
    for n, key in enumerate(["3", "0", "2", "s", "1"], 1):
        _press(pg, key, n)
    # undo takes back the last one, then it is given again
    _press(pg, "u", 4)
    _press(pg, "1", 5)
    first_pair = pg.locator("#passage").inner_text()
    pg.keyboard.press("ArrowLeft")
    pg.wait_for_selector("#current")
    assert pg.locator("#current").inner_text().startswith("labelled 1 by ana")
    pg.keyboard.press("ArrowRight")
    sync_api.expect(pg.locator("#passage")).to_have_text(first_pair)
    pg.reload()
    pg.wait_for_selector("#progress-text")
    assert _progress(pg) == 5  # saved as given, resumed after reload
    assert pg.input_value("#who") == "ana"
    records = [json.loads(x) for x in labels_file.read_text().splitlines()]
    assert [r.get("grade") for r in records if r["op"] == "label"][:5] == [3, 0, 2, None, 1]
    assert all(r["who"] == "ana" and r["at"] for r in records)
    # on to 50 labels, timed: the PPI interval appears once two queries are complete
    pg.locator("#query").click()
    start = time.perf_counter()
    for n in range(6, 51):
        _press(pg, "0123"[n % 4], n)
    elapsed = time.perf_counter() - start
    per = elapsed / 45
    print(f"\nlabelling: 45 labels in {elapsed:.2f} s ({per * 1000:.0f} ms each; 50 labels ~{per * 50:.1f} s)")
    pg.wait_for_selector("#ppi-table .ppi-ci")
    ci = pg.locator("#ppi-table .ppi-ci").first.inner_text()
    lo, hi = (float(x) for x in re.findall(r"-?\d+\.\d+", ci))
    assert lo <= hi
    assert "Estimand" in pg.locator("#ppi").inner_text()
    # with few complete queries the PPI view says the sample is small, in its notes list
    sync_api.expect(pg.locator("#ppi-notes li").first).to_contain_text("human-labelled queries")
    pg.check("#reveal")
    pg.wait_for_selector("#llm-grade")
    _shot(pg, "label")
    # showing the grade is a choice for this pair, recorded with its label; the next starts hidden
    n = _progress(pg)
    pg.locator("#query").click()
    _press(pg, "2", n + 1)
    assert pg.locator("#llm-grade").count() == 0 and not pg.is_checked("#reveal")
    records = [json.loads(x) for x in labels_file.read_text().splitlines()]
    assert any(r["op"] == "reveal" and r["who"] == "ana" for r in records)
    assert [r for r in records if r["op"] == "label"][-1]["llm_grade_shown"] is True
