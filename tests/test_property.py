"""Properties every sizing must keep, over random valid configs of every architecture (so every layer kind) on every
engine: more context never less cache, capped layers stop growing, 8-bit KV never larger, more memory never a worse
fit, splitting over GPUs never more per GPU, and engines agree where their rules coincide.

Configs are the tiny ones of tests/tiny_configs.py with their widths, windows and state sizes drawn at random, so
each example goes through transformers' own defaults as a real config.json would. Examples are bounded (see
SETTINGS) so the file runs in well under a minute on two cores.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.engines import ENGINES, configured
from core.errors import InputError
from core.fit import Setup, Solver, fit
from core.memory.gpus import Card
from core.model.layers import FullAttention
from core.model.loading import model_from_config
from core.model.spec import ModelSpec
from tests.tiny_configs import TINY, tiny_raw

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
EIGHT_BIT = {"vllm": ("fp8", "bf16"), "llama.cpp": ("q8_0", "f16")}  # (8-bit, 16-bit) per engine that has one
CAPPED_KINDS = ("sliding_window", "chunked_attention")


@lru_cache(maxsize=256)
def _model(model_type: str, drawn: tuple[tuple[str, int], ...]) -> ModelSpec:
    return model_from_config(tiny_raw(model_type, **dict(drawn)), f"random {model_type}")


DENSE = ("llama", "qwen3", "phi3")  # full attention in every layer


@st.composite
def models(draw, types: tuple[str, ...] = tuple(sorted(TINY))) -> ModelSpec:
    """A tiny config of a random architecture with random widths; the layer pattern stays the config's own."""
    model_type = draw(st.sampled_from(types))
    base = tiny_raw(model_type)
    drawn: dict[str, int] = {}
    if base.get("head_dim") is not None and not model_type.startswith(("deepseek", "mamba")):
        drawn["head_dim"] = draw(st.sampled_from([32, 64, 128]))  # real widths: whole 8-bit blocks
    if "num_key_value_heads" in base and not model_type.startswith("deepseek"):
        # with the narrowest head (16) still a K row of whole 8-bit blocks (32 elements), as in every real model
        drawn["num_key_value_heads"] = draw(st.sampled_from([2, 4]))
    for window in ("sliding_window", "attention_chunk_size"):
        if base.get(window):
            drawn[window] = draw(st.integers(2, 64))
    for state in ("state_size", "mamba_d_state", "ssm_state_size"):
        if base.get(state):
            drawn[state] = draw(st.sampled_from([4, 8, 16]))
    if model_type in ("llama", "qwen3", "mistral", "phi3", "gemma2", "deepseek_v3"):
        drawn["num_hidden_layers"] = draw(st.integers(1, 6))
    try:
        return _model(model_type, tuple(sorted(drawn.items())))
    except InputError as err:  # a draw the architecture itself forbids would be a gap in the strategy: say which
        raise AssertionError(f"{model_type} {drawn}: {err}") from None


engines = st.sampled_from(sorted(ENGINES))
contexts = st.integers(1, 1 << 20)


def _account(engine: str, model: ModelSpec, context: int, kv: str = "auto", batch: int = 1):
    try:
        return configured(engine).account(model, context, batch, kv)
    except InputError:  # an engine that cannot run this model says so; nothing to compare then
        assume(False)


@SETTINGS
@given(models(), engines, contexts, contexts, st.integers(1, 4))
def test_more_context_never_fewer_cache_bytes(model, engine, a, b, batch):
    short, long = sorted((a, b))
    assert _account(engine, model, short, batch=batch).total <= _account(engine, model, long, batch=batch).total


@SETTINGS
@given(models(), engines, st.integers(1, 1 << 16))
def test_sliding_and_state_layers_never_grow_past_their_cap(model, engine, context):
    capped = tuple(layer for layer in model.layers if layer.token_cap is not None or not layer.grows)
    assume(capped)
    only = model.with_layers(capped)
    big = max(layer.token_cap or 0 for layer in capped) * 4 + (1 << 15)  # past every window plus in-flight batches
    at_big = {line.label: line for line in _account(engine, only, big).lines}
    later = {line.label: line for line in _account(engine, only, big + context).lines}
    assert later.keys() == at_big.keys()
    checked = 0
    for label, line in later.items():
        if label.startswith("full_attention"):
            continue  # an engine without this window (llama.cpp on Mistral) stores the layer as full attention
        assert line.total == at_big[label].total, label  # stopped growing
        if not any(kind in label for kind in CAPPED_KINDS) and "hybrid" not in label:
            assert line.token_bytes_total == 0, label  # a state layer holds no per-token cache at all
        checked += 1
    assume(checked)


