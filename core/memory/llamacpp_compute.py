"""llama.cpp's compute (graph) buffers: what `sched_reserve` logs as "<buffer> compute buffer size".

Read in llama.cpp 0c1e57098 (the source llama-cpp-python 0.3.36 vendors):

- src/llama-context.cpp, sched_reserve: the worst-case graph is one ubatch of T = min(n_ctx, n_ubatch) tokens
  (cparams.n_ubatch is already min(n_ubatch, n_batch)) over n_seq_max sequences, with n_outputs = min(T, n_batch)
  logits rows, against the whole cache (`memory->init_full()`: n_kv = every cell of a stream). The pp graph, the
  tg graph (T = n_seqs) and the pp graph again are reserved; ggml-alloc keeps the largest, so the pp graph decides.
- ggml/src/ggml-alloc.c: the buffer is the peak of live tensors in node order, a tensor freed after its last
  consumer and an element-wise op written in place over its input. So the buffer is the largest of a few moments
  ("phases") of the graph, each the sum of what is live then.
- src/llama-graph.cpp, build_attn_mha: without flash attention kq = mul_mat(k, q) is an f32 [n_kv, T/n_stream,
  n_head, n_stream] tensor (n_kv × T × n_head × 4 B) and the mask is f32 [n_kv, T]; with flash attention the mask is
  f16 and nothing n_kv-sized is made. Every mask (a base one, a windowed one for SWA caches, llm_graph_input_attn_kv
  _iswa) is an input, live from the first layer to the last. Without flash attention V is stored transposed and its
  set_rows index (attn_inp_v_idxs) is i64 per element, T × n_embd_v_gqa × 8 B, not per token.
- MLA (models/deepseek2.cpp): the query is absorbed (n_head × (kv_lora_rank + rope) wide) and, without flash
  attention, V is ggml_cont of the transposed latent, an f16 [n_kv, kv_lora_rank] copy that does not scale with T.
- The output: inp_out_ids (i32) picks n_outputs rows, the final norm, then the [n_vocab, n_outputs] f32 logits
  beside the two [n_embd, T] tensors still live (the last residual and the normed rows).

Each phase's per-token terms were read from the graph and then checked against libllama's own buffer size
(`llama_get_memory_breakdown`, tests/engines/test_llamacpp_compute.py, table in
tests/artifacts/llamacpp_compute_referee.md). The figure is an upper envelope: the referee bounds it.

Offload (-ngl, --n-cpu-moe) is read from source, not refereed (there is no GPU here):
- The token embedding stays in system RAM (llama-model.cpp: the input layer is always on the CPU), so its
  get_rows runs on the CPU and the host buffer (CUDA_Host) holds the [n_embd, T] embeddings and the token ids.
- Layers left on the CPU run there (ggml-backend.cpp, ggml_backend_sched_split_graph: a node goes where its weights
  are), so the host buffer holds their phases; the GPU keeps the phases of its own layers and the output layer.
- op_offload (on by default): a matmul whose weight is in host memory runs on the GPU once the batch is ≥ 32 rows
  (ggml-cuda.cu, ggml_backend_cuda_device_offload_op), and the scheduler copies that weight into the GPU's compute
  buffer first; so experts kept in RAM (--n-cpu-moe) and CPU layers add their largest weight tensor to the GPU's
  FFN phase.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engines.llamacpp import LlamaCppEngine, Offload, as_llamacpp_sees
from core.errors import InputError
from core.memory.overhead import CUDA_CONTEXT, Item, parallel_items
from core.model.layers import MLA, FullAttention, LayerKind
from core.model.spec import ModelSpec

F32, F16, I32, I64 = 4, 2, 4, 8
OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu: op_offload_min_batch_size (GGML_OP_OFFLOAD_MIN_BATCH), 32 by default


@dataclass(frozen=True)
class Widths:
    """The widths of llama.cpp's graph tensors for one model (per token)."""

    n_embd: int
    n_vocab: int
    n_head: int  # query heads of the widest attention layer
    n_q: int  # query row: n_head × head_dim (MLA: n_head × (kv_lora_rank + rope), the absorbed query)
    n_v: int  # widest V row in the cache (n_embd_v_gqa), what the transposed-V index covers
    n_ff: int  # widest FFN row computed per token: dense intermediate, or top_k × expert width + shared
    n_rec: int  # widest recurrent layer's inner width (conv channels); 0 without recurrent layers
    n_latent: int = 0  # MLA's kv_lora_rank: without flash attention V is a transposed f16 copy of the latent


