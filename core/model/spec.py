"""The frozen description of a model that every calculation starts from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from core.model.layers import Hybrid, LayerKind


def kind_label(layer: LayerKind) -> str:
    if isinstance(layer, Hybrid):
        return "hybrid(" + "+".join(m.kind for m in layer.members) + ")"
    return layer.kind


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    layers: tuple[LayerKind, ...]
    dtype: str  # the checkpoint's compute dtype, kvscope spelling (bf16, fp16, fp32)
    hidden_size: int
    vocab_size: int
    max_context: int | None  # max_position_embeddings; None for models without one (pure SSMs)
    tie_word_embeddings: bool
    ssm_dtype: str | None = None  # a config's own say on recurrent-state dtype (Qwen3.5's mamba_ssm_dtype)
    notes: tuple[str, ...] = ()  # assumptions made while reading the config, shown to the user
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    first_layer: int = 0  # a part of a model (the layers one GPU holds): the whole model's index of layers[0]

    @cached_property
    def census(self) -> dict[LayerKind, list[int]]:
        """Each distinct layer, in order of first appearance, with the indices it sits at (ascending): a 10,000-layer
        model usually has one to three, so per-layer work is done once per distinct layer. Computed once per spec
        (a spec is immutable; `with_layers` and `replace` make a new one)."""
        out: dict[LayerKind, list[int]] = {}
        for i, layer in enumerate(self.layers):
            out.setdefault(layer, []).append(i)
        return out

    def layer_counts(self) -> dict[str, int]:
        return dict(Counter(kind_label(layer) for layer in self.layers))

    def with_layers(self, layers: tuple[LayerKind, ...], name: str | None = None, first_layer: int = 0) -> ModelSpec:
        """The same model with other layers: what-ifs such as 'every layer full attention', or (`first_layer`) the
        run of its layers from that index on that one GPU holds."""
        from dataclasses import replace

        return replace(self, layers=layers, name=name or self.name, first_layer=first_layer)
