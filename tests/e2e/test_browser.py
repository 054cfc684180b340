"""The explorer in a real browser: `streamlit run` + Chromium (Playwright), driven the way a person would.

Every expected figure is computed here with core for the same inputs, never copied from the app. Screenshots of each
page land in tests/artifacts/ (git-ignored), with the server's log.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

from core.engines import engine_named
from core.fit import Setup, context_limit, fit, table_contexts
from core.gpus import card_named
from core.loading import load_model
from core.report import table_records, verdict
from core.units import GIB, format_bytes, format_tokens
from tests.e2e.conftest import ARTIFACTS, full_page_screenshot, wait_for_app

MODEL, ENGINE, WEIGHTS, CARD, CTX = "Qwen/Qwen3-8B", "vllm", "bf16", "H100 80GB SXM5", 32768
SHARE_LINK = "/?model=Qwen/Qwen3-8B&engine=vllm&weights=bf16&card=H100%2080GB%20SXM5&ctx=32K"
PAGES = [("Hybrid vs dense", "/hybrid_vs_dense"), ("Measure live", "/measure_live")]


def expected(kv: str):
    """What core says for the share link's inputs (one GPU: tp = pp = 1)."""
    model = load_model(MODEL, isolated=True)  # same resolution (and disk cache) as the app's
    setup = Setup(model=model, engine=engine_named(ENGINE), card=card_named(CARD), weights=WEIGHTS, kv_dtype=kv)
    limit = context_limit(setup)
    result = fit(setup, sorted(set(table_contexts(limit)) | {min(CTX, limit)}))
    return result, next(r for r in result.rows if r.context == min(CTX, limit))


def metrics(page) -> dict[str, str]:
    out = {}
    for box in page.locator('[data-testid="stMetric"]').all():
        label = box.locator('[data-testid="stMetricLabel"]').inner_text().strip()
        out[label] = box.locator('[data-testid="stMetricValue"]').inner_text().strip()
    return out


def metric_value(page, label: str):
    box = page.locator('[data-testid="stMetric"]').filter(has=page.get_by_text(label, exact=True))
    return box.locator('[data-testid="stMetricValue"]')


def query(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(page.url).query).items()}


def grid_rows(page) -> list[list[str]]:
    """st.dataframe draws on a canvas; glide-data-grid keeps an accessible <table> inside it."""
    return page.locator('[data-testid="stDataFrame"] canvas').first.evaluate(
        "c => [...c.querySelectorAll('tr')].map(r => [...r.children].map(cell => cell.textContent))"
    )


def no_exception(page, where: str) -> None:
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"Streamlit exception on {where}: {boxes.all_inner_texts()}"
    assert not page.js_errors, f"JavaScript errors on {where}: {page.js_errors}"


