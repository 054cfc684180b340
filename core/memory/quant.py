"""Bytes of a model's weights in a given storage format, from its parameter tensors (core.model.params).

Whole-number arithmetic throughout: every format is bytes per block of weights along a row (scales included),
plus any per-tensor or per-tile scale tensors, so a figure is what the checkpoint's tensors hold, not a rounded
bits-per-weight estimate. What stays unquantised, and in which dtype, is part of each format's definition.

GGUF files come in every ftype llama-quantize offers (FTYPES): each picks a ggml type per tensor, as llama.cpp's
llama_tensor_get_type_impl and tensor_type_fallback do (src/llama-quant.cpp); tensors llama.cpp never quantises
(1-D tensors, norms, the MoE router ffn_gate_inp, ssm_conv1d, shortconv.conv, names not ending in "weight" such as
ssm_a/ssm_d) are F32, as convert_hf_to_gguf.py writes them ("Some tensor types are always in float32").
tests/engines/test_llamacpp_quantize.py checks every tensor's type and bytes against libllama's own quantiser.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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


# ggml block types: (bytes per block, weights per block), from ggml/src/ggml-common.h's static_asserts (QK_K = 256)
# and ggml.c's type_traits; gguf-py's GGML_QUANT_SIZES holds the same table.
GGML: dict[str, tuple[int, int]] = {
    "F32": (4, 1),
    "F16": (2, 1),
    "BF16": (2, 1),
    "Q8_0": (34, 32),  # fp16 d + 32 int8
    "Q5_1": (24, 32),  # fp16 d, m + 4 B high bits + 16 B nibbles
    "Q5_0": (22, 32),
    "Q4_1": (20, 32),
    "Q4_0": (18, 32),
    "IQ4_NL": (18, 32),
    "MXFP4": (17, 32),  # one E8M0 scale byte + 16 B of FP4
    "Q2_0": (18, 64),  # fp16 d + 64 2-bit
    "Q1_0": (18, 128),  # fp16 d + 128 bits
    "Q6_K": (210, 256),  # fp16 d + 16 int8 scales + 192 B of 6-bit quants
    "Q5_K": (176, 256),
    "Q4_K": (144, 256),
    "Q3_K": (110, 256),
    "Q2_K": (84, 256),
    "IQ4_XS": (136, 256),
    "IQ3_S": (110, 256),  # fp16 d + 13 × QK_K/32 + QK_K/64 scales
    "IQ3_XXS": (98, 256),  # fp16 d + 3 × QK_K/8
    "IQ2_S": (82, 256),
    "IQ2_XS": (74, 256),
    "IQ2_XXS": (66, 256),
    "IQ1_M": (56, 256),  # no d: QK_K/8 + QK_K/16 + QK_K/32
    "IQ1_S": (50, 256),
    "TQ2_0": (66, 256),
    "TQ1_0": (54, 256),  # fp16 d + QK_K/64 + (QK_K − QK_K/16)/5
}
# llama-quant.cpp tensor_type_fallback: a row whose length is no multiple of the type's block gets a 32-block type
# instead; if even that does not divide it, F16. Q1_0 (block 128) has no fallback: llama-quantize stops.
_FALLBACK = dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL")
_FALLBACK |= dict.fromkeys(("Q2_0", "Q2_K", "Q3_K", "TQ1_0", "TQ2_0"), "Q4_0")
_FALLBACK |= {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


@dataclass(frozen=True)
class Ftype:
    """A llama-quantize file type: the ggml type most tensors get (llama_ftype_get_default_type) and whether
    llama-quantize refuses it without an importance matrix (tensor_requires_imatrix: IQ1/IQ2/IQ3_XXS tensors, and
    Q2_K in a Q2_K_S file), so that a file of it always has one and the rules reading `has_imatrix` apply."""

    default: str
    imatrix: bool = False


# tools/quantize/quantize.cpp QUANT_OPTIONS, by llama.cpp's own name (lower-cased); F16/BF16/F32 are `gguf_` here
# (see format_named).
FTYPES: dict[str, Ftype] = {
    "q1_0": Ftype("Q1_0"),
    "q2_0": Ftype("Q2_0"),
    "q4_0": Ftype("Q4_0"),
    "q4_1": Ftype("Q4_1"),
    "mxfp4_moe": Ftype("MXFP4"),
    "q5_0": Ftype("Q5_0"),
    "q5_1": Ftype("Q5_1"),
    "iq2_xxs": Ftype("IQ2_XXS", imatrix=True),
    "iq2_xs": Ftype("IQ2_XS", imatrix=True),
    "iq2_s": Ftype("IQ2_XS", imatrix=True),
    "iq2_m": Ftype("IQ2_S", imatrix=True),
    "iq1_s": Ftype("IQ1_S", imatrix=True),
    "iq1_m": Ftype("IQ1_M", imatrix=True),
    "tq1_0": Ftype("TQ1_0"),
    "tq2_0": Ftype("TQ2_0"),
    "q2_k": Ftype("Q2_K"),
    "q2_k_s": Ftype("Q2_K", imatrix=True),
    "iq3_xxs": Ftype("IQ3_XXS", imatrix=True),
    "iq3_s": Ftype("IQ3_S"),
    "iq3_m": Ftype("IQ3_S"),
    "iq3_xs": Ftype("IQ3_S", imatrix=True),
    "q3_k_s": Ftype("Q3_K"),
    "q3_k_m": Ftype("Q3_K"),
    "q3_k_l": Ftype("Q3_K"),
    "iq4_nl": Ftype("IQ4_NL"),
    "iq4_xs": Ftype("IQ4_XS"),
    "q4_k_s": Ftype("Q4_K"),
    "q4_k_m": Ftype("Q4_K"),
    "q5_k_s": Ftype("Q5_K"),
    "q5_k_m": Ftype("Q5_K"),
    "q6_k": Ftype("Q6_K"),
    "q8_0": Ftype("Q8_0"),
    "gguf_f16": Ftype("F16"),
    "gguf_bf16": Ftype("BF16"),
    "gguf_f32": Ftype("F32"),
}
_UNQUANTISED = ("F32", "F16", "BF16")  # ggml_is_quantized is false: no mix, no fallback, just this type


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
        # GPTQ at 8 bits (Qwen's *-GPTQ-Int8 releases): the same tensors, four weights and four zeros to an int32.
        WeightFormat(
            "gptq_int8", "INT8 matmuls, group 128, fp16 scale + 8-bit zero, g_idx", MATMUL, 8, 128, 2, 8, col_bytes=4
        ),
        # compressed-tensors W4A16 (pack-quantized, symmetric): 4-bit weights packed in int32, one 16-bit scale per
        # group of 128, no zero point: 64 + 2 B per 128 weights, 4.125 bits per weight.
        WeightFormat("w4a16", "INT4 matmuls (compressed-tensors), group 128, 16-bit scale", MATMUL, 4, 128, 2),
        # OCP MXFP4 as gpt-oss ships it: experts only, FP4 + one E8M0 scale byte per 32 (17 B / 32 = 4.25 bpw);
        # attention, router, embeddings stay bf16 (its quantization_config's modules_to_not_convert).
        WeightFormat("mxfp4", "MXFP4 experts (gpt-oss), rest bf16", frozenset({"experts"}), 4, 32, 1, rest_bytes=2),
        # NVIDIA ModelOpt NVFP4: FP4 + one FP8 E4M3 scale per 16 (9 B / 16 = 4.5 bpw) + an fp32 per-tensor scale.
        WeightFormat("nvfp4", "NVFP4 matmuls, fp8 scale per 16 + fp32 per tensor", MATMUL, 4, 16, 1, tensor_bytes=4),
        *(
            WeightFormat(
                name, f"GGUF {name.upper().removeprefix('GGUF_')} (llama-quantize)", EVERYTHING, gguf=f.default
            )
            for name, f in FTYPES.items()
        ),
    )
}


_ALIASES = {
    "int4_awq": "awq",
    "int4_gptq": "gptq",
    "int8_gptq": "gptq_int8",
    "w8a16": "int8",
    "bfloat16": "bf16",
    "float16": "fp16",
    # llama-quantize's aliases (QUANT_OPTIONS), and its F16/F32, which differ from kvscope's fp16/fp32 (every tensor
    # in that dtype, as an HF checkpoint stores it): a GGUF keeps norms, routers and conv kernels F32.
    "q3_k": "q3_k_m",
    "q4_k": "q4_k_m",
    "q5_k": "q5_k_m",
    "f16": "gguf_f16",
    "f32": "gguf_f32",
}


def format_named(name: str) -> WeightFormat:
    """A format by name; case, and '-' for '_', do not matter (Q4_K_M, int4-awq, IQ2_XXS).

    `bf16`, `fp16`, `fp32` are an HF checkpoint in that dtype, every tensor included. llama-quantize's F16 and F32
    (also spelt `gguf_f16`, `gguf_f32`) and `gguf_bf16` are GGUF files, whose norms, routers and conv kernels stay
    F32; llama.cpp's own spelling `BF16` cannot be told from the checkpoint's `bf16`, which it keeps meaning except
    on llama.cpp (`as_gguf`).
    """
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise InputError(
            f"unknown weight format {name!r}; use one of: {', '.join(FORMATS)} "
            f"(or llama-quantize's {', '.join(a.upper() for a in _ALIASES if _ALIASES[a] in FTYPES)})"
        )
    return FORMATS[key]


_AS_GGUF = {"bf16": "gguf_bf16", "fp16": "gguf_f16", "fp32": "gguf_f32"}


def as_gguf(name: str) -> str:
    """The format as llama.cpp holds it. It loads only GGUFs, so on it a 16/32-bit checkpoint (and llama.cpp's own
    `BF16`) is the GGUF of that type, whose norms, routers and conv kernels stay F32."""
    key = format_named(name).name
    return _AS_GGUF.get(key, key)


def gguf_type(weights: str, runner: str) -> str:
    """The weights as a GGUF type `runner` loads (a 16/32-bit checkpoint is its GGUF of that type), or why not."""
    name = format_named(weights).name
    if format_named(as_gguf(name)).gguf is None:
        raise InputError(
            f"{runner} runs GGUF files; {weights} is not a GGUF type (use q4_k_m, q8_0, f16, … as llama-quantize "
            "names them)"
        )
    return name


# quantization_config's (quant_method, bits, group_size) → the format that stores it; a group_size of 128 is the only
# one these formats count scales for
_GROUPED = {("awq", 4): "awq", ("gptq", 4): "gptq", ("gptq", 8): "gptq_int8"}


def default_format(spec: ModelSpec) -> str:
    """The format the checkpoint itself ships: its quantization_config if it has one, else its dtype. A
    quantization_config kvscope cannot count (bitsandbytes, another bit width or group size) is refused, naming it:
    sizing such a checkpoint as its 16-bit dtype was 2-4x over, and a GPTQ-Int8 one as 4-bit GPTQ 2x under."""
    qc = spec.config.get("quantization_config")
    if qc is None:
        return spec.dtype if spec.dtype in FORMATS else "bf16"
    method = str(qc.get("quant_method", "")).lower() if isinstance(qc, dict) else ""
    if method == "fp8":
        return "fp8_block" if qc.get("weight_block_size") else "fp8"
    if method == "mxfp4":
        return method
    if method in ("awq", "gptq"):
        bits, group = qc.get("bits", 4), qc.get("group_size", 128)
        if group == 128 and (method, bits) in _GROUPED:
            return _GROUPED[method, bits]
        raise _uncounted(f"{method} at {bits} bits, group size {group}", "awq, gptq (4-bit) and gptq_int8 at group 128")
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    raise _uncounted(f"quant_method {method or qc!r}"[:80], "fp8, mxfp4, awq, gptq and compressed-tensors")


def _compressed_tensors(qc: dict) -> str:
    """compressed-tensors' one weight scheme (config_groups) as a format: FP8 (fp8), INT8 per channel (int8), INT4 in
    symmetric groups of 128 (w4a16), FP4 in groups of 16 (nvfp4)."""
    groups = qc.get("config_groups")
    schemes = [g.get("weights") for g in groups.values() if isinstance(g, dict)] if isinstance(groups, dict) else []
    if len(schemes) == 1 and isinstance(w := schemes[0], dict):
        kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
        if (kind, bits) == ("float", 8):
            return "fp8_block" if strategy == "block" else "fp8"
        if (kind, bits, strategy) == ("int", 8, "channel"):
            return "int8"
        if (kind, bits, strategy, w.get("group_size"), w.get("symmetric")) == ("int", 4, "group", 128, True):
            return "w4a16"
        if (kind, bits, w.get("group_size")) == ("float", 4, 16):
            return "nvfp4"
        scheme = f"{kind} {bits}-bit, strategy {strategy}, group size {w.get('group_size')}"
    else:
        scheme = f"{len(schemes)} weight schemes"
    raise _uncounted(f"compressed-tensors ({scheme})", "its FP8, INT8 per channel, INT4 in groups of 128 and NVFP4")


def _uncounted(what: str, counted: str) -> InputError:
    return InputError(
        f"this checkpoint's quantization_config ({what}) is not one kvscope counts ({counted}); choose the weight "
        "format to size it as (--weights, or Weights in the app)"
    )


def _use_more_bits(i: int, n: int) -> bool:
    # llama.cpp: i_layer < n/8 || i_layer >= 7n/8 || (i_layer - n/8) % 3 == 2 (C integer division)
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


# The rules below are llama-quant.cpp's llama_tensor_get_type_impl (llama.cpp as vendored by llama-cpp-python
# 0.3.36), branch for branch, minus Falcon's and GLM5-Next's, architectures kvscope does not model; its ATTENTION_QKV
# branch is unreachable there (category_is_attn_v takes attn_qkv first) and left out here too.
_IQ_LOW = frozenset({"iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq1_s", "iq1_m"})  # the first i-quant branch
_IQ2_SM = frozenset({"iq2_s", "iq2_m"})
_EMBD_TYPE = {  # an untied token_embd
    **dict.fromkeys(("iq2_xxs", "iq2_xs", "iq1_s", "iq1_m"), "Q2_K"),
    **dict.fromkeys(("iq2_s", "iq2_m", "iq3_xxs"), "IQ3_S"),
    **dict.fromkeys(("tq1_0", "tq2_0", "q2_0"), "Q4_K"),
}
_ATTN_QK_TYPE = {"iq3_xs": "IQ3_XXS", "iq3_xxs": "IQ2_S"}  # attn_q, and attn_k of models without 8 experts
_ATTN_OUT_8_EXPERTS = frozenset(
    {"q2_k", "iq3_xs", "iq3_xxs", "q3_k_s", "q3_k_m", "iq4_nl", "q4_k_s", "q4_k_m", "iq3_s", "iq3_m", "iq4_xs"}
)  # → Q5_K
_ATTN_OUT_TYPE = {"q2_k": "Q3_K", "iq3_xxs": "IQ3_S", "q3_k_m": "Q4_K", "q3_k_l": "Q5_K", "iq3_m": "Q4_K"}


def _category(role: str) -> str:
    """llama-quant.cpp tensor_get_category: substring tests on the GGUF name, in its order."""
    if role in ("output", "token_embd"):
        return role
    name = f"{role}.weight"
    for needle, category in (
        ("attn_qkv.weight", "attn_v"),  # attn_qkv and attn_kv_b count as attn_v (category_is_attn_v)
        ("attn_kv_b.weight", "attn_v"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if needle in name:
            return category
    return "other"


@dataclass
class _GgufState:
    """What llama_tensor_get_type_impl reads besides the tensor: quantize_state_impl's counters and the hparams."""

    ftype: str
    imatrix: bool
    n_layer: int  # hparams.n_layer_all, also n_ffn_down/gate/up
    n_attn_v: int
    n_expert: int
    gqa: int  # hparams.n_gqa(0)
    tied: bool
    type_70b: bool  # model.type == LLM_TYPE_70B
    i_attn_v: int = 0
    i_ffn_down: int = 0
    i_ffn_gate: int = 0
    i_ffn_up: int = 0


