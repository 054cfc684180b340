"""llama.cpp's compute (graph) buffers: what `sched_reserve` logs as "<buffer> compute buffer size".

Read in llama.cpp 0c1e57098 (the source llama-cpp-python 0.3.36 vendors):

- src/llama-context.cpp, sched_reserve: the worst-case graph is one ubatch of T = min(n_ctx, n_ubatch) tokens
  (cparams.n_ubatch is already min(n_ubatch, n_batch); graph_reserve rounds T up to a multiple of n_seq_max) over
  n_seq_max sequences, with n_outputs = min(T, n_outputs_max) logits rows (n_outputs_max is n_batch unless the
  front end sets it: llama-server passes its slot count), against the whole cache (`memory->init_full()`: n_kv =
  every cell of a stream). The pp graph, the tg graph (T = n_seqs) and the pp graph again are reserved; ggml-alloc
  keeps the largest, so the pp graph decides.
- ggml/src/ggml-alloc.c: the buffer is the peak of live tensors in node order, a tensor freed after its last
  consumer and an element-wise op written in place over its input. So the buffer is the largest of a few moments
  ("phases") of the graph, each the sum of what is live then.
- src/llama-graph.cpp, build_attn_mha: without flash attention kq = mul_mat(k, q) is an f32 [n_kv, T/n_stream,
  n_head, n_stream] tensor (n_kv × T × n_head × 4 B) and the mask is f32 [n_kv, T]; with flash attention the mask is
  f16 and nothing n_kv-sized is made. Every mask (a base one, a windowed one for SWA caches, llm_graph_input_attn_kv
  _iswa) is an input, live from the first layer to its last use in the last layer, so beside every layer's peak but
  not the logits. Without flash attention V is stored transposed and its set_rows index (attn_inp_v_idxs) is i64 per
  element, T × n_embd_v_gqa × 8 B, not per token.
- MLA (models/deepseek2.cpp): the query is absorbed (n_head × (kv_lora_rank + rope) wide) and, without flash
  attention, V is ggml_cont of the transposed latent, an f16 [n_kv, kv_lora_rank] copy per stream that does not
  scale with T.
- The output: inp_out_ids (i32) picks n_outputs rows, the final norm, then the [n_vocab, n_outputs] f32 logits
  beside the two [n_embd, T] tensors still live (the last residual and the normed rows); graphs with an MTP head
  keep the normed rows as an output and pick after them, one row more (NEXTN_HEAD).
- Nothing else grows with the context: on Qwen3.5-9B's shapes (q8_0 cache, flash attention, 2 unified slots) libllama
  's buffer grows from 32K to 262K cells by exactly the f16 mask, 2 B × n_kv × T; the Gated DeltaNet intermediates,
  the q8_0 K/V views (read as they are by flash attention; only f32 K/V are cast) and the output ids do not.

Which tensors make each phase was read from the graph; how many [n_embd, T]-sized rows sit beside them (the
residual, norms) was then set from libllama's own buffer size (`llama_get_memory_breakdown`) on models of realistic
widths, tests/engines/test_llamacpp_compute.py (table in tests/artifacts/llamacpp_compute_referee.md). The bounds it
enforces: at Llama-3.1-8B and Qwen3-30B-A3B widths (dense, MHA, MoE) kvscope is never under libllama and at most 8 %
over, and the logits and no-flash-attention kq peaks are exact to the byte; at Qwen3.5-9B and Nemotron-H-8B (hybrid)
and gpt-oss-20b (iSWA MoE) widths to 262K cells −2 % .. +7 %, the flash-attention logits exact; at the tiny widths,
where each architecture's own small tensors weigh as much as the modelled rows, −10 % .. +13 %.

Offload (-ngl, --n-cpu-moe) was read from source; llama.cpp's RPC devices now referee -ngl (last item), not
--n-cpu-moe's op_offload copy (RPC does not offload ops):
- Graph inputs (ids, masks, set_rows indices) are placed on the CPU backend (ggml-backend.cpp,
  ggml_backend_sched_backend_id_from_cur) and copied to the GPU that uses them; the token embedding stays in system
  RAM (llama-model.cpp: the input layer is always on the CPU), so its get_rows runs on the CPU. The host buffer
  (CUDA_Host) therefore holds the inputs and the [n_embd, T] embeddings: published CUDA logs of builds before
  core.engines.llamacpp.F16_MASK (PR #23764), whose masks were f32 even with flash attention, match this to the
  printed 0.01 MiB (Llama-3.1-8B 8K 4 seqs 24.01 MiB, Qwen2.5-Coder-7B 15.01, gpt-oss-20b 128K 263.15,
  Qwen3-235B-A22B 32K 72.01).
- In those builds the GPU gets the f32 mask copies and casts them to f16 at the first attention layer: for a moment
  both stand beside that layer's q/k/v (mask_cast). At long contexts that moment is the GPU's peak: Qwen3.5-9B,
  b8571, 262,144 cells × 2 slots logs 808.02 MiB, kvscope 808.01 (the logits alone, 501, are the peak at 32K).
- Layers left on the CPU run there (ggml-backend.cpp, ggml_backend_sched_split_graph: a node goes where its weights
  are), so the host buffer holds their phases; the GPU keeps the phases of its own layers and the output layer.
- op_offload (on by default): a matmul whose weight is in host memory runs on the GPU once the batch is ≥ 32 rows
  (ggml-cuda.cu, ggml_backend_cuda_device_offload_op), and the scheduler copies that weight into the GPU's compute
  buffer first; so experts kept in RAM (--n-cpu-moe) and CPU layers add their largest weight tensor to the GPU's
  FFN phase.
- Over several GPUs each holds the phases of its own layers, the last one the logits (Offload.split); with pipeline
  parallelism every GPU also pins four copies of its inputs (pipeline_peak). llama.cpp's RPC devices referee these,
  and the -ngl split's host buffer (tests/test_llamacpp_split.py): a GPU holds one [n_embd, T] row fewer beside the
  logits than the CPU backend, and the same runs show RPC's layer phases one row under CUDA's, whose fusions hold it
  (kvscope keeps CUDA's; the published Qwen3-4B log's FFN peak, 85.01 MiB, is exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from core.engines.llamacpp import LlamaCppEngine, Offload, as_llamacpp_sees
from core.errors import InputError
from core.memory.overhead import CUDA_CONTEXT_ITEM, Item
from core.model.layers import MLA, FullAttention, GatedDeltaNet, LayerKind, Mamba1, Mamba2, ShortConv
from core.model.spec import ModelSpec
from core.units import round_up

F32, F16, I32, I64 = 4, 2, 4, 8
ALIGN = 128  # ggml-cuda.cu: ggml_backend_cuda_buffer_type_get_alignment; the CPU's is 32 (TENSOR_ALIGNMENT)
OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu: op_offload_min_batch_size (GGML_OP_OFFLOAD_MIN_BATCH), 32 by default
# [T, conv channels] f32 rows live at a recurrent layer's peak, in halves: the in-projection (z and x for Mamba,
# q/k/v/z for Gated DeltaNet, b/c/x for short conv), the conv's input and output, the scan's input and output. Fitted
# on the referee's tiny models (models/mamba.cpp, graph-context-mamba.cpp, qwen35.cpp, lfm2.cpp give the rows;
# their widths differ per kind), so an estimate, not a reading.
REC_HALF_ROWS: dict[type, int] = {Mamba1: 11, Mamba2: 11, GatedDeltaNet: 10, ShortConv: 14}
# Graphs with a multi-token-prediction head (models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp, openai-moe.cpp,
# nemotron-h.cpp @ 0c1e57098) keep the final norm over all T rows as an output (res->t_h_nextn, which
# llm_graph_result::set_outputs flags, so ggml-alloc never frees it) and pick the output rows after it: one more
# [n_embd, T] row beside the logits. Builds before it (the published b8571 Qwen3.5-9B log) do not.
# Qwen3.5's full-attention layers (models/qwen35.cpp, build_layer_attn @ 0c1e57098): q_proj emits the query and an
# output gate; the gate is made contiguous (ggml_cont_2d, [n_head × head_dim, T] f32) before attention and multiplied
# in after it, so one more query-wide row is live across the attention.
GATED_QUERY = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
NEXTN_HEAD = frozenset(
    {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next", "gpt_oss", "nemotron_h"}
)
# Checkpoints with one q|k|v projection (Phi-3 and Phi-4's qkv_proj), which the converter keeps as attn_qkv: llama.cpp
# then makes one [n_q + n_k + n_v, T] matmul and views q, k and v in it (llama-graph.cpp build_qkv; rope cannot run
# in place on a view of a tensor viewed three times, ggml-alloc.c, and without flash attention V is copied out,
# llama-kv-cache.cpp cpy_v), which moves the attention phase's rows (attention_body). Every other model_type kvscope
# reads projects q, k and v apart (core/model/params.py gives phi3's attention alone an attn_qkv).
FUSED_QKV = frozenset({"phi3"})


PIPELINE_COPIES = 4  # GGML_SCHED_MAX_COPIES (ggml-backend.cpp): the scheduler's copies with pipeline parallelism
PIPELINE_ITEM = "pipeline-parallel copies"


@dataclass(frozen=True)
class Widths:
    """The widths of llama.cpp's graph tensors for one model (elements per token)."""

    n_embd: int
    n_vocab: int
    n_head: int  # query heads
    n_q: int  # query row: n_head × head_dim (MLA: n_head × (kv_lora_rank + rope), the absorbed query)
    n_k: int  # widest K row (n_embd_k_gqa)
    n_v: int  # widest V row in the cache (n_embd_v_gqa), what the transposed-V index covers
    n_ff: int  # dense FFN width (0 when every layer is MoE)
    n_expert_ff: int  # routed experts: top_k × expert width (0 without experts)
    n_expert_out: int  # routed experts: top_k × n_embd, the down projections before they are summed
    n_shared_ff: int  # shared expert width
    n_rec: int  # widest recurrent layer's conv channels (0 without recurrent layers)
    rec_half_rows: int  # its [T, n_rec] f32 rows at its peak, in halves (REC_HALF_ROWS)
    rec_state: int  # bytes of one sequence's state in the widest recurrent layer (f32 conv + ssm)
    n_latent: int = 0  # MLA's kv_lora_rank: without flash attention V is a transposed f16 copy of the latent
    out_rows: int = 2  # [n_embd, T] rows live beside the logits (3 with a kept t_h_nextn: NEXTN_HEAD)
    n_gate: int = 0  # attention output gate held across the attention (GATED_QUERY: n_q)
    fused_qkv: bool = False  # one q|k|v matmul whose views are q, k and v (FUSED_QKV)


