"""The Fact-check page in a real browser: reached from the app's sidebar, the scatter drawn, one claim by its link.

Expected figures come from core.check for the same data, never copied from the page."""

from __future__ import annotations

from core.check import check_all
from tests.e2e.conftest import ARTIFACTS, full_page_screenshot, wait_for_app

CLAIM = "s001-state-bf16"


def test_fact_check_page_table_scatter_and_a_shared_claim(page, server):
    from playwright.sync_api import expect

    checks = {c.figure.id: c for c in check_all()}
    page.goto(server.url + "/")
    wait_for_app(page)
    page.locator('[data-testid="stSidebar"]').get_by_role("link", name="Fact-check").click()
    expect(page.get_by_role("heading", name="Fact-check")).to_be_visible(timeout=60_000)
    wait_for_app(page)
    assert not page.locator('[data-testid="stException"]').count()
    expect(page.locator('[data-testid="stDataFrame"]')).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(1)
    expect(page.locator('[data-testid="stMain"] [data-testid="stExpander"]')).to_have_count(len(checks))
    full_page_screenshot(page, ARTIFACTS / "fact_check.png")

    # one claim by its link: that figure alone, its arithmetic open
    c = checks[CLAIM]
    page.goto(server.url + f"/fact_check?claim={CLAIM}")
    wait_for_app(page)
    expect(page.locator('[data-testid="stMain"] [data-testid="stExpander"]')).to_have_count(1, timeout=60_000)
    body = page.locator('[data-testid="stMain"]')
    expect(body).to_contain_text(c.reason)
    expect(body).to_contain_text(c.kvscope_lines[0])
    assert f"claim={CLAIM}" in page.url
    page.get_by_role("button", name="Show every figure").click()
    wait_for_app(page)
    expect(page.locator('[data-testid="stMain"] [data-testid="stExpander"]')).to_have_count(len(checks), timeout=60_000)
    assert "claim=" not in page.url
