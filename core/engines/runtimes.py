"""Local runtimes built on llama.cpp: Ollama's defaults and its own estimate of how many layers go on the GPU,
and Apple silicon's GPU share of unified memory. Rules read from source at named versions (ollama/ollama), each a
hypothesis until a running Ollama agrees: none runs here.

Ollama v0.32.15 (the release whose defaults are modelled; paths at that tag):
- envconfig/config.go:275 OLLAMA_NUM_PARALLEL defaults to 1; :222 OLLAMA_KV_CACHE_TYPE (empty = f16); :216
  OLLAMA_FLASH_ATTENTION unset = auto; :303 OLLAMA_GPU_OVERHEAD bytes reserved per GPU (default 0); :230
  OLLAMA_CONTEXT_LENGTH 0 = "4k/32k/256k based on VRAM".
- server/routes.go:2043-2057: with no num_ctx anywhere, the default context is 262144 when the GPUs' total memory
  less OLLAMA_GPU_OVERHEAD each is ≥ 47 GiB, 32768 when ≥ 23 GiB, else 4096 (since 0334ffa62, 2026-01-27; 4096
  flat before, e.g. envconfig/config.go:206 at v0.12.10). llm/server.go:112-116 caps it at the model's training
  context.
- llm/llama_server.go:371-372 runs llama-server with `-c num_ctx × num_parallel -np num_parallel` (so each request
  gets num_ctx; an explicit -np keeps llama-server's kv_unified off), :394-395 `--cache-type-k/-v` as given (llama.cpp
  then refuses a quantised V without flash attention), :590-591 `-b/-ub num_batch` (default 512, api/types.go:1116),
  and :403-410 no -ngl by default: llama-server's own fit chooses the layers.
- llm/llama_server.go:596-621 LlamaServerFlashAttention: `--flash-attn on|off` as OLLAMA_FLASH_ATTENTION says, else
  `auto` where ml/device.go:571-583 FlashAttentionSupported passes (CUDA from compute capability 6.0 but 7.2, Metal,
  ROCm, Vulkan, CPU: every card kvscope lists), which llama.cpp turns on when it makes the cache. The per-
  architecture list below is v0.12.10's estimate only (`server_flash_attention`, `estimate_flash_attention`).

The layer estimate is llm/memory.go `estimateGPULayers` at v0.12.10, the last release that chose the split from
a static estimate (from v0.12.11, commit f560bd077, both runners size layers by a trial allocation; from
9db4bdbad, 2026-05-29, llama-server picks them). `ollama_layers` follows it line for line for one GPU:
memory.go:186-192 one block (blk.0 + its KV) held back as a buffer; fs/ggml/ggml.go:550-593 KV per layer =
context × num_parallel × (key_length + value_length) × head_count_kv × bytes (f16 2, q8_0 1, q4_0 0.5; ggml.go:904),
the quantised types only with flash attention (memory.go:194-205); graph sizes per architecture (ggml.go:615-760;
default gqa × KV total / 6, memory.go:217-225); ml/device.go:320-325 457 MiB minimum on CUDA (512 MiB Metal);
memory.go:269-291 the GPU is dropped unless it holds overhead + graph + minimum + 2 blocks; memory.go:308-342
blocks placed from the last down while `free > overhead + used + graph + block`; memory.go:349-365 then the output
layer (output_norm + output, or token_embd when tied) under the same test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.dtypes import dtype_named
from core.engines.base import per_count, sized_tensors
from core.engines.llamacpp import LlamaCppEngine, LlamaCppOptions
from core.errors import InputError
from core.memory.quant import as_gguf
from core.model.layers import FullAttention
from core.model.params import count_params
from core.model.spec import ModelSpec
from core.units import GIB, MIB

OLLAMA_VERSION = "v0.32.15"
ESTIMATOR_VERSION = "v0.12.10"
OLLAMA_KV_TYPES = ("f16", "q8_0", "q4_0")  # fs/ggml/ggml.go:868-874 SupportsKVCacheType
MINIMUM_MEMORY = {"cuda": 457 * MIB, "metal": 512 * MIB}  # ml/device.go:320-325 at v0.12.10
# HF model_type → GGUF general.architecture (llama.cpp convert_hf_to_gguf.py's registrations; Mistral converts as
# "llama", DeepSeek V2/V3 and Kimi K2 as "deepseek2"); a type not listed keeps its name.
GGUF_ARCH = {
    "mistral": "llama",
    "qwen3_moe": "qwen3moe",
    "qwen3_next": "qwen3next",
    "qwen3_5": "qwen35",
    "qwen3_5_text": "qwen35",
    "qwen3_5_moe": "qwen35moe",
    "qwen3_5_moe_text": "qwen35moe",
    "gpt_oss": "gpt-oss",
    "gemma3_text": "gemma3",
    "deepseek_v2": "deepseek2",
    "deepseek_v3": "deepseek2",
    "kimi_k2": "deepseek2",
    "granitemoehybrid": "granitehybrid",
    "falcon_h1": "falcon-h1",
    "falcon_mamba": "mamba",
}
# fs/ggml/ggml.go:894-901 at v0.12.10: architectures with flash attention on when OLLAMA_FLASH_ATTENTION is unset.
FLASH_BY_DEFAULT = frozenset({"gemma3", "gptoss", "gpt-oss", "qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe"})
NO_FLASH = frozenset({"gemma2"})  # ggml.go:883-885 SupportsFlashAttention


@dataclass(frozen=True)
class OllamaSettings:
    """What an Ollama user sets: the environment variables and the request's num_ctx / num_batch / num_gpu."""

    num_ctx: int | None = None  # None: Ollama's default for the card (default_num_ctx)
    num_parallel: int = 1  # OLLAMA_NUM_PARALLEL
    kv_cache_type: str = "f16"  # OLLAMA_KV_CACHE_TYPE
    flash_attention: bool | None = None  # OLLAMA_FLASH_ATTENTION; None = unset
    gpu_overhead: int = 0  # OLLAMA_GPU_OVERHEAD, bytes per GPU
    num_batch: int = 512

    def __post_init__(self) -> None:
        if self.kv_cache_type not in OLLAMA_KV_TYPES:
            raise InputError(f"OLLAMA_KV_CACHE_TYPE {self.kv_cache_type!r}: Ollama knows {', '.join(OLLAMA_KV_TYPES)}")
        if self.num_parallel < 1 or self.num_batch < 1 or (self.num_ctx is not None and self.num_ctx < 1):
            raise InputError("num_ctx, OLLAMA_NUM_PARALLEL and num_batch must be at least 1")
        if self.gpu_overhead < 0:
            raise InputError("OLLAMA_GPU_OVERHEAD must be 0 or more bytes")


