"""vLLM pipeline parallel: each stage holds a slice of the layers, and the stage with the most cache per block decides.

Read in vllm/distributed/utils.py (`get_pp_indices`) and vllm/v1/core/kv_cache_utils.py (`get_kv_cache_configs`):
the KV cache groups are formed once for the whole model, projected onto each stage's layers, and each stage turns
its own memory into blocks (`memory // bytes per block`, the largest projected group's pages). All stages then take
the smallest stage's block count, because one scheduler hands out the same block ids everywhere. Averaging layers
over stages overstates capacity whenever the layers do not split evenly (DeepSeek-V2-Lite's 27 layers on PP 2: the
14-layer stage decides, 27/28 of the average).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from core.engines.vllm_engine import Capacity, Page, VllmEngine
from core.errors import InputError
from core.model.spec import ModelSpec


def pp_partitions(num_layers: int, pp: int) -> list[int]:
    """Layers per stage as vLLM splits them: the remainder goes to the stages before the last, from the back."""
    if pp < 1 or pp > num_layers:
        raise InputError(f"pipeline parallel {pp} cannot split {num_layers} layers")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def _page_layers(engine: VllmEngine, model: ModelSpec, kv_dtype: str) -> dict[Page, list[int]]:
    """Each cache page of the model with the indices of the layers that hold it (ascending), in order of first
    appearance; each distinct layer's pages are worked out once, on the layer alone."""
    by_page: dict[Page, list[int]] = {}
    for layer, indices in model.census.items():
        for page in engine.pages(model.with_layers((layer,)), kv_dtype):
            by_page.setdefault(page, []).extend(indices)
    for indices in by_page.values():
        indices.sort()  # several distinct layers may hold one page
    return by_page


def stage_bytes_per_block(engine: VllmEngine, model: ModelSpec, kv_dtype: str = "auto") -> list[int]:
    """Bytes one block takes on each pipeline stage (one tensor-parallel rank): the model-wide groups projected
    onto the stage's layers, the largest projected group deciding."""
    plan = engine.plan(model, kv_dtype)
    # the model-wide groups, with their layers: a bucket of n layers split into k groups takes layers[i::k]
    groups: list[tuple[Page, list[int]]] = []
    for page, indices in _page_layers(engine, model, kv_dtype).items():
        count = sum(1 for g in plan.groups if g.page == page)
        groups += [(page, indices[i::count]) for i in range(count)]
    sizes, start = [], 0
    for layers in pp_partitions(len(model.layers), engine.options.pipeline_parallel):
        end = start + layers
        sizes.append(max(plan.page_bytes[page] * count_within(members, start, end) for page, members in groups))
        start = end
    return sizes


def count_within(ascending: list[int], start: int, end: int) -> int:
    """How many of the ascending indices lie in [start, end)."""
    return bisect_left(ascending, end) - bisect_left(ascending, start)


def pipeline_capacity(
    engine: VllmEngine,
    model: ModelSpec,
    stage_budgets: Sequence[int],
    max_model_len: int,
    kv_dtype: str = "auto",
) -> Capacity:
    """What vLLM logs when each stage has its own KV budget (bytes per GPU): every stage keeps the smallest
    stage's block count; a request's blocks are counted on the model-wide groups."""
    per_block = stage_bytes_per_block(engine, model, kv_dtype)
    if len(stage_budgets) != len(per_block):
        raise InputError(f"{len(per_block)} pipeline stages need {len(per_block)} budgets, got {len(stage_budgets)}")
    num_blocks = min(budget // size for budget, size in zip(stage_budgets, per_block, strict=True) if size)
    return engine.capacity_of(model, num_blocks, max_model_len, kv_dtype)


def fullest_stage_fraction(engine: VllmEngine, model: ModelSpec, kv_dtype: str = "auto") -> tuple[int, int]:
    """(bytes per block on the fullest stage, bytes per block of the whole model on one stage): every block a
    request holds costs the first on the fullest GPU, so its cache there is its whole-model cache times this."""
    return max(stage_bytes_per_block(engine, model, kv_dtype)), engine.plan(model, kv_dtype).bytes_per_block