@dataclass(frozen=True)
class Ubatch:
    """The worst-case ubatch sched_reserve builds (llama-context.cpp)."""

    tokens: int  # T
    outputs: int  # n_outputs
    cells: int  # n_kv of full-attention layers (cells per stream)
    window_cells: int  # n_kv of windowed layers (0 without them)
    streams: int
    sequences: int


@dataclass(frozen=True)
class ComputeBuffers:
    """Bytes of the GPU's compute buffer and of the host's (CUDA_Host, or CPU when nothing is offloaded)."""

    gpu: Item
    host: Item


def _cfg_int(model: ModelSpec, *keys: str) -> int:
    for key in keys:
        value = model.config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def widths(model: ModelSpec) -> Widths:
    """Graph widths from the model's config and layers (as llama.cpp loads them: as_llamacpp_sees)."""
    model = as_llamacpp_sees(model)
    parts = [p for layer in model.census for p in layer.parts()]
    attention = [p for p in parts if isinstance(p, (FullAttention, MLA))]
    n_head = _cfg_int(model, "num_attention_heads", "n_head") if attention else 0
    head_q = max((_q_head(p) for p in attention), default=0)
    n_k = max((p.token_rows()[0] for p in attention), default=0)
    n_v = max((p.token_rows()[-1] for p in attention if isinstance(p, FullAttention)), default=0)
    inter = _cfg_int(model, "intermediate_size", "ffn_hidden_size")
    experts = _cfg_int(model, "num_experts", "num_local_experts", "n_routed_experts")
    top_k = _cfg_int(model, "num_experts_per_tok") if experts else 0
    # Mixtral-style configs give the expert width as intermediate_size; DeepSeek's first_k_dense_replace layers
    # are dense at intermediate_size beside the routed ones
    expert = (_cfg_int(model, "moe_intermediate_size") or inter) if top_k else 0
    dense = inter if not top_k or _cfg_int(model, "first_k_dense_replace") else 0
    shared = _cfg_int(model, "shared_expert_intermediate_size", "shared_intermediate_size")
    if not shared and _cfg_int(model, "n_shared_experts"):
        shared = expert * _cfg_int(model, "n_shared_experts")
    recurrent = [(REC_HALF_ROWS.get(type(p), 12), _channels(p)) for p in parts if p.state_tensors()]
    rec_half_rows, n_rec = max(recurrent, key=lambda r: r[0] * r[1], default=(0, 0))
    rec_state = max((sum(F32 * math.prod(t.shape) for t in p.state_tensors()) for p in parts), default=0)
    n_latent = max((p.kv_lora_rank for p in attention if isinstance(p, MLA)), default=0)
    return Widths(
        n_embd=model.hidden_size,
        n_vocab=model.vocab_size,
        n_head=n_head,
        n_q=n_head * head_q,
        n_k=n_k,
        n_v=n_v,
        n_ff=dense if dense or top_k else 4 * model.hidden_size,
        n_expert_ff=top_k * expert,
        n_expert_out=top_k * model.hidden_size,
        n_shared_ff=shared,
        n_rec=n_rec,
        rec_half_rows=rec_half_rows,
        rec_state=rec_state,
        n_latent=n_latent,
        out_rows=3 if model.model_type in NEXTN_HEAD else 2,
        n_gate=n_head * head_q if model.model_type in GATED_QUERY else 0,
        fused_qkv=model.model_type in FUSED_QKV,
    )


