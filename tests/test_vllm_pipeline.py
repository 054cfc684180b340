"""vLLM pipeline parallel: the stage with the most cache per block decides, checked against a published start-up log.

The log (vllm-project/vllm pull request 20665, July 2025): DeepSeek-V2-Lite, TP 2 × PP 2 on four L4s, ranks 0/1
(stage 0) report "Available KV cache memory: 12.13 GiB", ranks 2/3 (stage 1) 11.33 GiB, and the engine logs
"GPU KV cache size: 807,792 tokens" and "Maximum concurrency for 1,024 tokens per request: 788.86x". That vLLM
printed num_blocks × block_size (16) as the size, so the pool held 50,487 blocks.
"""

from __future__ import annotations

import pytest

from core.engines.vllm_engine import VllmEngine
from core.engines.vllm_pipeline import pipeline_capacity, pp_partitions, stage_bytes_per_block
from core.errors import InputError
from core.fit import Setup, Solver
from core.memory.gpus import card_named
from core.model.loading import load_model, model_from_config
from tests.tiny_configs import tiny_raw

GIB = 1 << 30
LOGGED_BLOCKS = 807_792 // 16
LOGGED_CONCURRENCY = 788.86


def test_layers_split_like_vllm_get_pp_indices():
    # the remainder goes to the stages before the last, counted from the back
    assert pp_partitions(27, 2) == [14, 13]
    assert pp_partitions(27, 4) == [7, 7, 7, 6]
    assert pp_partitions(26, 4) == [6, 7, 7, 6]
    assert pp_partitions(8, 4) == [2, 2, 2, 2]
    with pytest.raises(InputError):
        pp_partitions(3, 4)


def _deepseek_v2_lite_engine() -> tuple[VllmEngine, object]:
    # the log's vLLM (0.9.x) printed the pool as num_blocks // groups × block_size
    engine = VllmEngine().with_options(tensor_parallel=2, pipeline_parallel=2, block_size=16, version="0.9")
    return engine, load_model("deepseek-ai/DeepSeek-V2-Lite")


def test_published_deepseek_v2_lite_pp2_log_is_reproduced():
    engine, model = _deepseek_v2_lite_engine()
    latent_page = 16 * (512 + 64) * 2  # block × (kv_lora_rank + rope dim) × bf16, not split by TP
    assert stage_bytes_per_block(engine, model) == [14 * latent_page, 13 * latent_page]
    # The logged budgets are rounded to 0.01 GiB: every budget inside that rounding must bracket the logged blocks.
    low = pipeline_capacity(engine, model, [int(12.125 * GIB), int(11.325 * GIB)], 1024)
    high = pipeline_capacity(engine, model, [int(12.135 * GIB), int(11.335 * GIB)], 1024)
    assert low.num_blocks <= LOGGED_BLOCKS <= high.num_blocks
    assert low.kv_cache_tokens <= 807_792 <= high.kv_cache_tokens
    assert low.blocks_per_request == 1024 // 16
    assert round(LOGGED_BLOCKS / low.blocks_per_request, 2) == LOGGED_CONCURRENCY
    # the 13-layer stage alone would have afforded more blocks: the 14-layer stage decides
    stage1_blocks = int(11.325 * GIB) // (13 * latent_page)
    assert stage1_blocks > high.num_blocks


def test_averaging_layers_over_stages_overstates_the_published_figure():
    engine, model = _deepseek_v2_lite_engine()
    budget = int(12.13 * GIB)
    averaged = 2 * budget // (27 * 16 * 576 * 2) / 64  # the old rule: the whole model's pool over pp GPUs
    fullest = pipeline_capacity(engine, model, [budget, budget], 1024).max_concurrency
    assert averaged == pytest.approx(818, abs=1)
    assert fullest == pytest.approx(LOGGED_CONCURRENCY, abs=0.5)
    assert fullest / averaged == pytest.approx(27 / 28, rel=1e-3)


def test_fit_uses_the_fullest_stage_for_requests_and_per_gpu_cache():
    model = load_model("deepseek-ai/DeepSeek-V2-Lite")
    setup = Setup(
        model=model,
        engine=VllmEngine(),
        card=card_named("L4 24GB"),
        gpus=4,
        tp=2,
        pp=2,
        kv_cache_memory_bytes=10 * GIB,
        max_model_len=1024,
    )
    solver = Solver(setup)
    cap = solver.vllm_capacity(1024)
    per_block = 14 * 16 * 576 * 2
    assert cap.num_blocks == 10 * GIB // per_block
    whole = solver.engine.account(model, 1024).total  # 27 layers × 64 blocks at the 27-layer block size
    assert solver.cache(1024) == -(-whole * 14 // 27)


def test_hybrid_groups_are_projected_onto_each_stage():
    # 8 layers: 2 full attention + 6 Gated DeltaNet → groups of 2 layers; PP 2 splits layers 0-3 | 4-7
    raw = tiny_raw("qwen3_next", num_hidden_layers=8, full_attention_interval=4)
    model = model_from_config(raw, "tiny-qwen3-next")
    engine = VllmEngine().with_options(pipeline_parallel=2)
    plan = engine.plan(model)
    assert plan.group_size == 2
    page = max(plan.page_bytes.values())
    # GDN layers sit at 0,1,2,4,5,6 and form 3 groups taking [i::3]: {0,4}, {1,5}, {2,6}; attention {3,7}.
    # Each stage holds one layer of every group, so a block costs one page per stage, not the model's two.
    assert stage_bytes_per_block(engine, model) == [page, page]
    assert plan.bytes_per_block == 2 * page
    # a 6-layer first stage (PP split [6, 2] is not vLLM's) would differ: check the projection sees the indices
    uneven = VllmEngine().with_options(pipeline_parallel=3)  # [3, 3, 2]: layers 0-2 | 3-5 | 6-7
    assert stage_bytes_per_block(uneven, model) == [page, page, page]