def _layer_gqa(roles: dict[str, Tensor]) -> int | None:
    """Heads ÷ kv heads of one layer: attn_output reads n_head × head_dim_v, attn_v makes n_head_kv × head_dim_v (a
    fused attn_qkv the rest of its rows past q's); attn_q cannot tell, it may carry a gate (Qwen3-Next, Qwen3.5)."""
    out = roles.get("attn_output")
    if out is None:
        return None
    if "attn_v" in roles:
        return out.cols // roles["attn_v"].rows
    if "attn_qkv" in roles:
        return 2 * out.cols // (roles["attn_qkv"].rows - out.cols)
    return None


def _gqa(tensors: tuple[Tensor, ...]) -> int:
    """hparams.n_gqa(0), layer 0's heads ÷ kv heads. Where layer 0 has no attention: Mamba and shortconv hybrids'
    converters write head_count_kv per layer, 0 there (conversion/granite.py, jamba.py, lfm2.py), so 0; Gated
    DeltaNet ones (Qwen3-Next, Qwen3.5) write one count, so the attention layers' ratio. An MLA GGUF has no attn_v-like
    tensor for the ratio to matter: 1."""
    layers: dict[int, dict[str, Tensor]] = {}
    for t in tensors:
        if t.layer is not None:
            layers.setdefault(t.layer, {})[t.role] = t
    first = layers.get(0, {})
    if _layer_gqa(first) is None and any(role.startswith(("ssm_in", "shortconv")) for role in first):
        return 0
    return next((g for roles in layers.values() if (g := _layer_gqa(roles)) is not None), 1)


