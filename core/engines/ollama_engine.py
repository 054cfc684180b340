"""Which runner Ollama gives a model, by release, and the memory of Ollama's own Go engine ("ollamarunner").

Read from ollama/ollama at the tags named (none ran here; each rule is a hypothesis until a running Ollama agrees).

Runner, by release (llm/server.go NewLlamaServer):
- up to v0.24.0: the Go engine when `envconfig.NewEngine()` (OLLAMA_NEW_ENGINE) is set or the GGUF's
  general.architecture is in fs/ggml/ggml.go `KV.OllamaEngineRequired` (REQUIRED below, per release); a model the
  engine's registry (model/models/*, `model.Register`) lacks falls back to the llama.cpp runner ("compatibility
  mode"); every other architecture runs on the llama.cpp runner (runner/llamarunner, libllama through cgo).
- from v0.30.0 (9db4bdbad "runner: Remove CGO engines, use llama-server exclusively for GGML models", 2026-05-29) to
  the latest release read, v0.32.15: llm/llama_server.go runs llama-server for every GGUF, so kvscope's llama.cpp
  account and llama-server's --fit (core.llamacpp_autofit) are the whole story.

The Go engine's memory at v0.24.0, its last release:
- kvcache/causal.go Causal.Init: one cell array per cache of roundUp(sequences × capacity, CachePadding) cells;
  CachePadding is 256 (ml/backend/ggml/ggml.go Backend.CacheConfig), 1 where a model sets an empty config (gemma2,
  model/models/gemma2/model.go New). A sliding-window cache keeps roundUp(sequences × memory + batch, padding) cells,
  memory = the window (NewSWACache) or 4,096 (NewSWAMemCache: gpt-oss, gemma4), at least window + 1 with several
  sequences, and the full array once memory ≥ capacity. Causal.Put: per layer K [head_dim, kv_heads, cells] and V the
  same, in the cache type; kvcache/wrapper.go gives each layer its own cache (SWA or causal) by layer type.
- MLA (model/models/deepseek2/model.go Attention.Forward, the isMLA path): the cache gets K = rope ⊕ latent
  (rope_dim + kv_lora_rank, one head) and V = the latent (kv_lora_rank) as separate tensors.
- Recurrent layers (kvcache/recurrent.go, used by qwen3next/qwen35, nemotron_h, lfm2): per layer and sequence a conv
  state of (d_conv - 1) × channels and a recurrent state, both F32 (recurrent.go convState/recurrentState), and on
  the reserve pass DefaultCheckpointCount = 24 checkpoints of both per sequence (recurrent_checkpoints.go
  reserveCheckpointConv/Recurrent): 25 copies in all.
- Layers on the GPU (llm/server.go ollamaServer.Load, createLayout, buildLayout, assignLayers, greedyFit): no static
  estimate. The first layout assumes every size zero; the runner then allocates it ("fit" pass) and reports each
  layer's weights + cache and each device's graph, and the layout is rebuilt from those until it repeats. Converged,
  for one GPU: room = free - graph - MinimumMemory (457 MiB CUDA, 512 MiB Metal, ml/device.go) - OLLAMA_GPU_OVERHEAD;
  layers (blocks, then the output layer last) go on from the last down while each fits; if not all fit, the output
  layer is dropped and the blocks are placed again from the last down. The graph is what ggml's allocator measures
  for the worst-case batch; kvscope has no account of the Go graphs, so callers pass a stand-in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.dtypes import FP32, dtype_named
from core.engines.runtimes import MINIMUM_MEMORY  # ml/device.go MinimumMemory, unchanged to v0.24.0
from core.model.layers import MLA, LayerKind, SlidingWindow, Storage
from core.units import round_up

LATEST = "v0.32.15"  # the newest release tag in the snapshot read (v0.33.0-rc2 is a release candidate)
LAST_GO_ENGINE = "v0.24.0"  # the last release with runner/ollamarunner; v0.30.0 removed it
LLAMA_SERVER_FROM = "v0.30.0"

OLLAMA_ENGINE = "Ollama engine"
LLAMA_RUNNER = "llama.cpp runner"
LLAMA_SERVER = "llama-server"

# fs/ggml/ggml.go KV.OllamaEngineRequired: the release that changed the list, and the list from then on.
_REQUIRED_V0_12_9 = frozenset(
    {"gemma3", "gemma3n", "gptoss", "gpt-oss", "llama4", "mistral3", "mllama", "qwen25vl", "qwen3", "qwen3moe"}
    | {"qwen3vl", "qwen3vlmoe"}
)
_REQUIRED_V0_13_5 = _REQUIRED_V0_12_9 | {"deepseekocr", "deepseek2", "nomic-bert", "olmo3", "bert"}
_REQUIRED_V0_17_1 = _REQUIRED_V0_13_5 | {"glm4moelite", "lfm2", "qwen3next", "glmocr"} | {
    "nemotron_h", "nemotron_h_moe", "qwen35", "qwen35moe", "lfm2moe"
}  # fmt: skip
REQUIRED: tuple[tuple[str, frozenset[str]], ...] = (
    ("v0.12.9", _REQUIRED_V0_12_9),
    ("v0.13.0", _REQUIRED_V0_12_9 | {"deepseekocr", "deepseek2"}),
    ("v0.13.1", _REQUIRED_V0_12_9 | {"deepseekocr", "deepseek2", "nomic-bert"}),
    ("v0.13.4", _REQUIRED_V0_13_5 - {"bert"}),
    ("v0.13.5", _REQUIRED_V0_13_5),
    ("v0.14.3", _REQUIRED_V0_13_5 | {"glm4moelite", "lfm2"}),
    ("v0.15.5", _REQUIRED_V0_13_5 | {"glm4moelite", "lfm2", "qwen3next", "glmocr"}),
    ("v0.17.1", _REQUIRED_V0_17_1),
    ("v0.20.0", _REQUIRED_V0_17_1 | {"gemma4"}),
    ("v0.22.0", _REQUIRED_V0_17_1 | {"gemma4", "laguna", "nemotron_h_omni"}),
)
# model/models/* registers these from v0.12.9 to v0.24.0 but OllamaEngineRequired leaves them out: they take the Go
# engine only with OLLAMA_NEW_ENGINE set.
OPT_IN = frozenset({"llama", "qwen2", "gemma2"})


def version_key(tag: str) -> tuple[int, ...]:
    """'v0.12.10' → (0, 12, 10), so releases compare in order."""
    return tuple(int(part) for part in tag.lstrip("v").split("."))


def required(version: str) -> frozenset[str]:
    """OllamaEngineRequired's list at `version` (before v0.12.9: not modelled, taken as v0.12.9's)."""
    key = version_key(version)
    chosen = REQUIRED[0][1]
    for since, archs in REQUIRED:
        if version_key(since) <= key:
            chosen = archs
    return chosen


@dataclass(frozen=True)
class Runner:
    """The runner a release gives an architecture, and why, with the source line."""

    name: str
    why: str


def runner(arch: str, version: str = LATEST, new_engine: bool = False) -> Runner:
    """llm/server.go NewLlamaServer at `version`: which runner loads a GGUF of `arch`."""
    if version_key(version) >= version_key(LLAMA_SERVER_FROM):
        return Runner(
            LLAMA_SERVER,
            f"Ollama {version} runs llama-server for every GGUF (llm/llama_server.go; the Go engine and the cgo "
            "runner were removed in v0.30.0, commit 9db4bdbad)",
        )
    if arch in required(version):
        return Runner(
            OLLAMA_ENGINE,
            f"'{arch}' is in fs/ggml/ggml.go KV.OllamaEngineRequired @{version}, so llm/server.go NewLlamaServer "
            "starts the Go engine (runner/ollamarunner)",
        )
    if new_engine and arch in OPT_IN:
        return Runner(OLLAMA_ENGINE, f"OLLAMA_NEW_ENGINE is set and model/models registers '{arch}' @{version}")
    return Runner(
        LLAMA_RUNNER,
        f"'{arch}' is not in fs/ggml/ggml.go KV.OllamaEngineRequired @{version}, so llm/server.go NewLlamaServer "
        "loads it with the llama.cpp runner (runner/llamarunner, libllama)",
    )


# --- the Go engine's cache (kvcache/*.go at v0.24.0) -------------------------------------------------------------

CACHE_PADDING = 256  # ml/backend/ggml/ggml.go Backend.CacheConfig @v0.24.0, with or without flash attention
UNPADDED = frozenset({"gemma2"})  # model/models/gemma2/model.go New: SetConfig(ml.CacheConfig{}) → padding 1
SWA_MEMORY = {"gpt-oss": 4096, "gptoss": 4096, "gemma4": 4096}  # NewSWAMemCache(window, 4096, …) callers
CHECKPOINTS = 24  # kvcache/recurrent.go DefaultCheckpointCount


def causal_cells(capacity: int, sequences: int, pad: int = CACHE_PADDING) -> int:
    """Causal.Init without a window: sequences × capacity cells, padded."""
    return round_up(sequences * capacity, pad)


def window_cells(window: int, memory: int, capacity: int, sequences: int, batch: int, pad: int = CACHE_PADDING) -> int:
    """Causal.Init for a sliding-window cache: `memory` tokens per sequence (≥ window + 1 with several sequences)
    plus one batch, padded; the full array once memory reaches the capacity."""
    if sequences > 1:
        memory = max(memory, window + 1)
    if memory >= capacity:
        return causal_cells(capacity, sequences, pad)
    return round_up(sequences * memory + batch, pad)


def storage(kv_type: str) -> Storage:
    """The Go engine's dtypes: the cache type for K/V, F32 for every recurrent state; conv keeps d_conv - 1 columns
    (qwen3next/model.go, nemotronh/model.go, lfm2/model.go: convDim = kernel - 1)."""
    return Storage(kv=dtype_named(kv_type), conv=FP32, ssm=FP32, linear=FP32, conv_columns_dropped=1)


def layer_cache_bytes(
    layer: LayerKind, arch: str, kv_type: str, capacity: int, sequences: int, batch: int
) -> int:  # fmt: skip
    """One layer's cache in the Go engine: K and V over its cells, or 25 copies of its recurrent states."""
    store = storage(kv_type)
    pad = 1 if arch in UNPADDED else CACHE_PADDING
    total = 0
    for part in layer.parts():
        if isinstance(part, MLA):  # K = rope ⊕ latent, V = latent (deepseek2 Attention.Forward, isMLA)
            per_token = store.kv.bytes_for(part.kv_lora_rank + part.rope_dim) + store.kv.bytes_for(part.kv_lora_rank)
            total += causal_cells(capacity, sequences, pad) * per_token
        elif isinstance(part, SlidingWindow):
            memory = SWA_MEMORY.get(arch, part.window)
            total += window_cells(part.window, memory, capacity, sequences, batch, pad) * part.bytes_per_token(store)
        elif part.grows:
            total += causal_cells(capacity, sequences, pad) * part.bytes_per_token(store)
        total += (1 + CHECKPOINTS) * sequences * part.fixed_bytes(store)
    return total


