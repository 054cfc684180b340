"""A real `streamlit run` server and a real Chromium for the browser tests (and for tests/bench/bench_app.py).

Chromium is Debian's (/usr/bin/chromium, or $KVSCOPE_CHROMIUM). When it is missing the browser tests FAIL: a
skipped end-to-end test must not pass for a green run. Set KVSCOPE_SKIP_BROWSER=1 to skip them on purpose.
Only loopback is used: the server listens on 127.0.0.1 and HF_HUB_OFFLINE=1 keeps the Hub away.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from ui.figures import FIGURES_KEY

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = os.environ.get("KVSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1400, "height": 900}
SERVER_START_S = 60  # health must answer "ok" within this
WAIT_MS = 30_000  # default bound on every Playwright wait


# Installed before the page's own scripts: stamps (wall clock, ms) the first moment the page is complete: connected,
# the script run over, no running indicator, and `count` of `selector` drawn. Stamped inside the page, so a rerun
# that starts right after it (the rerun that draws the inputs and the chart once the browser is idle,
# ui.layout.wait_for_paint) is never counted into the first render, however late the harness looks; polling from
# outside caught that rerun in some rounds.
# Fit a card's four headline figures: markdown headings on a session's first run, st.metric from the rerun after its
# first paint (ui.figures.figure_row). Either way the verdict's numbers are on screen.
FIGURES = f'[data-testid="stMetric"], .st-key-{FIGURES_KEY} h2'
FIRST_DONE_JS = """
window.__kvFirstDone = null;
new MutationObserver(() => {
  if (window.__kvFirstDone !== null) return;
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-connection-state') !== 'CONNECTED') return;
  if (app.getAttribute('data-test-script-state') !== 'notRunning') return;
  if (document.querySelector('[data-testid="stStatusWidget"]')) return;
  if (document.querySelectorAll('%s').length < %d) return;
  window.__kvFirstDone = Date.now();
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m streamlit run app.py` (or `script`) on a free loopback port, in its own process group."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        watch_files: bool = False,
        script: Path | None = None,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log or Path(tempfile.mkstemp(prefix="kvscope-streamlit-", suffix=".log")[1])
        self._log_file = self.log.open("wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "streamlit", "run", str(script or "app.py"), "--server.headless", "true"),
                *("--server.port", str(self.port), "--server.address", "127.0.0.1"),
                *("--browser.gatherUsageStats", "false"),
                # no watcher by default: an edit elsewhere in the repo mid-test must not rerun the app
                *([] if watch_files else ["--server.fileWatcherType", "none"]),
            ],
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stop() also ends the config-resolution child, if one runs
        )

    def wait_healthy(self, timeout: float = SERVER_START_S) -> float:
        """Seconds from process start until /_stcore/health answered "ok"; raises with the log tail if not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return time.perf_counter() - self.started
            time.sleep(0.1)
        raise RuntimeError(f"streamlit did not answer /_stcore/health within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log_file.close()


def require_chromium() -> None:
    """Fail (or, with KVSCOPE_SKIP_BROWSER=1, skip) when the browser or Playwright is not there."""
    skip = os.environ.get("KVSCOPE_SKIP_BROWSER") == "1"
    missing = None
    if not Path(CHROMIUM).is_file():
        missing = f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set KVSCOPE_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError as err:
            missing = f"Playwright is not installed ({err}); pip install -r requirements.txt"
    if missing:
        if skip:
            pytest.skip(f"KVSCOPE_SKIP_BROWSER=1: {missing}")
        pytest.fail(f"browser tests cannot run: {missing}. Set KVSCOPE_SKIP_BROWSER=1 to skip them on purpose.")


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=WAIT_MS)


def wait_for_app(page, timeout: int = WAIT_MS) -> None:
    """Until the script run is over: connected, script state notRunning, no running indicator."""
    from playwright.sync_api import expect

    app = page.locator('[data-testid="stApp"]')
    expect(app).to_have_attribute("data-test-connection-state", "CONNECTED", timeout=timeout)
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=timeout)
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0, timeout=timeout)


def full_page_screenshot(page, path: Path) -> None:
    """Streamlit scrolls inside stMain and the sidebar, not the document, so full_page alone clips at the
    viewport: grow the viewport to the tallest scroller for the shot, then restore it."""
    height = page.evaluate(
        """() => Math.max(window.innerHeight, ...['stMain', 'stSidebarContent'].map(id => {
               const e = document.querySelector(`[data-testid="${id}"]`); return e ? e.scrollHeight : 0; }))"""
    )
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 20, 12_000)})
    page.wait_for_timeout(400)  # let plotly and the grid lay out at the new size
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


@pytest.fixture(scope="module")
def chromium():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def server():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    srv = Server(log=ARTIFACTS / "streamlit-server.log")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.e2e_failed = report.failed
    return report


# Streamlit's frontend, opened at a page's path (/cluster), first asks that path for its server (/cluster/_stcore/
# health, host-config) and then the root: the console logs those two 404s on every such load, Streamlit's own
STREAMLIT_PROBES = ("/_stcore/health", "/_stcore/host-config")


def logged_error(msg) -> bool:
    """A console error the page logged, other than Streamlit's probes of a page's path for its server."""
    return msg.type == "error" and not (msg.location or {}).get("url", "").endswith(STREAMLIT_PROBES)


@pytest.fixture
def page(request, chromium, server):
    """A fresh browser context (own session, own downloads) with every wait bounded; JS errors (thrown or logged to
    the console) collected."""
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)  # a loaded 2-core CI runner can take longer than the 5 s default
    context = chromium.new_context(viewport=VIEWPORT, accept_downloads=True)
    context.set_default_timeout(WAIT_MS)
    context.set_default_navigation_timeout(WAIT_MS)
    page = context.new_page()
    page.js_errors = []
    page.on("pageerror", lambda err: page.js_errors.append(str(err)))
    # errors the page logs without throwing: Streamlit calling a component's return value as its cleanup was one
    page.on("console", lambda msg: logged_error(msg) and page.js_errors.append(f"console: {msg.text}"))
    try:
        yield page
        if getattr(request.node, "e2e_failed", False):  # what the browser showed when the test failed
            with contextlib.suppress(Exception):
                page.screenshot(path=str(ARTIFACTS / f"FAILED-{request.node.name}.png"), full_page=True)
    finally:
        context.close()
