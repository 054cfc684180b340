"""Parameter counts from a resolved config, by module arithmetic: no weights, no torch.

Every architecture is a small function that lists the model's weight tensors in the order the model builds them
(layer by layer), each with its shape, a role and a category. Roles follow llama.cpp's GGUF tensor names (attn_v,
ffn_down_exps, ...) because GGUF's k-quant mixes pick a type per role; categories are what the other quantisation
formats care about. The counts equal `sum(p.numel() for p in model.parameters())` of the transformers model built
from the same config (tests/test_params.py checks every architecture). Buffers (DeepSeek-V3's
e_score_correction_bias, LFM2-MoE's expert_bias, Falcon-H1's µP vector) are not parameters and are not counted;
MTP layers (DeepSeek-V3, Qwen3.5) are not built by transformers and are left out too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from core.errors import InputError
from core.model.architectures import ARCHITECTURES, DENSE_TYPES, Cfg, head_dim
from core.model.config import MAX_WIDTH
from core.model.layers import GatedDeltaNet, LayerKind, Mamba1, Mamba2
from core.model.spec import ModelSpec

CATEGORIES = ("embedding", "lm_head", "linear", "experts", "router", "other")


@dataclass(frozen=True)
class Tensor:
    """`count` stacked `rows × cols` matrices (vectors have rows 1); quantisation blocks run along `cols`.

    `active` is how many of the `count` copies one token uses: all of them, except for routed experts (top-k).
    """

    role: str
    category: str
    rows: int
    cols: int
    count: int = 1
    active: int | None = None
    layer: int | None = None  # decoder layer index; None for embeddings, lm_head and the final norm
    stored: str = ""  # the ggml type the checkpoint already ships this tensor in ("MXFP4": gpt-oss's experts)

    @property
    def numel(self) -> int:
        return self.rows * self.cols * self.count

    @property
    def routed(self) -> bool:
        """A routed expert's weight or bias: stacked copies of which a token uses top-k."""
        return self.active is not None and self.count > 1

    @property
    def active_numel(self) -> int:
        return self.rows * self.cols * (self.count if self.active is None else self.active)


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int  # used per token: routed experts count only top-k of them; embeddings count in full
    embedding: int  # input embeddings
    lm_head: int  # 0 when tied to the embeddings
    linear: int  # dense matmul weights: attention, MLA, SSM in/out projections, dense and shared-expert MLPs
    experts: int  # routed expert matmul weights
    router: int  # router weights and biases
    other: int  # norms, biases, conv1d, A_log/D/dt_bias, sinks
    tensors: tuple[Tensor, ...] = ()  # the tensors behind the figures, in build order (for per-tensor quant rules)
    stored: str = ""  # the ggml type the checkpoint ships its routed experts in (Tensor.stored), kept in every GGUF


def _count(c: Cfg, key: str, default: int) -> int:
    """A non-negative integer field (layer offsets and counts that may be 0, which Cfg.int refuses), no larger than
    any width (a 400-digit expert count would reach float arithmetic and overflow)."""
    value = c.data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_WIDTH:
        raise InputError(f"{c.model_type} config: {key} must be an integer from 0 to {MAX_WIDTH:,}, got {value!r:.40}")
    return value


def _flag(c: Cfg, key: str, default: bool = False) -> bool:
    value = c.data.get(key)
    return default if value is None else bool(value)


