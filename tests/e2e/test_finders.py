"""The finders page in a real browser: both tables list what core.finders ranks, in its order, and the chosen one
is in the link."""

from __future__ import annotations

from core.engines import configured
from core.finders import rank_cards, rank_models
from core.memory.gpus import card_named
from core.model.loading import load_model, presets
from tests.e2e.conftest import ARTIFACTS, WAIT_MS, full_page_screenshot, wait_for_app
from tests.e2e.test_browser import no_exception

LINK = "/finders?model=Qwen/Qwen3-8B&card=GeForce%20RTX%204060%208GB&engine=llama.cpp&weights=q4_k_m&ctx=8K"


def table_rows(page, index: int, column: str) -> list[list[str]]:
    """The accessible rows glide-data-grid keeps inside the `index`th visible table's canvas (header first), once
    its header has `column`: after a switch the grid that was there is redrawn, not replaced, so its old rows come
    first."""
    grid = page.locator('[data-testid="stDataFrame"]:visible canvas').nth(index)
    page.wait_for_function(
        "([g, c]) => g.querySelectorAll('tr').length > 1 && [...g.querySelector('tr').children]"
        ".some(x => x.textContent === c)",
        arg=[grid.element_handle(timeout=WAIT_MS), column],
        timeout=WAIT_MS,
    )
    return grid.evaluate("c => [...c.querySelectorAll('tr')].map(r => [...r.children].map(x => x.textContent))")


def test_finders_page_lists_cores_rankings(page, server):
    page.goto(server.url + LINK)
    wait_for_app(page)
    no_exception(page, "finders")
    engine = configured("llama.cpp")
    model = load_model("Qwen/Qwen3-8B", isolated=True)
    cards = [a.card.name for a in rank_cards(model, engine, 8192, "q4_k_m")]
    rows = table_rows(page, 0, "card")
    column = rows[0].index("card")
    shown = [r[column] for r in rows[1:]]
    assert shown and shown == cards[: len(shown)], (shown, cards)
    full_page_screenshot(page, ARTIFACTS / "finders-cards.png")

    view = page.locator('[data-testid="stButtonGroup"]')  # the view control, whose value is the link's `ftab`
    view.get_by_text("Models for GeForce RTX 4060 8GB", exact=True).click()
    wait_for_app(page)
    page.wait_for_url("**ftab=models**", timeout=WAIT_MS)
    models = rank_models([load_model(n) for n in presets()], engine, card_named("GeForce RTX 4060 8GB"), 8192)
    rows = table_rows(page, 0, "model")
    column = rows[0].index("model")
    shown = [r[column] for r in rows[1:]]
    assert shown and shown == [a.model.name for a in models][: len(shown)], shown
    no_exception(page, "finders, models tab")
    full_page_screenshot(page, ARTIFACTS / "finders-models.png")
