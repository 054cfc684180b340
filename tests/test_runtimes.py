"""Ollama's rules (core.engines.runtimes) against a second reading of its source, hand arithmetic, and the
directions its settings must move the answer. The transliteration below is written from ollama v0.12.10 llm/memory.go
estimateGPULayers and fs/ggml/ggml.go GraphSize, keeping Go's shape (gpusWithSpace, tensorSplit, the j loop), so
that a slip in core.engines.runtimes' shorter loop shows up as a different split."""

from __future__ import annotations

import pytest

from core.engines.llamacpp import FRONTENDS
from core.engines.runtimes import (
    OllamaSettings,
    apple_gpu_bytes,
    default_num_ctx,
    estimate_flash_attention,
    estimate_kv_type,
    gguf_facts,
    llama_engine,
    lmstudio_gpu_layers,
    ollama_layers,
    server_flash_attention,
    server_kv_type,
)
from core.errors import InputError
from core.fit import Setup, fit
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.units import GIB, MIB

MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mistral-7B-v0.1",
    "Qwen/Qwen3-8B",
    "google/gemma-2-9b-it",
    "microsoft/phi-4",
    "Qwen/Qwen3-30B-A3B",
]
CARDS = ["GeForce RTX 4060 8GB", "GeForce RTX 3060 12GB", "GeForce RTX 4060 Ti 16GB", "GeForce RTX 4090 24GB"]