def _channels(part: LayerKind) -> int:
    return sum(t.shape[0] for t in part.state_tensors() if t.role == "conv")


def _q_head(part: LayerKind) -> int:
    # models/deepseek2.cpp: MLA absorbs wk_b into q, so each head's query is kv_lora_rank + rope wide
    if isinstance(part, MLA):
        return part.kv_lora_rank + part.rope_dim
    assert isinstance(part, FullAttention)
    return part.head_dim


def ubatch(engine: LlamaCppEngine, model: ModelSpec, context: int, n_seq: int, n_outputs_max: int = 0) -> Ubatch:
    """`n_seq` sequences of `context` tokens each (n_ctx = n_seq × context), as LlamaCppEngine.caches reads them.
    `n_outputs_max`: llama_context_params.n_outputs_max, 0 for n_batch (llama-cli, Ollama's runner, the library);
    llama-server passes min(n_batch, n_parallel × (1 + draft tokens)) (tools/server/server-context.cpp,
    server_output_limits; common/speculative.cpp, common_speculative_get_output_limits)."""
    if context <= 0 or n_seq <= 0:
        raise InputError(f"context and sequences must be positive (got context={context}, sequences={n_seq})")
    o = engine.options
    if o.n_ubatch <= 0 or o.n_batch <= 0:
        raise InputError(f"n_ubatch and n_batch must be positive (got {o.n_ubatch}, {o.n_batch})")
    model = as_llamacpp_sees(model)
    n_ctx = engine.cells(context * n_seq, 1)  # llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256)
    if n_outputs_max < 0:
        raise InputError(f"n_outputs_max must be 0 (n_batch) or positive, got {n_outputs_max}")
    first = min(o.n_ubatch, o.n_batch, n_ctx)
    outputs = min(first, n_outputs_max or o.n_batch)  # sched_reserve: n_outputs_pp = min(n_tokens, n_outputs_max)
    slots = engine.slots(n_seq)  # n_seq_max: a unified cache's slots may be more than the sequences in flight
    tokens = round_up(first, slots)  # graph_reserve: n_tokens rounded up to a multiple of n_seqs (= n_seq_max)
    caps = {p.token_cap for layer in model.census for p in layer.parts() if p.grows and p.token_cap is not None}
    window = engine.window_cells(max(caps), context, n_seq) if caps else 0
    has_full = any(p.grows and p.token_cap is None for layer in model.census for p in layer.parts())
    cells = engine.cells(context, n_seq) if has_full else 0
    return Ubatch(tokens, outputs, cells, window, engine.streams(n_seq), slots)


