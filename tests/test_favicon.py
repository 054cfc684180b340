"""Every page's icon is the local SVG Streamlit inlines: no `:material/…:` icon font fetched from a CDN."""

from __future__ import annotations

import os

import pytest
import streamlit
from streamlit.commands.page_config import _get_favicon_string

from tests.test_app import PAGES, app


@pytest.mark.parametrize("page", PAGES)
def test_page_icon_is_inlined_from_a_local_file(monkeypatch, page):
    seen: dict = {}
    real = streamlit.set_page_config
    monkeypatch.setattr(streamlit, "set_page_config", lambda **kw: (seen.update(kw), real(**kw))[1])
    at = app()
    if page != PAGES[0]:
        at.switch_page(page).run()
    assert not at.exception
    icon = seen["page_icon"]
    assert os.path.isfile(icon), icon
    assert _get_favicon_string(icon).startswith("data:image/svg+xml;base64,")
