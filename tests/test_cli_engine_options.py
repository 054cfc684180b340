"""The engine options on the command line (`--platform`, `--swa-full`, `--kv-unified`) reach the engine they name."""

from __future__ import annotations

import json

from tests.test_cli import run_cli


def _size(*args: str) -> dict:
    proc = run_cli("size", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_platform_reaches_vllm_and_is_echoed():
    out = _size("Qwen/Qwen3-8B", "--engine", "vllm", "--platform", "cpu", "--context", "1000")
    assert out["engine_options"]["platform"] == "cpu"
    assert _size("Qwen/Qwen3-8B", "--engine", "vllm")["engine_options"]["platform"] == "cuda"


def test_swa_full_keeps_every_token_on_sliding_layers():
    # gemma-3-4b: 29 sliding (window 1,024) + 5 full layers. With --swa-full every layer holds the whole context, so
    # the cache equals the per-token rate × padded cells; without it the sliding layers stop near the window.
    ctx = 32768
    full = _size("google/gemma-3-4b-it", "--engine", "llama.cpp", "--context", "32k", "--swa-full")
    capped = _size("google/gemma-3-4b-it", "--engine", "llama.cpp", "--context", "32k", "--no-swa-full")
    assert full["engine_options"]["swa_full"] is True
    assert full["contexts"][0]["cache_bytes"] == full["kv_bytes_per_token"] * ctx
    assert capped["contexts"][0]["cache_bytes"] < full["contexts"][0]["cache_bytes"] // 4


def test_llamacpp_flags_do_not_touch_other_engines():
    out = _size("Qwen/Qwen3-8B", "--engine", "transformers", "--swa-full", "--kv-unified", "--context", "4k")
    assert out["engine_options"] == {}


def test_unknown_platform_is_refused_with_the_choices():
    proc = run_cli("size", "Qwen/Qwen3-8B", "--engine", "vllm", "--platform", "tpu")
    assert proc.returncode == 2
    assert "cuda" in proc.stderr and "cpu" in proc.stderr
