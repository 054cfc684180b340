"""What one forward pass reads and computes, layer by layer: the arithmetic under every speed figure.

Pure functions of a model, an engine's cache account and the weights' bytes per tensor; no timing, no hardware.
Decode: one step of `batch` sequences, each at `context` tokens. Prefill: tokens [start, end) of one sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engines import Engine
from core.engines.base import _cap_label
from core.engines.llamacpp import LlamaCppEngine, as_llamacpp_sees
from core.model.layers import MLA, FullAttention, LayerKind
from core.model.params import Tensor
from core.model.spec import ModelSpec, kind_label

# Recurrent layers do a few multiply-adds per state element per token (decay, read k·S, rank-1 update, read q·S for
# Gated DeltaNet; discretise, update, read C·h for Mamba): 6 FLOPs per element, 2 per conv-window element. Orders of
# magnitude below the weights' 2 per parameter, so the figure's precision hardly matters; it is stated, not hidden.
STATE_FLOPS_PER_ELEMENT = 6
CONV_FLOPS_PER_ELEMENT = 2


def experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts `tokens` tokens route to in one layer, each picking top_k of `experts` uniformly:
    E·(1 − (1 − k/E)^B). One token: k; many: all E."""
    if experts <= 0 or top_k <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def attended(tokens: int, cap: int | None) -> int:
    """Keys one query at position `tokens` (1-based) attends to: all of them, or the window."""
    return tokens if cap is None else min(tokens, cap)


def attended_sum(n: int, cap: int | None) -> int:
    """Σ_{t=1..n} attended(t): the causal triangle, or a band of width `cap`."""
    if n <= 0:
        return 0
    if cap is None or n <= cap:
        return n * (n + 1) // 2
    return cap * (cap + 1) // 2 + (n - cap) * cap


def attention_flops_per_key(layer: LayerKind, q_heads: int) -> int:
    """FLOPs one query spends per key it attends to, over all heads: 2·d_k for q·k plus 2·d_v for p·v, per head.
    MLA runs absorbed (as vLLM and llama.cpp decode it): the score reads latent + rope, the output the latent."""
    total = 0
    for part in layer.parts():
        if isinstance(part, MLA):
            total += 2 * q_heads * (2 * part.kv_lora_rank + part.rope_dim)
        elif isinstance(part, FullAttention):
            total += 2 * q_heads * (part.head_dim + (part.v_head_dim or part.head_dim))
    return total


def score_heads(layer: LayerKind, q_heads: int) -> int:
    """Attention score matrices per query-key pair: one per query head of each attention part."""
    return q_heads * sum(isinstance(part, (MLA, FullAttention)) for part in layer.parts())


def kv_window_pairs(start: int, end: int, size: int) -> int:
    """Query-key pairs a prefill of [start, end) in passes of `size` scores without flash attention: each pass's
    queries against every cell cached so far plus its own (llama-graph.cpp build_attn_mha, the non-flash branch:
    ggml_mul_mat(k, q) over the whole KV view, the causal part masked, not skipped)."""
    total, pos = 0, start
    while pos < end:
        n = min(size, end - pos)
        total += n * (pos + n)
        pos += n
    return total


def attention_cap(layer: LayerKind) -> int | None:
    """The window of the layer's attention in the model's own terms (None: the whole context)."""
    caps = [p.token_cap for p in layer.parts() if p.grows]
    return None if not caps or None in caps else max(c for c in caps if c is not None)


def state_flops_per_token(layer: LayerKind, storage) -> int:
    total = 0
    for part in layer.parts():
        for t in part.state_tensors():
            n = 1
            for d in t.shape:
                n *= d
            total += n * (CONV_FLOPS_PER_ELEMENT if t.role == "conv" else STATE_FLOPS_PER_ELEMENT)
    return total


