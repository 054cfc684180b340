"""Bytes of a model's weights in a given storage format, from its parameter tensors (core.model.params).

Whole-number arithmetic throughout: every format is bytes per block of weights along a row (scales included),
plus any per-tensor or per-tile scale tensors, so a figure is what the checkpoint's tensors hold, not a rounded
bits-per-weight estimate. What stays unquantised, and in which dtype, is part of each format's definition.

GGUF k-quant mixes ("Q4_K_M") pick a block type per tensor; `_gguf_type` follows llama.cpp's
llama_tensor_get_type_impl (src/llama-quant.cpp), and tensors llama.cpp never quantises (1-D tensors, norms, the
MoE router ffn_gate_inp, ssm_conv1d, shortconv.conv, names not ending in "weight" such as ssm_a/ssm_d) are F32,
as convert_hf_to_gguf.py writes them ("Some tensor types are always in float32").
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from core.errors import InputError
from core.model.params import CATEGORIES, ParamCount, Tensor
from core.model.spec import ModelSpec

MATMUL = frozenset({"linear", "experts"})
EVERYTHING = frozenset(CATEGORIES)


@dataclass(frozen=True)
class WeightFormat:
    """How a format stores a `rows × cols` matrix of a category in `quantises`: `bits` per weight, and per `group`
    consecutive weights of a row a scale of `scale_bytes` and a zero point of `zero_bits`; `row_bytes` per output
    row (per-channel scales), `col_bytes` per input column (GPTQ's g_idx), `tensor_bytes` per matrix (per-tensor
    scales), and with `tile` an fp32 scale per tile × tile block. Other categories keep the model's dtype, or
    `rest_bytes` per weight where the format fixes it. `gguf` formats choose a ggml type per tensor instead.
    """

    name: str
    description: str
    quantises: frozenset[str]
    bits: int = 0
    group: int = 0
    scale_bytes: int = 0
    zero_bits: int = 0
    row_bytes: int = 0
    col_bytes: int = 0
    tensor_bytes: int = 0
    tile: int = 0
    rest_bytes: int | None = None
    gguf: str | None = None  # the ggml type a llama.cpp ftype defaults to

    @property
    def bits_per_weight(self) -> Fraction:
        """Bits per quantised weight including group scales and zeros (not per-row/tensor extras)."""
        if self.gguf:
            block_bytes, block_elems = GGML[self.gguf]
            return Fraction(8 * block_bytes, block_elems)
        per_group = Fraction(8 * self.scale_bytes + self.zero_bits, self.group) if self.group else 0
        return self.bits + per_group

    def matrix_bytes(self, t: Tensor) -> int:
        groups = t.rows * -(-t.cols // self.group) if self.group else 0
        one = (t.rows * t.cols * self.bits + groups * self.zero_bits + 7) // 8 + groups * self.scale_bytes
        one += t.rows * self.row_bytes + t.cols * self.col_bytes + self.tensor_bytes
        if self.tile:
            one += -(-t.rows // self.tile) * -(-t.cols // self.tile) * 4
        return t.count * one


@dataclass(frozen=True)
class WeightBytes:
    format: str
    total: int
    embedding: int
    lm_head: int
    linear: int
    experts: int
    router: int
    other: int


# ggml block types: (bytes per block, weights per block), from ggml/src/ggml-common.h's static_asserts
# (block_q2_K == 84, block_q3_K == 110, block_q4_K == 144, block_q5_K == 176, block_q6_K == 210 bytes per QK_K = 256;
# block_q8_0 = fp16 scale + 32 int8 = 34; block_iq4_xs = 2 + 2 + 4 + 128 = 136 per 256).
GGML: dict[str, tuple[int, int]] = {
    "F32": (4, 1),
    "F16": (2, 1),
    "Q8_0": (34, 32),
    "Q5_1": (24, 32),
    "Q5_0": (22, 32),
    "Q4_0": (18, 32),
    "IQ4_NL": (18, 32),
    "Q6_K": (210, 256),
    "Q5_K": (176, 256),
    "Q4_K": (144, 256),
    "Q3_K": (110, 256),
    "Q2_K": (84, 256),
    "IQ4_XS": (136, 256),
}
# llama.cpp's tensor_type_fallback: a row whose length is not a multiple of the block falls back to these.
_FALLBACK = {"Q6_K": "Q8_0", "Q5_K": "Q5_1", "Q4_K": "Q5_0", "Q3_K": "Q4_0", "Q2_K": "Q4_0", "IQ4_XS": "IQ4_NL"}

_GGUF_DEFAULT = {  # llama_ftype_get_default_type
    "q8_0": "Q8_0",
    "q6_k": "Q6_K",
    "q5_k_m": "Q5_K",
    "q4_k_m": "Q4_K",
    "q3_k_m": "Q3_K",
    "q2_k": "Q2_K",
    "iq4_xs": "IQ4_XS",
}


FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", "everything fp32", frozenset(), rest_bytes=4),
        WeightFormat("bf16", "everything bf16", frozenset(), rest_bytes=2),
        WeightFormat("fp16", "everything fp16", frozenset(), rest_bytes=2),
        # compressed-tensors / ModelOpt FP8 (E4M3) with a per-tensor fp32 weight scale; per-channel variants add
        # rows × 4 B per matrix (< 0.1 % of a 4096-wide layer), not counted here.
        WeightFormat("fp8", "FP8 E4M3 matmuls, per-tensor fp32 scale", MATMUL, bits=8, tensor_bytes=4),
        # DeepSeek-V3's release: fp8 weights with one fp32 weight_scale_inv per 128 × 128 tile (weight_block_size).
        WeightFormat("fp8_block", "FP8 E4M3 matmuls, fp32 scale per 128x128 tile", MATMUL, bits=8, tile=128),
        # W8A16: int8 weights, one fp16 scale per output channel.
        WeightFormat("int8", "INT8 matmuls (W8A16), fp16 scale per output channel", MATMUL, bits=8, row_bytes=2),
        # AutoAWQ GEMM: per group of 128 input weights an fp16 scale (2 B) and a 4-bit zero point packed eight to an
        # int32 (qzeros): 64 + 2 + 0.5 = 66.5 B per 128 weights, 4.15625 bits per weight.
        WeightFormat("awq", "INT4 matmuls, group 128, fp16 scale + 4-bit zero", MATMUL, 4, 128, 2, 4),
        # GPTQ: the same qweight/qzeros/scales, plus g_idx: one int32 per input column of every matrix.
        WeightFormat(
            "gptq", "INT4 matmuls, group 128, fp16 scale + 4-bit zero, g_idx", MATMUL, 4, 128, 2, 4, col_bytes=4
        ),
        # OCP MXFP4 as gpt-oss ships it: experts only, FP4 + one E8M0 scale byte per 32 (17 B / 32 = 4.25 bpw);
        # attention, router, embeddings stay bf16 (its quantization_config's modules_to_not_convert).
        WeightFormat("mxfp4", "MXFP4 experts (gpt-oss), rest bf16", frozenset({"experts"}), 4, 32, 1, rest_bytes=2),
        # NVIDIA ModelOpt NVFP4: FP4 + one FP8 E4M3 scale per 16 (9 B / 16 = 4.5 bpw) + an fp32 per-tensor scale.
        WeightFormat("nvfp4", "NVFP4 matmuls, fp8 scale per 16 + fp32 per tensor", MATMUL, 4, 16, 1, tensor_bytes=4),
        *(
            WeightFormat(name, f"GGUF {name.upper()} (llama.cpp's mix)", EVERYTHING, gguf=base)
            for name, base in _GGUF_DEFAULT.items()
        ),
    )
}


_ALIASES = {"int4_awq": "awq", "int4_gptq": "gptq", "w8a16": "int8", "bfloat16": "bf16", "float16": "fp16"}


def format_named(name: str) -> WeightFormat:
    """A format by name; case, and '-' for '_', do not matter (Q4_K_M, int4-awq)."""
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise InputError(f"unknown weight format {name!r}; use one of: {', '.join(FORMATS)}")
    return FORMATS[key]


def default_format(spec: ModelSpec) -> str:
    """The format the checkpoint itself ships: its quantization_config if it has one, else its dtype."""
    qc = spec.config.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method", "")).lower()
        if method == "fp8":
            return "fp8_block" if qc.get("weight_block_size") else "fp8"
        if method in ("mxfp4", "awq", "gptq"):
            return method
    return spec.dtype if spec.dtype in FORMATS else "bf16"


def _use_more_bits(i: int, n: int) -> bool:
    # llama.cpp: i_layer < n/8 || i_layer >= 7n/8 || (i_layer - n/8) % 3 == 2 (C integer division)
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@dataclass
class _GgufState:
    """What llama_tensor_get_type_impl reads besides the tensor: counters and model-wide figures."""

    ftype: str
    n_layer: int
    n_attn_v: int
    n_expert: int
    gqa: int
    tied: bool
    i_attn_v: int = 0
    i_ffn_down: int = 0


def _gguf_state(ftype: str, tensors: tuple[Tensor, ...]) -> _GgufState:
    layers = {t.layer for t in tensors if t.layer is not None}
    q = next((t.rows for t in tensors if t.role == "attn_q"), 0)
    k = next((t.rows for t in tensors if t.role == "attn_k"), 0)
    return _GgufState(
        ftype=ftype,
        n_layer=len(layers),
        n_attn_v=sum(t.role in _ATTN_V for t in tensors),
        n_expert=max((t.count for t in tensors if t.category == "experts"), default=0),
        gqa=q // k if k else 1,
        tied=not any(t.role == "output" for t in tensors),
    )


_ATTN_V = ("attn_v", "attn_qkv", "attn_kv_b")  # llama.cpp's category_is_attn_v


def _gguf_type(s: _GgufState, t: Tensor) -> str:
    """The ggml type llama-quantize gives tensor `t` (only the branches for the ftypes kvscope offers)."""
    if t.category in ("other", "router"):
        return "F32"
    ftype, new = s.ftype, _GGUF_DEFAULT[s.ftype]
    more = ftype in ("q4_k_m", "q5_k_m")
    if t.role == "output" or (s.tied and t.role == "token_embd"):
        new = "Q8_0" if t.cols % GGML[new][1] else new if new == "Q8_0" else "Q6_K"
    elif t.role == "token_embd":
        pass  # the ftype's default type
    elif t.role in _ATTN_V:
        if ftype == "q2_k":
            new = "Q4_K" if s.gqa >= 4 else "Q3_K"
        elif ftype == "q3_k_m":
            new = "Q5_K" if s.i_attn_v < 2 else "Q4_K"
        elif ftype == "iq4_xs" and s.gqa >= 4:
            new = "Q5_K"
        elif more and _use_more_bits(s.i_attn_v, s.n_attn_v):
            new = "Q6_K"
        if s.n_expert == 8:
            new = "Q8_0"
        s.i_attn_v += 1
    elif t.role == "attn_k":
        if s.n_expert == 8:
            new = "Q8_0"
    elif t.role.startswith("ffn_down"):
        # MoE models index by the tensor's layer; dense ones by a running count of ffn_down tensors.
        i = t.layer if s.n_expert > 1 and t.layer is not None else s.i_ffn_down
        n = s.n_layer
        if ftype == "q2_k":
            new = "Q3_K"
        elif ftype == "q3_k_m":
            new = "Q5_K" if i < n // 16 else "Q4_K"
        elif more and _use_more_bits(i, n):
            new = "Q6_K"
        elif ftype == "iq4_xs" and i < n // 8:  # the rule without an imatrix; imatrix quants keep IQ4_XS here
            new = "Q5_K"
        s.i_ffn_down += 1
    elif t.role == "attn_output":
        if s.n_expert == 8:
            if ftype in ("q2_k", "q3_k_m", "q4_k_m", "iq4_xs"):
                new = "Q5_K"
        elif ftype == "q2_k":
            new = "Q3_K"
        elif ftype == "q3_k_m":
            new = "Q4_K"
    if t.cols % GGML[new][1]:
        new = _FALLBACK.get(new, new)
        if t.cols % GGML[new][1]:
            new = "F16"
    return new


def _gguf_bytes(t: Tensor, ggml_type: str) -> int:
    block_bytes, block_elems = GGML[ggml_type]
    return t.count * t.rows * -(-t.cols // block_elems) * block_bytes


def tensor_bytes(count: ParamCount, fmt_name: str, model_dtype_bytes: int) -> list[tuple[Tensor, int]]:
    """Bytes of each of the model's tensors in the named format."""
    fmt = format_named(fmt_name)
    if fmt.gguf:
        state = _gguf_state(fmt.name, count.tensors)
        return [(t, _gguf_bytes(t, _gguf_type(state, t))) for t in count.tensors]
    rest = fmt.rest_bytes or model_dtype_bytes
    return [(t, fmt.matrix_bytes(t) if t.category in fmt.quantises else t.numel * rest) for t in count.tensors]


def weights_bytes(count: ParamCount, fmt_name: str, model_dtype_bytes: int) -> WeightBytes:
    """Weight bytes in total and per category. `model_dtype_bytes` is the size of what a format leaves alone."""
    if not count.tensors:
        raise InputError("this parameter count carries no tensor list; build it with core.model.params.count_params")
    by = dict.fromkeys(CATEGORIES, 0)
    for t, nbytes in tensor_bytes(count, fmt_name, model_dtype_bytes):
        by[t.category] += nbytes
    return WeightBytes(format=format_named(fmt_name).name, total=sum(by.values()), **by)