@SETTINGS
@given(models(), st.sampled_from(sorted(EIGHT_BIT)), contexts, st.integers(1, 4))
def test_eight_bit_kv_never_more_bytes_than_sixteen_bit(model, engine, context, batch):
    eight, sixteen = EIGHT_BIT[engine]
    small = _account(engine, model, context, eight, batch).total
    assert small <= _account(engine, model, context, sixteen, batch).total


def _fit(model: ModelSpec, engine: str, gib: float, gpus: int = 1, tp: int = 1, pp: int = 1, context: int = 4096):
    setup = Setup(
        model=model, engine=configured(engine), card=Card.custom(gib), gpus=gpus, tp=tp, pp=pp, weights="bf16"
    )
    try:
        return fit(setup, [context])
    except InputError:
        assume(False)


@SETTINGS
@given(models(), engines, st.floats(0.01, 2.0), st.floats(1.0, 8.0), st.integers(1, 1 << 14))
def test_more_gpu_memory_never_a_shorter_context_or_fewer_requests(model, engine, gib, factor, context):
    small, large = _fit(model, engine, gib, context=context), _fit(model, engine, gib * factor, context=context)
    assert large.max_context >= small.max_context
    assert large.rows[0].max_concurrency >= small.rows[0].max_concurrency


@SETTINGS
@given(models(), engines, st.sampled_from([2, 4]), st.integers(1, 1 << 14))
def test_splitting_over_gpus_never_more_cache_per_gpu(model, engine, n, context):
    one = _fit(model, engine, 4.0, context=context)
    tp, pp = (n, 1) if engine == "vllm" else (1, n)
    split = _fit(model, engine, 4.0, gpus=n, tp=tp, pp=pp, context=context)
    assert split.rows[0].cache_bytes <= one.rows[0].cache_bytes
    if engine == "vllm":  # pipeline parallel too
        staged = _fit(model, engine, 4.0, gpus=n, tp=1, pp=n, context=context)
        assert staged.rows[0].cache_bytes <= one.rows[0].cache_bytes


# Where the rules coincide: full attention in 16 bits, one sequence, a context that fills whole vLLM blocks (16)
# and whole llama.cpp cells (256): every engine stores exactly K and V for each token of each layer.
@SETTINGS
@given(models(DENSE), st.integers(1, 64))
def test_engines_agree_where_their_rules_coincide(model, blocks):
    assert all(type(layer) is FullAttention for layer in model.layers)
    context = 256 * blocks
    expected = sum(2 * layer.kv_heads * layer.head_dim * 2 for layer in model.layers) * context
    totals = {
        "transformers": _account("transformers", model, context, "fp16").total,
        "vllm": _account("vllm", model, context, "fp16").total,
        "llama.cpp": _account("llama.cpp", model, context, "f16").total,
    }
    assert totals == dict.fromkeys(totals, expected)


def test_the_strategy_reaches_every_layer_kind():
    """The properties above mean something only if the configs drawn cover every kind kvscope sizes."""
    kinds = set()
    for model_type in TINY:
        kinds |= {type(part).__name__ for layer in _model(model_type, ()).layers for part in layer.parts()}
    assert kinds >= {
        "FullAttention", "SlidingWindow", "ChunkedAttention", "MLA", "GatedDeltaNet", "Mamba1", "Mamba2",
        "ShortConv", "LightningAttention", "NoCache",
    }  # fmt: skip


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_sizes_a_drawn_model(engine):
    """Guards the properties against passing vacuously (every draw assumed away): each engine sizes these."""
    for model_type in (*DENSE, "gemma3_text", "qwen3_5_text", "mamba2"):
        assert configured(engine).account(_model(model_type, ()), 4096, 1).total > 0


@SETTINGS
@given(models(), st.integers(2, 5), st.integers(1, 1 << 14), st.one_of(st.none(), st.integers(0, 8)))
def test_llamacpp_gpus_hold_the_whole_model_between_them(model, n, context, gpu_layers):
    """llama.cpp over n GPUs (Offload.split): the GPUs' weights and caches add up to those of one GPU holding the same
    layers; the deciding GPU is the one fitting the fewest sequences; no GPU is asked to hold more than all of it."""
    assume(n <= len(model.layers))
    base = Setup(model, configured("llama.cpp"), Card.custom(64), weights="q8_0", gpu_layers=gpu_layers)
    try:
        one, split = Solver(base), Solver(replace(base, gpus=n, pp=n))
    except InputError:
        assume(False)
    assert sum(share.weights for share in split.shares) == one.weights
    cache = sum(split._account(share.model, context).total for share in split.shares)
    assert cache == one.account(context).total
    layers = [i for share in split.shares for i in share.where.layers]
    assert layers == list(one.offload.layers)
    assert sum(share.where.output for share in split.shares) == one.offload.output
    assert split.concurrency(context) == min(split._room(share, context)[0] for share in split.shares)
    assert split.row(context).cache_bytes <= one.row(context).cache_bytes