class _Model:
    """Collects tensors while an architecture function walks the model."""

    def __init__(self, c: Cfg):
        self.c = c
        self.h = c.int("hidden_size")
        self.tensors: list[Tensor] = []
        self.layer: int | None = None
        # gpt-oss ships its routed experts as MXFP4 blocks (quantization_config, every other module unconverted)
        qc = c.data.get("quantization_config")
        self.stored_experts = "MXFP4" if isinstance(qc, dict) and qc.get("quant_method") == "mxfp4" else ""

    def blocks(self) -> Iterator[tuple[int, str]]:
        """(index, layer type) of each decoder layer; tensors added meanwhile are tagged with the index."""
        for i, kind in enumerate(_layer_types(self.c)):
            self.layer = i
            yield i, kind
        self.layer = None

    def add(
        self, role: str, category: str, rows: int, cols: int, count: int = 1, active: int | None = None,
        stored: str = "",
    ) -> None:  # fmt: skip
        self.tensors.append(Tensor(role, category, rows, cols, count, active, self.layer, stored))

    def mat(self, role: str, rows: int, cols: int, bias: bool = False, category: str = "linear") -> None:
        self.add(role, category, rows, cols)
        if bias:
            self.vec(role + "_bias", rows)

    def vec(self, role: str, n: int, count: int = 1, active: int | None = None) -> None:
        self.add(role, "other", 1, n, count, active)

    def norm(self, role: str = "norm", n: int | None = None, bias: bool = False) -> None:
        self.vec(role, n or self.h)
        if bias:
            self.vec(role + "_bias", n or self.h)

    def experts(self, role: str, rows: int, cols: int, n: int, top_k: int, bias: bool = False) -> None:
        self.add(role, "experts", rows, cols, n, top_k, self.stored_experts)
        if bias:
            self.vec(role + "_bias", rows, n, top_k)

    def router(self, n: int, bias: bool = False, role: str = "ffn_gate_inp") -> None:
        self.add(role, "router", n, self.h)
        if bias:
            self.add(role + "_bias", "router", 1, n)

    # --- building blocks shared by many architectures ---

    def gqa(
        self,
        q_mult: int = 1,
        bias: bool = False,
        o_bias: bool | None = None,
        qk_norm: str | None = None,
        width: int | None = None,
    ) -> None:
        """q/k/v/o projections. `q_mult` 2 is Qwen3.5/Qwen3-Next's output gate fused into q_proj; `qk_norm` is
        "head" (per-head RMSNorm) or "full" (OLMo-2's norm over all heads); `width` is the attention input width."""
        c, d = self.c, head_dim(self.c)
        heads = c.int("num_attention_heads")
        kv = c.int("num_key_value_heads", default=heads)
        width = width or self.h
        self.mat("attn_q", q_mult * heads * d, width, bias)
        self.mat("attn_k", kv * d, width, bias)
        self.mat("attn_v", kv * d, width, bias)
        self.mat("attn_output", self.h, heads * d, bias if o_bias is None else o_bias)
        if qk_norm == "head":
            self.norm("attn_q_norm", d)
            self.norm("attn_k_norm", d)
        elif qk_norm == "full":
            self.norm("attn_q_norm", heads * d)
            self.norm("attn_k_norm", kv * d)

    def attention_bias(self) -> bool:
        return _flag(self.c, "attention_bias")

    def mlp(self, inter: int, bias: bool = False, gated: bool = True, suffix: str = "") -> None:
        if gated:
            self.mat("ffn_gate" + suffix, inter, self.h, bias)
        self.mat("ffn_up" + suffix, inter, self.h, bias)
        self.mat("ffn_down" + suffix, self.h, inter, bias)

    def moe(self, n: int, top_k: int, inter: int, gated: bool = True, bias: bool = False) -> None:
        """Routed experts as transformers 5 stores them: gate and up fused per expert, then down."""
        self.experts(
            "ffn_gate_up_exps" if gated else "ffn_up_exps", (2 if gated else 1) * inter, self.h, n, top_k, bias
        )
        self.experts("ffn_down_exps", self.h, inter, n, top_k, bias)

    def state_layer(self) -> LayerKind:
        """The architecture's constant-state layer, with its shape read once by core.model.architectures."""
        arch = ARCHITECTURES.get(self.c.model_type) or ARCHITECTURES[str(self.c.data.get("_top_model_type"))]
        assert arch.state is not None
        return arch.state(self.c)

    def mamba2(self, *, conv_bias: bool, proj_bias: bool, out_bias: bool, gated_norm: bool) -> None:
        layer = self.state_layer()
        assert isinstance(layer, Mamba2)
        heads, inner, kernel = layer.heads, layer.intermediate, layer.d_conv
        conv_dim = inner + 2 * layer.n_groups * layer.d_state
        self.vec("ssm_dt_bias", heads)
        self.vec("ssm_a", heads)
        self.vec("ssm_d", heads)
        self.vec("ssm_conv1d", conv_dim * kernel)
        if conv_bias:
            self.vec("ssm_conv1d_bias", conv_dim)
        self.mat("ssm_in", inner + conv_dim + heads, self.h, proj_bias)
        if gated_norm:
            self.norm("ssm_norm", inner)
        self.mat("ssm_out", self.h, inner, out_bias)

    def mamba1(self, dt_rank: int, *, conv_bias: bool, proj_bias: bool) -> None:
        layer = self.state_layer()
        assert isinstance(layer, Mamba1)
        inner, state, kernel = layer.intermediate, layer.d_state, layer.d_conv
        self.vec("ssm_a", inner * state)
        self.vec("ssm_d", inner)
        self.vec("ssm_conv1d", inner * kernel)
        if conv_bias:
            self.vec("ssm_conv1d_bias", inner)
        self.mat("ssm_in", 2 * inner, self.h, proj_bias)
        self.mat("ssm_x", dt_rank + 2 * state, inner)
        self.mat("ssm_dt", inner, dt_rank, bias=True)
        self.mat("ssm_out", self.h, inner, proj_bias)

    def finish(self) -> None:
        """The final norm and the output head (nothing new when it is tied to the embeddings)."""
        self.norm("output_norm")
        self.lm_head(_flag(self.c, "tie_word_embeddings"))

    def embeddings(self) -> None:
        self.add("token_embd", "embedding", self.c.int("vocab_size"), self.h)

    def lm_head(self, tied: bool) -> None:
        if not tied:
            self.add("output", "lm_head", self.c.int("vocab_size"), self.h)


