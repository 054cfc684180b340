"""The explorer in a real browser: `streamlit run` + Chromium (Playwright), driven the way a person would.

Every expected figure is computed here with core for the same inputs, never copied from the app. Screenshots of each
page land in tests/artifacts/ (git-ignored), with the server's log.
"""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from core.engines import engine_named
from core.engines.runtimes import ollama_layers
from core.fit import Setup, context_limit, fit, table_contexts
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.ollama_report import DEFAULT_CARDS
from core.report import verdict
from core.units import GIB, floor_places, format_bytes, format_tokens, parse_tokens
from tests.e2e.conftest import ARTIFACTS, WAIT_MS, full_page_screenshot, wait_for_app
from ui.state import from_query

MODEL, ENGINE, WEIGHTS, CARD, CTX = "Qwen/Qwen3-8B", "vllm", "bf16", "H100 80GB SXM5", 32768
SHARE_LINK = "/?model=Qwen/Qwen3-8B&engine=vllm&weights=bf16&card=H100%2080GB%20SXM5&ctx=32K"
PAGES = [
    ("Hybrid vs full attention", "/hybrid_vs_dense"),
    ("Measure live", "/measure_live"),
    ("Ollama on your card", "/ollama"),
]
MODEL_ONLY = ("Measure live", "Ollama on your card")  # pages whose card, engine and context are their own


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


def query_of(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}


def query(page) -> dict[str, str]:
    return query_of(page.url)