def inputs(w: Widths, u: Ubatch, flash_attn: bool, attention: bool = True, f32_mask: bool = False) -> Item:
    """The graph's inputs, live from the first layer to the last (llama-graph.cpp, llm_graph_input_*): token ids,
    positions and output ids (i32), and per attention cache its mask (f16 with flash attention, else f32) and its
    K and V set_rows indices (i64; V's per element when V is stored transposed, i.e. without flash attention). Each
    is rounded up to 128 B, the widest tensor alignment of ggml's backends (CUDA's; the CPU's is 32), which matters
    only when T is not a multiple of 32. `attention`: the graph part has attention layers (else ids only);
    `f32_mask`: the masks are f32 with flash attention too (builds before F16_MASK)."""
    t = u.tokens
    caches = [c for c in (u.cells, u.window_cells) if c] if attention else []
    mask_bytes = F16 if flash_attn and not f32_mask else F32
    v_index = 1 if flash_attn else w.n_v
    tensors = [I32 * t] * 3 + [b for c in caches for b in (mask_bytes * t * c, I64 * t, I64 * t * v_index)]
    cells = " + ".join(f"{c:,}" for c in caches)
    per_token = (
        f"12 B ids + {mask_bytes} B × ({cells}) mask cells + {len(caches)} × 8 B × (1 + {v_index}) indices"
        if caches
        else "12 B ids"
    )
    padded = sum(round_up(b, ALIGN) for b in tensors)
    if padded != sum(tensors):  # T not a multiple of 32: the padding adds bytes the product does not show
        shown = " + ".join(f"{round_up(b, ALIGN):,} B" for b in tensors)
        return Item(f"graph inputs, each tensor padded to {ALIGN} B", padded, shown)
    return Item("graph inputs", padded, f"{t} tokens × ({per_token})")