@dataclass(frozen=True)
class LayerWork:
    """One decoder layer's share of a forward pass."""

    index: int
    kind: str
    weight_bytes: float  # weights this pass reads (routed experts: the expected distinct ones touched)
    cache_bytes: int  # attention cache read (all sequences)
    state_bytes: int  # recurrent/conv state read and written (all sequences)
    matmul_flops: float  # 2 × active parameters × tokens
    attention_flops: int  # q·k and p·v over the keys each query attends to
    state_flops: int  # recurrent update and conv
    expert_bytes: float = 0.0  # the routed experts' share of weight_bytes (llama.cpp --n-cpu-moe runs it in RAM)
    expert_flops: float = 0.0  # their share of matmul_flops
    routing: tuple[int, int] = (0, 0)  # (routed experts, top-k); (0, 0) for a dense layer
    scores: int = 0  # attention score entries (heads × query-key pairs) an engine without flash attention stores

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.cache_bytes + self.state_bytes

    @property
    def flops(self) -> float:
        return self.matmul_flops + self.attention_flops + self.state_flops


@dataclass(frozen=True)
class PassWork:
    """A forward pass: per decoder layer, plus what sits outside the layers (the output head, the final norm)."""

    layers: tuple[LayerWork, ...]
    head_bytes: float
    head_flops: float
    tokens: int  # tokens in the pass (batch for decode, chunk length for prefill)

    @property
    def bytes(self) -> float:
        return self.head_bytes + sum(w.bytes for w in self.layers)

    @property
    def flops(self) -> float:
        return self.head_flops + sum(w.flops for w in self.layers)


@dataclass(frozen=True)
class Weights:
    """Bytes and active parameters per decoder layer and outside them, from core.memory.quant's per-tensor bytes."""

    layer_bytes: tuple[float, ...]  # dense part: read whole every pass
    layer_expert_bytes: tuple[float, ...]  # all routed experts' bytes in the layer
    layer_experts: tuple[tuple[int, int], ...]  # (experts, top_k) per layer; (0, 0) for dense layers
    layer_active_params: tuple[int, ...]  # parameters one token multiplies by (routed experts: top-k)
    layer_expert_active_params: tuple[int, ...]  # the routed experts' share of them
    head_bytes: float  # the output projection (the embedding table when tied) and the final norm
    head_params: int

    @classmethod
    def of(cls, tensors: list[tuple[Tensor, int]], n_layers: int, tied: bool, scale: float = 1.0) -> Weights:
        dense = [0.0] * n_layers
        expert = [0.0] * n_layers
        routing = [(0, 0)] * n_layers
        active = [0] * n_layers
        expert_active = [0] * n_layers
        head_bytes = 0.0
        head_params = 0
        for t, size in tensors:
            if t.layer is None:
                # the input embedding is a lookup (a row per token): only as the tied output head is it read whole
                if t.category == "embedding" and not tied:
                    continue
                head_bytes += size * scale
                head_params += t.numel
                continue
            if t.routed:  # routed experts and their biases
                expert[t.layer] += size * scale
                routing[t.layer] = (t.count, t.active)
                expert_active[t.layer] += t.active_numel
            else:
                dense[t.layer] += size * scale
            active[t.layer] += t.active_numel
        return cls(
            tuple(dense), tuple(expert), tuple(routing), tuple(active), tuple(expert_active), head_bytes, head_params
        )

    def expert_read(self, i: int, tokens: int) -> float:
        """Bytes of layer i's routed experts that `tokens` tokens touch."""
        experts, k = self.layer_experts[i]
        if not experts:
            return 0.0
        return self.layer_expert_bytes[i] * experts_touched(experts, k, tokens) / experts

    def layer_read(self, i: int, tokens: int) -> float:
        return self.layer_bytes[i] + self.expert_read(i, tokens)


def engine_view(model: ModelSpec, engine: Engine) -> ModelSpec:
    """The layers as the engine builds them (llama.cpp drops or fixes some windows at load time)."""
    return as_llamacpp_sees(model) if isinstance(engine, LlamaCppEngine) else model


def _q_heads(model: ModelSpec) -> int:
    heads = model.config.get("num_attention_heads")
    return heads if isinstance(heads, int) and heads > 0 else 0


@dataclass(frozen=True)
class _Terms:
    """What a pass's figures take from one layer alone, worked out once per distinct layer."""

    kind: str
    cap: int | None
    per_token: int  # cache bytes per token
    fixed: int  # state bytes per sequence
    per_key: int  # attention FLOPs per key attended
    heads: int  # score matrices per query-key pair
    state_flops: int  # per token
    cache_label: str


