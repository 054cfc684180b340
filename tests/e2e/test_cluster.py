"""The "vLLM across nodes" page in a real browser: the plans listed are core.engines.vllm_cluster's, in its order,
and the page link in the sidebar reaches it with the model kept."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.sync_api import expect

from core.engines.vllm_cluster import Cluster, plans
from core.memory.gpus import card_named
from core.model.loading import load_model
from tests.e2e.conftest import ARTIFACTS, WAIT_MS, full_page_screenshot, wait_for_app
from tests.e2e.test_browser import no_exception
from tests.e2e.test_finders import table_rows

LINK = "/cluster?model=deepseek-ai/DeepSeek-V3&ctx=32K&ccard=H200&nodes=2&gpn=8"


def test_cluster_page_lists_cores_plans(page, server):
    page.goto(server.url + LINK)
    wait_for_app(page)
    no_exception(page, "cluster")
    expected = plans(load_model("deepseek-ai/DeepSeek-V3", isolated=True), Cluster(card_named("H200"), 2, 8), 32768)
    rows = table_rows(page, 0, "plan")
    plan, requests = rows[0].index("plan"), rows[0].index("requests")
    shown = [(r[plan], r[requests].replace(",", "")) for r in rows[1:]]
    assert shown and shown == [(r.label, str(r.requests)) for r in expected][: len(shown)], shown
    full_page_screenshot(page, ARTIFACTS / "cluster.png")

    page.locator('[data-testid="stSidebar"] [data-testid="stPageLink"]').filter(has_text="Fit a card").click()
    page.wait_for_url(lambda url: urlsplit(url).path == "/")
    wait_for_app(page)
    # Fit a card draws its chart in a rerun of its own once the browser is idle: leave after it, not during it
    expect(page.locator('[data-testid="stPlotlyChart"]').first).to_be_visible(timeout=WAIT_MS)
    wait_for_app(page)
    page.locator('[data-testid="stSidebar"] [data-testid="stPageLink"]').filter(has_text="vLLM across nodes").click()
    page.wait_for_url(lambda url: urlsplit(url).path == "/cluster")
    expect(page.locator("h1")).to_have_text("vLLM across nodes", timeout=WAIT_MS)
    wait_for_app(page)
    no_exception(page, "cluster, reached from the sidebar")
    expect(page.locator('[data-testid="stSidebar"] input[aria-label="Model"]')).to_have_value("deepseek-ai/DeepSeek-V3")


def test_cluster_page_text_wraps_instead_of_being_cut_off(page, server):
    """Issue 20: the best-plan metric and the arithmetic lines were cut off at the box's edge."""
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(server.url + LINK)
    wait_for_app(page)
    no_exception(page, "cluster")
    page.get_by_text("How is it computed?").click()
    expect(page.get_by_text("KV budget per GPU =").first).to_be_visible()
    cut = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="stMetricValue"], [data-testid="stCode"] pre')]
            .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
            .map(e => e.innerText.slice(0, 60))"""
    )
    assert not cut, cut
    expect(page.get_by_text("vllm serve deepseek-ai/DeepSeek-V3").first).to_be_visible()