def output_body(w: Widths, u: Ubatch) -> Item:
    """After the last layer the inputs are freed (bar the output ids): the logits beside two [n_embd, T] rows
    (three with a kept t_h_nextn, NEXTN_HEAD)."""
    size = F32 * u.outputs * w.n_vocab + F32 * u.tokens * w.out_rows * w.n_embd + round_up(I32 * u.outputs, ALIGN)
    return Item(
        "logits",
        size,
        f"4 B × ({u.outputs} outputs × ({w.n_vocab:,} vocab + 1 id) + {u.tokens} tokens × {w.out_rows}·{w.n_embd})",
    )


def attention_body(w: Widths, u: Ubatch, flash_attn: bool) -> Item:
    """One attention layer at its peak. n_kv is cells per stream; the streams split T, so kq is n_kv × T × n_head.
    MLA adds its latent-space output [kv_lora_rank, n_head, T] (before v_mla) and, without flash attention, the
    transposed latent copy per stream; a gated query (GATED_QUERY) its gate row.
    Fused q|k|v (FUSED_QKV): with flash attention the q|k|v row, q and k after rope, the output and the residual;
    without it 3·n_embd beside kq and no query rows. Set from libllama on nine Phi-3 shapes, tiny to Phi-4's, exact
    on each (the referee runs two tiny ones; tests/test_llamacpp_compute.py quotes Phi-4's); Phi-3's q is n_embd
    wide, so n_q and n_embd rows cannot be told apart there."""
    t = u.tokens
    extra = w.n_head * w.n_latent + w.n_gate
    mla = f" + {w.n_head}·{w.n_latent}" if w.n_latent else ""
    mla += f" + {w.n_gate} gate" if w.n_gate else ""
    if flash_attn:  # no n_kv-sized tensor: q and k before and after rope, v, the output
        fused = [(1, w.n_embd), (3, w.n_q), (2, w.n_k), (1, w.n_v)]
        rows, shown = _rows(fused if w.fused_qkv else [(2, w.n_q), (2, w.n_k), (2, w.n_v)])
        return Item("attention (flash)", F32 * t * (rows + extra), f"{t} tokens × 4 B × ({shown}{mla})")
    n_kv = max(u.cells, u.window_cells)
    copy = F16 * n_kv * u.streams * w.n_latent
    rows, shown = _rows([(3, w.n_embd)] if w.fused_qkv else [(3, w.n_embd), (2, w.n_q)])
    size = F32 * t * (w.n_head * n_kv + rows + extra) + copy
    latent = f" + 2 B × {n_kv:,} cells × {u.streams} streams × {w.n_latent} latent (MLA's V)" if copy else ""
    return Item(
        "attention KQ (no flash)",
        size,
        f"{t} tokens × 4 B × ({w.n_head} heads × {n_kv:,} cells + {shown}{mla}){latent}",
    )