def _gguf_state(ftype: str, tensors: tuple[Tensor, ...]) -> _GgufState:
    n_layer = 1 + max((t.layer for t in tensors if t.layer is not None), default=-1)
    gqa = _gqa(tensors)
    n_expert = max((t.count for t in tensors if t.category == "experts"), default=0)
    return _GgufState(
        ftype=ftype,
        imatrix=FTYPES[ftype].imatrix,
        n_layer=n_layer,
        n_attn_v=sum(_category(t.role) == "attn_v" for t in tensors),
        n_expert=n_expert,
        gqa=gqa,
        tied=not any(t.role == "output" for t in tensors),
        # models/llama.cpp, qwen2.cpp, deci.cpp, olmo.cpp: 80 layers (with GQA, for llama) make LLM_TYPE_70B; kvscope
        # keeps no GGUF architecture with a count, so this is any 80-layer dense GQA model (Llama-3 70B, Qwen2 72B).
        type_70b=n_layer == 80 and gqa > 1 and n_expert == 0,
    )


def _gguf_type(s: _GgufState, t: Tensor) -> str:
    """The ggml type llama-quantize gives tensor `t` (llama_tensor_get_type, then tensor_type_fallback)."""
    if t.category in ("other", "router"):
        return "F32"  # tensor_allows_quantization is false: the converter's type stays, F32 for these
    default = FTYPES[s.ftype].default
    if default in _UNQUANTISED:
        return t.stored or default
    new = _mix_type(s, t, _category(t.role), default)  # the counters advance for a stored tensor too
    if t.stored:
        # the converter writes a tensor the checkpoint ships quantised in that type (conversion/gpt_oss.py
        # repack_mxfp4, whatever --outtype), and llama-quantize will not requantize it ("requantizing from type mxfp4
        # is disabled" without --allow-requantize): gpt-oss's published GGUFs keep MXFP4 experts in every type
        return t.stored
    if t.cols % GGML[new][1]:
        if new == "Q1_0":
            raise InputError(
                f"llama-quantize cannot make Q1_0 of this model: {t.role} has rows of {t.cols}, no multiple of 128"
            )
        new = _FALLBACK.get(new, new)
        if t.cols % GGML[new][1]:
            new = "F16"
    return new