def _layer_types(c: Cfg) -> list[str]:
    types = c.data.get("layer_types")
    n = c.int("num_hidden_layers", hi=100_000)
    if not isinstance(types, list) or len(types) != n:
        raise InputError(f"{c.model_type} config: layer_types must list one type per layer ({n})")
    return [str(t) for t in types]


# ---------------------------------------------------------------- transformer decoders (GQA attention + MLP/MoE)


def _sparse_step(c: Cfg, i: int) -> bool:
    """Qwen2-MoE / Qwen3-MoE / Qwen3-Next: a layer is MoE unless listed in mlp_only_layers or off the step."""
    only = c.data.get("mlp_only_layers") or []
    experts = _count(c, "num_experts", 0) or _count(c, "num_local_experts", 0)  # Qwen3-MoE renames num_experts
    return i not in only and experts > 0 and (i + 1) % c.int("decoder_sparse_step", default=1) == 0


def _decoder(m: _Model) -> None:
    """Llama-shaped decoders and their MoE relatives: one attention and one FFN per layer."""
    c, t = m.c, m.c.model_type
    bias = m.attention_bias()
    qk_norm = {
        "qwen3": "head",
        "qwen3_moe": "head",
        "gemma3_text": "head",
        "gemma3": "head",
        "olmo2": "full",
        "olmo3": "full",
    }.get(t)
    if t == "qwen2":
        bias = True  # Qwen2 hard-codes q/k/v biases (o_proj has none)
    elif t == "qwen2_moe":
        bias = _flag(c, "qkv_bias", True)
    mlp_bias = _flag(c, "mlp_bias")
    m.embeddings()
    for i, _ in m.blocks():
        m.norm("attn_norm")
        if t == "phi3":
            heads, kv, d = c.int("num_attention_heads"), c.int("num_key_value_heads"), head_dim(c)
            m.mat("attn_output", m.h, heads * d)
            m.mat("attn_qkv", (heads + 2 * kv) * d, m.h)
        else:
            m.gqa(bias=bias, o_bias=False if t in ("qwen2", "qwen2_moe") else bias, qk_norm=qk_norm)
        if t == "gpt_oss":
            m.vec("attn_sinks", c.int("num_attention_heads"))
        if t != "cohere2":  # Cohere runs attention and MLP in parallel off one norm
            m.norm("ffn_norm")
        if t in ("gemma2", "gemma3", "gemma3_text"):
            m.norm("post_attention_norm")
            m.norm("post_ffw_norm")
        _ffn(m, i, mlp_bias)
    m.finish()


