"""Issue 20 item 11, at 400 px in Chromium: a chart's legend is not under the chart's toolbar, and the Ollama page
answers on the first screen without sideways scrolling for its main columns' first three."""

from __future__ import annotations

from tests.e2e.conftest import wait_for_app


def _overlap(a: dict, b: dict) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def _phone(chromium):
    context = chromium.new_context(viewport={"width": 400, "height": 800}, is_mobile=True, has_touch=True)
    return context, context.new_page()


def test_the_chart_toolbar_leaves_the_legend_readable(chromium, server):
    from playwright.sync_api import expect

    context, page = _phone(chromium)
    try:
        page.goto(server.url + "/hybrid_vs_dense?model=Qwen/Qwen3.5-9B")
        chart = page.locator('[data-testid="stPlotlyChart"]').first
        expect(chart.locator(".legend")).to_have_count(1, timeout=60_000)
        wait_for_app(page)
        chart.scroll_into_view_if_needed()
        chart.hover()  # the toolbar shows on hover (and always, on a touch screen)
        toolbar = page.locator('[data-testid="stElementToolbar"]').first
        expect(toolbar).to_be_visible(timeout=30_000)
        legend = chart.locator(".legend").bounding_box()
        assert not _overlap(toolbar.bounding_box(), legend), (toolbar.bounding_box(), legend)
        modebar = chart.locator(".modebar")
        if modebar.count() and modebar.first.is_visible():
            assert not _overlap(modebar.first.bounding_box(), legend)
    finally:
        context.close()


def test_the_ollama_page_answers_on_the_first_screen(chromium, server):
    from playwright.sync_api import expect

    context, page = _phone(chromium)
    try:
        page.goto(server.url + "/ollama?model=Qwen/Qwen3-8B")
        table = page.locator('[data-testid="stDataFrame"]').first
        expect(table).to_be_visible(timeout=60_000)
        wait_for_app(page)
        box = table.bounding_box()
        assert box["y"] < 800, box  # the settings are folded: the answer starts on the first screen
        expect(table.locator("[role=columnheader]").first).to_be_attached(timeout=30_000)  # drawn after the frame
        header = table.evaluate("e => [...e.querySelectorAll('[role=columnheader]')].map(c => c.textContent)")
        assert header[:3] == ["card", "Ollama layers", "decode tok/s"], header
    finally:
        context.close()
