"""What every engine answers: given a model, a KV dtype and a prompt length, which bytes does its cache hold."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from core.dtypes import CacheDtype, dtype_named
from core.errors import InputError
from core.memory.quant import WeightBytes, tensor_bytes, weights_bytes
from core.model.layers import LayerKind, Storage
from core.model.params import ParamCount, Tensor
from core.model.spec import ModelSpec, kind_label

T = TypeVar("T")
_DERIVED: dict[tuple[int, Hashable], tuple[ParamCount, object]] = {}
_DERIVED_KEEP = 32
_DERIVED_LOCK = threading.Lock()


def per_count(count: ParamCount, what: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, done once per parameter count and `what`: count_params returns one object per config and depth,
    so the per-tensor passes of a request (100,000 tensors for a 10,000-layer model) run once, not once per
    candidate card, layer count or plan. Keyed by the count's identity, which the entry keeps alive."""
    key = (id(count), what)
    hit = _DERIVED.get(key)
    if hit is not None and hit[0] is count:
        return hit[1]  # type: ignore[return-value]
    value = compute()
    with _DERIVED_LOCK:
        _DERIVED.pop(key, None)
        _DERIVED[key] = (count, value)
        while len(_DERIVED) > _DERIVED_KEEP:
            del _DERIVED[next(iter(_DERIVED))]
    return value


def sized_tensors(count: ParamCount, fmt: str, dtype_bytes: int) -> list[tuple[Tensor, int]]:
    """core.memory.quant.tensor_bytes, once per count and format."""
    return per_count(count, ("tensor_bytes", fmt, dtype_bytes), lambda: tensor_bytes(count, fmt, dtype_bytes))


def sized_weights(count: ParamCount, fmt: str, dtype_bytes: int) -> WeightBytes:
    """core.memory.quant.weights_bytes, once per count and format, from sized_tensors' (not a second pass)."""
    return per_count(
        count,
        ("weights_bytes", fmt, dtype_bytes),
        lambda: weights_bytes(count, fmt, dtype_bytes, sized_tensors(count, fmt, dtype_bytes)),
    )


@dataclass(frozen=True)
class KindLine:
    """All layers of one kind, for `batch` sequences of `context` tokens."""

    label: str
    count: int
    bytes_per_token: int  # per layer, per cached token
    tokens_held: int  # per layer, per sequence
    fixed_bytes: int  # per layer, per sequence
    token_bytes_total: int  # growing part, all layers of this kind, all sequences
    fixed_bytes_total: int  # constant part, likewise
    # what the totals multiply: the copies of the tokens held (streams) and of the fixed state (sequences, or
    # llama.cpp's slots); and how the tokens held come about, where an engine's rule makes them ("" if plain)
    token_copies: int = 1
    fixed_copies: int = 1
    held_note: str = ""

    @property
    def total(self) -> int:
        return self.token_bytes_total + self.fixed_bytes_total


@dataclass(frozen=True)
class CacheAccount:
    model: str
    engine: str
    kv_dtype: str
    context: int
    batch: int
    lines: tuple[KindLine, ...]

    @property
    def token_bytes(self) -> int:
        """Attention-like cache that grows with context (capped for windows)."""
        return sum(line.token_bytes_total for line in self.lines)

    @property
    def fixed_bytes(self) -> int:
        """Constant per-sequence state (conv + recurrent)."""
        return sum(line.fixed_bytes_total for line in self.lines)

    @property
    def total(self) -> int:
        return self.token_bytes + self.fixed_bytes


class Engine:
    """An engine is a set of storage rules applied to a model's layers."""

    name: str
    kv_dtypes: tuple[str, ...]
    rules_version: str  # which release the rules follow, and how they were checked

    def storage(self, model: ModelSpec, kv_dtype: str) -> Storage:
        raise NotImplementedError

    def tokens_held(self, layer: LayerKind, context: int) -> int:
        raise NotImplementedError

    def layer_storage(self, layer: LayerKind, storage: Storage) -> Storage:
        """The rules for one layer; engines that store some layers differently override this."""
        return storage

    def kv_dtype(self, model: ModelSpec, kv_dtype: str) -> CacheDtype:
        """The KV storage type a `--kv-dtype` choice means for this engine ('auto' = the model's dtype)."""
        choice = kv_dtype.strip().lower()
        if choice not in self.kv_dtypes:
            raise InputError(
                f"KV dtype {kv_dtype!r} is not available on {self.name}; choose one of: {', '.join(self.kv_dtypes)}"
            )
        return dtype_named(model.dtype if choice == "auto" else choice)

    def kv_bytes_per_token(self, model: ModelSpec, kv_dtype: str = "auto") -> int:
        """Bytes one more token adds across all growing layers (windows not yet full)."""
        storage = self.storage(model, kv_dtype)
        return sum(
            layer.bytes_per_token(self.layer_storage(layer, storage)) * len(at) for layer, at in model.census.items()
        )

    def fixed_bytes_per_sequence(self, model: ModelSpec, kv_dtype: str = "auto") -> int:
        storage = self.storage(model, kv_dtype)
        return sum(
            layer.fixed_bytes(self.layer_storage(layer, storage)) * len(at) for layer, at in model.census.items()
        )

    def seen(self, model: ModelSpec) -> ModelSpec:
        """The model as this engine loads it (some engines drop or force a window)."""
        return model

    def kind_line(
        self, model: ModelSpec, label: str, layers: list[LayerKind], storage: Storage, context: int, batch: int
    ) -> KindLine:
        """All `layers` of one kind (they share a spec), for `batch` sequences of `context` tokens."""
        first = layers[0]
        rules = self.layer_storage(first, storage)
        per_token = first.bytes_per_token(rules)
        held = self.tokens_held(first, context) if first.grows else 0
        fixed = first.fixed_bytes(rules)
        return KindLine(
            label=label,
            count=len(layers),
            bytes_per_token=per_token,
            tokens_held=held,
            fixed_bytes=fixed,
            token_bytes_total=len(layers) * per_token * held * batch,
            fixed_bytes_total=len(layers) * fixed * batch,
            token_copies=batch,
            fixed_copies=batch,
        )

    def account(self, model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto") -> CacheAccount:
        if context <= 0 or batch <= 0:
            raise InputError(f"context and batch must be positive (got context={context}, batch={batch})")
        model = self.seen(model)
        storage = self.storage(model, kv_dtype)
        grouped: dict[str, list[LayerKind]] = {}
        for layer, indices in model.census.items():  # labels in order of first appearance, as layer by layer
            grouped.setdefault(kind_label(layer) + _cap_label(layer), []).extend([layer] * len(indices))
        lines = tuple(self.kind_line(model, label, group, storage, context, batch) for label, group in grouped.items())
        return CacheAccount(model.name, self.name, self.kv_dtype(model, kv_dtype).name, context, batch, lines)


def _cap_label(layer: LayerKind) -> str:
    cap = layer.token_cap
    return f" [{cap:,}]" if cap else ""
