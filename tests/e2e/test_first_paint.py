"""Issue 20 item 13, in a real server and browser: what the landing page's first render leaves out, so the verdict
reaches a new visitor sooner (tests/bench/bench_app.py measures how much sooner)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import ARTIFACTS, VIEWPORT, Server, wait_for_app


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
