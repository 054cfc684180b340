"""Hostile input and a whole team, in a real browser against one real `streamlit run` server.

Hostile: links with values out of range, a server path as the model, a bombed shared config, an upload past the
size limit and a deeply nested one; each gets a visible message and no exception box. Team: TEAM_SIZE browser
contexts (one session each) load different models and settings at the same time; each page shows the figures core
computes for its own inputs (no cross-talk) and none fails. tests/bench/bench_team.py times the same load.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from core.errors import InputError
from core.fit import context_limit, fit, table_contexts
from core.model.loading import presets
from core.report import max_context_text
from core.units import format_bytes
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, FIGURES, FIRST_DONE_JS, VIEWPORT, wait_for_app
from ui.state import from_query, share_query

TEAM_SIZE = 20
TEAM_TIMEOUT_MS = 150_000  # one page load while TEAM_SIZE others load on two cores
SECRET = "/etc/passwd"


def _exceptions(page) -> list[str]:
    return page.locator('[data-testid="stException"]').all_inner_texts()


def _alerts(page) -> str:
    return "\n".join(page.locator('[data-testid="stAlert"]').all_inner_texts())


def test_out_of_range_link_values_are_named_in_the_browser(page, server):
    from playwright.sync_api import expect

    page.goto(server.url + "/?layers=16000000&hd=16000000&gib=0.001")
    expect(page.locator('[data-testid="stMetric"]')).to_have_count(4, timeout=60_000)
    wait_for_app(page)
    assert not _exceptions(page)
    alerts = _alerts(page)
    for key in ("layers=", "hd=", "gib="):
        assert key in alerts, (key, alerts)
    # the context box is text: it keeps what was sent and says what is wrong in place of the results
    page.goto(server.url + "/?ctx=999999999999999999999")
    expect(page.get_by_test_id("stAlertContentError").get_by_text("more than kvscope sizes")).to_be_visible(
        timeout=60_000
    )
    assert not _exceptions(page)
    assert "953674316406250M" not in page.content()


def test_a_server_path_or_a_bomb_in_a_link_is_refused_in_the_browser(page, server):
    from playwright.sync_api import expect

    secret_line = Path(SECRET).read_text().splitlines()[0]
    bomb = base64.urlsafe_b64encode(zlib.compress(b'{"a":"' + b" " * (10 << 20) + b'"}', 9)).decode().rstrip("=")
    for link, phrase in ((f"/?model={SECRET}&source=Hub", "unknown model"), (f"/?config={bomb}", "unpacks to")):
        page.goto(server.url + link)
        expect(page.locator('[data-testid="stAlert"]').first).to_be_visible(timeout=60_000)
        wait_for_app(page)
        assert not _exceptions(page)
        assert phrase in _alerts(page)
        assert secret_line not in page.content()


def test_uploads_past_the_limit_or_nested_too_deep_are_explained(page, server, tmp_path):
    from playwright.sync_api import expect

    page.goto(server.url + "/?source=Upload")
    wait_for_app(page)
    uploader = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    huge = tmp_path / "config.json"
    huge.write_bytes(b'{"model_type": "llama", "x": "' + b"a" * (3 << 20) + b'"}')  # the limit is 2 MiB
    uploader.set_input_files(str(huge))
    expect(page.get_by_text("File must be 2.0MB or smaller", exact=False)).to_be_visible(timeout=30_000)
    wait_for_app(page)
    assert not _exceptions(page)
    nested = tmp_path / "nested" / "config.json"
    nested.parent.mkdir()
    nested.write_text("[" * 100_000 + "]" * 100_000)
    uploader.set_input_files(str(nested))  # the oversize file never reached the server: nothing to remove
    expect(page.get_by_text("nested too deeply", exact=False)).to_be_visible(timeout=30_000)
    wait_for_app(page)
    assert not _exceptions(page)


# --- a whole team -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Member:
    link: str  # path and query
    expected: dict[str, str]  # metric label -> text core computes for these inputs


def team(size: int = TEAM_SIZE) -> list[Member]:
    """`size` different views: models, engines, cards, contexts and KV types cycled, each with core's figures."""
    from core.model.loading import load_model
    from ui.inputs import setup_for

    names = sorted(presets())
    engines = ["llama.cpp", "vllm", "transformers"]
    cards = ["H100 80GB SXM5", "GeForce RTX 4090", "custom"]
    out: list[Member] = []
    i = 0
    while len(out) < size:
        params = {
            "model": names[i % len(names)],
            "engine": engines[i % 3],
            "card": cards[(i // 3) % 3],
            "gib": str(12 + i),
            "ctx": ["8K", "16K", "32K", "4K"][i % 4],
            "weights": ["bf16", "q4_k_m", "fp8"][(i // 2) % 3],
        }
        i += 1
        inputs, _ = from_query(params)
        try:
            setup = setup_for(inputs, load_model(inputs.model, isolated=True))
            limit = context_limit(setup)
            result = fit(setup, sorted(set(table_contexts(limit)) | {min(inputs.ctx, limit)}))
        except InputError:
            continue  # a combination the engine cannot run (the page would say so): take the next
        row = next(r for r in result.rows if r.context == min(inputs.ctx, limit))
        expected = {"Cache at this context": format_bytes(row.cache_bytes)}
        expected["Max context, one sequence"] = max_context_text(result)
        out.append(Member("/?" + share_query(inputs), expected))
    return out


async def _metrics(page) -> dict[str, str]:
    out = {}
    for box in await page.locator('[data-testid="stMetric"]').all():
        label = (await box.locator('[data-testid="stMetricLabel"]').inner_text()).strip()
        out[label] = (await box.locator('[data-testid="stMetricValue"]').inner_text()).strip()
    return out


@dataclass(frozen=True)
class Answer:
    """One user's page: seconds to its first render (`count` of `ready` drawn and the script run over, stamped in the
    page) and, on kvscope, to its sidebar's inputs too (the rerun after the first paint, ui.layout.wait_for_paint);
    what its metrics show; its final URL; how many exception boxes it drew."""

    first: float
    inputs: float | None
    shown: dict[str, str]
    url: str
    errors: int


async def _load(browser, url: str, ready: str, count: int, read: bool, inputs: bool) -> Answer:
    """One user: a fresh browser context opens `url` (`inputs`: a kvscope page, whose inputs follow its first
    render)."""
    from playwright.async_api import expect

    context = await browser.new_context(viewport=VIEWPORT)
    try:
        page = await context.new_page()
        await page.add_init_script(FIRST_DONE_JS % (ready, count))
        started, start = time.time(), time.perf_counter()
        await page.goto(url, timeout=TEAM_TIMEOUT_MS)
        await page.wait_for_function("window.__kvFirstDone !== null", timeout=TEAM_TIMEOUT_MS, polling="raf")
        first = await page.evaluate("window.__kvFirstDone") / 1000 - started
        if inputs:
            box = page.locator('[data-testid="stSidebar"]').get_by_role("textbox", name="Context (tokens)")
            await expect(box).to_be_visible(timeout=TEAM_TIMEOUT_MS)
        app = page.locator('[data-testid="stApp"]')
        await expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=TEAM_TIMEOUT_MS)
        drawn = time.perf_counter() - start if inputs else None
        if read:  # the rerun's metrics (ui.figures): their code may still be on its way when the inputs are drawn
            await expect(page.locator('[data-testid="stMetric"]')).to_have_count(count, timeout=TEAM_TIMEOUT_MS)
        shown = await _metrics(page) if read else {}
        errors = await page.locator('[data-testid="stException"]').count()
        return Answer(first, drawn, shown, page.url, errors)
    finally:
        await context.close()


async def _team_round(urls: list[str], ready: str, count: int, read: bool, inputs: bool) -> list[Answer]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            return await asyncio.gather(*(_load(browser, url, ready, count, read, inputs) for url in urls))
        finally:
            await browser.close()


def drive_team(
    urls: list[str], ready: str = FIGURES, count: int = 4, read: bool = True, inputs: bool = True
) -> list[Answer]:
    """Every URL opened at once, each in its own browser context (its own session), in one Chromium. Runs on its
    own thread: Playwright's sync API (the other tests' fixtures) owns this thread's event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _team_round(urls, ready, count, read, inputs)).result()


def test_a_whole_team_at_once_sees_each_its_own_view(server):
    members = team()
    assert len({m.link for m in members}) == TEAM_SIZE
    assert len({tuple(m.expected.items()) for m in members}) >= TEAM_SIZE // 2  # cross-talk would show
    answers = drive_team([server.url + m.link for m in members])
    for member, answer in zip(members, answers, strict=True):
        assert answer.errors == 0, member.link
        assert {k: answer.shown.get(k) for k in member.expected} == member.expected, (member.link, answer.shown)
        mine = parse_qs(urlsplit(member.link).query)
        assert parse_qs(urlsplit(answer.url).query)["model"] == mine["model"]
        assert answer.first < answer.inputs < TEAM_TIMEOUT_MS / 1000
