"""MXFP4 MoE experts as vLLM holds them after loading, which is more than the checkpoint ships.

The checkpoint (gpt-oss) stores each expert's gate_up (2I × H) and down (H × I) matrices as FP4 with one E8M0
scale byte per 32 values, and bf16 biases. vLLM re-lays them for its MoE kernel, read in vLLM 0.32's
`model_executor/layers/fused_moe/oracle/mxfp4.py` (`mxfp4_round_up_hidden_size_and_intermediate_size`,
`convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`), `quantization/utils/marlin_utils_fp4.py` and triton_kernels'
`tensor_details/layout_details/hopper_{value,scale}.py`:

- **Marlin** (GPUs without native FP4 before Hopper, e.g. A100, L40S, RTX 30/40): intermediate rounded up to a
  multiple of 128 and hidden to 256 (2880 → 2944 × 3072 for gpt-oss); biases in the model dtype.
- **Triton on Hopper** (OAI triton_kernels, SM90): intermediate rounded to 64; the Hopper value layout then pads
  each matrix's packed-FP4 byte rows to 64 and its columns to 256, the scale layout pads rows to 32 × num_warps
  (8 warps: 256); biases become fp32.
- **FlashInfer TRT-LLM** (datacenter Blackwell, SM100): intermediate to 128, hidden to 256; biases fp32.
- **CPU** (AMX kernel): both rounded to 32.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.memory.gpus import Card
from core.units import round_up

MX_BLOCK = 32  # values per E8M0 scale byte
HOPPER_WARPS = 8  # num_warps vLLM passes to _swizzle_mxfp4 on Hopper


@dataclass(frozen=True)
class Kernel:
    name: str
    pad_hidden: int
    pad_intermediate: int
    bias_bytes: int  # per bias element after loading
    hopper_swizzle: bool = False


KERNELS = {
    k.name: k
    for k in (
        Kernel("marlin", 256, 128, 2),
        Kernel("triton-hopper", 1, 64, 4, hopper_swizzle=True),
        Kernel("flashinfer-trtllm", 256, 128, 4),
        Kernel("cpu", 32, 32, 2),
    )
}


def kernel_for(card: Card | None, platform: str = "cuda") -> Kernel:
    """The MoE kernel vLLM's 'auto' picks for gpt-oss on this card (vLLM 0.32's priority list)."""
    if platform == "cpu":
        return KERNELS["cpu"]
    name = card.name if card else ""
    if card is not None and card.hopper:
        return KERNELS["triton-hopper"]
    if any(tag in name for tag in ("B200", "GB200", "B300")):
        return KERNELS["flashinfer-trtllm"]
    # Ampere, Ada and consumer Blackwell (SM120, where vLLM ranks Marlin before Triton); unknown cards likewise
    return KERNELS["marlin"]


def _fp4_matrix(rows: int, cols: int, kernel: Kernel) -> int:
    """Bytes of one expert's FP4 matrix of `rows` outputs × `cols` inputs, values plus scales."""
    values, scales = rows * cols // 2, rows * (cols // MX_BLOCK)
    if kernel.hopper_swizzle:
        # stored transposed (inputs × outputs); packed along the inputs, then padded to the layout's tiles
        values = round_up(cols // 2, 64) * round_up(rows, 256)
        scales = round_up(rows, 2 * HOPPER_WARPS * 2 * 8) * round_up(cols // MX_BLOCK, 2)
    return values + scales


def expert_bytes(hidden: int, intermediate: int, kernel: Kernel | None = None) -> int:
    """One expert of one layer: gate_up (2I × H) and down (H × I) in MXFP4, plus their biases.
    kernel None = as the checkpoint ships it (bf16 biases, no padding)."""
    if kernel is None:
        return (
            _fp4_matrix(2 * intermediate, hidden, KERNELS["marlin"])
            + _fp4_matrix(hidden, intermediate, KERNELS["marlin"])
            + 2 * (2 * intermediate + hidden)
        )
    h, i = round_up(hidden, kernel.pad_hidden), round_up(intermediate, kernel.pad_intermediate)
    return _fp4_matrix(2 * i, h, kernel) + _fp4_matrix(h, i, kernel) + kernel.bias_bytes * (2 * i + h)


def loading_growth(config: dict, kernel: Kernel) -> int:
    """Bytes vLLM holds beyond the checkpoint for all MXFP4 experts of the model (0 where no MoE is MXFP4)."""
    hidden = config.get("hidden_size")
    intermediate = config.get("intermediate_size")
    experts = config.get("num_local_experts") or config.get("num_experts")
    layers = config.get("num_hidden_layers")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, intermediate, experts, layers)):
        return 0
    per_expert = expert_bytes(hidden, intermediate, kernel) - expert_bytes(hidden, intermediate)
    return per_expert * experts * layers
