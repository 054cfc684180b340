"""Every bundled preset loads offline, has provenance, and sizes to the layer layout its model card states."""

from __future__ import annotations

import json

import pytest

from core.engines import engine_named
from core.model.config import SHIPPED_DIR, cache_key, resolve
from core.model.loading import load_model, presets
from core.model.params import count_params
from tests.conftest import ROOT

PROVENANCE = (ROOT / "core" / "model" / "presets" / "PROVENANCE.md").read_text()


def test_at_least_twenty_presets():
    assert len(presets()) >= 20


@pytest.mark.parametrize("repo_id", sorted(presets()))
def test_preset_loads_and_has_provenance(repo_id):
    spec = load_model(repo_id)
    assert spec.layers and all(engine_named("transformers").account(spec, 1024).lines)
    assert repo_id in PROVENANCE or presets()[repo_id].name in PROVENANCE


@pytest.mark.parametrize(
    ("repo_id", "counts"),
    [
        ("Qwen/Qwen3.5-9B", {"gated_deltanet": 24, "full_attention": 8}),
        ("Qwen/Qwen3.5-35B-A3B", {"gated_deltanet": 30, "full_attention": 10}),
        ("Qwen/Qwen3-Next-80B-A3B-Thinking", {"gated_deltanet": 36, "full_attention": 12}),
        ("openai/gpt-oss-20b", {"sliding_window [128]": 12, "full_attention": 12}),
        ("google/gemma-3-12b-it", {"sliding_window [1,024]": 40, "full_attention": 8}),
        ("mistralai/Mistral-7B-v0.1", {"sliding_window [4,096]": 32}),
        ("deepseek-ai/DeepSeek-V3", {"mla": 61}),
        ("ai21labs/Jamba-v0.1", {"mamba1": 28, "full_attention": 4}),
        ("state-spaces/mamba2-2.7b", {"mamba2": 64}),
        ("nvidia/Nemotron-H-8B-Base-8K", {"mamba2": 24, "no_cache": 24, "full_attention": 4}),
        ("LiquidAI/LFM2-1.2B", {"short_conv": 10, "full_attention": 6}),
        ("tiiuae/Falcon-H1-7B-Instruct", {"hybrid(full_attention+mamba2)": 44}),
    ],
)
def test_layer_layouts(repo_id, counts):
    if repo_id not in presets():
        pytest.fail(f"preset {repo_id} missing")
    account = engine_named("transformers").account(load_model(repo_id), 4096)
    assert {line.label: line.count for line in account.lines} == counts


def test_deepseek_v3_mla_latent_is_576_wide():
    spec = load_model("deepseek-ai/DeepSeek-V3")
    assert engine_named("transformers").kv_bytes_per_token(spec) == 61 * (512 + 64) * 2


@pytest.mark.parametrize("repo_id", sorted(presets()))
def test_shipped_resolution_is_what_transformers_gives_now(repo_id):
    """core/model/presets/resolved/ lets the app skip a child process; `make presets` rewrites it when this fails."""
    raw = json.loads(presets()[repo_id].read_text())
    shipped = SHIPPED_DIR / f"{cache_key(raw)}.json"
    assert shipped.is_file(), f"no shipped resolution for {repo_id}: run `make presets`"
    assert json.loads(shipped.read_text()) == json.loads(json.dumps(resolve(raw))), "stale: run `make presets`"


def test_app_resolution_of_a_preset_needs_no_child_process(monkeypatch):
    import core.model.config

    def refuse(*_args, **_kwargs):
        raise AssertionError("a child process was started for a bundled preset")

    monkeypatch.setattr("core.model.resolver.subprocess.Popen", refuse)
    monkeypatch.setattr("core.model.resolver.RESOLVER._proc", None)
    raw = json.loads(presets()["Qwen/Qwen3.5-9B"].read_text())
    assert core.model.config.resolve_isolated(raw)["layer_types"].count("full_attention") == 8


def test_the_lfm2_preset_carries_what_vllms_lfm2_reads():
    """vLLM's Lfm2 reads conv_dim and block_dim, which transformers' Lfm2Config does not define
    (tests/engines/vllm_models.py): the preset held the counts only, and a vLLM probe of it stopped at "'Lfm2Config'
    object has no attribute 'conv_dim'". It now holds the Hub file's keys, with its dtype, and sizes as before."""
    raw = json.loads(presets()["LiquidAI/LFM2-1.2B"].read_text())
    assert raw["conv_dim"] == raw["block_dim"] == raw["hidden_size"] == 2048 and raw["torch_dtype"] == "bfloat16"
    spec = load_model("LiquidAI/LFM2-1.2B")
    assert spec.dtype == "bf16" and 1.15e9 < count_params(spec).total < 1.2e9  # block_ff_dim 12288 → 8192 in use