def _mix_type(s: _GgufState, t: Tensor, cat: str, new: str) -> str:
    """llama_tensor_get_type_impl: the ftype's choice for one tensor, counters advanced as llama.cpp does."""
    ft, n = s.ftype, s.n_layer

    def layer(counter: int) -> int:  # layer_info: MoE models read the layer from the name, others count tensors
        return t.layer if s.n_expert > 1 and t.layer is not None else counter

    if cat == "output" or (s.tied and cat == "token_embd"):
        if ft == "mxfp4_moe" or t.cols % GGML[new][1]:
            return "Q8_0"
        if ft in _IQ_LOW or ft == "iq3_xxs":
            return "Q5_K"
        return new if new == "Q8_0" else "Q6_K"
    if ft == "mxfp4_moe":  # 3-D (stacked expert) tensors MXFP4, every other Q8_0
        return "MXFP4" if t.count > 1 else "Q8_0"
    if cat == "token_embd":
        return _EMBD_TYPE.get(ft, new)
    if ft in _IQ_LOW:
        if cat == "attn_v":
            s.i_attn_v += 1
            if s.gqa >= 4 or s.n_expert >= 4:
                return "Q4_K"
            return "IQ3_S" if ft in _IQ2_SM else "Q2_K"
        if cat == "attn_k" and s.n_expert == 8:
            return "Q4_K"
        if cat == "ffn_down":
            s.i_ffn_down += 1  # a running count here, even for MoE models
            if s.i_ffn_down - 1 < n // 8:
                return "IQ3_S" if ft in _IQ2_SM else "Q2_K"
        if cat == "attn_output":
            if s.n_expert == 8:
                return "Q5_K"
            if ft in ("iq1_s", "iq1_m"):
                return "IQ2_XXS"
            if ft in _IQ2_SM:
                return "IQ3_S"
        return new
    if cat == "attn_v":
        i, gqa4 = s.i_attn_v, s.gqa >= 4
        s.i_attn_v += 1
        if ft == "q2_k":
            new = "Q4_K" if gqa4 else "Q3_K"
        elif ft == "q2_k_s" and gqa4:
            new = "Q4_K"
        elif ft == "iq3_xxs":
            new = "Q4_K" if gqa4 else "IQ3_XXS" if s.imatrix else "IQ3_S"
        elif (ft in ("iq3_xs", "iq3_s") and gqa4) or ft == "iq3_m":
            new = "Q4_K"
        elif ft == "q3_k_m":
            new = "Q5_K" if i < 2 else "Q4_K"
        elif ft == "q3_k_l" or (ft in ("iq4_nl", "iq4_xs") and gqa4):
            new = "Q5_K"
        elif ft in ("q4_k_m", "q5_k_m") and _use_more_bits(i, s.n_attn_v):
            new = "Q6_K"
        elif ft == "q4_k_s" and i < 4:
            new = "Q5_K"
        if s.type_70b and new in ("Q3_K", "Q4_K"):
            new = "Q5_K"
        return "Q8_0" if s.n_expert == 8 else new
    if cat == "attn_k" and s.n_expert == 8:
        return "Q8_0"
    if cat in ("attn_k", "attn_q"):
        return _ATTN_QK_TYPE.get(ft, new)
    if cat == "ffn_down":
        i = layer(s.i_ffn_down)
        s.i_ffn_down += 1
        first_eighth = i < n // 8
        if ft == "q2_k":
            return "Q3_K"
        if ft == "q2_k_s":
            return "Q4_K" if first_eighth else new
        if ft == "iq3_xxs" and not s.imatrix:
            return "Q4_K" if first_eighth else "Q3_K"
        if ft == "q3_k_m":
            return "Q5_K" if i < n // 16 else "Q4_K"  # Falcon's Q3_K for the rest is not modelled
        if ft == "iq3_m" and (first_eighth or (s.n_expert == 8 and _use_more_bits(i, n))):
            return "Q4_K"
        if ft == "q3_k_l":
            return "Q5_K"
        if ft == "q4_k_m":
            return "Q6_K" if _use_more_bits(i, n) else new
        if first_eighth and ft in ("iq4_nl", "iq4_xs") and not s.imatrix:
            return "Q5_K"
        if ft == "q5_k_m" and _use_more_bits(i, n):
            return "Q6_K"
        if ft == "q4_k_s" and first_eighth:
            return "Q5_K"
        if ft in ("q4_0", "q5_0") and s.imatrix and first_eighth:  # never here: an imatrix is optional for these
            return "Q4_1" if ft == "q4_0" else "Q5_1"
        return new
    if cat == "attn_output":
        if s.n_expert == 8:
            return "Q5_K" if ft in _ATTN_OUT_8_EXPERTS else new
        return _ATTN_OUT_TYPE.get(ft, new)
    if cat in ("ffn_gate", "ffn_up"):
        counter = "i_ffn_gate" if cat == "ffn_gate" else "i_ffn_up"
        i = layer(getattr(s, counter))
        setattr(s, counter, getattr(s, counter) + 1)
        if ft == "iq3_xs" and n // 8 <= i < 7 * n // 8:
            return "IQ3_XXS"
    return new