def default_num_ctx(total_vram: int, gpu_overhead: int = 0, gpus: int = 1) -> int:
    """server/routes.go:2043-2057 at v0.32.15: the context Ollama uses when nothing sets num_ctx."""
    usable = total_vram - gpus * gpu_overhead
    if usable >= 47 * GIB:
        return 262144
    if usable >= 23 * GIB:
        return 32768
    return 4096


def request_ctx(model: ModelSpec, settings: OllamaSettings, total_vram: int) -> int:
    """num_ctx as the runner gets it: the setting, else the default for the card's total memory; capped at the
    training context (llm/server.go NewLlamaServer)."""
    num_ctx = settings.num_ctx or default_num_ctx(total_vram, settings.gpu_overhead)
    return min(num_ctx, model.max_context or num_ctx)


def gguf_arch(model: ModelSpec) -> str:
    return GGUF_ARCH.get(model.model_type, model.model_type)


def server_flash_attention(settings: OllamaSettings) -> bool:
    """Flash attention as current Ollama has llama-server run it: OLLAMA_FLASH_ATTENTION when set, else auto, on."""
    return settings.flash_attention if settings.flash_attention is not None else True


def server_kv_type(settings: OllamaSettings) -> str:
    """The cache type current Ollama passes (--cache-type-k/-v as OLLAMA_KV_CACHE_TYPE says); llama.cpp refuses a
    quantised one without flash attention, and so does Ollama's load, which this message names."""
    if settings.kv_cache_type != "f16" and not server_flash_attention(settings):
        raise InputError(
            f"OLLAMA_KV_CACHE_TYPE={settings.kv_cache_type} with OLLAMA_FLASH_ATTENTION=0: Ollama {OLLAMA_VERSION} "
            "passes both to llama-server, which refuses a quantised V cache without flash attention; unset "
            "OLLAMA_FLASH_ATTENTION (auto turns it on) or keep OLLAMA_KV_CACHE_TYPE f16"
        )
    return settings.kv_cache_type