def _ffn(m: _Model, i: int, mlp_bias: bool = False) -> None:
    """Layer i's feed-forward block in the Llama-shaped families (MoE placement rules included)."""
    c, t = m.c, m.c.model_type
    if t == "phi3":
        inter = c.int("intermediate_size")
        m.mat("ffn_up", 2 * inter, m.h)  # gate_up_proj, fused
        m.mat("ffn_down", m.h, inter)
    elif t in ("mixtral", "minimax", "gpt_oss"):
        n = c.int("num_local_experts")
        m.router(n, bias=t == "gpt_oss")
        m.moe(n, c.int("num_experts_per_tok"), c.int("intermediate_size"), bias=t == "gpt_oss")
    elif (t in ("qwen2_moe", "qwen3_moe", "qwen3_next") and _sparse_step(c, i)) or t == "qwen3_5_moe_text":
        n = c.int("num_experts", "num_local_experts")
        m.router(n)
        m.moe(n, c.int("num_experts_per_tok"), c.int("moe_intermediate_size"))
        if t != "qwen3_moe":
            m.mlp(c.int("shared_expert_intermediate_size"), suffix="_shexp")
            m.router(1, role="ffn_gate_inp_shexp")
    elif t in ("llama4", "llama4_text"):
        if i in (c.data.get("moe_layers") or []):
            n = c.int("num_local_experts")
            m.moe(n, c.int("num_experts_per_tok"), c.int("intermediate_size"))
            m.router(n)
            m.mlp(c.int("intermediate_size"), suffix="_shexp")
        else:
            m.mlp(c.int("intermediate_size_mlp"))
    else:
        m.mlp(c.int("intermediate_size"), mlp_bias)


# ---------------------------------------------------------------- MLA (DeepSeek-V2/V3, Kimi-K2)


def _deepseek(m: _Model) -> None:
    c = m.c
    heads = c.int("num_attention_heads")
    nope, rope, v, kv_rank = (
        c.int("qk_nope_head_dim"),
        c.int("qk_rope_head_dim"),
        c.int("v_head_dim"),
        c.int("kv_lora_rank"),
    )
    bias = m.attention_bias()
    first_dense = _count(c, "first_k_dense_replace", 0)
    n_experts = c.int("n_routed_experts")
    m.embeddings()
    for i, _ in m.blocks():
        if c.has("q_lora_rank"):
            q_rank = c.int("q_lora_rank")
            m.mat("attn_q_a", q_rank, m.h, bias)
            m.norm("attn_q_a_norm", q_rank)
            m.mat("attn_q_b", heads * (nope + rope), q_rank)
        else:
            m.mat("attn_q", heads * (nope + rope), m.h)
        m.mat("attn_kv_a_mqa", kv_rank + rope, m.h, bias)
        m.norm("attn_kv_a_norm", kv_rank)
        m.mat("attn_kv_b", heads * (nope + v), kv_rank)
        m.mat("attn_output", m.h, heads * v, bias)
        if i >= first_dense:
            m.moe(n_experts, c.int("num_experts_per_tok"), c.int("moe_intermediate_size"))
            m.router(n_experts)
            m.mlp(c.int("moe_intermediate_size") * c.int("n_shared_experts", default=1), suffix="_shexp")
        else:
            m.mlp(c.int("intermediate_size"), _flag(c, "mlp_bias"))
        m.norm("attn_norm")
        m.norm("ffn_norm")
    m.finish()


