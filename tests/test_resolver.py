"""The app's config resolver: one long-lived child process imports transformers once, so a config the server has
not seen costs milliseconds of CPU instead of a fresh interpreter importing torch (issue 17 item 2)."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from core.errors import InputError
from core.model.config import resolve, resolve_isolated
from core.model.resolver import RESOLVER
from tests.tiny_configs import tiny_raw


def fresh(model_type: str = "llama", **fields) -> dict:
    """A config no cache has seen (the nonce is part of the cache key, not of the config transformers reads)."""
    return tiny_raw(model_type, **fields) | {"_nonce": uuid.uuid4().hex}


def test_one_child_answers_every_new_config_as_resolve_would():
    first = fresh("llama")
    assert resolve_isolated(first) == resolve(first)
    pid = RESOLVER.pid
    assert pid is not None and pid != os.getpid()
    for model_type in ("qwen3_5_text", "mamba2", "gemma3_text"):
        raw = fresh(model_type)
        assert resolve_isolated(raw) == resolve(raw)
    assert RESOLVER.pid == pid  # the same process: transformers imported once


def test_a_warm_child_resolves_a_new_config_in_well_under_a_second():
    resolve_isolated(fresh())  # warm
    before = RESOLVER.cpu_seconds()
    for _ in range(5):
        resolve_isolated(fresh("qwen3_5_text"))
    assert (RESOLVER.cpu_seconds() - before) / 5 < 0.5  # a cold `python -m core resolve` cost 1.5–3 s each


def test_a_rejected_config_is_an_error_and_the_child_lives_on():
    resolve_isolated(fresh())
    pid = RESOLVER.pid
    with pytest.raises(InputError, match="model_type"):
        resolve_isolated({"hidden_size": 8, "_nonce": uuid.uuid4().hex})
    assert RESOLVER.pid == pid
    raw = fresh()
    assert resolve_isolated(raw) == resolve(raw)


def test_a_killed_or_slow_child_is_replaced():
    resolve_isolated(fresh())
    os.kill(RESOLVER.pid, signal.SIGKILL)
    RESOLVER._proc.wait()
    raw = fresh()
    assert resolve_isolated(raw) == resolve(raw)  # a new child answers
    # a child that cannot answer (stopped): a tiny timeout alone races a child that answers before the wait starts
    os.kill(RESOLVER.pid, signal.SIGSTOP)
    with pytest.raises(InputError, match="took more than"):
        resolve_isolated(fresh(), timeout=0.2)
    assert RESOLVER.pid is None  # killed, not left working on it
    raw = fresh()
    assert resolve_isolated(raw) == resolve(raw)


def test_the_app_starts_it_after_its_first_page_and_below_the_pages_priority():
    """Started at once, its import slowed the server's first render by about 0.5 s of CPU on two cores."""
    import time
    from pathlib import Path

    from core.model.resolver import Resolver

    resolver = Resolver()
    resolver.start_soon(delay_s=0.5)
    assert resolver.pid is None  # not while the first page renders
    deadline = time.monotonic() + 30
    while resolver.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert resolver.pid is not None
        nice = int(Path(f"/proc/{resolver.pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
        assert nice >= 10
        resolver.start_soon(delay_s=0.0)  # once per process: a second call starts nothing more
        assert resolver._timer is not None and resolver.pid is not None
        raw = fresh()
        assert resolver.resolve(raw, timeout=120) == resolve(raw)
    finally:
        resolver.stop()