def grid_rows(page) -> list[list[str]]:
    """st.dataframe draws on a canvas; glide-data-grid keeps an accessible <table> inside it, filled in after the
    canvas appears (later on a loaded machine): wait for its rows, then read them."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):  # an empty answer fails the caller's assert with its reason
        page.wait_for_function(
            "() => document.querySelector('[data-testid=\"stDataFrame\"] canvas')?.querySelectorAll('tr').length > 1",
            timeout=WAIT_MS,
        )
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
                   f"{floor_places(bf16_row.max_concurrency):,.2f} requests of 32K", "KV bf16", CARD):  # fmt: skip
        assert figure in text, (figure, text)
    assert metrics(page) == {
        "Fits?": "yes" if bf16_row.fits else "no",
        "Max context, one sequence": format_tokens(bf16.max_context),
        "Requests at 32K": f"{floor_places(bf16_row.max_concurrency):,.2f}",
        "Cache at this context": format_bytes(cache_bf16),
    }
    assert query(page) | {"ctx": "32K"} == {  # ctx=32K is the default, so the app drops it from the link
        "model": MODEL, "engine": ENGINE, "weights": WEIGHTS, "card": CARD, "ctx": "32K",
    }  # fmt: skip

    # 2. The context table: the CSV download is the table as shown (same columns, same rows), after the inputs.
    with page.expect_download(timeout=30_000) as download:
        page.get_by_role("button", name="Download table (CSV)").click()
    assert download.value.suggested_filename == "kvscope-table.csv"
    csv_text = Path(download.value.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    inputs = {"model": MODEL, "card": CARD, "gpus": "1", "engine": ENGINE, "weights": WEIGHTS, "kv": "bf16"}  # used
    assert all({k: r[k] for k in inputs} == inputs for r in rows)
    assert [r["context"] for r in rows] == [format_tokens(r.context) for r in bf16.rows]
    # to the digits the page shows (3 decimals)
    assert [float(r["cache (GiB)"]) for r in rows] == pytest.approx([r.cache_bytes / GIB for r in bf16.rows], abs=5e-4)
    assert [r["fits"] for r in rows] == [str(r.fits) for r in bf16.rows]
    shown = [floor_places(r.max_concurrency) for r in bf16.rows]  # vLLM's counts cut to two places, as the grid's
    assert [float(r["requests"]) for r in rows] == pytest.approx(shown, abs=5e-4)
    wait_for_app(page)  # the download button reruns the script
    grid = grid_rows(page)
    assert grid, "st.dataframe no longer renders glide-data-grid's accessible table; read the grid another way"
    assert grid[0] == list(rows[0])[len(inputs) :]  # the CSV's table columns are the grid's, in order
    assert [r[0] for r in grid[1:]] == [format_tokens(r.context) for r in bf16.rows]
    cache = grid[0].index("cache (GiB)")
    assert [float(r[cache]) for r in grid[1:]] == pytest.approx([r.cache_bytes / GIB for r in bf16.rows], abs=5e-4)
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
        "Requests at 32K": f"{floor_places(fp8_row.max_concurrency):,.2f}",
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
        expect(page.locator('[data-testid="stSidebar"] input[aria-label="Model"]')).to_have_value(MODEL)
        engine_box = page.locator('[data-testid="stSidebar"] input[aria-label="Engine"]')
        if label in MODEL_ONLY:  # no card, engine or context in the sidebar: hidden, but kept in the link
            expect(engine_box).to_have_count(0)
        else:
            expect(engine_box).to_have_value(ENGINE)
            expect(page.locator('[data-testid="stSidebar"] input[aria-label="KV dtype"]')).to_have_value("fp8")
        q = query(page)
        assert (q.get("engine"), q.get("kv"), q.get("model"), q.get("card")) == (ENGINE, "fp8", MODEL, CARD), page.url
        if label == "Hybrid vs full attention":
            # cache, ratio, requests, longest context per card size, decode tok/s and time to first token
            expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(6)
        if label == "Ollama on your card":  # Qwen3-8B (all full attention): one row per default card
            cells = grid_rows(page)
            assert [r[cells[0].index("card")] for r in cells[1:]] == list(DEFAULT_CARDS), cells
            layers = cells[0].index("Ollama layers")
            for r in cells[1:]:
                card = card_named(r[cells[0].index("card")])
                split = ollama_layers(load_model(MODEL, isolated=True), card.memory_bytes)
                assert r[layers] == f"{split.layers}/{split.blocks + 1}", r
        if label != "Fit a card":
            full_page_screenshot(page, ARTIFACTS / f"{path.strip('/')}.png")
    # back on the first page: still the fp8 answer
    expect(metric_value(page, "Cache at this context")).to_have_text(format_bytes(cache_fp8))


# --- issue 9: what a new user hit in Chromium ---------------------------------------------------------------------
def open_link(page, url: str) -> None:
    page.goto(url)
    expect_ready(page)


def expect_ready(page) -> None:
    """Until the paint's rerun is over (ui.layout.wait_for_paint): the first run ends with neither the sidebar's
    inputs nor its share box drawn, and the rerun the browser's report causes starts some 0.2 s later. A click in
    between lands while a widget is redrawn: on the hybrid page, one click on a filtered option of "Compare with"
    chose the three options at the top of the unfiltered list instead (test_comparator_added_twice_in_a_row failed 3
    of 6 runs on this machine without this wait, 0 of 4 with it; that box is now greyed out until the rerun,
    test_a_comparator_clicked_at_once_is_the_one_added)."""
    from playwright.sync_api import expect

    expect(page.locator("h1")).to_have_count(1, timeout=60_000)
    share = page.locator('[data-testid="stSidebar"] [data-testid="stExpander"]').filter(has_text="Share this view")
    expect(share).to_have_count(1, timeout=60_000)
    wait_for_app(page)


def shared_link(page) -> str:
    """What a person copies from the sidebar's "Share this view" box."""
    sidebar = page.locator('[data-testid="stSidebar"]')
    box = sidebar.locator('[data-testid="stExpander"]').filter(has_text="Share this view")
    code = box.locator("code")
    if not code.is_visible():
        box.locator("summary").click()
    return code.inner_text().strip()


def pasted_in_chat(link: str) -> str:
    """A chat client ends a link at the first whitespace."""
    return f"try {link} please".split()[1]