# ---------------------------------------------------------------- Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next)


def _gated_deltanet(m: _Model) -> None:
    gdn = m.state_layer()
    assert isinstance(gdn, GatedDeltaNet)
    v_heads, value_dim = gdn.num_v_heads, gdn.num_v_heads * gdn.v_head_dim
    conv_dim = 2 * gdn.num_k_heads * gdn.k_head_dim + value_dim
    m.embeddings()
    for i, kind in m.blocks():
        if kind == "linear_attention":
            m.vec("ssm_dt_bias", v_heads)
            m.vec("ssm_a", v_heads)
            m.vec("ssm_conv1d", conv_dim * gdn.conv_kernel)
            # Qwen3-Next fuses q,k,v,z and b,a; Qwen3.5 keeps them apart: same parameters either way.
            m.mat("attn_qkv", conv_dim, m.h)
            m.mat("attn_gate", value_dim, m.h)
            m.mat("ssm_beta", v_heads, m.h)
            m.mat("ssm_alpha", v_heads, m.h)
            m.norm("ssm_norm", gdn.v_head_dim)
            m.mat("ssm_out", m.h, value_dim)
        else:
            m.gqa(q_mult=2, bias=m.attention_bias(), qk_norm="head")  # q_proj also yields the output gate
        _ffn(m, i)
        m.norm("attn_norm")
        m.norm("ffn_norm")
    m.finish()


# ---------------------------------------------------------------- state-space models and their hybrids


def _mamba(m: _Model) -> None:
    c = m.c
    m.embeddings()
    for _ in m.blocks():
        m.norm("attn_norm")
        m.mamba1(
            c.int("time_step_rank"),
            conv_bias=_flag(c, "use_conv_bias", True),
            proj_bias=_flag(c, "use_bias"),
        )
    m.finish()


def _mamba2(m: _Model) -> None:
    c = m.c
    m.embeddings()
    for _ in m.blocks():
        m.norm("attn_norm")
        m.mamba2(
            conv_bias=_flag(c, "use_conv_bias", True),
            proj_bias=_flag(c, "use_bias"),
            out_bias=_flag(c, "use_bias"),
            gated_norm=True,
        )
    m.finish()


def _jamba(m: _Model) -> None:
    c = m.c
    period, offset = c.int("expert_layer_period", default=2), _count(c, "expert_layer_offset", 1)
    n_experts = c.int("num_experts", "num_local_experts", default=1)
    dt_rank = c.int("mamba_dt_rank")
    m.embeddings()
    for i, kind in m.blocks():
        if kind == "full_attention":
            m.gqa()
        else:
            state = c.int("mamba_d_state")
            m.mamba1(
                dt_rank,
                conv_bias=_flag(c, "mamba_conv_bias", True),
                proj_bias=_flag(c, "mamba_proj_bias"),
            )
            m.norm("ssm_dt_norm", dt_rank)
            m.norm("ssm_b_norm", state)
            m.norm("ssm_c_norm", state)
        if n_experts > 1 and i % period == offset:
            m.router(n_experts)
            m.moe(n_experts, c.int("num_experts_per_tok"), c.int("intermediate_size"))
        else:
            m.mlp(c.int("intermediate_size"))
        m.norm("attn_norm")
        m.norm("ffn_norm")
    m.finish()


def _falcon_h1(m: _Model) -> None:
    """Every Falcon-H1 layer runs attention and Mamba-2 side by side, then an MLP."""
    c = m.c
    m.embeddings()
    for _ in m.blocks():
        m.mlp(c.int("intermediate_size"), _flag(c, "mlp_bias"))
        m.mamba2(
            conv_bias=_flag(c, "mamba_conv_bias", True),
            proj_bias=_flag(c, "mamba_proj_bias"),
            out_bias=_flag(c, "projectors_bias"),
            gated_norm=_flag(c, "mamba_rms_norm"),
        )
        m.gqa(bias=m.attention_bias())
        m.norm("attn_norm")
        m.norm("ffn_norm")
    m.finish()