def cache_bytes(
    layers: Sequence[LayerKind], arch: str, kv_type: str, num_ctx: int, sequences: int, batch: int
) -> tuple[int, ...]:
    """Every layer's cache: runner/ollamarunner/cache.go NewInputCache calls Init(sequences, num_ctx, batch)."""
    return tuple(layer_cache_bytes(layer, arch, kv_type, num_ctx, sequences, batch) for layer in layers)


# --- the layout (llm/server.go at v0.24.0) -----------------------------------------------------------------------


def _greedy(sizes: Sequence[int], room: int) -> int:
    """greedyFit with one device: from the last size down, while each fits in what is left."""
    placed = 0
    for size in reversed(sizes):
        if size > room:
            break
        room -= size
        placed += 1
    return placed


def assign_layers(layers: Sequence[int], room: int) -> int:
    """assignLayers for one GPU: `layers` are blocks then the output layer (weights + cache each); how many go on
    the GPU, the output layer counted as one. If not all fit, the output layer is dropped and the blocks placed
    again ("prefer offloading layers other than the output layer")."""
    placed = _greedy(layers, room)
    return placed if placed == len(layers) else _greedy(layers[:-1], room)


@dataclass(frozen=True)
class EngineLayout:
    """The Go engine's converged layout on one GPU."""

    layers: int  # on the GPU, the output layer counted as one (Ollama logs "offloaded N/M layers")
    blocks: int
    cache_bytes: int  # every layer's cache, GPU or not
    graph_bytes: int  # the stand-in for the measured graph
    vram_bytes: int  # graph + minimum + what was placed

    @property
    def full(self) -> bool:
        return self.layers > self.blocks


def engine_layout(
    weights: Sequence[int],
    output: int,
    cache: Sequence[int],
    free_bytes: int,
    graph: int,
    gpu_overhead: int = 0,
    library: str = "cuda",
) -> EngineLayout:
    """buildLayout for one GPU: room = free - graph - MinimumMemory - OLLAMA_GPU_OVERHEAD, then assign_layers."""
    minimum = MINIMUM_MEMORY[library]
    sizes = [w + c for w, c in zip(weights, cache, strict=True)] + [output]
    room = max(0, free_bytes - graph - minimum - gpu_overhead)
    placed = assign_layers(sizes, room)
    on_gpu = sizes[-1] if placed == len(sizes) else 0
    on_gpu += sum(sizes[len(weights) - min(placed, len(weights)) : len(weights)])
    return EngineLayout(
        layers=placed,
        blocks=len(weights),
        cache_bytes=sum(cache),
        graph_bytes=graph,
        vram_bytes=graph + minimum + on_gpu if placed else 0,
    )