def test_share_link_fit_toggle_download_and_pages(page, server):
    from playwright.sync_api import expect

    bf16, bf16_row = expected("auto")
    fp8, fp8_row = expected("fp8")
    cache_bf16 = engine_named(ENGINE).account(bf16.setup.model, CTX).total
    cache_fp8 = engine_named(ENGINE).account(fp8.setup.model, CTX, kv_dtype="fp8").total
    assert cache_fp8 * 2 == cache_bf16  # Qwen3-8B is all full attention: 8-bit K/V is exactly half

    # 1. The share link opens on the verdict and the metrics core computes.
    page.goto(server.url + SHARE_LINK)
    expect(page.locator('[data-testid="stMetric"]')).to_have_count(4, timeout=60_000)  # first run resolves the config
    wait_for_app(page)
    no_exception(page, "Fit a card")
    v = verdict(bf16, bf16_row)
    alert = page.locator('[data-testid="stAlert"]').filter(has_text=v.headline).first
    expect(alert).to_have_text(f"{v.headline}. {v.sentence}")
    text = alert.inner_text()
    assert v.fits and text.startswith("Fits.")
    for figure in (format_bytes(bf16_row.headroom_bytes), f"reach {format_tokens(bf16.max_context)} tokens",
                   f"{bf16_row.max_concurrency:,.2f} requests of 32K", "KV bf16", CARD):  # fmt: skip
        assert figure in text, (figure, text)
    assert metrics(page) == {
        "Fits?": "yes" if bf16_row.fits else "no",
        "Max context, one sequence": format_tokens(bf16.max_context),
        "Requests at 32K": f"{bf16_row.max_concurrency:,.2f}",
        "Cache at this context": format_bytes(cache_bf16),
    }
    assert query(page) | {"ctx": "32K"} == {  # ctx=32K is the default, so the app drops it from the link
        "model": MODEL, "engine": ENGINE, "weights": WEIGHTS, "card": CARD, "ctx": "32K",
    }  # fmt: skip

    # 2. The context table: the CSV download is core's table exactly; the grid shows the same rows.
    with page.expect_download(timeout=30_000) as download:
        page.get_by_role("button", name="Download table (CSV)").click()
    assert download.value.suggested_filename == "kvscope-table.csv"
    csv_text = Path(download.value.path()).read_text(encoding="utf-8")
    records = table_records(bf16)
    assert csv_text == pd.DataFrame(records).to_csv(index=False)
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert [int(r["context"]) for r in rows] == [r.context for r in bf16.rows]
    assert [int(r["cache_bytes"]) for r in rows] == [r.cache_bytes for r in bf16.rows]
    wait_for_app(page)  # the download button reruns the script
    grid = grid_rows(page)
    assert grid, "st.dataframe no longer renders glide-data-grid's accessible table; read the grid another way"
    assert grid[0][:2] == ["context", "cache (GiB)"]
    assert [r[0] for r in grid[1:]] == [format_tokens(r.context) for r in bf16.rows]
    assert [float(r[1]) for r in grid[1:]] == pytest.approx([r.cache_bytes / GIB for r in bf16.rows])
    expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(1)
    full_page_screenshot(page, ARTIFACTS / "fit_a_card.png")

    # 3. The 8-bit KV toggle halves the cache; the link follows.
    page.locator('[data-testid="stSidebar"]').get_by_text("8-bit KV cache", exact=True).click()
    expect(metric_value(page, "Cache at this context")).to_have_text(format_bytes(cache_fp8))
    wait_for_app(page)
    no_exception(page, "Fit a card after the toggle")
    assert metrics(page) == {
        "Fits?": "yes" if fp8_row.fits else "no",
        "Max context, one sequence": format_tokens(fp8.max_context),
        "Requests at 32K": f"{fp8_row.max_concurrency:,.2f}",
        "Cache at this context": format_bytes(cache_fp8),
    }
    expect(page.locator('[data-testid="stSidebar"] input[aria-label="KV dtype"]')).to_have_value("fp8")
    expect(page.get_by_role("switch", name="8-bit KV cache")).to_be_checked()
    assert query(page).get("kv") == "fp8", page.url
    full_page_screenshot(page, ARTIFACTS / "fit_a_card_fp8.png")

    # 4. Every page renders, and the inputs (in session and in the link) survive the switch.
    for label, path in [*PAGES, ("Fit a card", "/")]:
        page.locator('[data-testid="stSidebar"] [data-testid="stPageLink"]').filter(has_text=label).click()
        page.wait_for_url(lambda url, path=path: urlsplit(url).path == path)
        expect(page.locator("h1")).to_have_text(label)
        wait_for_app(page)
        no_exception(page, label)
        expect(page.locator('[data-testid="stSidebar"] input[aria-label="Engine"]')).to_have_value(ENGINE)
        expect(page.locator('[data-testid="stSidebar"] input[aria-label="Model"]')).to_have_value(MODEL)
        expect(page.locator('[data-testid="stSidebar"] input[aria-label="KV dtype"]')).to_have_value("fp8")
        q = query(page)
        assert (q.get("engine"), q.get("kv"), q.get("model"), q.get("card")) == (ENGINE, "fp8", MODEL, CARD), page.url
        if label == "Hybrid vs dense":
            expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(4)
        if label != "Fit a card":
            full_page_screenshot(page, ARTIFACTS / f"{path.strip('/')}.png")
    # back on the first page: still the fp8 answer
    expect(metric_value(page, "Cache at this context")).to_have_text(format_bytes(cache_fp8))
