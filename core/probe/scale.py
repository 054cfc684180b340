"""Scaled-down copies of a config: fewer layers, the same layer kinds, widths and kind mix.

A probe on a CPU (or a GPU too small for the model) measures a copy with fewer layers; every layer keeps its
widths, so per-layer cache bytes are the real model's and the prediction is made for the same scaled config.

Works on the raw config.json dict (no transformers needed) for the fields that spell a layer pattern:
`layer_types`, `hybrid_override_pattern`, `layers_block_type`, `full_attention_interval`, `sliding_window_pattern`,
`attn_layer_period`/`attn_layer_offset`. Other architectures (Gemma 2's alternation, LFM2's `full_attn_idxs`) fall
back to transformers' resolved `layer_types` (which imports torch: call that path only in the worker or in tests).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from core.errors import InputError

# Lists of layer indices (not one entry per layer): remapped to the kept layers' new positions.
_INDEX_LISTS = ("full_attn_idxs", "attn_layer_indices", "mlp_only_layers")


@dataclass(frozen=True)
class Scaled:
    raw: dict[str, Any]  # the scaled raw config (a deep copy; the input is never changed)
    layers_from: int
    layers_to: int
    kept: tuple[int, ...]  # indices of the original layers kept, in order
    exact: bool  # the kind mix is the original's exactly (False: rounded, said in `note`)
    note: str


def text_part(raw: dict[str, Any]) -> dict[str, Any]:
    """The dict that holds the decoder's layer fields (a VLM's `text_config`, else the config itself)."""
    text = raw.get("text_config")
    return text if isinstance(text, dict) and "num_hidden_layers" not in raw else raw


def layer_pattern(raw: dict[str, Any]) -> list[str]:
    """One token per layer naming its kind, read from whichever field the architecture uses."""
    cfg = text_part(raw)
    n = cfg.get("num_hidden_layers")
    if isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        return [str(t) for t in cfg["layer_types"]]
    if isinstance(cfg.get("hybrid_override_pattern"), str) and cfg["hybrid_override_pattern"]:
        return list(cfg["hybrid_override_pattern"])
    if isinstance(cfg.get("layers_block_type"), list) and cfg["layers_block_type"]:
        return [str(t) for t in cfg["layers_block_type"]]
    if not isinstance(n, int) or n <= 0:
        raise InputError(f"num_hidden_layers must be a positive integer to scale a model, got {n!r}")
    if isinstance(cfg.get("full_attention_interval"), int):
        k = cfg["full_attention_interval"]
        return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    if isinstance(cfg.get("sliding_window_pattern"), int):
        k = cfg["sliding_window_pattern"]
        return ["full_attention" if (i + 1) % k == 0 else "sliding_attention" for i in range(n)]
    if isinstance(cfg.get("attn_layer_period"), int):
        period, offset = cfg["attn_layer_period"], cfg.get("attn_layer_offset", 0)
        return ["attention" if i % period == offset else "mamba" for i in range(n)]
    from core.model.config import resolve  # imports transformers (and torch): only reached for implicit patterns

    return [str(t) for t in resolve(raw)["layer_types"]]


def _period(pattern: list[str]) -> int:
    """The shortest block that, repeated at least twice (the last copy possibly cut short), spells the whole
    pattern. Once is no repeat: LFM2-1.2B's 16 layers would otherwise 'repeat' a 15-layer block."""
    for p in range(1, len(pattern) // 2 + 1):
        if all(pattern[i] == pattern[i % p] for i in range(len(pattern))):
            return p
    return len(pattern)


def _spread(indices: list[int], k: int) -> list[int]:
    """k of `indices`, evenly spaced through them."""
    return [indices[(2 * j + 1) * len(indices) // (2 * k)] for j in range(k)]


def _choose(pattern: list[str], n: int) -> tuple[list[int], bool]:
    total = len(pattern)
    period = _period(pattern)
    if period < total:
        # A repeating block (Qwen3.5's 3 linear + 1 full, Gemma 3's 5 sliding + 1 full): keep whole blocks from
        # the start, so period-based fields (full_attention_interval, attn_layer_period, ...) stay valid unchanged.
        return list(range(min(total, math.ceil(n / period) * period))), True
    counts = Counter(pattern)
    unit = total // math.gcd(*counts.values())
    if unit < total:
        keep = {kind: c * math.ceil(n / unit) * unit // total for kind, c in counts.items()}
        exact = True
    else:
        # No exact smaller mix exists: round each kind's share, keeping at least one layer of every kind.
        size = max(n, len(counts))
        shares = {kind: c * size / total for kind, c in counts.items()}
        keep = {kind: max(1, int(s)) for kind, s in shares.items()}
        for kind in sorted(shares, key=lambda k: shares[k] - int(shares[k]), reverse=True):
            if sum(keep.values()) >= size:
                break
            keep[kind] += 1
        exact = False
    chosen: list[int] = []
    for kind, k in keep.items():
        chosen += _spread([i for i, t in enumerate(pattern) if t == kind], k)
    return sorted(chosen), exact


def scale_layers(raw: dict[str, Any], n: int) -> Scaled:
    """A copy of `raw` with about `n` layers (rounded up to keep the kind mix), every layer's widths unchanged."""
    if n <= 0:
        raise InputError(f"--scale-layers must be positive, got {n}")
    pattern = layer_pattern(raw)
    total = len(pattern)
    out = copy.deepcopy(raw)
    if n >= total:
        return Scaled(out, total, total, tuple(range(total)), True, f"full size ({total} layers)")
    kept, exact = _choose(pattern, n)
    if len(kept) >= total:
        note = f"full size ({total} layers): no smaller copy keeps the mix"
        return Scaled(out, total, total, tuple(range(total)), True, note)
    cfg = text_part(out)
    new_pos = {old: new for new, old in enumerate(kept)}
    for key, value in list(cfg.items()):
        per_layer = "layer" in key or key.endswith("block_type")  # layer_types, layers_block_type, no_rope_layers
        if per_layer and isinstance(value, list) and len(value) == total and key not in _INDEX_LISTS:
            cfg[key] = [value[i] for i in kept]
        elif key in _INDEX_LISTS and isinstance(value, list):
            cfg[key] = [new_pos[i] for i in value if i in new_pos]
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        cfg["hybrid_override_pattern"] = "".join(cfg["hybrid_override_pattern"][i] for i in kept)
    if (
        kept != list(range(len(kept)))
        and "layer_types" not in cfg
        and not any(isinstance(cfg.get(k), list | str) for k in ("hybrid_override_pattern", "layers_block_type"))
    ):
        cfg["layer_types"] = [pattern[i] for i in kept]  # an implicit pattern, subsampled: spell it out
    cfg["num_hidden_layers"] = len(kept)
    mix = ", ".join(f"{c}× {k}" for k, c in Counter(pattern[i] for i in kept).items())
    whole = ", ".join(f"{c}× {k}" for k, c in Counter(pattern).items())
    how = f"the model's mix is {whole}" if exact else f"the model's {whole} rounded: no smaller exact copy"
    asked = "" if len(kept) == n else f"; {n} asked, and {len(kept)} is the nearest copy that keeps the mix"
    note = f"scaled down: {len(kept)} of {total} layers ({mix}; {how}){asked}, widths unchanged"
    return Scaled(out, total, len(kept), tuple(kept), exact, note)


def smallest_exact(raw: dict[str, Any], at_least: int = 2) -> int:
    """The fewest layers (≥ at_least where possible) a copy can have while keeping the kind mix."""
    pattern = layer_pattern(raw)
    return len(_choose(pattern, min(at_least, len(pattern)))[0])
