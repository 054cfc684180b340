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