def _granite_hybrid(m: _Model) -> None:
    c = m.c
    n_experts = _count(c, "num_local_experts", 0)
    m.embeddings()
    for _, kind in m.blocks():
        m.norm("attn_norm")
        m.norm("ffn_norm")
        if n_experts:
            m.router(n_experts)
            m.moe(n_experts, c.int("num_experts_per_tok"), c.int("intermediate_size"))
        shared = c.int("shared_intermediate_size")
        m.mat("ffn_up_shexp", 2 * shared, m.h)  # input_linear: gate and up fused
        m.mat("ffn_down_shexp", m.h, shared)
        if kind == "full_attention":
            m.gqa(bias=m.attention_bias())
        else:
            m.mamba2(
                conv_bias=_flag(c, "mamba_conv_bias", True),
                proj_bias=_flag(c, "mamba_proj_bias"),
                out_bias=_flag(c, "mamba_proj_bias"),
                gated_norm=True,
            )
    m.finish()


def _nemotron_h(m: _Model) -> None:
    """One mixer per layer: Mamba-2, attention, a plain (non-gated, ReLU²) MLP, or an MoE."""
    c = m.c
    mlp_bias = _flag(c, "mlp_bias")
    m.embeddings()
    for _, kind in m.blocks():
        m.norm("attn_norm")
        if kind == "linear_attention":
            m.mamba2(
                conv_bias=_flag(c, "use_conv_bias", True),
                proj_bias=_flag(c, "use_bias"),
                out_bias=_flag(c, "use_bias"),
                gated_norm=True,
            )
        elif kind == "full_attention":
            m.gqa(bias=m.attention_bias())
        elif kind == "mlp":
            m.mlp(c.int("intermediate_size"), mlp_bias, gated=False)
        elif kind == "moe":
            n = c.int("n_routed_experts")
            latent = c.int("moe_latent_size") if c.has("moe_latent_size") else None
            inter = c.int("moe_intermediate_size")
            width = latent or m.h
            m.experts("ffn_up_exps", inter, width, n, c.int("num_experts_per_tok"))
            m.experts("ffn_down_exps", width, inter, n, c.int("num_experts_per_tok"))
            m.router(n)
            m.mlp(c.int("moe_shared_expert_intermediate_size"), mlp_bias, gated=False, suffix="_shexp")
            if latent:
                m.mat("ffn_latent_in", latent, m.h, mlp_bias)
                m.mat("ffn_latent_out", m.h, latent, mlp_bias)
        else:
            raise InputError(f"nemotron_h: unknown layer type {kind!r}")
    m.finish()


