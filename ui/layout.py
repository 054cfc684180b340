"""Page-level layout fixes shared by every page."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

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


# Runs in the component's same-origin iframe. `key` changes with the inputs, so the script runs again (and only)
# after an input changed; on a phone-width window it then folds the sidebar away so the new results show.
_FOLD_SIDEBAR = """
<script>
const doc = window.parent.document;
const bar = doc.querySelector('[data-testid="stSidebar"]');
if (window.parent.innerWidth <= 640 && bar && bar.dataset.collapsed === "false") {
  const button = doc.querySelector('[data-testid="stSidebarCollapseButton"] button');
  if (button) button.click();
}
</script>
<!-- %s -->
"""


def fold_sidebar_on_phones(key: str) -> None:
    from streamlit.components.v1 import html

    html(_FOLD_SIDEBAR % key.replace("-", ""), height=0)
