"""transformers 5.x `DynamicCache` after a prefill.

Measured with transformers 5.24 on CPU; tests/test_transformers_exact.py checks every rule against real caches.

- K/V, MLA latents, conv windows and MiniMax's lightning state are kept in the model's compute dtype.
- Gated DeltaNet and Mamba recurrent states are float32 whatever the compute dtype.
- Conv windows keep all d_conv (LFM2: L_cache) columns, zero-padded when the prompt is shorter.
- Sliding and chunked layers keep the last window − 1 tokens.
"""

from __future__ import annotations

from core.dtypes import FP32
from core.engines.base import Engine
from core.model.layers import LayerKind, Storage
from core.model.spec import ModelSpec


class TransformersEngine(Engine):
    name = "transformers"
    rules_version = "transformers 5.24 (checked against its own cache objects)"
    # The KV dtype in transformers is the model's compute dtype: choosing one means running the model in it.
    kv_dtypes = ("auto", "bf16", "fp16", "fp32")

    def storage(self, model: ModelSpec, kv_dtype: str = "auto") -> Storage:
        compute = self.kv_dtype(model, kv_dtype)
        return Storage(kv=compute, conv=compute, ssm=FP32, linear=compute, conv_columns_dropped=0)

    def tokens_held(self, layer: LayerKind, context: int) -> int:
        cap = layer.token_cap
        return context if cap is None else min(context, cap - 1)