def _rows(terms: list[tuple[int, int]]) -> tuple[int, str]:
    """Σ count × width, and the sum as the formulas show it ("3·4096 + 2·4096")."""
    shown = " + ".join(f"{n}·{width}" if n > 1 else f"{width}" for n, width in terms)
    return sum(n * width for n, width in terms), shown


def ffn_bodies(w: Widths, u: Ubatch) -> list[Item]:
    """The FFN at its peak (llama-graph.cpp build_ffn, build_moe_ffn). Dense: gate, up and their product beside
    four [n_embd, T] rows (Phi-3's one gate|up matmul leaves three or four, as the inputs' size lays the buffer
    out: four, never under). Routed experts: the same with top_k × expert width, or the product beside the experts'
    down outputs and their weighted copy ([n_embd, top_k, T] each) and three rows, whichever is larger. A recurrent
    layer: REC_HALF_ROWS of its conv channels beside two rows, and every sequence's state, which the scan reads and
    writes.
    The row counts were read from the graph and checked on the referee's realistic-width models."""
    t = u.tokens
    out = []
    if w.n_ff:
        out.append(
            Item("FFN", F32 * t * (3 * w.n_ff + 4 * w.n_embd), f"{t} tokens × 4 B × (3·{w.n_ff} + 4·{w.n_embd})")
        )
    if w.n_shared_ff:
        out.append(
            Item(
                "shared expert",
                F32 * t * (3 * w.n_shared_ff + 4 * w.n_embd),
                f"{t} tokens × 4 B × (3·{w.n_shared_ff} + 4·{w.n_embd})",
            )
        )
    if w.n_expert_ff:
        up = 3 * w.n_expert_ff + 4 * w.n_embd
        down = w.n_expert_ff + 2 * w.n_expert_out + 3 * w.n_embd
        if up >= down:
            label, rows = "routed experts (gate and up, the larger side)", f"3·{w.n_expert_ff} + 4·{w.n_embd}"
        else:
            label = "routed experts (down, the larger side)"
            rows = f"{w.n_expert_ff} + 2·{w.n_expert_out} + 3·{w.n_embd}"
        out.append(Item(label, F32 * t * max(up, down), f"{t} tokens × 4 B × ({rows})"))
    if w.n_rec:
        rows = f"{w.rec_half_rows / 2:g}"
        size = 2 * t * w.rec_half_rows * w.n_rec + F32 * t * 2 * w.n_embd + u.sequences * w.rec_state
        formula = f"{t} tokens × 4 B × ({rows}·{w.n_rec} + 2·{w.n_embd}) + {u.sequences} seqs × {w.rec_state:,} B state"
        out.append(Item("recurrent layer", size, formula))
    return out