def go_estimate(f, free, num_ctx, num_parallel=1, num_batch=512, overhead=0, bytes_per_element=2.0):
    """estimateGPULayers for `gpus` = [one CUDA device], opts.NumGPU = -1, no projectors."""
    context = num_ctx * num_parallel  # GraphSize: context *= numParallel
    batch = min(num_ctx, num_batch)
    n = len(f.blocks)
    kv = [int(float(context * (f.key_length + f.value_length) * f.heads_kv) * bytes_per_element) for _ in range(n)]
    kv_total = sum(kv)
    e, heads, heads_kv, vocab = f.embedding, f.heads, f.heads_kv, f.vocab
    embedding_heads = e // heads
    partial = full = 0
    if f.arch == "llama":
        full = max(4 * batch * (1 + 4 * e + context * (1 + heads)), 4 * batch * (e + vocab))
        partial = 4 * batch * e
        partial += max(
            4 * batch * (1 + e + max(context, e))
            + e * e * 9 // 16
            + 4 * context * (batch * heads + embedding_heads * heads_kv),
            4 * batch * (e + vocab) + e * vocab * 105 // 128,
        )
    elif f.arch == "gemma2":
        k = f.key_length
        full = max(4 * batch * (e + vocab), 4 * batch * (2 + context + context * heads + 2 * e + 2 * k * heads))
        partial = max(
            4 * e * batch + e * vocab * 105 // 128 + 4 * vocab * batch,
            4 * batch * (2 * e + 1 + 2 * k * heads + context + context * heads)
            + 4 * k * context * 8
            + e * k * heads * 9 // 16,
        )
    if partial == 0:
        partial = (heads // heads_kv) * kv_total // 6
    if full == 0:
        full = partial
    minimum = 457 * MIB
    layer_size = f.blocks[0] + kv[0]
    gpus = [free]
    gpus_with_space = []
    allocations = [0]
    tensor_split = [0]
    for i in range(len(gpus)):
        if gpus[i] < overhead + max(partial, full) + minimum + 2 * layer_size:
            continue
        gpus_with_space.append(i)
        allocations[i] += minimum + layer_size
    layer_count, overflow = 0, 0
    for i in range(n - 1, -1, -1):
        layer_size = f.blocks[i] + kv[i]
        for j in range(len(gpus_with_space), 0, -1):
            g = gpus_with_space[i % j]
            used = allocations[g] + max(partial, full)
            if gpus[g] > overhead + used + layer_size:
                allocations[g] += layer_size
                tensor_split[g] += 1
                layer_count += 1
                break
            gpus_with_space.pop(i % j)
        if not gpus_with_space:
            overflow += layer_size
    fully = layer_count >= n
    for j in range(len(gpus_with_space), 0, -1):
        g = gpus_with_space[layer_count % j]
        used = allocations[g] + max(partial, full)
        if gpus[g] > overhead + used + f.output:
            allocations[g] += f.output
            tensor_split[g] += 1
            layer_count += 1
            break
    if layer_count < n + 1:
        fully = False
        overflow += f.output
    for i in range(len(gpus)):
        if tensor_split[i] > 0:
            allocations[i] += full if fully else partial
    if layer_count == 0:
        return 0, 0, sum(allocations) + overflow
    return layer_count, sum(allocations), sum(allocations) + overflow


@pytest.mark.parametrize("num_ctx", [4096, 32768])
@pytest.mark.parametrize("model_name", MODELS)
def test_split_matches_the_go_transliteration(model_name, num_ctx):
    model = load_model(model_name)
    facts = gguf_facts(model)
    for name in CARDS:
        free = card_named(name).memory_bytes
        split = ollama_layers(model, free, OllamaSettings(num_ctx=num_ctx))
        capped = min(num_ctx, model.max_context)  # llm/server.go caps num_ctx at the training context
        assert (split.layers, split.vram_bytes, split.total_bytes) == go_estimate(facts, free, capped), name


def test_llama_8b_kv_and_graph_by_hand():
    split = ollama_layers(load_model("meta-llama/Llama-3.1-8B-Instruct"), 24 * GIB, OllamaSettings(num_ctx=4096))
    # KV: 4096 tokens × (128 + 128) × 8 KV heads × 2 B = 16 MiB a layer, 32 layers
    assert split.kv_bytes == 32 * 16 * MIB
    # full-offload graph, llama case, batch 512: max(4·512·(1 + 4·4096 + 4096·33), 4·512·(4096 + 128256))
    assert split.graph_bytes == 4 * 512 * (1 + 4 * 4096 + 4096 * 33) == 310_380_544
    assert split.layers == 33 and split.full  # 32 blocks + output on a 24 GiB card


def test_more_memory_never_loses_layers_and_overhead_costs_some():
    model = load_model("Qwen/Qwen3-30B-A3B")
    layers = [ollama_layers(model, gib * GIB, OllamaSettings(num_ctx=4096)).layers for gib in (6, 8, 12, 16, 24)]
    assert layers == sorted(layers) and layers[0] < layers[-1]
    plain = ollama_layers(model, 12 * GIB, OllamaSettings(num_ctx=4096)).layers
    reserved = ollama_layers(model, 12 * GIB, OllamaSettings(num_ctx=4096, gpu_overhead=2 * GIB)).layers
    assert reserved < plain


def test_quantised_cache_only_with_flash_attention():
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")  # llama: flash attention off unless the variable is set
    f16 = ollama_layers(llama, 8 * GIB, OllamaSettings(num_ctx=8192))
    asked = ollama_layers(llama, 8 * GIB, OllamaSettings(num_ctx=8192, kv_cache_type="q8_0"))
    assert (asked.kv_type, asked.kv_bytes) == ("f16", f16.kv_bytes)
    on = ollama_layers(llama, 8 * GIB, OllamaSettings(num_ctx=8192, kv_cache_type="q8_0", flash_attention=True))
    assert (on.kv_type, on.kv_bytes * 2) == ("q8_0", f16.kv_bytes)
    qwen = load_model("Qwen/Qwen3-8B")  # qwen3 has it on by default at v0.12.10
    assert ollama_layers(qwen, 8 * GIB, OllamaSettings(num_ctx=8192, kv_cache_type="q4_0")).kv_type == "q4_0"
    with pytest.raises(InputError, match="OLLAMA_KV_CACHE_TYPE"):
        OllamaSettings(kv_cache_type="q5_1")


def test_parallel_multiplies_the_cache():
    model = load_model("Qwen/Qwen3-8B")
    one = ollama_layers(model, 24 * GIB, OllamaSettings(num_ctx=4096))
    four = ollama_layers(model, 24 * GIB, OllamaSettings(num_ctx=4096, num_parallel=4))
    assert four.kv_bytes == 4 * one.kv_bytes


def test_default_context_tiers():
    assert default_num_ctx(8 * GIB) == 4096
    assert default_num_ctx(card_named("RTX 4090").memory_bytes) == 32768  # 24,564 MiB ≥ 23 GiB
    assert default_num_ctx(23 * GIB - 1) == 4096
    assert default_num_ctx(47 * GIB) == 262144
    assert default_num_ctx(48 * GIB, gpu_overhead=2 * GIB) == 32768  # the overhead comes off first
    model = load_model("Qwen/Qwen3-8B")
    assert ollama_layers(model, 24 * GIB).num_ctx == 32768
    assert ollama_layers(model, 48 * GIB).num_ctx == model.max_context  # 256K capped at the model's 40,960


def test_ollama_frontend_and_engine_are_what_it_passes_llama_server():
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    engine = llama_engine(OllamaSettings())
    assert engine.options.kv_unified is False  # Ollama always passes -np
    assert (engine.options.n_batch, engine.options.n_ubatch) == (512, 512)
    # v0.32.15 passes --flash-attn auto unless OLLAMA_FLASH_ATTENTION is set (llama_server.go
    # LlamaServerFlashAttention), whatever the architecture: v0.12.10's per-architecture list is its estimate's only
    assert engine.options.flash_attn is True and server_flash_attention(OllamaSettings()) is True
    assert estimate_flash_attention(model, OllamaSettings()) is False  # llama: not on v0.12.10's list
    off = OllamaSettings(flash_attention=False)
    assert llama_engine(off).options.flash_attn is False
    assert FRONTENDS["ollama"].options.kv_unified is False and FRONTENDS["ollama"].n_parallel == 1
    # a quantised cache is passed as given: with flash attention off llama-server refuses it, and kvscope says so
    assert server_kv_type(OllamaSettings(kv_cache_type="q8_0")) == "q8_0"
    assert estimate_kv_type(model, OllamaSettings(kv_cache_type="q8_0")) == "f16"  # v0.12.10 sized it f16
    with pytest.raises(InputError, match=r"OLLAMA_FLASH_ATTENTION=0.*refuses a quantised V cache"):
        server_kv_type(OllamaSettings(kv_cache_type="q4_0", flash_attention=False))
    with pytest.raises(InputError, match="flash attention"):  # llama.cpp refuses a quantised V without it
        setup = Setup(model=model, engine=llama_engine(off), card=card_named("RTX 4090"), weights="q4_k_m",
                      kv_dtype="q8_0")  # fmt: skip
        fit(setup, [4096])


def test_ollama_split_on_kvscopes_llamacpp_stays_on_the_card():
    """Where Ollama's estimate puts every block on the GPU, kvscope's llama.cpp account of that split must fit too
    (Ollama's estimate is the more cautious: it reserves a spare block, 457 MiB and a graph)."""
    for name in MODELS:
        model = load_model(name)
        for card_name in CARDS:
            card = card_named(card_name)
            settings = OllamaSettings(num_ctx=4096)
            split = ollama_layers(model, card.memory_bytes, settings)
            setup = Setup(
                model=model,
                engine=llama_engine(settings),
                card=card,
                weights="q4_k_m",
                gpu_layers=split.gpu_layers,
            )
            row = fit(setup, [4096]).rows[0]
            assert row.fits, (name, card_name)
            assert row.total_bytes <= split.vram_bytes, (name, card_name)


def test_lmstudio_and_apple():
    assert lmstudio_gpu_layers("max", 32) is None and lmstudio_gpu_layers("off", 32) == 0
    assert lmstudio_gpu_layers(0.5, 33) == 16
    with pytest.raises(InputError):
        lmstudio_gpu_layers(1.5, 32)
    assert apple_gpu_bytes(64 * GIB) == 48 * GIB
    assert apple_gpu_bytes(64 * GIB, wired_limit_mb=57344) == 56 * GIB  # sudo sysctl iogpu.wired_limit_mb=57344
    with pytest.raises(InputError):
        apple_gpu_bytes(64 * GIB, wired_limit_mb=-1)
