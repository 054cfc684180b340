"""vLLM past one machine (core.engines.vllm_cluster): per-GPU weights under TP × PP × DP with and without EP, the
latent cache MLA keeps whole on every TP rank, DP ranks holding only their own requests, and the plan search. The
expected figures are hand arithmetic from the configs (DeepSeek-V3: 61 layers, 3 dense, 256 experts of
2048 × 7168, kv_lora_rank 512 + rope 64) or other kvscope functions, never the module's own output."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from core.dtypes import dtype_named
from core.engines import configured
from core.engines.vllm_cluster import (
    Cluster,
    Layout,
    arithmetic,
    dp_attention,
    engine_for,
    evaluate,
    layouts,
    plain_tp,
    plans,
    serve_command,
    serve_defaults,
    stage_token_bytes,
    stage_weights,
)
from core.engines.vllm_engine import ServeDefaults, VllmEngine, VllmOptions
from core.errors import InputError
from core.fit import Setup, fit
from core.memory.gpus import card_named
from core.memory.quant import weights_bytes
from core.model.loading import load_model
from core.model.params import count_params

H100 = card_named("H100 80GB SXM5")
H200 = card_named("H200")
CTX = 32768


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-ai/DeepSeek-V3")


@pytest.fixture(scope="module")
def kimi():
    return load_model("moonshotai/Kimi-K2-Instruct")


def fp8_block_matrix(rows: int, cols: int) -> int:
    """An fp8 matrix with one fp32 scale per 128 × 128 tile (DeepSeek's block quantisation)."""
    return rows * cols + -(-rows // 128) * -(-cols // 128) * 4


# one routed expert of DeepSeek-V3: gate+up (2·2048 × 7168) and down (7168 × 2048)
DSV3_EXPERT = fp8_block_matrix(2 * 2048, 7168) + fp8_block_matrix(7168, 2048)
DSV3_MOE_LAYERS = 61 - 3


def test_one_gpu_holds_the_whole_checkpoint(dsv3):
    whole = stage_weights(dsv3, Layout())
    fmt = "fp8_block"
    expected = weights_bytes(count_params(dsv3), fmt, dtype_named(dsv3.dtype).block_bytes).total
    assert whole.total == (expected,)
    assert whole.experts == (DSV3_MOE_LAYERS * 256 * DSV3_EXPERT,)


@pytest.mark.parametrize("dp, tp", [(16, 1), (8, 2), (2, 8)])
def test_expert_parallel_gives_each_rank_whole_experts(dsv3, dp, tp):
    ways = dp * tp
    sw = stage_weights(dsv3, Layout(tp=tp, dp=dp, expert_parallel=True))
    assert sw.experts == (DSV3_MOE_LAYERS * -(-256 // ways) * DSV3_EXPERT,)


def test_uneven_expert_parallel_rounds_up():
    model = load_model("Qwen/Qwen3-30B-A3B")  # 128 experts of 768 × 2048, 48 layers, bf16
    sw = stage_weights(model, Layout(tp=1, dp=6, expert_parallel=True))
    per_expert = (2 * 768 * 2048 + 2048 * 768) * 2
    assert sw.experts == (48 * 22 * per_expert,)  # ⌈128 / 6⌉ = 22 on the fullest rank


def test_without_ep_experts_are_split_over_dp_times_tp(dsv3):
    with_ep = stage_weights(dsv3, Layout(tp=2, dp=8, expert_parallel=True))
    without = stage_weights(dsv3, Layout(tp=2, dp=8, expert_parallel=False))
    whole = DSV3_MOE_LAYERS * 256 * DSV3_EXPERT
    assert sum(without.experts) == pytest.approx(whole / 16, rel=1e-6)
    assert with_ep.experts == (whole // 16,)  # 256 divides evenly: the same bytes
    # with DP > 1, EP and TP > 1 vLLM replicates the shared experts over TP (use_sequence_parallel_moe)
    shared = DSV3_MOE_LAYERS * (fp8_block_matrix(2048, 7168) * 2 + fp8_block_matrix(7168, 2048))
    assert with_ep.replicated[0] - without.replicated[0] == shared


def test_tp_splits_weights_but_replicates_mla_down_projections(dsv3):
    one = stage_weights(dsv3, Layout(tp=1, dp=8, expert_parallel=True))
    eight = stage_weights(dsv3, Layout(tp=8, dp=1, expert_parallel=True))
    # q_a (1536 × 7168) and kv_a (576 × 7168) stay whole on every TP rank (DeepSeekV2FusedQkvAProjLinear)
    qkv_a = 61 * (fp8_block_matrix(1536, 7168) + fp8_block_matrix(576, 7168))
    assert eight.replicated[0] > qkv_a
    assert one.split[0] + one.replicated[0] > 8 * eight.split[0]


def test_pipeline_stages_hold_their_layers_the_embedding_and_the_head(dsv3):
    two = stage_weights(dsv3, Layout(tp=8, pp=2))
    one = stage_weights(dsv3, Layout(tp=8, pp=1))
    assert sum(two.total) == pytest.approx(one.total[0], rel=1e-9, abs=64)  # nothing lost or counted twice
    # 61 layers split 31 / 30: the first stage has the 3 dense layers, so 28 MoE layers against 30
    assert two.experts[0] * 30 == two.experts[1] * 28


def test_mla_latent_is_whole_on_every_tp_rank_and_gqa_is_split(dsv3):
    latent = 61 * (512 + 64) * 2
    for tp in (1, 2, 8):
        engine = engine_for(Cluster(H100), Layout(tp=tp, dp=8 // tp))
        assert stage_token_bytes(engine, dsv3, Layout(tp=tp)) == [latent]
    llama = load_model("meta-llama/Llama-3.1-70B-Instruct")  # 80 layers, 8 KV heads of 128
    gqa = [stage_token_bytes(engine_for(Cluster(H100), Layout(tp=t)), llama, Layout(tp=t))[0] for t in (1, 2, 8)]
    assert gqa == [80 * 8 * 128 * 2 * 2 // t for t in (1, 2, 8)]


def test_dp_attention_requests_by_hand(dsv3):
    r = evaluate(dsv3, Cluster(H100, 2, 8), Layout(tp=1, dp=16, expert_parallel=True), CTX)
    assert r.why_not is None
    overhead = sum(i.bytes for i in r.overhead)
    assert r.kv_budgets == (int(H100.memory_bytes * 0.92) - r.weights.total[0] - overhead,)
    # one group of 61 MLA layers; a block = 61 pages of 16 tokens × 1,152 B; a 32K request takes 2,048 blocks
    blocks = r.kv_budgets[0] // (61 * 16 * 1152)
    assert r.capacity.num_blocks == blocks
    assert r.requests == 16 * (blocks // 2048)
    assert r.cache_tokens == 16 * int(blocks / 2048 * CTX)


def test_plain_tp_keeps_eight_copies_of_each_latent(dsv3):
    cluster = Cluster(H100, 2, 8)
    base = evaluate(dsv3, cluster, plain_tp(dsv3, cluster), CTX)
    assert (base.layout.tp, base.layout.pp, base.layout.dp) == (8, 2, 1)
    # the fuller stage has 31 layers of latents, for every request of the one engine
    per_block = max(31, 30) * 16 * 1152
    stage_blocks = [b // per_block if s == 0 else b // (30 * 16 * 1152) for s, b in enumerate(base.kv_budgets)]
    assert base.capacity.num_blocks == min(stage_blocks)
    assert base.requests == min(stage_blocks) // 2048


@pytest.mark.parametrize("card", [H100, H200])
@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K2-Instruct"])
def test_search_ranks_every_layout_by_requests(name, card):
    model = load_model(name)
    cluster = Cluster(card, 2, 8)
    ranked = plans(model, cluster, CTX)
    again = {(r.layout, r.requests) for r in (evaluate(model, cluster, lay, CTX) for lay in layouts(model, cluster))}
    assert {(r.layout, r.requests) for r in ranked} == again
    fitting = [r.requests for r in ranked if r.why_not is None]
    assert fitting == sorted(fitting, reverse=True) and fitting
    best, base = ranked[0], evaluate(model, cluster, plain_tp(model, cluster), CTX)
    assert best.layout.dp > 1 and best.requests > base.requests  # DP-attention beats plain TP for MLA


def test_kimi_k2_dp_attention_does_not_fit_h100s(kimi):
    """1.03T fp8 parameters: 16 ranks each holding 1/16 of the experts plus every non-expert weight leave an H100
    no room for cache; on H200s it fits."""
    h100 = evaluate(kimi, Cluster(H100, 2, 8), dp_attention(kimi, Cluster(H100, 2, 8)), CTX)
    assert h100.why_not and "no room" in h100.why_not
    # Kimi-K2's experts have DeepSeek-V3's shape: 60 MoE layers × ⌈384 / 16⌉ = 24 of them a rank
    assert h100.weights.experts == (60 * 24 * DSV3_EXPERT,)
    overhead = sum(i.bytes for i in h100.overhead)
    assert h100.weights.total[0] + overhead > int(H100.memory_bytes * 0.92)
    h200 = evaluate(kimi, Cluster(H200, 2, 8), dp_attention(kimi, Cluster(H200, 2, 8)), CTX)
    assert h200.why_not is None and h200.requests > 0


def test_dense_replicas_multiply_one_engine():
    model = load_model("meta-llama/Llama-3.1-70B-Instruct")
    r = evaluate(model, Cluster(H100, 2, 8), Layout(tp=8, dp=2), CTX)
    engine = VllmEngine(options=VllmOptions(tensor_parallel=8, max_num_batched_tokens=8192, gdn_flashinfer=True))
    alone = engine.capacity(model, r.kv_budgets[0], CTX)
    assert r.requests == 2 * int(alone.max_concurrency)
    assert not r.moe and "EP" not in r.label


def test_layouts_keep_tp_inside_a_node_and_pp_across_nodes(dsv3):
    cluster = Cluster(H100, 2, 8)
    found = layouts(dsv3, cluster)
    assert all(8 % lay.tp == 0 and 2 % lay.pp == 0 and lay.gpus == 16 for lay in found)
    assert {(lay.tp, lay.pp, lay.dp) for lay in found} == {
        (tp, pp, 16 // (tp * pp)) for tp in (1, 2, 4, 8) for pp in (1, 2)
    }
    assert len(layouts(dsv3, cluster, pp_inside_nodes=True)) > len(found)
    refused = evaluate(dsv3, cluster, Layout(tp=16), CTX)
    assert refused.why_not == "TP 16 would span nodes of 8 GPUs"


def test_max_num_seqs_caps_short_requests(dsv3):
    r = evaluate(dsv3, Cluster(H200, 2, 8), Layout(tp=1, dp=16, expert_parallel=True), 1024)
    assert r.capacity.max_concurrency > 1024 and r.requests == 16 * 1024


def test_serve_defaults_follow_the_card():
    assert serve_defaults(card_named("RTX 4090")) == ServeDefaults(2048, 256)
    # A100s keep the small batch (PR 17885)
    assert serve_defaults(card_named("A100 80GB SXM4")) == ServeDefaults(2048, 256)
    assert serve_defaults(H100) == ServeDefaults(8192, 1024)
    assert serve_defaults(card_named("B200")) == ServeDefaults(16384, 1024)


def test_arithmetic_lines_carry_the_figures(dsv3):
    r = evaluate(dsv3, Cluster(H100, 2, 8), Layout(tp=1, dp=16, expert_parallel=True), CTX)
    text = "\n".join(arithmetic(r))
    assert "⌈256 / EP 16⌉ = 16" in text
    assert "61 layers' pages = 70,272 B" in text
    assert f"= {r.requests:,}" in text.splitlines()[-1]


def test_bad_inputs_are_refused_with_a_reason(dsv3):
    with pytest.raises(InputError, match="uses 8 GPUs"):
        evaluate(dsv3, Cluster(H100, 2, 8), Layout(tp=8), CTX)
    with pytest.raises(InputError, match="maximum context"):
        evaluate(dsv3, Cluster(H100, 2, 8), Layout(tp=8, pp=2), 10**7)
    with pytest.raises(InputError, match="at least 1 node"):
        Cluster(H100, 0, 8)


def test_cli_json_and_errors(capsys, dsv3):
    assert (
        main(["cluster", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--nodes", "2", "--context", "32k", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    direct = plans(dsv3, Cluster(card_named("H100"), 2, 8), CTX)
    assert [p["requests"] for p in out["plans"]] == [r.requests for r in direct]
    assert out["best"]["vllm_flags"] == direct[0].layout.flags()
    plain = out["recipes"]["plain_tp"]
    assert (plain["tp"], plain["pp"], plain["dp"]) == (8, 2, 1)
    assert out["best_vs_plain_tp"] == round(out["best"]["requests"] / plain["requests"], 3)
    assert main(["cluster", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--layout", "8,2"]) == 2
    assert "give TP,PP,DP" in capsys.readouterr().err
    assert main(["cluster", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--nodes", "2", "--layout", "1,1,16,ep"]) == 0
    assert "DP-attention" in capsys.readouterr().out


def test_splits_vllm_refuses_are_listed_with_its_reason_not_raised():
    model = load_model("microsoft/phi-4")  # 40 heads, 10 KV heads: TP 4 and 8 divide the heads, not the KV heads
    ranked = plans(model, Cluster(H100, 1, 8), 16384)
    refused = {r.layout.tp: r.why_not for r in ranked if r.why_not}
    assert set(refused) == {4, 8} and all("does not divide the 10 KV heads" in w for w in refused.values())
    assert ranked[0].why_not is None and ranked[-1].why_not


@pytest.mark.parametrize(
    ("tp", "dp", "ep", "refused"),
    [
        (1, 16, False, False),  # 2048 / 16 = 128: whole 128 × 128 blocks
        (8, 4, False, False),  # 64: vLLM refines the scales to 64 × 64 (gcd with 7,168), Triton kernels
        (8, 8, False, False),  # 32: refined to 32 × 32, the finest it tries
        (8, 16, False, True),  # 16: under 32, validate_fp8_block_shape_moe raises
        (8, 512, False, True),  # 2048 / 4096 leaves no column at all
        (8, 16, True, False),  # expert parallel: each rank holds whole experts, no slice
    ],
)
def test_block_fp8_experts_split_past_their_scale_blocks_are_refused(dsv3, tp, dp, ep, refused):
    """DeepSeek-V3's experts are 2,048 wide in 128 × 128 fp8 scale blocks (its quantization_config); without EP each
    of the DP × TP ranks holds a slice of every expert (fused_moe/oracle/fp8.py, vLLM 0.32, read from source)."""
    layout = Layout(tp=tp, dp=dp, expert_parallel=ep)
    result = evaluate(dsv3, Cluster(H200, tp * dp // 8, 8), layout, 8192)
    why = result.why_not or ""
    assert ("vLLM refuses experts TP" in why) == refused, why
    if refused:
        assert f"experts TP {tp * dp}" in why and "--enable-expert-parallel" in why
    # a bf16 checkpoint has no scale blocks: the same split is not refused for that reason
    plain = evaluate(dsv3, Cluster(H200, tp * dp // 8, 8), layout, 8192, weights="bf16")
    assert "vLLM refuses experts TP" not in (plain.why_not or "")


def test_cache_tokens_are_what_vllm_logs_when_started_as_the_plan_says():
    """The plan is sized at its context, so its command passes it as --max-model-len: vLLM (0.21 on) logs its KV
    cache size as concurrency × max_model_len, which for gpt-oss's windows is far from the pool's tokens at the
    model's own 131K. Fit a card with the same --max-model-len logs the same line."""
    model = load_model("openai/gpt-oss-120b")
    plan = evaluate(model, Cluster(H200, 1, 8), Layout(tp=8), 8192)
    assert "--max-model-len 8192" in serve_command(plan)
    alone = fit(Setup(model, configured("vllm"), H200, gpus=8, tp=8, max_model_len=8192), [8192]).vllm
    assert plan.cache_tokens == alone.kv_cache_tokens == int(alone.max_concurrency * 8192)
    at_max = evaluate(model, Cluster(H200, 1, 8), Layout(tp=8), model.max_context)
    assert "--max-model-len" not in serve_command(at_max)  # vLLM's default already


def test_when_nothing_fits_the_closest_comes_first(capsys):
    model = load_model("Qwen/Qwen3-32B")  # ~61 GiB of bf16 weights on three 24 GB L4s
    ranked = plans(model, Cluster(card_named("L4"), 3, 1), 8192)
    assert all(r.why_not for r in ranked)
    rooms = [min(r.kv_budgets) for r in ranked]
    assert rooms == sorted(rooms, reverse=True) and ranked[0].layout.pp == 3  # PP 3 splits the weights
    assert main(["cluster", "Qwen/Qwen3-32B", "--gpu", "L4", "--nodes", "3", "--gpus-per-node", "1"]) == 0
    assert "no plan fits; the closest: TP 1 × PP 3" in capsys.readouterr().out


def test_a_recipe_the_model_cannot_take_is_a_reason_not_an_error():
    from core.cluster_report import cluster_report
    from core.model.loading import model_from_config
    from tests.tiny_configs import tiny_raw

    tiny = model_from_config(tiny_raw("llama"), "tiny llama")  # 4 heads, 2 layers
    cluster = Cluster(H100, 2, 8)
    plain = evaluate(tiny, cluster, plain_tp(tiny, cluster), 256)
    assert (plain.layout.tp, plain.layout.pp) == (4, 4) and plain.why_not == "PP 4 exceeds the model's 2 layers"
    out = cluster_report(tiny, cluster, 256)
    assert out["best"]["fits"] and out["best_vs_plain_tp"] is None


@pytest.mark.parametrize("name", ["openai/gpt-oss-120b", "Qwen/Qwen3-30B-A3B"])
def test_one_gpu_plan_holds_what_fit_says_vllm_loads(name):
    """On one GPU the planner's weights are core.fit's for vLLM, including the MXFP4 re-layout on Hopper."""
    from core.engines import configured
    from core.fit import Setup, fit

    model = load_model(name)
    plan = evaluate(model, Cluster(H100, 1, 1), Layout(), 8192)
    assert plan.weights.total == (fit(Setup(model, configured("vllm"), H100), [8192]).weights_bytes,)


@pytest.mark.parametrize(("card", "batched"), [("H100", 8192), ("H200", 8192), ("B200", 16384), ("A100 80GB", 2048)])
def test_fit_takes_vllm_serves_batch_defaults_for_the_card_as_the_cluster_plan_does(card, batched):
    """fit took `vllm serve`'s max_num_seqs for the card but kept 2,048 batched tokens: on H100 its profile run's
    activations were a quarter of vLLM's (3.06 against 4.42 GiB per GPU for Llama-3.1-70B on 4). Now both come
    from serve_defaults, the cluster plan's rule, and --max-num-batched-tokens still overrides."""
    from core.engines import configured
    from core.fit import Setup, fit

    model = load_model("meta-llama/Llama-3.1-70B-Instruct")
    setup = Setup(model, configured("vllm"), card_named(card), gpus=4, tp=4)
    profile = {i.label: i.formula for i in fit(setup, [8192]).rows[0].overhead}["profile-run activations"]
    assert profile.startswith(f"{batched:,} tokens")
    asked = Setup(model, configured("vllm", max_num_batched_tokens=4096), card_named(card), gpus=4, tp=4)
    assert {i.label: i.formula for i in fit(asked, [8192]).rows[0].overhead}["profile-run activations"].startswith(
        "4,096 tokens"
    )
    plan = evaluate(model, Cluster(card_named(card), 1, 4), Layout(4, 1, 1, False), 8192)
    assert fit(setup, [8192]).vllm.kv_cache_tokens == plan.cache_tokens  # each rank's weights as the plan has them


@pytest.mark.parametrize(
    ("model", "tp", "pp"),
    [("moonshotai/Kimi-K2-Instruct", 8, 1), ("deepseek-ai/DeepSeek-V3", 8, 1), ("deepseek-ai/DeepSeek-V3", 8, 2)],
)
def test_fit_on_several_gpus_shards_the_weights_as_vllm_does(model, tp, pp):
    """fit split every weight evenly over the GPUs; vLLM keeps norms, routers and MLA's down-projections whole on
    every TP rank, the embedding on the first stage and the head on the last (stage_weights). Kimi-K2 at TP 8 on
    H200s read 80,896 cache tokens where the plan, sharding as vLLM does, has 65,264."""
    from core.engines import configured
    from core.fit import Setup, fit

    spec, card = load_model(model), card_named("H200")
    result = fit(Setup(spec, configured("vllm"), card, gpus=tp * pp, tp=tp, pp=pp), [8192])
    plan = evaluate(spec, Cluster(card, pp, tp), Layout(tp, pp, 1, False), 8192)
    assert result.vllm.kv_cache_tokens == plan.cache_tokens
    assert result.rows[0].weights_bytes == max(plan.weights.total)
