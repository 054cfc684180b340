"""The heart of kvscope: predictions equal the bytes in the cache object transformers really returns.

Every architecture is built tiny with random weights, prefilled at lengths below and above its window and conv
kernel, and every tensor reachable from the returned cache is summed (bookkeeping scalars under 64 bytes aside).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from core.engines import engine_named  # noqa: E402
from core.model.cachewalk import cache_bytes, pinned_bytes, walk  # noqa: E402
from core.model.loading import model_from_config  # noqa: E402
from tests.tiny_configs import TINY, WINDOW, tiny_raw  # noqa: E402

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LENGTHS = (2, WINDOW + 9, 3 * WINDOW + 1)  # shorter than every conv kernel; past every window
EXPECTED_KINDS = {
    "mistral": {"sliding_window [8]"},
    "gemma2": {"sliding_window [8]", "full_attention"},
    "gemma3_text": {"sliding_window [8]", "full_attention"},
    "gpt_oss": {"sliding_window [8]", "full_attention"},
    "llama4_text": {"chunked_attention [8]", "full_attention"},
    "deepseek_v2": {"mla"},
    "deepseek_v3": {"mla"},
    "qwen3_5_text": {"gated_deltanet", "full_attention"},
    "qwen3_5_moe_text": {"gated_deltanet", "full_attention"},
    "qwen3_next": {"gated_deltanet", "full_attention"},
    "mamba": {"mamba1"},
    "falcon_mamba": {"mamba1"},
    "mamba2": {"mamba2"},
    "jamba": {"mamba1", "full_attention"},
    "falcon_h1": {"hybrid(full_attention+mamba2)"},
    "granitemoehybrid": {"mamba2", "full_attention"},
    "nemotron_h": {"mamba2", "full_attention", "no_cache"},
    "zamba2": {"mamba2", "hybrid(full_attention+mamba2)"},
    "lfm2": {"short_conv", "full_attention"},
    "minimax": {"lightning_attention", "full_attention"},
}


def build(raw: dict, dtype: torch.dtype):
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    config = AutoConfig.for_model(raw["model_type"], **fields)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def prefill(model, n: int, batch: int = 1):
    ids = torch.randint(0, model.config.vocab_size, (batch, n))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    return out.cache  # transformers 5's name (`past_key_values`: a deprecated alias)


def check(model_type: str, kv: str, batch: int = 1) -> None:
    raw = tiny_raw(model_type)
    spec = model_from_config(raw, model_type)
    engine = engine_named("transformers")
    model = build(raw, TORCH_DTYPES[kv])
    for n in LENGTHS:
        cache = prefill(model, n, batch)
        measured = cache_bytes(cache)
        predicted = engine.account(spec, n, batch=batch, kv_dtype=kv).total
        detail = "\n".join(f"{h.path} {h.shape} {h.dtype} {h.nbytes}" for h in walk(cache))
        assert predicted == measured, f"{model_type} {kv} n={n} b={batch}: {predicted} != {measured}\n{detail}"


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_bf16_cache_bytes_equal_transformers(model_type):
    check(model_type, "bf16")


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "mamba2", "minimax", "lfm2", "mistral", "deepseek_v3"])
@pytest.mark.parametrize("kv", ["fp32", "fp16"])
def test_other_dtypes_equal_transformers(model_type, kv):
    check(model_type, kv)


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "falcon_h1", "gemma3_text"])
def test_batch_of_three_equals_transformers(model_type):
    check(model_type, "bf16", batch=3)


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tiny_models_hold_the_kinds_they_are_meant_to(model_type):
    spec = model_from_config(tiny_raw(model_type), model_type)
    engine = engine_named("transformers")
    labels = {line.label for line in engine.account(spec, 4).lines}
    assert EXPECTED_KINDS.get(model_type, {"full_attention"}) == labels


def test_sliding_layers_pin_more_than_they_hold():
    """transformers slices the window out of a concatenation: after a prefill the whole prompt's K/V stays alive,
    and while decoding each step's buffer is `window` tokens long though only window − 1 are visible."""
    raw = tiny_raw("mistral")
    model = build(raw, torch.bfloat16)
    n = 5 * WINDOW
    cache = prefill(model, n)
    per_token = 2 * 2 * 16 * 2 * 2  # K+V × kv heads × head_dim × bf16 × layers
    assert cache_bytes(cache) == per_token * (WINDOW - 1)
    assert pinned_bytes(cache) == per_token * n
    with torch.no_grad():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long), cache=cache, use_cache=True)
    assert cache_bytes(cache) == per_token * (WINDOW - 1)
    assert pinned_bytes(cache) == per_token * WINDOW
