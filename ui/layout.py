"""Page-level layout fixes shared by every page."""

from __future__ import annotations

import streamlit as st

# On a phone the header toolbar (deploy/menu) floats over the page title: push the content below it.
_MOBILE_CSS = """
<style>
@media (max-width: 640px) {
  [data-testid="stMainBlockContainer"] { padding-top: 4.5rem; }
}
</style>
"""


def mobile_css() -> None:
    st.html(_MOBILE_CSS)
