"""The Fact-check page under AppTest: table, filters, scatter, the arithmetic per row, one claim by link."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.check import AGREES, DISAGREES, check_all
from tests.rendered import shown

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def page(**params: str | list[str]) -> AppTest:
    """The page reached from the app (its sidebar links back), opened with the link's query parameters."""
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.query_params.clear()
    for key, value in params.items():
        at.query_params[key] = value
    return at.switch_page("pages/3_fact_check.py").run()


def test_the_table_lists_every_figure_with_its_verdict():
    at = page()
    assert not at.exception, [e.value for e in at.exception]
    checks = check_all()
    table = at.dataframe[0].value
    assert len(table) == len(checks)
    assert list(table["Verdict"]) == [c.verdict for c in checks]
    counts = {m.label: m.value for m in at.metric}
    assert counts["Disagrees"] == str(sum(c.verdict == DISAGREES for c in checks))
    assert len(at.main.expander) == len(checks)
    assert at.get("plotly_chart")  # the published-vs-kvscope scatter


def test_filters_narrow_the_table_and_land_in_the_link():
    at = page()
    at.multiselect[1].select("fixed_state_bytes").run()
    at.multiselect[2].select(DISAGREES).run()
    table = at.dataframe[0].value
    expected = [c for c in check_all() if c.figure.metric == "fixed_state_bytes" and c.verdict == DISAGREES]
    assert len(table) == len(expected) >= 2
    assert at.query_params["metric"] in ("fixed_state_bytes", ["fixed_state_bytes"])
    assert at.query_params["verdict"] in (DISAGREES, [DISAGREES])


def test_a_claim_link_opens_that_figure_alone_with_both_sides_of_the_arithmetic():
    at = page(claim="s001-state-bf16")
    assert not at.exception
    assert len(at.dataframe[0].value) == 1 and len(at.main.expander) == 1
    text = " ".join(c.value for c in at.code)
    assert "51,904,512" in text  # 24 layers × (8192 × 4 × 2 + 32 × 128 × 128 × 4) B
    markdown = " ".join(m.value for m in at.markdown)
    assert "25.2 MB" in markdown and "32-head" in markdown  # kvscope's reason and the source's own derivation
    at.button[0].click().run()
    assert "claim" not in at.query_params and len(at.dataframe[0].value) == len(check_all())


def test_an_unknown_claim_says_so_and_shows_all():
    at = page(claim="no-such-claim")
    assert not at.exception
    assert "'no-such-claim'" in shown(at.error[0].value)  # as markdown shows it (quoted literally)
    assert len(at.dataframe[0].value) == len(check_all())


def test_filter_params_from_a_link_are_applied():
    at = page(verdict=AGREES, model="Qwen/Qwen3-8B")
    table = at.dataframe[0].value
    assert len(table) and set(table["Verdict"]) == {AGREES} and set(table["Model"]) == {"Qwen/Qwen3-8B"}