@dataclass(frozen=True)
class Ubatch:
    """The worst-case ubatch sched_reserve builds (llama-context.cpp)."""

    tokens: int  # T
    outputs: int  # n_outputs
    cells: int  # n_kv of full-attention layers (cells per stream)
    window_cells: int  # n_kv of windowed layers (0 without them)
    streams: int


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
    n_v = max((p.token_rows()[-1] for p in attention if isinstance(p, FullAttention)), default=0)
    moe = _cfg_int(model, "moe_intermediate_size")
    top_k = _cfg_int(model, "num_experts_per_tok")
    shared = _cfg_int(model, "shared_expert_intermediate_size", "shared_intermediate_size")
    dense = _cfg_int(model, "intermediate_size", "ffn_hidden_size") or 4 * model.hidden_size
    n_ff = max(dense, moe * top_k + shared) if moe and top_k else dense
    n_rec = max((sum(t.shape[0] for t in p.state_tensors() if t.role == "conv") for p in parts), default=0)
    n_latent = max((p.kv_lora_rank for p in attention if isinstance(p, MLA)), default=0)
    return Widths(model.hidden_size, model.vocab_size, n_head, n_head * head_q, n_v, n_ff, n_rec, n_latent)


def _q_head(part: LayerKind) -> int:
    # models/deepseek2.cpp: MLA absorbs wk_b into q, so each head's query is kv_lora_rank + rope wide
    if isinstance(part, MLA):
        return part.kv_lora_rank + part.rope_dim
    assert isinstance(part, FullAttention)
    return part.head_dim


def ubatch(engine: LlamaCppEngine, model: ModelSpec, context: int, n_seq: int) -> Ubatch:
    """`n_seq` sequences of `context` tokens each (n_ctx = n_seq × context), as LlamaCppEngine.caches reads them."""
    if context <= 0 or n_seq <= 0:
        raise InputError(f"context and sequences must be positive (got context={context}, sequences={n_seq})")
    o = engine.options
    if o.n_ubatch <= 0 or o.n_batch <= 0:
        raise InputError(f"n_ubatch and n_batch must be positive (got {o.n_ubatch}, {o.n_batch})")
    model = as_llamacpp_sees(model)
    n_ctx = engine.cells(context * n_seq, 1)  # llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256)
    tokens = min(o.n_ubatch, o.n_batch, n_ctx)
    caps = {p.token_cap for layer in model.census for p in layer.parts() if p.grows and p.token_cap is not None}
    window = engine.window_cells(max(caps), context, n_seq) if caps else 0
    has_full = any(p.grows and p.token_cap is None for layer in model.census for p in layer.parts())
    cells = engine.cells(context, n_seq) if has_full else 0
    return Ubatch(tokens, min(tokens, o.n_batch), cells, window, engine.streams(n_seq))


def output_phase(w: Widths, u: Ubatch) -> Item:
    size = F32 * u.outputs * w.n_vocab + F32 * u.tokens * 2 * w.n_embd + I32 * u.outputs
    return Item(
        "logits",
        size,
        f"4 B × ({u.outputs} outputs × ({w.n_vocab:,} vocab + 1 id) + {u.tokens} tokens × 2·{w.n_embd})",
    )


def attention_phase(w: Widths, u: Ubatch, flash_attn: bool) -> Item:
    """One attention layer at its peak, with every mask live. n_kv is cells per stream; the streams split T."""
    n_kv = max(u.cells, u.window_cells)
    masks = u.cells + u.window_cells
    t = u.tokens
    if flash_attn:
        size = F16 * t * masks + F32 * t * (4 * w.n_embd + 2 * w.n_q) + 4 * I64 * t
        return Item(
            "attention (flash)",
            size,
            f"{t} tokens × (2 B × {masks:,} mask cells + 4 B × (4·{w.n_embd} + 2·{w.n_q}) + 32 B)",
        )
    size = (
        F32 * t * w.n_head * n_kv
        + F32 * t * masks
        + F32 * t * (3 * w.n_embd + 2 * w.n_q)
        + I64 * t * w.n_v
        + 20 * t
        + F16 * n_kv * w.n_latent
    )
    return Item(
        "attention KQ (no flash)",
        size,
        f"{t} tokens × (4 B × {w.n_head} heads × {n_kv:,} cells + 4 B × {masks:,} mask cells"
        f" + 4 B × (3·{w.n_embd} + 2·{w.n_q}) + 8 B × {w.n_v} V-index + 20 B)"
        + (f" + 2 B × {n_kv:,} cells × {w.n_latent} latent (MLA's V)" if w.n_latent else ""),
    )