def _gguf_order(t: Tensor) -> tuple[int, str]:
    """llama_model_loader's weights_map order (weight_name_comparer): by layer, non-layer tensors first, then name;
    the counters above advance in it."""
    return (-1 if t.layer is None else t.layer, t.role)


def _gguf_bytes(t: Tensor, ggml_type: str) -> int:
    block_bytes, block_elems = GGML[ggml_type]
    return t.count * t.rows * -(-t.cols // block_elems) * block_bytes


def _mla_split(kv_b: Tensor, layer: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """conversion/deepseek.py (and the other MLA converters) write kv_b_proj as two 3-D tensors for MLA's absorption:
    attn_k_b, per head kv_lora rows of qk_nope, transposed, and attn_v_b, per head v_head rows of kv_lora. Widths from
    the layer: attn_output reads heads × v_head, attn_kv_a_mqa makes kv_lora + rope, the query heads × (nope + rope)."""
    v_all = layer["attn_output"].cols
    nope_all = kv_b.rows - v_all
    rope = layer["attn_kv_a_mqa"].rows - kv_b.cols
    heads = (layer.get("attn_q_b", layer.get("attn_q", kv_b)).rows - nope_all) // rope
    return (
        replace(kv_b, role="attn_k_b", rows=kv_b.cols, cols=nope_all // heads, count=heads),
        replace(kv_b, role="attn_v_b", rows=v_all // heads, cols=kv_b.cols, count=heads),
    )


def gguf_tensors(count: ParamCount, ftype: str) -> list[tuple[int, Tensor, str, int]]:
    """The tensors of a GGUF of the model in an ftype: (index of the count's tensor each comes from, the tensor as
    llama.cpp's converter writes it, the ggml type llama-quantize gives it, its bytes), in the count's order."""
    layers: dict[int | None, dict[str, Tensor]] = {}
    for t in count.tensors:
        layers.setdefault(t.layer, {})[t.role] = t
    written = [
        (i, part)
        for i, t in enumerate(count.tensors)
        for part in (_mla_split(t, layers[t.layer]) if t.role == "attn_kv_b" else (t,))
    ]
    state = _gguf_state(ftype, tuple(t for _, t in written))
    chosen = {
        k: _gguf_type(state, written[k][1])
        for k in sorted(range(len(written)), key=lambda k: _gguf_order(written[k][1]))
    }
    return [(i, t, chosen[k], _gguf_bytes(t, chosen[k])) for k, (i, t) in enumerate(written)]


# the llama.cpp ftype that gives routed experts the type a checkpoint ships them in (ParamCount.stored)
STORED_FTYPE = {"MXFP4": "mxfp4_moe"}


def tensor_bytes(count: ParamCount, fmt_name: str, model_dtype_bytes: int) -> list[tuple[Tensor, int]]:
    """Bytes of each of the model's tensors in the named format."""
    fmt = format_named(fmt_name)
    if fmt.gguf:
        sizes = [0] * len(count.tensors)
        for i, _, _, nbytes in gguf_tensors(count, fmt.name):
            sizes[i] += nbytes
        return list(zip(count.tensors, sizes, strict=True))
    rest = fmt.rest_bytes or model_dtype_bytes
    return [(t, fmt.matrix_bytes(t) if t.category in fmt.quantises else t.numel * rest) for t in count.tensors]


def weights_bytes(
    count: ParamCount, fmt_name: str, model_dtype_bytes: int, sizes: list[tuple[Tensor, int]] | None = None
) -> WeightBytes:
    """Weight bytes in total and per category. `model_dtype_bytes` is the size of what a format leaves alone;
    `sizes`, tensor_bytes' answer where the caller holds it already (a 10,000-layer what-if has 100,000 tensors)."""
    if not count.tensors:
        raise InputError("this parameter count carries no tensor list; build it with core.model.params.count_params")
    by = dict.fromkeys(CATEGORIES, 0)
    for t, nbytes in sizes if sizes is not None else tensor_bytes(count, fmt_name, model_dtype_bytes):
        by[t.category] += nbytes
    return WeightBytes(format=format_named(fmt_name).name, total=sum(by.values()), **by)