def test_link_pasted_as_text_and_every_pages_share_box(page, server):
    from playwright.sync_api import expect

    start = "/?model=Qwen/Qwen3-8B&engine=vllm&weights=awq&card=GeForce%20RTX%204090%2024GB&ctx=16K"
    open_link(page, server.url + start)
    expect(page.locator('[data-testid="stMetric"]')).to_have_count(4)
    before = metrics(page)
    link = shared_link(page)
    assert " " not in link and urlsplit(link).netloc == urlsplit(server.url).netloc
    received = pasted_in_chat(link)
    assert received == link
    inputs, ignored = from_query({k: v[-1] for k, v in parse_qs(urlsplit(received).query).items()})
    assert ignored == [] and inputs.card == "GeForce RTX 4090 24GB" and inputs.weights == "awq"

    other = page.context.new_page()  # the receiver
    other.js_errors = []
    other.on("pageerror", lambda err: other.js_errors.append(str(err)))
    open_link(other, received)
    expect(other.locator('[data-testid="stMetric"]')).to_have_count(4)
    no_exception(other, "the received link")
    assert metrics(other) == before
    expect(other.locator('[data-testid="stSidebar"] input[aria-label="Card"]')).to_have_value(inputs.card)
    other.close()

    for label, path in PAGES:
        page.locator('[data-testid="stSidebar"] [data-testid="stPageLink"]').filter(has_text=label).click()
        page.wait_for_url(lambda url, path=path: urlsplit(url).path == path)
        expect_ready(page)
        no_exception(page, label)
        link = shared_link(page)
        assert urlsplit(link).path == path, link
        again, ignored = from_query({k: v[-1] for k, v in parse_qs(urlsplit(link).query).items()})
        assert (again, ignored) == (inputs, []), label


def test_comparator_added_twice_in_a_row(page, server):
    from playwright.sync_api import expect

    open_link(page, server.url + "/hybrid_vs_dense?model=Qwen/Qwen3.5-9B&cmp=Qwen/Qwen3-8B")
    chips = page.locator('[data-testid="stMultiSelect"] [data-tag]:visible')
    expect(chips).to_have_count(1)
    chosen = ["Qwen/Qwen3-8B"]
    for name in ("nvidia/Nemotron-H-8B-Base-8K", "google/gemma-3-4b-it"):
        box = page.locator('[data-testid="stMultiSelect"] input')
        box.click()
        box.fill(name)
        page.get_by_role("option", name=name, exact=True).click()
        page.keyboard.press("Escape")
        chosen.append(name)
        expect(chips).to_have_count(len(chosen))
        want = ",".join(chosen)
        page.wait_for_url(lambda url, want=want: query_of(url).get("cmp") == want)
        wait_for_app(page)
        expect(chips).to_have_count(len(chosen))  # still there after the rerun
        legend = page.locator('[data-testid="stPlotlyChart"]').first.locator(".legendtext")
        expect(legend.filter(has_text=name)).to_have_count(1)
    no_exception(page, "Hybrid vs full attention")


def test_a_comparator_clicked_at_once_is_the_one_added(page, server):
    """No wait for the paint's rerun: the click comes as soon as the box is drawn. Before the box was greyed out on
    the first run, 2 of 8 such loads added the top three models of the unfiltered list instead; since, 24 of 24 added
    the one clicked (Playwright waits for the box to be enabled, as a person must)."""
    from playwright.sync_api import expect

    page.goto(server.url + "/hybrid_vs_dense?model=Qwen/Qwen3.5-9B&cmp=Qwen/Qwen3-8B")
    chips = page.locator('[data-testid="stMultiSelect"] [data-tag]:visible')
    expect(chips).to_have_count(1, timeout=60_000)
    name = "nvidia/Nemotron-H-8B-Base-8K"
    box = page.locator('[data-testid="stMultiSelect"] input')
    box.click()
    box.fill(name)
    page.get_by_role("option", name=name, exact=True).click()
    page.keyboard.press("Escape")
    page.wait_for_url(lambda url: query_of(url).get("cmp") == f"Qwen/Qwen3-8B,{name}")
    wait_for_app(page)
    assert sorted(chips.all_inner_texts()) == sorted(["Qwen/Qwen3-8B", name])
    no_exception(page, "Hybrid vs full attention")


