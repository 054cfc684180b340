"""Page-level layout fixes shared by every page."""

from __future__ import annotations

import re
import secrets
import string
from pathlib import Path
from urllib.parse import urlsplit

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

FAVICON = str(Path(__file__).resolve().parents[1] / "static" / "favicon.svg")  # inlined SVG: no icon font from a CDN

# On a phone the table's toolbar (search, download, full screen) is always shown, floating above the table's top
# edge: over the heading above it. Move tables down by the toolbar's height there.
_MOBILE_CSS = """
<style>
@media (max-width: 640px) {
  .stElementContainer:has([data-testid="stDataFrame"]) { margin-top: 2.75rem; }
}
</style>
"""


def mobile_css() -> None:
    st.html(_MOBILE_CSS)


# Runs in the page (components v2 code is not sandboxed; our own constant script). `data` is the inputs' key: the
# script acts when it differs from the last one this tab saw (first load, or after an input changed); on a
# phone-width window it then folds the sidebar away so the new results show. No iframe: a frame per page costs a
# fresh tab a document of its own before the first paint.
_FOLD_SIDEBAR_JS = """
let seen = null;
export default function ({ data }) {
  if (data.key === seen) return;
  seen = data.key;
  const bar = document.querySelector('[data-testid="stSidebar"]');
  if (window.innerWidth <= 640 && bar && bar.dataset.collapsed === "false") {
    const button = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    if (button) button.click();
  }
}
"""
_fold_sidebar = st.components.v2.component("kvscope_fold_sidebar", js=_FOLD_SIDEBAR_JS)


def fold_sidebar_on_phones(key: str) -> None:
    _fold_sidebar(key="kv_fold_sidebar", data={"key": key}, width="content", height=0)


# No markup. Once the run that mounted it is over in the tab (Streamlit's run state back to not running, its
# running indicator gone) and the tab's main thread is idle (what the run drew is on screen; at most 2 s later;
# without requestIdleCallback, 50 ms later), it reports `painted`, which reruns the page. Waiting for the run's end
# matters under load: with 20 tabs on two cores the 2 s timeout fired while the tab was still drawing the first
# run, and the rerun it caused kept the page running (tests/bench/bench_team.py). Were the state attribute renamed
# by a Streamlit upgrade, the run would read as over and the report would come when idle, as before; a run that
# never reads as over is reported after 20 s. Our own constant script (components v2 code runs unsandboxed in the
# page).
_PAINTED_JS = """
let asked = null;
export default function ({ data, setStateValue }) {
  if (data.session === asked) return;  // once a session: the rerun it causes draws it again
  asked = data.session;
  const report = () => setStateValue("painted", true);
  const whenIdle = () => window.requestIdleCallback
    ? requestIdleCallback(report, { timeout: 2000 })
    : setTimeout(report, 50);  // Safari has no requestIdleCallback
  const app = document.querySelector('[data-testid="stApp"]');
  const over = () => !["running", "rerunRequested"].includes(app.getAttribute("data-test-script-state"))
    && !document.querySelector('[data-testid="stStatusWidget"]');
  // nothing returned: Streamlit calls what the component returns as its cleanup (a timer id is not one)
  if (!app || over()) { whenIdle(); return; }
  const late = setTimeout(() => { watch.disconnect(); report(); }, 20000);
  const watch = new MutationObserver(() => {
    if (!over()) return;
    watch.disconnect();
    clearTimeout(late);
    whenIdle();
  });
  watch.observe(document.body, { attributes: true, childList: true, subtree: true });
}
"""
_painted = st.components.v2.component("kvscope_painted", js=_PAINTED_JS)


_REPORTER = "kv_painted"  # the reporter's key: its state holds the browser's report
PAINTED = "_kv_painted"  # session state: the browser has drawn this session's first run (AppTest sets it: no browser)


def page_config(title: str, *, icon_at_once: bool = False) -> None:
    """Title and wide layout; the page's icon from the first paint's rerun on (ui.layout.wait_for_paint), unless
    `icon_at_once`: Streamlit turns any image icon into a URL through a function that imports numpy and Pillow,
    ~60 ms of a fresh server's first run. Until then the tab shows Streamlit's own icon, as it does while loading."""
    icon = FAVICON if icon_at_once or painted() else None
    st.set_page_config(page_title=f"kvscope — {title}", page_icon=icon, layout="wide")


