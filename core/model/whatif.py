"""What-if variants of a model: the same skeleton with other layer kinds or shapes."""

from __future__ import annotations

from dataclasses import replace

from core.errors import InputError
from core.model.architectures import ARCHITECTURES, Cfg
from core.model.config import MAX_LAYERS
from core.model.layers import MLA, FullAttention, LayerKind, NoCache, SlidingWindow
from core.model.spec import ModelSpec


def attention_of(model: ModelSpec) -> LayerKind:
    """The model's own full-attention layer (its first attention-bearing layer, windows removed)."""
    for layer in model.layers:
        for part in layer.parts():
            if isinstance(part, MLA):
                return part
            if isinstance(part, FullAttention):
                return FullAttention(part.kv_heads, part.head_dim, part.v_head_dim)
    raise InputError(f"{model.name} has no attention layer to copy; give heads and head_dim to build one")


def all_full_attention(model: ModelSpec, attention: LayerKind | None = None) -> ModelSpec:
    """Every layer replaced by full attention: the dense baseline a hybrid is compared against."""
    layer = attention or attention_of(model)
    return model.with_layers(tuple(layer for _ in model.layers), name=f"{model.name} (all {len(model.layers)} full)")


PATTERN_LETTERS = {"F": "full attention", "S": "sliding window", "L": "linear/state", "N": "no cache"}


def _state_of(model: ModelSpec) -> LayerKind:
    """The model's constant-state layer: one of its own, else the one its architecture defines."""
    for layer in model.layers:
        for part in layer.parts():
            if part.state_tensors() and not part.grows:
                return part
    arch = ARCHITECTURES.get(model.model_type)
    if arch is None or arch.state is None:
        raise InputError(f"{model.name} ({model.model_type}) has no linear/state layer kind to put at 'L'")
    return arch.state(Cfg(model.config))


def patterned(model: ModelSpec, pattern: str, window: int | None = None) -> tuple[LayerKind, ...]:
    """Layers from a repeating pattern such as 'LLLF' (F full, S sliding, L the model's state layer, N none)."""
    letters = pattern.strip().upper()
    bad = sorted(set(letters) - set(PATTERN_LETTERS))
    if not letters or bad:
        raise InputError(
            f"layer pattern {pattern!r} must use only "
            + ", ".join(f"{k} ({v})" for k, v in PATTERN_LETTERS.items())
            + (f"; found {', '.join(bad)}" if bad else "")
        )
    kinds: dict[str, LayerKind] = {"N": NoCache()}
    if "F" in letters or "S" in letters:
        kinds["F"] = attention_of(model)
    if "S" in letters:
        base = kinds["F"]
        size = window or next((lay.token_cap for lay in model.layers if lay.token_cap), None)
        if not isinstance(base, FullAttention) or not size:
            raise InputError("a sliding layer (S) needs GQA attention and a window: set the sliding window too")
        kinds["S"] = SlidingWindow(base.kv_heads, base.head_dim, base.v_head_dim, window=size)
    if "L" in letters:
        kinds["L"] = _state_of(model)
    return tuple(kinds[letters[i % len(letters)]] for i in range(len(model.layers)))


def edited(
    model: ModelSpec,
    *,
    num_layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    window: int | None = None,
    pattern: str | None = None,
) -> ModelSpec:
    """The model with its depth, layer pattern or attention shape changed; the pattern repeats to the depth."""
    layers = list(model.layers)
    if num_layers is not None:
        if not 0 < num_layers <= MAX_LAYERS:
            raise InputError(f"layer count must be 1 … {MAX_LAYERS:,}, got {num_layers}")
        layers = [layers[i % len(layers)] for i in range(num_layers)]
    if pattern:
        layers = list(patterned(model.with_layers(tuple(layers)), pattern, window))

    def change(layer: LayerKind) -> LayerKind:
        if isinstance(layer, FullAttention):
            changes: dict[str, int] = {}
            if kv_heads is not None:
                changes["kv_heads"] = kv_heads
            if head_dim is not None:
                changes["head_dim"] = head_dim
                changes["v_head_dim"] = head_dim
            if window is not None and hasattr(layer, "window"):
                changes["window"] = window
            return replace(layer, **changes)
        if hasattr(layer, "members"):
            return replace(layer, members=tuple(change(m) for m in layer.members))
        return layer

    for value, what in ((kv_heads, "KV heads"), (head_dim, "head_dim"), (window, "window")):
        if value is not None and not 0 < value <= 1 << 24:
            raise InputError(f"{what} must be a positive integer, got {value}")
    return model.with_layers(tuple(change(layer) for layer in layers), name=f"{model.name} (edited)")
