"""Memory an engine needs besides weights and cache, per GPU: a documented, conservative estimate.

Constants and their sources:
- CUDA_CONTEXT: the CUDA context, cuBLAS workspaces and allocator slack of an idle PyTorch or ggml process;
  300–600 MiB on current drivers (nvidia-smi beside an idle process), so 512 MiB.
- NCCL: communicator buffers when tensor/pipeline parallel is on; 256 MiB per rank.
- VLLM_GRAPHS_AND_WORKSPACES: vLLM's captured decode graphs (its log reports about 0.3–0.7 GiB for 7–9B models)
  plus the non-torch allocations it measures at start-up (NCCL/cuBLAS workspaces, allocator slack). 896 MiB makes
  kvscope's budget for the one measured run we have, Qwen3-8B on an A100 80GB at utilization 0.90 (54.94 GiB of
  KV cache, a seed figure not yet reproduced), come out 0.07 GiB under it rather than over.
- Activations of one layer over T tokens in 2-byte activations: T × 2 B × (4·hidden + 3·intermediate); only one
  layer's activations are live at a time.
- Logits: vLLM's profile run samples max_num_seqs rows of the vocabulary in fp32 (logits and probabilities);
  transformers' generate keeps only the last position's logits.
- llama.cpp's compute buffer is modelled from its graph in core/memory/llamacpp_compute.py (llamacpp_overhead).
- transformers sliding-window layers pin the whole prefill's K/V until the first decode step (measured, see
  tests/test_transformers_exact.py), which is counted here as a prefill transient.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.model.spec import ModelSpec
from core.units import MIB

CUDA_CONTEXT = 512 * MIB
NCCL = 256 * MIB
VLLM_GRAPHS_AND_WORKSPACES = 896 * MIB
VLLM_MAX_NUM_SEQS = 256  # `vllm serve` default on cards under 70 GiB (1024 above)


@dataclass(frozen=True)
class Item:
    label: str
    bytes: int
    formula: str  # the arithmetic with this model's numbers, shown on demand
    basis: str = ""  # for a figure not read from the engine's code: what it rests on, shown beside it

    @property
    def basis_note(self) -> str:
        """ " (what it rests on)", to follow the figure wherever it is shown; "" for one read from the engine."""
        return f" ({self.basis})" if self.basis else ""


NOT_CHECKED = "not checked against an engine"
CUDA_CONTEXT_ITEM = Item(
    "CUDA context", CUDA_CONTEXT, "512 MiB", f"assumed: an idle process holds 300–600 MiB (nvidia-smi), {NOT_CHECKED}"
)


def _ffn_width(model: ModelSpec) -> int:
    cfg = model.config
    moe = cfg.get("moe_intermediate_size")
    top_k = cfg.get("num_experts_per_tok")
    if isinstance(moe, int) and isinstance(top_k, int):
        shared = cfg.get("shared_expert_intermediate_size") or 0
        return moe * top_k + (shared if isinstance(shared, int) else 0)
    inter = cfg.get("intermediate_size")
    return inter if isinstance(inter, int) and inter > 0 else 4 * model.hidden_size


def activations(model: ModelSpec, tokens: int, what: str) -> Item:
    width = 4 * model.hidden_size + 3 * _ffn_width(model)
    formula = f"{tokens:,} tokens × 2 B × (4·{model.hidden_size} + 3·{_ffn_width(model)})"
    return Item(what, tokens * 2 * width, formula, f"estimated: one layer's activations live at a time, {NOT_CHECKED}")


def parallel_items(world: int) -> list[Item]:
    nccl = Item("NCCL buffers", NCCL, "256 MiB per rank with tensor/pipeline parallel", f"assumed, {NOT_CHECKED}")
    return [nccl] if world > 1 else []


def vllm_overhead(
    model: ModelSpec, max_num_batched_tokens: int, world: int = 1, max_num_seqs: int = VLLM_MAX_NUM_SEQS
) -> list[Item]:
    logits = max_num_seqs * model.vocab_size * 4 * 2
    return [
        CUDA_CONTEXT_ITEM,
        activations(model, max_num_batched_tokens, "profile-run activations"),
        Item("sampler logits", logits, f"{max_num_seqs} seqs × {model.vocab_size:,} vocab × 4 B × 2"),
        Item(
            "CUDA graphs and workspaces",
            VLLM_GRAPHS_AND_WORKSPACES,
            "896 MiB",
            "set so that kvscope's KV cache for one seed figure (Qwen3-8B, A100 80GB, utilization 0.90: 54.94 GiB) "
            "comes out 0.07 GiB under it, not checked on any other run",
        ),
        *parallel_items(world),
    ]


# transformers' overhead items that one sequence brings: generate() prefills a batch's prompts in one forward pass,
# so their activations, last-token logits and the prompt K/V sliding layers pin grow with the batch
PER_SEQUENCE = ("prefill activations", "last-token logits", "sliding-window prefill transient")


def transformers_overhead(model: ModelSpec, context: int, sliding_transient: int, world: int = 1) -> list[Item]:
    """`sliding_transient`: bytes of prompt K/V that sliding layers pin beyond their window after a prefill. One
    sequence's; the items named in PER_SEQUENCE come again with each sequence of a batch."""
    items = [
        CUDA_CONTEXT_ITEM,
        activations(model, context, PER_SEQUENCE[0]),
        Item(PER_SEQUENCE[1], model.vocab_size * 4, f"{model.vocab_size:,} vocab × 4 B"),
    ]
    if sliding_transient:
        items.append(Item(PER_SEQUENCE[2], sliding_transient, "prompt K/V pinned until decode"))
    return items + parallel_items(world)