def estimate_flash_attention(model: ModelSpec, settings: OllamaSettings) -> bool:
    """v0.12.10 memory.go:194-196: the env var, else the architecture's default; never where unsupported."""
    arch = gguf_arch(model)
    wanted = settings.flash_attention if settings.flash_attention is not None else arch in FLASH_BY_DEFAULT
    return wanted and arch not in NO_FLASH


def estimate_kv_type(model: ModelSpec, settings: OllamaSettings) -> str:
    """The cache type v0.12.10's estimate (and the Go engine) uses: a quantised one only with flash attention
    (memory.go:198-205)."""
    return settings.kv_cache_type if estimate_flash_attention(model, settings) else "f16"


def llama_engine(settings: OllamaSettings) -> LlamaCppEngine:
    """The llama.cpp context Ollama asks for (llm/llama_server.go at v0.32.15): -np given, so kv_unified stays off;
    -b and -ub both num_batch; flash attention as LlamaServerFlashAttention passes it."""
    options = LlamaCppOptions(
        n_ubatch=settings.num_batch,
        n_batch=settings.num_batch,
        kv_unified=False,
        flash_attn=server_flash_attention(settings),
        n_outputs_max=settings.num_parallel,  # llama-server's slots
    )
    return LlamaCppEngine(options=options, front_end="ollama")


# --- estimateGPULayers (llm/memory.go at v0.12.10) ---------------------------------------------------------------


@dataclass(frozen=True)
class GgufFacts:
    """The GGUF metadata and tensor sizes Ollama's estimator reads."""

    arch: str
    blocks: tuple[int, ...]  # bytes of blk.i's tensors
    output: int  # output_norm + output (token_embd when tied)
    embedding: int  # embedding_length
    heads: int  # attention.head_count (max over layers)
    heads_kv: int  # attention.head_count_kv
    key_length: int
    value_length: int
    vocab: int  # tokenizer.ggml.tokens (conversion pads it to the config's vocab_size)
    feed_forward: int = 0


def gguf_blocks(model: ModelSpec, weights: str = "q4_k_m") -> tuple[tuple[int, ...], int]:
    """Bytes of each blk.i of a `weights` GGUF of the model, and of its output layer (output_norm + output, or
    token_embd when tied, as memory.go:244-248 and the Go engine's output layer count it), from kvscope's tensor
    list and llama.cpp's quantisation mix."""
    count = count_params(model)
    dtype_bytes = dtype_named(model.dtype).block_bytes
    weights = as_gguf(weights)

    def tally() -> tuple[tuple[int, ...], int, int]:
        blocks = [0] * len(model.layers)
        output = embd = 0
        for tensor, size in sized_tensors(count, weights, dtype_bytes):
            if tensor.layer is not None:
                blocks[tensor.layer] += size
            elif tensor.role in ("output", "output_norm"):
                output += size
            elif tensor.role == "token_embd":
                embd = size
        return tuple(blocks), output, embd

    blocks, output, embd = per_count(count, ("gguf blocks", weights, dtype_bytes), tally)
    return blocks, output + (embd if count.lm_head == 0 else 0)


def estimator_covers(model: ModelSpec) -> bool:
    """kvscope models v0.12.10's estimate for models whose every layer is attention (windows taken as full: its
    GraphSize special cases for gemma and gpt-oss windows are not modelled)."""
    return all(isinstance(layer, FullAttention) for layer in model.layers)


def gguf_facts(model: ModelSpec, weights: str = "q4_k_m") -> GgufFacts:
    """What a `weights` GGUF of the model holds, for v0.12.10's estimator."""
    if not estimator_covers(model):
        raise InputError(f"{model.name}: the v0.12.10 Ollama estimate here covers full-attention models only")
    blocks, output = gguf_blocks(model, weights)
    cfg = model.config
    first = model.layers[0]
    assert isinstance(first, FullAttention)  # estimator_covers
    return GgufFacts(
        arch=gguf_arch(model),
        blocks=blocks,
        output=output,
        embedding=int(cfg["hidden_size"]),
        heads=int(cfg["num_attention_heads"]),
        heads_kv=first.kv_heads,
        key_length=first.head_dim,
        value_length=first.v_head_dim or first.head_dim,
        vocab=int(cfg["vocab_size"]),
        feed_forward=int(cfg.get("intermediate_size") or 0),
    )


KV_BYTES = {"f16": 2.0, "q8_0": 1.0, "q4_0": 0.5}  # ggml.go:904-915