def _zamba2(m: _Model) -> None:
    """Mamba-2 layers; every "hybrid" layer also runs one of `num_mem_blocks` shared attention+MLP blocks (whose
    weights are counted once) through its own linear projection. Each shared block holds LoRA-style adapters for the
    hybrid layers that use it."""
    c = m.c
    hybrids = [i for i, t in enumerate(_layer_types(c)) if t == "hybrid"]
    blocks = c.int("num_mem_blocks", default=1)
    attn_width, inter, rank = 2 * m.h, c.int("intermediate_size"), c.int("adapter_rank", default=128)
    bias = _flag(c, "add_bias_linear")
    adapters = _flag(c, "use_shared_attention_adapter")
    heads = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads", default=heads)
    d = attn_width // heads
    m.embeddings()
    for i, kind in m.blocks():
        m.mamba2(
            conv_bias=True,
            proj_bias=bias,
            out_bias=bias,
            gated_norm=True,
        )
        m.norm("attn_norm")
        if kind != "hybrid":
            continue
        block = hybrids.index(i)
        m.mat("shared_proj", m.h, m.h)
        if block >= blocks:
            continue  # a later use of a shared block: its weights are already counted
        users = sum(1 for k in range(len(hybrids)) if k % blocks == block)
        m.mat("attn_q", heads * d, attn_width)
        m.mat("attn_k", kv * d, attn_width)
        m.mat("attn_v", kv * d, attn_width)
        m.mat("attn_output", m.h, heads * d)
        for _ in range(users * 3 if adapters else 0):  # q, k, v adapters
            m.mat("attn_adapter_a", rank, attn_width)
            m.mat("attn_adapter_b", attn_width, rank)
        m.mat("ffn_up", 2 * inter, m.h, bias)  # gate_up_proj, fused
        m.mat("ffn_down", m.h, inter, bias)
        for _ in range(users):
            m.mat("ffn_adapter_a", rank, m.h)
            m.mat("ffn_adapter_b", 2 * inter, rank)
        m.norm("attn_norm", attn_width)
        m.norm("ffn_norm")
    m.norm("output_norm")
    m.lm_head(_flag(c, "tie_word_embeddings", True))