def test_stale_input_is_replaced_by_the_error(page, server):
    from playwright.sync_api import expect

    open_link(page, server.url + "/?model=meta-llama/Llama-3.1-8B-Instruct&card=H100%2080GB%20SXM5")
    # the chart's deferred rerun (after the first paint) is over before anything is typed
    expect(page.locator('[data-testid="stPlotlyChart"] .main-svg').first).to_be_visible(timeout=WAIT_MS)
    wait_for_app(page)
    context = page.locator('[data-testid="stSidebar"] input[aria-label="Context (tokens)"]')
    main = page.locator('[data-testid="stMain"]')
    for text, label in (("1M", None), ("abc", None), ("64,000", "Requests at 64,000")):
        context.fill(text)
        expect(context).to_have_value(text)
        context.press("Enter")
        # the run this entry starts has written the link (the typed text itself when it cannot be read): only then
        # can wait_for_app not return before that run began (a fill typed into a run still drawing can be lost)
        want = text if text == "abc" else format_tokens(parse_tokens(text)).replace(",", "")
        page.wait_for_url(lambda url, want=want: query_of(url).get("ctx") == want)
        wait_for_app(page)
        if text == "abc":
            expect(main.locator('[data-testid="stAlert"]').filter(has_text="'abc'")).to_have_count(1)
            expect(main.locator('[data-testid="stMetric"]')).to_have_count(0)
            expect(main.locator('[data-testid="stDataFrame"]')).to_have_count(0)
        else:
            expect(main.locator('[data-testid="stMetric"]')).to_have_count(4)
            if label:
                expect(main.get_by_text(label, exact=True)).to_have_count(1)
    no_exception(page, "stale input")


def test_phone_width(chromium, server):
    from playwright.sync_api import expect

    context = chromium.new_context(viewport={"width": 400, "height": 800}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.js_errors = []
    page.on("pageerror", lambda err: page.js_errors.append(str(err)))
    try:
        open_link(page, server.url + "/?model=Qwen/Qwen3-8B&engine=vllm&weights=bf16&card=H100%2080GB%20SXM5")
        sidebar = page.locator('[data-testid="stSidebar"]')
        expect(sidebar).to_have_attribute("data-collapsed", "true")
        # the columns that answer the question come first, inside the phone's width (the grid renders only the
        # columns in view into its accessible table)
        table = page.locator('[data-testid="stDataFrame"]').first
        table.scroll_into_view_if_needed()
        expect(table.locator("[role=columnheader]").first).to_be_attached()
        header = table.evaluate("e => [...e.querySelectorAll('[role=columnheader]')].map(c => c.textContent)")
        assert header[:3] == ["context", "fits", "requests"], header
        heading = page.locator("h3").filter(has_text="Context table")
        heading.scroll_into_view_if_needed()
        toolbar = page.locator('[data-testid="stElementToolbar"]').first
        top = heading.bounding_box()
        bar = toolbar.bounding_box()
        assert bar["y"] >= top["y"] + top["height"] - 1, (top, bar)  # the table's toolbar is below the heading
        # open the sidebar, change an input: it folds away and shows the new results
        page.locator('[data-testid="stExpandSidebarButton"]').click()
        expect(sidebar).to_have_attribute("data-collapsed", "false")
        box = sidebar.locator('input[aria-label="Context (tokens)"]')
        box.fill("8k")
        box.press("Enter")
        expect(sidebar).to_have_attribute("data-collapsed", "true")
        wait_for_app(page)
        expect(page.get_by_text("Requests at 8K", exact=True)).to_be_visible()
        no_exception(page, "phone width")
        full_page_screenshot(page, ARTIFACTS / "phone.png")
    finally:
        context.close()