def ffn_phase(w: Widths, u: Ubatch, weight_copy: int = 0) -> Item:
    t = u.tokens
    size = F32 * t * (3 * w.n_ff + 3 * w.n_embd + 4 * w.n_rec) + weight_copy
    copy = f" + {weight_copy:,} B weight copied from RAM" if weight_copy else ""
    return Item(
        "FFN",
        size,
        f"{t} tokens × 4 B × (3·{w.n_ff} + 3·{w.n_embd} + 4·{w.n_rec}){copy}",
    )


def peak(w: Widths, u: Ubatch, flash_attn: bool, output: bool, attention: bool, weight_copy: int = 0) -> Item:
    """The largest phase of a graph part: `output` when it holds the output layer, `attention` when it holds an
    attention layer."""
    phases = [ffn_phase(w, u, weight_copy)]
    if attention and (u.cells or u.window_cells):
        phases.append(attention_phase(w, u, flash_attn))
    if output:
        phases.append(output_phase(w, u))
    return max(phases, key=lambda item: item.bytes)


def compute_buffers(
    engine: LlamaCppEngine,
    model: ModelSpec,
    context: int,
    n_seq: int = 1,
    offload: Offload | None = None,
    cpu_weight: int = 0,
) -> ComputeBuffers:
    """The GPU's and the host's compute buffer for `n_seq` sequences of `context` tokens.

    `offload` is where -ngl / --n-cpu-moe put the model (None: everything on the GPU); `cpu_weight` is the largest
    weight tensor left in system RAM that a GPU op reads (an expert tensor with --n-cpu-moe, a CPU layer's FFN
    matrix), which op_offload copies into the GPU buffer when the ubatch has ≥ 32 rows.
    """
    w, u = widths(model), ubatch(engine, model, context, n_seq)
    n_layers = len(model.layers)
    where = offload or Offload.of(None, n_layers)
    flash = engine.options.flash_attn
    embd = F32 * u.tokens * w.n_embd + I32 * u.tokens
    embd_item = Item("input embeddings", embd, f"{u.tokens} tokens × (4 B × {w.n_embd} + 4 B)")
    gpu_layers = [model.layers[i] for i in where.layers]
    cpu_layers = [model.layers[i] for i in where.on_cpu]
    copy = cpu_weight if (cpu_layers or where.cpu_experts) and u.tokens >= OP_OFFLOAD_MIN_BATCH else 0
    if gpu_layers or where.output:
        gpu = peak(w, u, flash, where.output, any(layer.grows for layer in gpu_layers), copy)
    else:
        gpu = Item("nothing offloaded", 0, "0")
    if cpu_layers or not where.output:
        cpu = peak(w, u, flash, not where.output, any(layer.grows for layer in cpu_layers))
        host = Item(cpu.label, max(cpu.bytes, embd), cpu.formula if cpu.bytes >= embd else embd_item.formula)
    else:
        host = embd_item
    return ComputeBuffers(gpu, host)


def cpu_only(engine: LlamaCppEngine, model: ModelSpec, context: int, n_seq: int = 1) -> Item:
    """The CPU backend's compute buffer when nothing is offloaded: the whole graph's peak (the referee's figure)."""
    w, u = widths(model), ubatch(engine, model, context, n_seq)
    attention = any(layer.grows for layer in model.layers)
    return peak(w, u, engine.options.flash_attn, True, attention)


def llamacpp_overhead(
    engine: LlamaCppEngine,
    model: ModelSpec,
    context: int,
    n_seq: int = 1,
    world: int = 1,
    offload: Offload | None = None,
    cpu_weight: int = 0,
) -> list[Item]:
    """What llama.cpp holds on the fullest GPU besides weights and cache: the CUDA context and the compute buffer
    of the GPU that holds the output layer (with -ngl splitting layers over GPUs, the last one). The host's
    CUDA_Host buffer is in system RAM and not counted here (`compute_buffers` gives it)."""
    gpu = compute_buffers(engine, model, context, n_seq, offload, cpu_weight).gpu
    return [
        Item("CUDA context", CUDA_CONTEXT, "512 MiB"),
        Item(f"compute buffer ({gpu.label})", gpu.bytes, gpu.formula),
        *parallel_items(world),
    ]
