"""Sum the tensors a real cache object holds: the measurement every prediction is checked against.

Duck-typed (anything with `numel` and `element_size` is a tensor), so importing this module never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOOKKEEPING_BYTES = 64  # integer position counters and window scalars: a few int64s per layer, not cache


@dataclass(frozen=True)
class Held:
    path: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int  # numel × element size: what the cache logically holds
    storage_bytes: int  # the buffer it pins; larger for a slice of a bigger tensor (0 when another view counted it)


def _is_tensor(obj: Any) -> bool:
    return hasattr(obj, "numel") and hasattr(obj, "element_size") and hasattr(obj, "shape")


def walk(cache: Any) -> list[Held]:
    """Every distinct tensor reachable from `cache` through attributes, dicts, lists and tuples."""
    seen: set[int] = set()
    storages: set[int] = set()
    found: list[Held] = []

    def visit(obj: Any, path: str) -> None:
        if obj is None or isinstance(obj, str | int | float | bool | type) or id(obj) in seen:
            return
        seen.add(id(obj))
        if _is_tensor(obj):
            storage = obj.untyped_storage() if obj.numel() else None
            pinned = 0
            if storage is not None and storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                pinned = storage.nbytes()
            dtype = str(obj.dtype).removeprefix("torch.")
            found.append(Held(path, tuple(obj.shape), dtype, obj.numel() * obj.element_size(), pinned))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                visit(v, f"{path}[{k!r}]")
        elif isinstance(obj, list | tuple):
            for i, v in enumerate(obj):
                visit(v, f"{path}[{i}]")
        elif hasattr(obj, "__dict__"):
            for k, v in vars(obj).items():
                if k != "config":
                    visit(v, f"{path}.{k}")

    visit(cache, "cache")
    return found


def is_bookkeeping(held: Held, floor: int = BOOKKEEPING_BYTES) -> bool:
    """Small integer tensors (lengths, window sizes); cached activations are always floating point."""
    return held.nbytes < floor and not held.dtype.startswith(("float", "bfloat"))


def cache_bytes(cache: Any) -> int:
    """Bytes of cache tensors (numel × element size), bookkeeping left out."""
    return sum(h.nbytes for h in walk(cache) if not is_bookkeeping(h))


def pinned_bytes(cache: Any) -> int:
    """Bytes of the buffers the cache keeps alive. transformers' sliding layers slice the whole prefill's K/V,
    so right after a prefill this exceeds `cache_bytes` until the first decode step copies the window out."""
    return sum(h.storage_bytes for h in walk(cache) if not is_bookkeeping(h))