def graph_sizes(f: GgufFacts, context: int, batch: int, kv_total: int) -> tuple[int, int]:
    """(partial offload, full offload) graph bytes: ggml.go GraphSize's cases for the architectures modelled, else
    memory.go:217-225's default. `context` is already num_ctx × num_parallel."""
    e, h, hkv, v = f.embedding, f.heads, f.heads_kv, f.vocab
    eh = e // h  # EmbeddingHeadCountMax: embedding_length / head_count (ggml.go:118-124)
    if f.arch in ("llama", "llama4"):
        full = max(4 * batch * (1 + 4 * e + context * (1 + h)), 4 * batch * (e + v))
        partial = 4 * batch * e + max(
            4 * batch * (1 + e + max(context, e)) + e * e * 9 // 16 + 4 * context * (batch * h + eh * hkv),
            4 * batch * (e + v) + e * v * 105 // 128,
        )
        return partial, full
    if f.arch == "qwen2":
        full = max(4 * batch * (e + v), 4 * batch * (1 + 2 * e + context + context * h))
        partial = max(
            4 * batch * (e + v) + e * v * 105 // 128,
            4 * (batch * (1 + 2 * e + context * (1 + h)) + e * (1 + context)),
        )
        return partial, full
    if f.arch in ("gemma", "gemma2"):
        k = f.key_length
        full = max(4 * batch * (e + v), 4 * batch * (2 + context + context * h + 2 * e + 2 * k * h))
        partial = max(
            4 * e * batch + e * v * 105 // 128 + 4 * v * batch,
            4 * batch * (2 * e + 1 + 2 * k * h + context + context * h) + 4 * k * context * 8 + e * k * h * 9 // 16,
        )
        return partial, full
    gqa = h // max(1, f.heads_kv)
    partial = gqa * kv_total // 6
    return partial, partial


@dataclass(frozen=True)
class EstimatorTerms:
    """The inputs estimateGPULayers weighs blocks against, for one model and setting (shown with each split)."""

    num_ctx: int  # capped at the model's training context
    kv_type: str
    context: int  # num_ctx × num_parallel (GraphSize: context *= numParallel)
    batch: int  # min(num_ctx, num_batch)
    kv_per_layer: tuple[int, ...]  # context × (key_length + value_length) × head_count_kv × bytes
    graph_partial: int  # after memory.go:228-230 (Metal: the full graph)
    graph_full: int
    minimum: int  # ml/device.go:320-325
    buffer: int  # blk.0 + its KV, held back (memory.go:186-192)
    blocks: tuple[int, ...]  # bytes of each blk.i's tensors
    output: int

    @property
    def kv_total(self) -> int:
        return sum(self.kv_per_layer)

    @property
    def graph(self) -> int:
        """max(partial, full): what every placement test reserves."""
        return max(self.graph_partial, self.graph_full)


def estimator_terms(
    model: ModelSpec,
    free_bytes: int,
    settings: OllamaSettings,
    weights: str = "q4_k_m",
    library: str = "cuda",
    total_bytes: int | None = None,
) -> EstimatorTerms:
    """`total_bytes` (default: `free_bytes`) sets the default num_ctx; `free_bytes` is what the layers go into."""
    f = gguf_facts(model, weights)
    num_ctx = request_ctx(model, settings, total_bytes or free_bytes)
    kvct = estimate_kv_type(model, settings)
    context = num_ctx * settings.num_parallel
    batch = min(num_ctx, settings.num_batch)
    kv = tuple(int(context * (f.key_length + f.value_length) * f.heads_kv * KV_BYTES[kvct]) for _ in f.blocks)
    partial, full = graph_sizes(f, context, batch, sum(kv))
    if library == "metal":  # memory.go:228-230: no partial-offload overhead on Metal
        partial = full
    return EstimatorTerms(
        num_ctx=num_ctx,
        kv_type=kvct,
        context=context,
        batch=batch,
        kv_per_layer=kv,
        graph_partial=partial,
        graph_full=full,
        minimum=MINIMUM_MEMORY[library],
        buffer=f.blocks[0] + kv[0],
        blocks=f.blocks,
        output=f.output,
    )


