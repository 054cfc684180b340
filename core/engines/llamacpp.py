"""llama.cpp's KV cache (read in src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp, llama-memory-recurrent.cpp and
ggml/src/ggml-common.h).

- K and V are rows of kv_heads × head_dim per cell, each row stored in the cache type: f16 by default; q8_0 is
  34 B per 32 values, q4_0 18 B per 32 (a quantised V needs flash attention, which recent builds turn on).
- Cells are padded to 256 (the flash-attention padding); each parallel sequence is its own stream of cells.
- Sliding-window layers keep min(cells, pad(n_swa + n_ubatch)) cells per stream unless --swa-full; Mistral and
  Mixtral GGUFs carry no window, so theirs is a full cache.
- The SWA cache is not quantised: it stays F16 under a q8_0/q4_0 cache type (since llama.cpp PR 21277).
- MLA keeps only the 576-wide latent as K; V is read from it.
- Recurrent layers (Mamba, Gated DeltaNet, short conv) keep conv (d_conv − 1 columns) and state in f32 whatever
  the KV type, one slot per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.dtypes import FP16, FP32, CacheDtype
from core.engines.base import CacheAccount, Engine
from core.errors import InputError
from core.layers import FullAttention, LayerKind, LightningAttention, SlidingWindow, Storage
from core.model import ModelSpec

CELL_PAD = 256
# Architectures whose GGUF conversion drops the sliding window: Mistral and Mixtral load as plain "llama", so
# llama.cpp keeps every token on every layer for them.
NO_SWA = frozenset({"mistral", "mixtral"})


def pad(n: int, to: int) -> int:
    return -(-n // to) * to


def as_llamacpp_sees(model: ModelSpec) -> ModelSpec:
    if model.model_type not in NO_SWA:
        return model
    return model.with_layers(
        tuple(
            FullAttention(layer.kv_heads, layer.head_dim, layer.v_head_dim)
            if isinstance(layer, SlidingWindow)
            else layer
            for layer in model.layers
        )
    )


@dataclass(frozen=True)
class LlamaCppOptions:
    n_ubatch: int = 512
    swa_full: bool = False  # --swa-full: sliding layers keep the whole context
    kv_unified: bool = False  # --kv-unified: all sequences share one stream of cells


@dataclass(frozen=True)
class LlamaCppEngine(Engine):
    options: LlamaCppOptions = LlamaCppOptions()
    name = "llama.cpp"
    kv_dtypes = ("auto", "f16", "fp16", "bf16", "fp32", "f32", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")

    def with_options(self, **changes) -> LlamaCppEngine:
        return replace(self, options=replace(self.options, **changes))

    def kv_dtype(self, model: ModelSpec, kv_dtype: str) -> CacheDtype:
        # llama.cpp's cache defaults to f16 whatever the weights are
        return FP16 if kv_dtype.strip().lower() == "auto" else super().kv_dtype(model, kv_dtype)

    def storage(self, model: ModelSpec, kv_dtype: str = "auto") -> Storage:
        if any(isinstance(p, LightningAttention) for layer in model.layers for p in layer.parts()):
            raise InputError(f"{model.name}: llama.cpp has no lightning-attention (MiniMax-Text-01) cache to model")
        return Storage(kv=self.kv_dtype(model, kv_dtype), conv=FP32, ssm=FP32, linear=FP32, conv_columns_dropped=1)

    def account(self, model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto") -> CacheAccount:
        return super().account(as_llamacpp_sees(model), context, batch, kv_dtype)

    def layer_storage(self, layer: LayerKind, storage: Storage) -> Storage:
        # llama.cpp keeps the small SWA cache in F16 whatever -ctk/-ctv say (ggml-org/llama.cpp pull request 21277)
        if layer.token_cap is not None and storage.kv.block_elems > 1:
            return replace(storage, kv=FP16)
        return storage

    def cells(self, context: int) -> int:
        return pad(context, CELL_PAD)

    def tokens_held(self, layer: LayerKind, context: int) -> int:
        cells = self.cells(context)
        cap = layer.token_cap
        if cap is None or self.options.swa_full:
            return cells
        return min(cells, pad(cap + self.options.n_ubatch, CELL_PAD))
