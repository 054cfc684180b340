"""Tests never touch the network, and never write outside a temporary folder."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("KVSCOPE_CACHE", tempfile.mkdtemp(prefix="kvscope-test-cache-"))
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="kvscope-test-hf-"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _as_painted(init):
    """AppTest runs no browser, so nothing reports a session's first run drawn (ui.layout.wait_for_paint): every
    AppTest starts as a session whose browser has drawn it, inputs and charts included. Tests of the first run
    itself set it (ui.layout.PAINTED) to False before running."""

    def wrapped(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self.session_state[PAINTED] = True

    return wrapped


from streamlit.testing.v1 import AppTest  # noqa: E402  (after the environment above)

from ui.layout import PAINTED  # noqa: E402

AppTest.__init__ = _as_painted(AppTest.__init__)