def mask_cast(w: Widths, u: Ubatch) -> Item:
    """Builds before F16_MASK, flash attention, on the GPU: the first attention layer casts the f32 mask copies to
    f16 while its q/k/v and the residual are live, so the copies, the casts and that layer stand together once (the
    copies are freed after, and later layers reuse their room)."""
    live = inputs(w, u, True, True, f32_mask=True)
    casts = F16 * u.tokens * (u.cells + u.window_cells)
    body = attention_body(w, u, True)
    residual = F32 * u.tokens * w.n_embd
    return Item(
        "f32 masks cast to f16 + graph inputs",
        live.bytes + casts + body.bytes + residual,
        f"{live.formula} + 2 B × {u.tokens} tokens × {u.cells + u.window_cells:,} cells (the casts) + "
        f"{body.formula} + {u.tokens} tokens × 4 B × {w.n_embd} (residual)",
    )


def peak(
    w: Widths, u: Ubatch, flash_attn: bool, output: bool, attention: bool, weight_copy: int = 0, copies: int = 1
) -> Item:
    """The graph's peak: its inputs plus the largest layer body, or the output (logits) if that is larger.
    `output`: this part holds the output layer; `attention`: it holds an attention layer; `weight_copy`: a weight
    op_offload copies in for a layer body; `copies`: the scheduler's copies with pipeline parallelism
    (pipeline_peak)."""
    bodies = ffn_bodies(w, u)
    if attention and (u.cells or u.window_cells):
        bodies.append(attention_body(w, u, flash_attn))
    live = inputs(w, u, flash_attn, attention)
    body = max(bodies, key=lambda item: item.bytes)
    if copies > 1:
        return pipeline_peak(w, u, live, body, output, copies)
    copy = f" + {weight_copy:,} B weight copied from RAM" if weight_copy else ""
    layer = Item(
        f"{body.label} + graph inputs",
        live.bytes + body.bytes + weight_copy,
        f"{live.formula} + {body.formula}{copy}",
    )
    if output:
        return max(layer, output_body(w, u), key=lambda item: item.bytes)
    return layer


def pipeline_peak(w: Widths, u: Ubatch, live: Item, body: Item, output: bool, copies: int) -> Item:
    """A GPU's peak with pipeline parallelism: the scheduler keeps `copies` of each of its split's inputs, the graph
    inputs and the hidden state arriving from the previous device (the embeddings on the first), allocated before the
    graph and never freed (ggml-backend.cpp: the 4.cpy copies, flagged input and output); every phase, the logits
    too, stands beside them. Refereed over llama.cpp's RPC devices (tests/test_llamacpp_split.py)."""
    hidden = F32 * u.tokens * w.n_embd
    pinned = copies * (live.bytes + hidden)
    held = f"{copies} × ({live.formula} + {u.tokens} tokens × 4 B × {w.n_embd})"
    top = max([body, output_body(w, u)] if output else [body], key=lambda item: item.bytes)
    return Item(f"{top.label} + {copies} pipeline copies of the inputs", pinned + top.bytes, f"{held} + {top.formula}")