def _terms(model: ModelSpec, engine: Engine, kv_dtype: str) -> tuple[ModelSpec, list[_Terms]]:
    """The layers as the engine builds them, and each one's terms (computed once per distinct layer)."""
    seen = engine_view(model, engine)
    storage = engine.storage(model, kv_dtype)
    heads = _q_heads(model)
    by_layer: dict[LayerKind, _Terms] = {}
    for layer in seen.census:
        rules = engine.layer_storage(layer, storage)
        by_layer[layer] = _Terms(
            kind=kind_label(layer),
            cap=attention_cap(layer),
            per_token=layer.bytes_per_token(rules),
            fixed=layer.fixed_bytes(rules),
            per_key=attention_flops_per_key(layer, heads),
            heads=score_heads(layer, heads),
            state_flops=state_flops_per_token(layer, rules),
            cache_label=kind_label(layer) + _cap_label(layer),
        )
    return seen, [by_layer[layer] for layer in seen.layers]


def decode_work(
    model: ModelSpec, engine: Engine, weights: Weights, context: int, batch: int, kv_dtype: str
) -> PassWork:
    """One decode step: `batch` sequences each add one token at `context` tokens of history."""
    seen, terms = _terms(model, engine, kv_dtype)
    account = engine.account(model, context, batch, kv_dtype)
    per_layer_cache = {line.label: line.token_bytes_total // line.count if line.count else 0 for line in account.lines}
    layers = []
    for i, (layer, t) in enumerate(zip(seen.layers, terms, strict=True)):
        layers.append(
            LayerWork(
                index=i,
                kind=t.kind,
                weight_bytes=weights.layer_read(i, batch),
                cache_bytes=per_layer_cache.get(t.cache_label, 0) if layer.grows else 0,
                state_bytes=2 * t.fixed * batch,
                matmul_flops=2.0 * weights.layer_active_params[i] * batch,
                attention_flops=t.per_key * attended(context, t.cap) * batch if layer.grows else 0,
                state_flops=t.state_flops * batch,
                expert_bytes=weights.expert_read(i, batch),
                expert_flops=2.0 * weights.layer_expert_active_params[i] * batch,
                routing=weights.layer_experts[i],
                scores=t.heads * attended(context, t.cap) * batch if layer.grows else 0,
            )
        )
    return PassWork(tuple(layers), weights.head_bytes, 2.0 * weights.head_params * batch, batch)


def prefill_work(
    model: ModelSpec,
    engine: Engine,
    weights: Weights,
    start: int,
    end: int,
    kv_dtype: str,
    chunk: int | None = None,
    logits: int = 1,
) -> PassWork:
    """Tokens [start, end) of one prompt, `chunk` tokens per forward pass (None: one pass), each pass reading the
    weights it touches once. `logits`: positions the output head runs on (serving engines: one per pass)."""
    seen, terms = _terms(model, engine, kv_dtype)
    n = end - start
    size = n if chunk is None else min(chunk, n)
    passes = -(-n // size)
    window = kv_window_pairs(start, end, size)
    layers = []
    for i, (layer, t) in enumerate(zip(seen.layers, terms, strict=True)):
        held_before = min(start, t.cap) if t.cap is not None else start
        pairs = window if t.cap is None else attended_sum(end, t.cap) - attended_sum(start, t.cap)
        layers.append(
            LayerWork(
                index=i,
                kind=t.kind,
                weight_bytes=passes * weights.layer_read(i, size),
                # the chunk reads what earlier chunks cached and writes its own keys and values
                cache_bytes=t.per_token * (held_before + n) if layer.grows else 0,
                state_bytes=2 * t.fixed * passes,
                matmul_flops=2.0 * weights.layer_active_params[i] * n,
                attention_flops=t.per_key * (attended_sum(end, t.cap) - attended_sum(start, t.cap))
                if layer.grows
                else 0,
                state_flops=t.state_flops * n,
                expert_bytes=passes * weights.expert_read(i, size),
                expert_flops=2.0 * weights.layer_expert_active_params[i] * n,
                routing=weights.layer_experts[i],
                scores=t.heads * pairs if layer.grows else 0,
            )
        )
    return PassWork(tuple(layers), weights.head_bytes * passes, 2.0 * weights.head_params * logits, n)
