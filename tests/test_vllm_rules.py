"""vLLM's paging rules, recomputed by hand from vLLM 0.33's algorithm for real configs.

Each expectation is derived in the test from the config's numbers, so a wrong block alignment, a missing state
padding or a miscounted group changes the result.
"""

from __future__ import annotations

import pytest

from core.engines import engine_named
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError
from core.model.loading import load_model, model_from_config
from tests.tiny_configs import tiny_raw

GIB = 1 << 30
VLLM = engine_named("vllm")
assert isinstance(VLLM, VllmEngine)


def cdiv(a, b):
    return -(-a // b)


def test_dense_qwen3_8b_matches_the_startup_log_arithmetic():
    model = load_model("Qwen/Qwen3-8B")
    page = 16 * 8 * (128 + 128) * 2  # block × kv heads × (K + V width) × bf16
    bytes_per_block = 36 * page  # one group holding all 36 layers
    budget, max_len = 10 * GIB, 40960
    cap = VLLM.capacity(model, budget, max_len)
    blocks = budget // bytes_per_block
    assert cap.num_blocks == blocks
    assert cap.blocks_per_request == max_len // 16
    assert cap.max_concurrency == pytest.approx(blocks / 2560)
    assert cap.kv_cache_tokens == int(blocks / 2560 * max_len)


def test_seed_a100_dense_figure_is_reproduced():
    # The seed's A100 run: 54.94 GiB free for KV, max_model_len 40960 → 9.77× for Qwen3-8B.
    cap = VLLM.capacity(load_model("Qwen/Qwen3-8B"), int(54.94 * GIB), 40960)
    assert round(cap.max_concurrency, 2) == 9.77


def qwen35_hand_plan(prefix_caching: bool, budget: int, max_len: int):
    attn_per_token = 4 * (256 + 256) * 2  # 4 KV heads, bf16
    conv = (2 * 16 * 128 + 32 * 128) * (4 - 1) * 2  # conv keeps d_conv − 1 columns, bf16
    ssm = 32 * 128 * 128 * 4  # Qwen3.5's config says mamba_ssm_dtype float32
    state = conv + ssm
    block = 16 * cdiv(state, 16 * attn_per_token)  # smallest multiple of 16 whose page holds the state
    page = block * attn_per_token  # the state page is padded up to this
    # 8 full + 24 GDN layers: group size 8 → 1 attention group + 3 state groups, 8 pages per block
    bytes_per_block = 8 * page
    per_request = cdiv(max_len, block) + 3 * (2 if prefix_caching else 1)
    blocks = budget // bytes_per_block
    return block, blocks, per_request


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_qwen35_hybrid_alignment_padding_and_groups(prefix_caching):
    model = load_model("Qwen/Qwen3.5-9B")
    engine = VLLM.with_options(prefix_caching=prefix_caching)
    budget, max_len = 20 * GIB, 262144
    block, blocks, per_request = qwen35_hand_plan(prefix_caching, budget, max_len)
    assert block == 528
    plan = engine.plan(model)
    assert plan.block_size == 528 and len(plan.groups) == 4 and plan.group_size == 8
    cap = engine.capacity(model, budget, max_len)
    assert (cap.num_blocks, cap.blocks_per_request) == (blocks, per_request)
    assert cap.max_concurrency == pytest.approx(blocks / per_request)


def test_sliding_window_blocks_cap_at_window_plus_in_flight_tokens():
    model = load_model("openai/gpt-oss-20b")
    per_token = 8 * (64 + 64) * 2
    max_len = 131072
    cap = VLLM.capacity(model, 8 * GIB, max_len)
    in_flight = 2 * 2048  # async scheduling keeps two batches of max_num_batched_tokens in flight
    sliding_blocks = cdiv(min(128 - 1 + in_flight, max_len), 16) + 1
    assert cap.blocks_per_request == max_len // 16 + sliding_blocks
    assert cap.num_blocks == 8 * GIB // (12 * 16 * per_token)  # 12 sliding + 12 full → 2 groups of 12


def test_gemma3_groups_follow_the_smaller_bucket():
    plan = VLLM.plan(load_model("google/gemma-3-12b-it"))
    # 40 sliding + 8 full: 40 ≥ 1.5 × 8, so groups of 8 → 5 sliding groups + 1 full group
    assert plan.group_size == 8
    assert sorted(g.page.kind for g in plan.groups) == ["full"] + ["sliding"] * 5


def test_uneven_buckets_are_padded():
    layer_types = ["full_attention"] * 10 + ["sliding_attention"] * 25
    raw = tiny_raw("gemma3_text", num_hidden_layers=35, layer_types=layer_types)
    plan = VLLM.plan(model_from_config(raw, "uneven"))
    sliding = [g.layers for g in plan.groups if g.page.kind == "sliding"]
    assert plan.group_size == 10 and sorted(sliding) == [8, 8, 9]
    # every block still spans a whole group of 10 pages, padding included
    page = 16 * 2 * (16 + 16) * 2
    assert plan.bytes_per_block == 10 * page


def test_mla_latent_is_not_split_by_tensor_parallel():
    model = load_model("deepseek-ai/DeepSeek-V3")
    one = VLLM.with_options(tensor_parallel=1).plan(model)
    eight = VLLM.with_options(tensor_parallel=8).plan(model)
    assert one.bytes_per_block == eight.bytes_per_block == 61 * 16 * 576 * 2


def test_tensor_parallel_splits_and_replicates_kv_heads():
    model = load_model("Qwen/Qwen3-8B")  # 8 KV heads
    assert VLLM.with_options(tensor_parallel=2).kv_bytes_per_token(model) == 36 * 4 * 256 * 2
    assert VLLM.with_options(tensor_parallel=16).kv_bytes_per_token(model) == 36 * 1 * 256 * 2
    with pytest.raises(InputError, match="does not divide"):
        VLLM.with_options(tensor_parallel=3).plan(model)


def test_fp8_kv_halves_attention_but_not_the_qwen35_state():
    model = load_model("Qwen/Qwen3.5-9B")
    bf16 = VLLM.account(model, 65536, kv_dtype="auto")
    fp8 = VLLM.account(model, 65536, kv_dtype="fp8")
    assert VLLM.kv_bytes_per_token(model, "fp8") * 2 == VLLM.kv_bytes_per_token(model, "auto")
    assert VLLM.fixed_bytes_per_sequence(model, "fp8") == VLLM.fixed_bytes_per_sequence(model, "auto")
    assert fp8.total < bf16.total


def test_mamba_ssm_cache_dtype_defaults():
    # auto follows the model dtype, except Qwen3.5 (config mamba_ssm_dtype) and Nemotron-H (float32)
    assert VLLM.storage(load_model("Qwen/Qwen3.5-9B")).ssm.name == "fp32"
    assert VLLM.storage(load_model("nvidia/Nemotron-H-8B-Base-8K")).ssm.name == "fp32"
    assert VLLM.storage(load_model("ai21labs/Jamba-v0.1")).ssm.name == "bf16"
    assert (
        VLLM.with_options(mamba_ssm_cache_dtype="float32").storage(load_model("ai21labs/Jamba-v0.1")).ssm.name == "fp32"
    )


def test_hopper_gdn_checkpoints_realign_blocks_and_add_one_per_request():
    """On Hopper vLLM's auto GDN prefill backend is FlashInfer: blocks align to 64 tokens and, with prefix caching,
    each GDN group keeps one more (checkpoint) block per request."""
    model = load_model("Qwen/Qwen3.5-9B")
    engine = VLLM.with_options(gdn_flashinfer=True)
    state = (2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4
    block = 64 * cdiv(state, 64 * 4096)
    assert block == 576 and engine.plan(model).block_size == 576
    cap = engine.capacity(model, 20 * GIB, 262144)
    assert cap.blocks_per_request == cdiv(262144, 576) + 3 * 3
    assert cap.num_blocks == 20 * GIB // (8 * 576 * 4096)
    # without prefix caching there are no checkpoints and the Ampere layout returns
    assert engine.with_options(prefix_caching=False).plan(model).block_size == 528


def test_the_solver_picks_the_hopper_rules_from_the_card():
    from core.fit import Setup, Solver
    from core.memory.gpus import card_named

    model = load_model("Qwen/Qwen3.5-9B")
    for card, block in (("H100", 576), ("A100 80GB SXM4", 528)):
        solver = Solver(Setup(model=model, engine=VLLM, card=card_named(card)))
        assert solver.engine.plan(model).block_size == block


def test_a_published_hybrid_startup_log_is_reproduced_to_the_token():
    """A vLLM boot log published in github.com/mitchross/talos-argocd-proxmox pull request #1995: a 64-layer Qwen
    hybrid (16 full-attention layers, 4 KV heads × 256; the Qwen3.5-27B shape), TP=2 on two RTX 3090s (Ampere:
    Triton GDN, no checkpoints), fp8 KV, prefix caching, max_num_batched_tokens 8192, a 2 × 4.99 GiB KV pool, block
    size 1568. It logged "GPU KV cache size: 302,921 tokens" and "Maximum concurrency for 131,072 tokens per
    request: 2.31x". The pool is only known to 0.01 GiB, so every budget in that range is tried."""
    model = load_model("Qwen/Qwen3.5-27B")
    engine = VLLM.with_options(tensor_parallel=2, max_num_batched_tokens=8192)
    assert engine.plan(model, "fp8").block_size == 1568
    for gib in (4.985, 4.99, 4.9949):
        cap = engine.capacity(model, int(gib * GIB), 131072, "fp8")
        assert cap.kv_cache_tokens == 302_921
        assert round(cap.max_concurrency, 2) == 2.31


# --- the CPU backend (vllm/platforms/cpu.py); the real engine referees these in tests/engines/test_vllm_engine.py


def test_cpu_block_size_defaults_to_128_and_cpu_mla_forces_16():
    cpu = VLLM.with_options(platform="cpu")
    dense = load_model("Qwen/Qwen3-8B")
    assert VLLM.plan(dense).block_size == 16 and cpu.plan(dense).block_size == 128
    assert cpu.with_options(block_size=64).plan(dense).block_size == 64  # a user's block size is kept
    mla = load_model("deepseek-ai/DeepSeek-V3")
    assert cpu.with_options(block_size=64).plan(mla).block_size == 16  # the reference CPU MLA kernel: 16 only
    assert not cpu.plan(mla).prefix_caching and VLLM.plan(mla).prefix_caching
    assert cpu.with_options(cpu_amx=True, block_size=64).plan(mla).block_size == 64  # AMX MLA has no such limit


def test_cpu_keeps_one_batch_in_flight_for_sliding_windows():
    model = load_model("openai/gpt-oss-20b")  # 12 sliding (128) + 12 full layers
    max_len = 131072
    cpu = VLLM.with_options(platform="cpu", async_scheduling=True)  # the CPU backend forces async off anyway
    cap = cpu.capacity(model, 8 * GIB, max_len)
    assert cap.blocks_per_request == max_len // 128 + cdiv(min(128 - 1 + 2048, max_len), 128) + 1


def test_cpu_stores_recurrent_states_in_fp32_and_aligns_hybrid_blocks_to_32():
    model = load_model("Qwen/Qwen3.5-9B")
    cpu = VLLM.with_options(platform="cpu", mamba_ssm_cache_dtype="bfloat16")
    assert cpu.storage(model).ssm.name == "bf16"  # a GDN model may keep a 16-bit state on CPU
    jamba = load_model("ai21labs/Jamba-v0.1")
    assert VLLM.storage(jamba).ssm.name == "bf16"
    assert VLLM.with_options(platform="cpu").storage(jamba).ssm.name == "fp32"
    assert VLLM.with_options(platform="cpu", cpu_avx512_bf16=False).storage(jamba).ssm.name == "bf16"
    # Qwen3.5-9B: state (fp32) over a 4 KiB/token attention page; block ≥ 128, a multiple of 128 (the default)
    state = (2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4
    per_token = 4 * (256 + 256) * 2
    assert VLLM.with_options(platform="cpu").plan(model).block_size == 128 * cdiv(state, 128 * per_token)
    # with a user block size of 16 the CPU kernel's multiple of 32 decides, where CUDA's 16 would
    user16 = VLLM.with_options(platform="cpu", block_size=16).plan(model).block_size
    assert user16 == 32 * cdiv(state, 32 * per_token) != 16 * cdiv(state, 16 * per_token)


# --- versions: what "KV cache size: N tokens" means


def test_kv_cache_size_tokens_follow_the_chosen_vllm_version():
    model = load_model("Qwen/Qwen3.5-9B")  # 4 groups of 8 layers (1 attention + 3 GDN)
    budget, max_len = 20 * GIB, 262144
    new = VLLM.with_options(version="0.33").capacity(model, budget, max_len)
    old = VLLM.with_options(version="0.20").capacity(model, budget, max_len)
    assert (old.num_blocks, old.max_concurrency) == (new.num_blocks, new.max_concurrency)
    assert new.kv_cache_tokens == int(new.num_blocks / new.blocks_per_request * max_len)
    assert old.kv_cache_tokens == new.num_blocks // 4 * 528  # before 0.21: blocks shared evenly over 4 groups
    dense = load_model("Qwen/Qwen3-8B")  # one group, L a multiple of 16: both formulas agree
    a, b = (VLLM.with_options(version=v).capacity(dense, budget, 40960) for v in ("0.20", "0.33"))
    assert a.kv_cache_tokens == b.kv_cache_tokens == a.num_blocks * 16
    with pytest.raises(InputError, match=r"MAJOR\.MINOR"):
        VLLM.with_options(version="latest").capacity(dense, budget, 40960)