def painted() -> bool:
    """Whether the browser has drawn this session's first run (`wait_for_paint` asks it). True from the top of the
    rerun the browser's report causes: the report is already in the reporter's state then."""
    if not st.session_state.get(PAINTED) and (st.session_state.get(_REPORTER) or {}).get("painted"):
        st.session_state[PAINTED] = True
    return bool(st.session_state.get(PAINTED))


def wait_for_paint() -> bool:
    """False on a session's first run, True once the browser has drawn that run: then the page reruns, with what
    waited. What waits: the sidebar's inputs and page links (~0.4 s of a fresh tab's first render, while the results
    need only the inputs' values) and a plotly chart (plotly.js costs a fresh tab ~0.6 s of main thread). Call once
    per run."""
    if not painted():
        session = st.session_state.setdefault("_kv_session", secrets.token_hex(8))  # a new one after a server restart
        state = _painted(
            key=_REPORTER, data={"session": session}, on_painted_change=lambda: None, width="content", height=0
        )
        st.session_state[PAINTED] = bool(state.painted)  # a plain key: kept once the reporter is gone
    return painted()


PAGES = (
    ("app.py", "Fit a card", ":material/calculate:"),
    ("pages/1_hybrid_vs_dense.py", "Hybrid vs full attention", ":material/show_chart:"),
    ("pages/2_measure_live.py", "Measure live", ":material/speed:"),
    ("pages/3_fact_check.py", "Fact-check", ":material/fact_check:"),
    ("pages/4_finders.py", "Which card, which model", ":material/travel_explore:"),
    ("pages/5_ollama.py", "Ollama on your card", ":material/memory:"),
    ("pages/6_cluster.py", "vLLM across nodes", ":material/hub:"),
)


def nav() -> None:
    """Every page, in the sidebar of every page."""
    for path, label, icon in PAGES:
        st.page_link(path, label=label, icon=icon)
    st.divider()


def opened(label: str, key: str, expanded: bool = False) -> DeltaGenerator | None:
    """An expander whose content runs only while it is open (opening it reruns the page); None while it is closed.
    What a closed expander holds is otherwise drawn, hidden, into a fresh tab's first render: the share box's code
    box costs ~0.25 s of main thread (its syntax highlighter), the explanations' long markdown."""
    box = st.expander(label, expanded=expanded, key=key, on_change="rerun")
    return box if box.open else None


# every ASCII punctuation character, which CommonMark lets a backslash escape (it then shows the character alone):
# links, emphasis, code, HTML, entities (&), Streamlit's $ (LaTeX), :name: (emoji, icons) and :colour[text], and GFM's
# bare https:// and www. autolinks (their ':' and '.' escaped)
MARKUP = re.compile("([" + re.escape(string.punctuation) + "])")


def literal(text: str) -> str:
    """Text that someone else chose (a link's values) as Streamlit's markdown shows it: character for character,
    whitespace run together (a line break or indent would start a block of its own), with no link, emphasis,
    formula or directive of its own."""
    return MARKUP.sub(r"\\\1", " ".join(text.split()))


# what lets text inside a message draw a link, an image, HTML, a formula or a coloured directive ([...], <...>, $...$,
# :red[...]), and a backslash that could undo an escape; bare addresses (:// and www.) are broken apart below
LINKISH = re.compile(r"([\\\[\]<>$@])")


def linkless(message: str) -> str:
    """A message that may quote someone else's text (a config's field, a link's value, a server's reply) with none of
    it drawn as a link, image, HTML or formula; the message's own markdown (`code`, emphasis) stays. What `literal`
    is for a whole value, this is for a sentence around one."""
    return LINKISH.sub(r"\\\1", message).replace("://", ":\\/\\/").replace("www.", "www\\.")


def link_base(url: str) -> str:
    """The page's address without its query; the root page's with its "/" (`http://host:8501/?…`, not `…8501?…`)."""
    base = url.split("?")[0]
    return base + "/" if base and not urlsplit(base).path else base


def share_box(query: str, notes: tuple[str, ...] = ()) -> None:
    """The link to this view, to copy (the code box has a copy button), and what it carries."""
    box = opened("Share this view", "kv_share")
    if box is None:
        return
    with box:
        st.code(f"{link_base(st.context.url or '')}?{query}", language=None, wrap_lines=True)
        st.caption("Copy the link with the button in the box's corner; it reproduces every input.")
        for note in notes:
            st.caption(note)
