"""Tests never touch the network, and never write outside a temporary folder."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ["HF_HUB_OFFLINE"] = "1"
for _var, _prefix in (("KVSCOPE_CACHE", "kvscope-test-cache-"), ("HF_HOME", "kvscope-test-hf-")):
    if _var not in os.environ:  # a folder of this run's own, gone when it ends
        os.environ[_var] = tempfile.mkdtemp(prefix=_prefix)
        atexit.register(shutil.rmtree, os.environ[_var], ignore_errors=True)
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