def _lfm2_mlp_width(c: Cfg) -> int:
    inter = c.int("intermediate_size")
    if _flag(c, "block_auto_adjust_ff_dim"):
        inter = int(2 * inter / 3)
        if c.has("block_ffn_dim_multiplier"):
            multiple = c.int("block_multiple_of", default=256)
            inter = int(c.num("block_ffn_dim_multiplier", 1) * inter)
            inter = multiple * -(-inter // multiple)
    return inter


def _lfm2(m: _Model) -> None:
    """Short-convolution layers and attention layers, each followed by a SwiGLU MLP (or, in LFM2-MoE, an MoE past
    the first num_dense_layers)."""
    c = m.c
    conv_bias = _flag(c, "conv_bias")
    moe = c.model_type == "lfm2_moe"
    m.embeddings()
    for i, kind in m.blocks():
        if kind == "conv":
            m.vec("shortconv_conv", m.h * c.int("conv_L_cache"))
            if conv_bias:
                m.vec("shortconv_conv_bias", m.h)
            m.mat("shortconv_in_proj", 3 * m.h, m.h, conv_bias)
            m.mat("shortconv_out_proj", m.h, m.h, conv_bias)
        else:
            m.gqa(qk_norm="head")
        if moe and i >= _count(c, "num_dense_layers", 0):
            n = c.int("num_experts", "num_local_experts")
            m.moe(n, c.int("num_experts_per_tok"), c.int("moe_intermediate_size"))
            m.router(n)
        else:
            m.mlp(c.int("intermediate_size") if moe else _lfm2_mlp_width(c))
        m.norm("attn_norm")
        m.norm("ffn_norm")
    m.norm("output_norm")  # LFM2 calls it embedding_norm but applies it last
    m.lm_head(_flag(c, "tie_word_embeddings", True))


def _minimax(m: _Model) -> None:
    """Lightning (linear) attention layers and softmax attention layers, every one followed by an MoE."""
    c = m.c
    heads, d = c.int("num_attention_heads"), head_dim(c)
    m.embeddings()
    for i, kind in m.blocks():
        if kind == "linear_attention":
            m.norm("attn_norm_lightning", heads * d)
            m.mat("attn_qkv", 3 * heads * d, m.h)
            m.mat("attn_output", m.h, heads * d)
            m.mat("attn_gate", heads * d, m.h)
        else:
            m.gqa()
        m.norm("attn_norm")
        m.norm("ffn_norm")
        _ffn(m, i)
    m.finish()


BUILDERS: dict[str, Callable[[_Model], None]] = {
    **dict.fromkeys(DENSE_TYPES, _decoder),
    **dict.fromkeys(["deepseek_v2", "deepseek_v3", "kimi_k2"], _deepseek),
    **dict.fromkeys(["qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next"], _gated_deltanet),
    **dict.fromkeys(["mamba", "falcon_mamba"], _mamba),
    "mamba2": _mamba2,
    "jamba": _jamba,
    "falcon_h1": _falcon_h1,
    "granitemoehybrid": _granite_hybrid,
    "nemotron_h": _nemotron_h,
    "zamba2": _zamba2,
    **dict.fromkeys(["lfm2", "lfm2_moe"], _lfm2),
    "minimax": _minimax,
}


def tensors_of(config: dict[str, Any]) -> tuple[Tensor, ...]:
    """The weight tensors of the model a resolved text config builds, in build order (built once per distinct
    config: a 10,000-layer model has some 100,000 tensors, and every figure of a request reads them)."""
    key = _config_key(config)
    if key is None:
        return _build_tensors(config)
    tensors = _TENSORS.get(key)
    if tensors is None:
        tensors = _remember(_TENSORS, key, _build_tensors(config))
    return tensors


_TENSORS: dict[str, tuple[Tensor, ...]] = {}  # config → its tensors, the most recent _KEEP configs
_COUNTS: dict[tuple[str, int], ParamCount] = {}  # (config, depth) → count_params
_KEEP = 8


def _config_key(config: dict[str, Any]) -> str | None:
    """The config as canonical JSON, the key of its cached tensors; None if it is not plain JSON (then no cache)."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError):
        return None


def _remember(cache: dict, key, value):
    """Keep `value` under `key`, dropping the oldest entries past _KEEP (a dict keeps insertion order)."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > _KEEP:
        try:
            cache.pop(next(iter(cache)), None)
        except RuntimeError:  # another session's thread changed it meanwhile
            break
    return value


def _build_tensors(config: dict[str, Any]) -> tuple[Tensor, ...]:
    c = Cfg(config)
    builder = BUILDERS.get(c.model_type)
    if builder is None:
        raise InputError(
            f"model_type {c.model_type!r}: kvscope cannot count its parameters; supported: "
            + ", ".join(sorted(BUILDERS))
        )
    m = _Model(c)
    builder(m)
    return tuple(m.tensors)


def summarise(tensors: tuple[Tensor, ...]) -> ParamCount:
    by = dict.fromkeys(CATEGORIES, 0)
    for t in tensors:
        by[t.category] += t.numel
    stored = next((t.stored for t in tensors if t.stored), "")
    return ParamCount(
        total=sum(by.values()), active=sum(t.active_numel for t in tensors), tensors=tensors, stored=stored, **by
    )


def at_depth(tensors: tuple[Tensor, ...], depth: int) -> tuple[Tensor, ...]:
    """The tensors of a model cut or repeated to `depth` decoder layers, layer i taking config layer i mod n: the
    way a what-if depth repeats the layer kinds (core.model.whatif.edited), so weights follow the same depth."""
    per_layer: dict[int, list[Tensor]] = {}
    for t in tensors:
        if t.layer is not None:
            per_layer.setdefault(t.layer, []).append(t)
    if not per_layer or len(per_layer) == depth:
        return tensors
    n = len(per_layer)
    head = [t for t in tensors if t.layer is None and t.category == "embedding"]
    tail = [t for t in tensors if t.layer is None and t.category != "embedding"]
    body = [replace(t, layer=i) for i in range(depth) for t in per_layer[i % n]]
    return (*head, *body, *tail)


def count_params(spec: ModelSpec) -> ParamCount:
    """The spec's parameters, at its own depth (a what-if may give it more or fewer layers than its config); counted
    once per distinct config and depth, the same object then returned (callers cache what they derive from it)."""
    depth = len(spec.layers)
    key = _config_key(spec.config)
    count = _COUNTS.get((key, depth)) if key is not None else None
    if count is None:
        count = summarise(at_depth(tensors_of(spec.config), depth))
        if key is not None:
            _remember(_COUNTS, (key, depth), count)
    return count
