"""Issue 20 item 13, in a real server and browser: what the landing page's first render leaves out, so the verdict
reaches a new visitor sooner (tests/bench/bench_app.py measures how much sooner)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from tests.e2e.conftest import ARTIFACTS, FIGURES, ROOT, VIEWPORT, Server, wait_for_app


def _mapped(pid: int, fragment: str) -> bool:
    """Whether the process has a shared library whose path holds `fragment` loaded (Linux: /proc/PID/maps)."""
    return fragment in Path(f"/proc/{pid}/maps").read_text()


def test_the_first_render_does_not_import_pandas(chromium, tmp_path):
    """A fresh server: pandas (~0.3 s to import, which a visitor's first request waited on) is not loaded by the
    time the verdict and the table are drawn; the share box holds this view's link and the chart comes after."""
    from playwright.sync_api import expect

    server = Server(env={"KVSCOPE_CACHE": str(tmp_path)}, log=ARTIFACTS / "streamlit-first-paint.log")
    try:
        server.wait_healthy()
        assert not _mapped(server.proc.pid, "pandas/_libs")  # the check can see a library load
        context = chromium.new_context(viewport=VIEWPORT)
        try:
            page = context.new_page()
            page.goto(server.url + "/")
            expect(page.locator('[data-testid="stMetric"]')).to_have_count(4, timeout=60_000)
            expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(1)
            assert not _mapped(server.proc.pid, "pandas/_libs"), "the first render imported pandas"
            box = page.locator('[data-testid="stSidebar"] [data-testid="stExpander"]').filter(has_text="Share")
            box.locator("summary").click()
            link = box.locator("code")
            expect(link).to_contain_text("?model=Qwen%2FQwen3.5-9B", timeout=30_000)
            expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(1, timeout=60_000)
            wait_for_app(page)
            assert not page.locator('[data-testid="stException"]').count()
        finally:
            context.close()
        # the probe is not blind: a page that builds a pandas DataFrame maps it
        context = chromium.new_context(viewport=VIEWPORT)
        try:
            page = context.new_page()
            page.goto(server.url + "/fact_check")
            expect(page.locator('[data-testid="stDataFrame"]').first).to_be_visible(timeout=60_000)
        finally:
            context.close()
        assert _mapped(server.proc.pid, "pandas/_libs")
    finally:
        server.stop()


def test_the_inputs_follow_in_a_browser_without_request_idle_callback(chromium, server):
    """The inputs wait for the browser's report that the first run is drawn (ui.layout.wait_for_paint), sent when
    the tab is idle. Safari has no requestIdleCallback: there the report must still come, or the page would keep
    "Loading the inputs…" for good. This Chromium is made to lack it too."""
    from playwright.sync_api import expect

    context = chromium.new_context(viewport=VIEWPORT)
    try:
        context.add_init_script("delete window.requestIdleCallback; delete Window.prototype.requestIdleCallback;")
        page = context.new_page()
        page.goto(server.url + "/?model=Qwen%2FQwen3-8B&ctx=16k")
        assert page.evaluate("typeof window.requestIdleCallback") == "undefined"
        sidebar = page.locator('[data-testid="stSidebar"]')
        expect(sidebar.get_by_role("textbox", name="Context (tokens)")).to_have_value("16K", timeout=60_000)
        expect(sidebar.get_by_role("link", name="Fact-check")).to_be_visible()
        expect(sidebar.get_by_text("Loading the inputs…")).to_have_count(0)
        wait_for_app(page)
        assert not page.locator('[data-testid="stException"]').count()
    finally:
        context.close()


# Holds the page's idle callbacks until the test runs them: the paint report (ui.layout.wait_for_paint) waits. Notes
# the run's state when each was asked for (Streamlit's own code asks for none).
_HOLD_IDLE_JS = """
window.__kvIdle = [];
window.__kvIdleAsked = [];
window.requestIdleCallback = (f) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const busy = document.querySelector('[data-testid="stStatusWidget"]') ? " (running indicator)" : "";
  window.__kvIdleAsked.push((app && app.getAttribute("data-test-script-state")) + busy);
  return window.__kvIdle.push(f);
};
"""
# Script files of elements the first render leaves for the rerun after it: st.metric (and its number formatting),
# the download buttons, the data grid, st.html and unsafe markdown. A fresh tab fetches each when its element first
# arrives; with 20 tabs on one server those fetches held first renders back by seconds (tests/bench/bench_team.py).
_DEFERRED_CODE = ("Metric.", "numbro.", "DownloadButton.", "DataFrame.", "Html.", "rehype-raw.")


def _run_held_idle(page) -> None:
    """Run the idle callbacks _HOLD_IDLE_JS held: the paint report goes out."""
    page.evaluate("window.__kvIdle.splice(0).forEach((f) => f({ didTimeout: false, timeRemaining: () => 0 }))")


def _fetched(page) -> list[str]:
    """The names of the files the tab has fetched so far."""
    return page.evaluate("performance.getEntriesByType('resource').map((e) => e.name.split('/').pop())")


@contextlib.contextmanager
def _held_tab(chromium, server: Server, path: str) -> Iterator:
    """A fresh tab at `path` on a fresh `server` (stopped afterwards), its idle callbacks held (_HOLD_IDLE_JS)."""
    try:
        server.wait_healthy()
        context = chromium.new_context(viewport=VIEWPORT)
        try:
            context.add_init_script(_HOLD_IDLE_JS)
            page = context.new_page()
            page.goto(server.url + path)
            yield page
        finally:
            context.close()
    finally:
        server.stop()


def test_the_first_render_loads_no_array_library_and_the_grid_and_icon_follow(chromium, tmp_path):
    """A fresh server's first render draws the headline figures and the context table as markdown and sets no page
    icon: numpy, pyarrow and Pillow (the data grid's Arrow table, Streamlit's image-to-URL for the icon: ~0.15 s of
    the first run) are not loaded then, and the tab fetches no deferred element's code. The tab asks to report the
    run drawn only once the run is over. After the report, the metrics, the download buttons, the data grid with
    the same contexts and the local SVG icon follow."""
    from playwright.sync_api import expect

    libraries = ("numpy/_core/_multiarray_umath", "pyarrow/libarrow", "PIL/_imaging")
    server = Server(env={"KVSCOPE_CACHE": str(tmp_path)}, log=ARTIFACTS / "streamlit-first-paint-grid.log")
    with _held_tab(chromium, server, "/?model=Qwen%2FQwen3-8B&ctx=16k") as page:
        expect(page.locator(FIGURES)).to_have_count(4, timeout=60_000)
        table = page.locator('[data-testid="stMarkdown"] table').filter(has_text="cache (GiB)")
        expect(table.locator("tbody tr").first).to_be_visible()
        contexts = table.locator("tbody tr td:first-child").all_inner_texts()
        assert "16K" in contexts, contexts
        wait_for_app(page)  # the first run is over
        # the paint report is waiting, not sent, and was asked for once the run was over
        assert page.evaluate("window.__kvIdleAsked") == ["notRunning"]
        loaded = [lib for lib in libraries if _mapped(server.proc.pid, lib)]
        assert not loaded, f"the first render loaded {loaded}"
        assert not page.locator('[data-testid="stDataFrame"]').count()
        assert not page.locator('[data-testid="stMetric"], [data-testid="stDownloadButton"]').count()
        fetched = _fetched(page)
        early = [name for name in fetched if name.startswith(_DEFERRED_CODE)]
        assert not early, f"the first render fetched {early}"

        _run_held_idle(page)
        expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(1, timeout=60_000)
        expect(table).to_have_count(0)
        expect(page.locator('[data-testid="stMetric"]')).to_have_count(4)
        expect(page.locator('[data-testid="stDownloadButton"]')).to_have_count(2)
        fetched = _fetched(page)
        assert {p for p in _DEFERRED_CODE[:4] if any(n.startswith(p) for n in fetched)} == set(_DEFERRED_CODE[:4])
        icon = page.locator('link[rel~="icon"]').first
        expect(icon).to_have_attribute("href", re.compile(r"^data:image/svg\+xml;base64,"), timeout=30_000)
        wait_for_app(page)
        assert all(_mapped(server.proc.pid, lib) for lib in libraries[:2])  # the probe is not blind
        assert not page.locator('[data-testid="stException"]').count()


# A page whose first run goes on for 3 s after the paint reporter is drawn.
_SLOW_FIRST_RUN = """
import time

import streamlit as st

from ui.layout import wait_for_paint

st.title("A slow first run")
if wait_for_paint():
    st.write("The rerun after the report")
else:
    time.sleep(3)
    st.write("The first run is over")
"""


def test_the_paint_report_waits_for_the_end_of_the_run(chromium, tmp_path):
    """The reporter is drawn early in a run, and its code loads while the run goes on. It must not ask to report
    before the run is over in the tab: with 20 tabs on two cores its idle callback's 2 s timeout fired while tabs
    were still drawing their first run, and the rerun it caused kept them running (tests/bench/bench_team.py)."""
    from playwright.sync_api import expect

    script = tmp_path / "slow_first_run.py"
    script.write_text(_SLOW_FIRST_RUN)
    server = Server(env={"PYTHONPATH": str(ROOT), "KVSCOPE_CACHE": str(tmp_path)}, script=script)
    with _held_tab(chromium, server, "/") as page:
        app = page.locator('[data-testid="stApp"]')
        expect(page.locator('[data-testid="stBidiComponentIsolated"]')).to_have_count(1, timeout=60_000)
        assert app.get_attribute("data-test-script-state") == "running", "the reporter came after the run"
        page.wait_for_timeout(500)
        assert page.evaluate("window.__kvIdleAsked") == []  # mounted, waiting for the run's end
        expect(page.get_by_text("The first run is over")).to_be_visible(timeout=30_000)
        wait_for_app(page)
        page.wait_for_function("window.__kvIdleAsked.length > 0", timeout=10_000)
        assert page.evaluate("window.__kvIdleAsked") == ["notRunning"]
        _run_held_idle(page)
        expect(page.get_by_text("The rerun after the report")).to_be_visible(timeout=30_000)
        assert not page.locator('[data-testid="stException"]').count()