def compute_buffers(
    engine: LlamaCppEngine,
    model: ModelSpec,
    context: int,
    n_seq: int = 1,
    offload: Offload | None = None,
    cpu_weight: int = 0,
    n_outputs_max: int = 0,
    copies: int = 1,
) -> ComputeBuffers:
    """The GPU's and the host's compute buffer for `n_seq` sequences of `context` tokens.

    `offload` is where -ngl / --n-cpu-moe put the model (None: everything on the GPU); `cpu_weight` is the largest
    weight tensor left in system RAM that a GPU op reads (an expert tensor with --n-cpu-moe, a CPU layer's FFN
    matrix), which op_offload copies into the GPU buffer when the ubatch has ≥ 32 rows; `copies`: the scheduler's
    copies with pipeline parallelism (PIPELINE_COPIES; the GPU's figure only).
    """
    w, u = widths(model), ubatch(engine, model, context, n_seq, n_outputs_max)
    where = offload or Offload.of(None, len(model.layers))
    flash = engine.options.flash_attn
    gpu_layers = [model.layers[i] for i in where.layers]
    cpu_layers = [model.layers[i] for i in where.on_cpu]
    copy = cpu_weight if (cpu_layers or where.cpu_experts) and u.tokens >= OP_OFFLOAD_MIN_BATCH else 0
    f32_mask = flash and not engine.options.build.f16_mask
    gpu_attention = any(layer.grows for layer in gpu_layers)
    # A GPU holds one [n_embd, T] row fewer beside its logits than the CPU backend does: the logits phase of three
    # published CUDA logs (tests/test_gpu_logs.py) and of every RPC device (tests/test_llamacpp_split.py)
    on_gpu = replace(w, out_rows=w.out_rows - 1)
    if gpu_layers or where.output or copy:  # with -ngl 0 the GPU still runs the big matmuls (op_offload)
        gpu = peak(on_gpu, u, flash, where.output, gpu_attention, copy, copies)
        if f32_mask and gpu_attention and (u.cells or u.window_cells):
            gpu = max(gpu, mask_cast(on_gpu, u), key=lambda item: item.bytes)
    else:
        gpu = Item("nothing offloaded", 0, "0")
    # The graph's inputs live in the host buffer whatever is offloaded (ggml-backend.cpp,
    # ggml_backend_sched_backend_id_from_cur: an input tensor goes to the last backend, the CPU; the GPU gets
    # copies), beside the token embeddings' get_rows, or the CPU layers' own peak when layers stay on the CPU.
    ids = inputs(w, u, flash, any(layer.grows for layer in model.layers), f32_mask)
    embd = F32 * u.tokens * w.n_embd
    host = Item(
        "graph inputs + input embeddings",
        ids.bytes + embd,
        f"{ids.formula} + {u.tokens} tokens × 4 B × {w.n_embd}",
    )
    if cpu_layers or not where.output:
        cpu = peak(w, u, flash, not where.output, any(layer.grows for layer in cpu_layers))
        host = max(host, cpu, key=lambda item: item.bytes)
    return ComputeBuffers(gpu, host)


def cpu_only(engine: LlamaCppEngine, model: ModelSpec, context: int, n_seq: int = 1, n_outputs_max: int = 0) -> Item:
    """The CPU backend's compute buffer when nothing is offloaded (-ngl 0, no GPU): the referee's figure."""
    nowhere = Offload.of(0, len(model.layers))
    return compute_buffers(engine, model, context, n_seq, nowhere, n_outputs_max=n_outputs_max).host


def llamacpp_overhead(
    engine: LlamaCppEngine,
    model: ModelSpec,
    context: int,
    n_seq: int = 1,
    offload: Offload | None = None,
    cpu_weight: int = 0,
    n_outputs_max: int = 0,
    copies: int = 1,
) -> list[Item]:
    """What llama.cpp holds on a GPU besides weights and cache: the CUDA context and the compute buffer of the part
    of the model `offload` puts there (Offload.split gives each GPU's). The host's CUDA_Host buffer is in system RAM
    and not counted here (`compute_buffers` gives it). The layer split exchanges activations between GPUs through
    the scheduler's copies: no NCCL communicator (that is the tensor split mode's, not modelled). With pipeline
    parallelism (`copies` > 1) the scheduler's copies are an item of their own: llama.cpp drops them when they do not
    fit (sched_reserve retries without them), so the cache's budget is reckoned without them."""
    gpu = compute_buffers(engine, model, context, n_seq, offload, cpu_weight, n_outputs_max).gpu
    items = [
        CUDA_CONTEXT_ITEM,
        Item("compute buffer", gpu.bytes, f"{gpu.label}: {gpu.formula}"),
    ]
    if copies > 1:
        pp = compute_buffers(engine, model, context, n_seq, offload, cpu_weight, n_outputs_max, copies).gpu
        formula = f"{pp.label}: {pp.formula} − the compute buffer with one copy ({gpu.bytes:,} B)"
        items.append(Item(PIPELINE_ITEM, pp.bytes - gpu.bytes, formula))
    return items