@dataclass(frozen=True)
class OllamaSplit:
    """What estimateGPULayers returns for one GPU."""

    layers: int  # Ollama's num_gpu: blocks on the GPU, plus 1 when the output layer goes too
    blocks: int  # repeating blocks in the model
    vram_bytes: int  # its VRAMSize: what it expects the GPU to hold
    total_bytes: int  # its TotalSize: everything, GPU or not
    kv_bytes: int
    graph_bytes: int
    num_ctx: int
    kv_type: str
    terms: EstimatorTerms | None = field(default=None, repr=False, compare=False)

    @property
    def full(self) -> bool:
        return self.layers > self.blocks

    @property
    def gpu_layers(self) -> int | None:
        """As llama.cpp's -ngl for kvscope's Setup: None = every layer and the output."""
        return None if self.full else self.layers


def ollama_layers(
    model: ModelSpec,
    free_bytes: int,
    settings: OllamaSettings = OllamaSettings(),
    weights: str = "q4_k_m",
    library: str = "cuda",
    total_bytes: int | None = None,
) -> OllamaSplit:
    """estimateGPULayers (llm/memory.go at v0.12.10) for one GPU with `free_bytes` free, num_gpu unset (-1)."""
    if free_bytes <= 0:
        raise InputError("free GPU memory must be positive")
    t = estimator_terms(model, free_bytes, settings, weights, library, total_bytes)
    kv, graph = t.kv_per_layer, t.graph
    overhead = settings.gpu_overhead
    on_gpu = free_bytes >= overhead + graph + t.minimum + 2 * t.buffer  # memory.go:269-291
    allocated = t.minimum + t.buffer if on_gpu else 0
    layers = overflow = 0
    for i in reversed(range(len(t.blocks))):  # memory.go:308-342, from the last block down
        size = t.blocks[i] + kv[i]
        if on_gpu and free_bytes > overhead + allocated + graph + size:
            allocated += size
            layers += 1
        else:
            on_gpu = False  # one GPU: it leaves the list, and every block below overflows
            overflow += size
    if on_gpu and free_bytes > overhead + allocated + graph + t.output:  # memory.go:349-360
        allocated += t.output
        layers += 1
    full_offload = layers == len(t.blocks) + 1
    if not full_offload:
        overflow += t.output  # memory.go:362-365
    graph_used = (t.graph_full if full_offload else t.graph_partial) if layers else 0  # memory.go:368-377
    allocated += graph_used
    return OllamaSplit(
        layers=layers,
        blocks=len(t.blocks),
        vram_bytes=allocated if layers else 0,  # memory.go:426-431: no layers, no VRAM estimate
        total_bytes=allocated + overflow,
        kv_bytes=t.kv_total,
        graph_bytes=graph_used,
        num_ctx=t.num_ctx,
        kv_type=t.kv_type,
        terms=t,
    )


# --- Apple silicon -----------------------------------------------------------------------------------------------


def apple_gpu_bytes(ram_bytes: int, wired_limit_mb: int = 0, default_share: float = 0.75) -> int:
    """What Metal lets the GPU wire: `sysctl iogpu.wired_limit_mb` when set (> 0), else macOS's default share.

    llama.cpp sizes its Metal device by `recommendedMaxWorkingSetSize` (ggml-metal-device.m:1290, :1503), which
    follows iogpu.wired_limit_mb; the default share (about 2/3 of RAM on small Macs, 3/4 on larger ones) is Apple's
    and not in any source here, so it is a parameter (core.memory.gpus.UNIFIED_GPU_SHARE is 0.75)."""
    if ram_bytes <= 0:
        raise InputError("RAM must be positive")
    if wired_limit_mb < 0:
        raise InputError("iogpu.wired_limit_mb must be 0 (macOS's default) or a size in MB")
    if wired_limit_mb:
        return min(ram_bytes, wired_limit_mb * MIB)
    return int(ram_bytes * default_share)


# --- LM Studio ---------------------------------------------------------------------------------------------------


def lmstudio_gpu_layers(offload: float | str, blocks: int) -> int | None:
    """LM Studio's GPU offload (`lms load --gpu`: 0-1, off or max; lmstudio.ai/docs/cli/load) as llama.cpp -ngl:
    None = every layer. LM Studio is closed source; a fraction taken as that share of the blocks, rounded down,
    is a hypothesis until its load log agrees."""
    if offload == "max":
        return None
    if offload == "off":
        return 0
    if isinstance(offload, str) or not 0 <= offload <= 1:
        raise InputError(f"LM Studio GPU offload is 0-1, 'off' or 'max', got {offload!r}")
    return None if offload == 1 else int(offload * blocks)
