"""Reading a model's config.json and applying its architecture's defaults.

The raw dict a checkpoint ships may omit fields its architecture defaults (Gemma 3's head count, Qwen3.5's
`layer_types`). transformers' `AutoConfig.for_model` fills them the way the model itself will; `resolve` returns the
decoder's text config as a plain dict with those defaults applied. transformers imports torch on import, so the app
calls `resolve_isolated`, which does this once per config in one long-lived child process (core.model.resolver) and
keeps the answer on disk; the command line calls `resolve_cached`, which reads the same answers and resolves
in-process on a miss.

Fallback: a `model_type` that the installed transformers does not know but kvscope's architecture table does (e.g.
`kimi_k2`, which is DeepSeek-V3-shaped) is used as the raw dict, with `layer_types` derived the way transformers'
`DynamicCache` derives them. mamba_ssm's native format (`d_model`, `n_layer`, `ssm_cfg`) is translated to the
matching transformers fields first.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.files import cache_dir, write_json_atomic

MAX_CONFIG_BYTES = 4 << 20  # the largest real config.json (a VLM's, with label maps) is well under 1 MiB
MAX_DEPTH = 32  # real configs nest 3 or 4 levels; copying or hashing a deeper one could exhaust the stack
MAX_WIDTH = 1 << 22  # as core.model.architectures reads widths: no real width or head count comes near 4M
# past any real model (the deepest bundled: 118), and 10× cheaper per request than the 10,000 it was: a 9,990-layer
# what-if cost the Ollama page 5.7 s of server CPU; a list of 10^12 layer types would exhaust memory before any check
MAX_LAYERS = 1_000


class _TwoValues(Exception):  # not a ValueError: parse_json reads those as oversized numbers
    pass


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys each have one value (Python keeps the last of two, other readers the first)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and json.dumps(out[key], sort_keys=True) != json.dumps(value, sort_keys=True):  # NaN twice
            raise _TwoValues(key, out[key], value)
        out[key] = value
    return out


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "…"


def parse_json(text: str | bytes, origin: str, limit: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    """A config.json's text → dict, or an InputError saying where it is broken (never a MemoryError or a
    RecursionError). NaN and Infinity parse (Nemotron-H ships Infinity); sizes are checked as integers later.
    `limit`: the most characters (or bytes) read; the app's is lower (reading 4 MiB of nested JSON costs ~2 s)."""
    if len(text) > limit:
        raise InputError(
            f"{origin} is {len(text) / (1 << 20):.1f} MiB, more than a config.json's limit of "
            f"{limit / (1 << 20):g} MiB; give the checkpoint's config.json itself"
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            where = f"{err.reason} at byte {err.start}"
            raise InputError(f"{origin} is not UTF-8 text ({where}); save it as UTF-8") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark, as a file's bytes lose it (pasted text keeps it)
    try:
        data = json.loads(text, object_pairs_hook=_one_value_per_key)
    except _TwoValues as err:
        key, first, second = err.args
        raise InputError(
            f"{origin} gives {key!r} twice, {_short(first)} then {_short(second)}; JSON readers differ on which wins, "
            "so keep the one the checkpoint means"
        ) from None
    except json.JSONDecodeError as err:
        raise InputError(
            f"{origin} is not valid JSON ({err}); upload the checkpoint's config.json as it ships"
        ) from None
    except ValueError:  # an integer of 4,300+ digits, which int() refuses to convert
        raise InputError(f"{origin} holds a number of more than 4,300 digits, which no config field has") from None
    except RecursionError:
        raise InputError(f"{origin} is nested too deeply to be a config.json") from None
    if not isinstance(data, dict):
        raise InputError(f"{origin} holds a JSON {type(data).__name__}, not an object; a config.json is one object")
    if _depth(data) > MAX_DEPTH:
        raise InputError(f"{origin} is nested more than {MAX_DEPTH} levels deep, which no config.json is")
    return data


def _depth(data: Any) -> int:
    """How deeply lists and objects nest (iterative: the point is not to trust the stack with hostile input)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_layer_count(n: Any, key: str = "num_hidden_layers") -> None:
    """Before anything builds one entry per layer: a count past any real model is an error, not a MemoryError; and
    one below 1 says so, not in transformers' own validator's words."""
    if not isinstance(n, int) or isinstance(n, bool):
        return
    if n > MAX_LAYERS:
        raise InputError(f"{key}={n:,} is more than kvscope sizes ({MAX_LAYERS:,}); check the config")
    if n < 1:
        raise InputError(f"{key}={n:,} in the config: a model has at least one layer; check the config")


def from_mamba_ssm(raw: dict[str, Any]) -> dict[str, Any]:
    """mamba_ssm's own config format → the transformers fields of `mamba` or `mamba2`."""
    if "model_type" in raw or "ssm_cfg" not in raw or "d_model" not in raw:
        return raw
    ssm = raw.get("ssm_cfg") or {}
    if not isinstance(ssm, dict):
        raise InputError(f"mamba_ssm config: ssm_cfg must be an object, got {_shown(ssm)}")
    if raw.get("attn_layer_idx"):  # mamba_ssm's hybrids (mamba2attn): their attention layers have no mapping here
        raise InputError(
            f"mamba_ssm config with attention layers (attn_layer_idx {_shown(raw['attn_layer_idx'])}): kvscope maps "
            "only pure Mamba/Mamba2 configs of this format, and none of its engines loads it; give the model's "
            "transformers config.json (model_type) instead"
        )
    layer = ssm.get("layer", "Mamba1")
    hidden = _mamba_int(raw, "d_model", None)
    expand = _mamba_int(ssm, "expand", 2)
    common = {
        "hidden_size": hidden,
        "num_hidden_layers": raw.get("n_layer"),
        "vocab_size": raw.get("vocab_size"),
        "tie_word_embeddings": raw.get("tie_embeddings", True),
        "expand": expand,
        "conv_kernel": ssm.get("d_conv", 4),
        "_converted_from": "mamba_ssm",
    }
    if layer == "Mamba2":
        head_dim = _mamba_int(ssm, "headdim", 64)
        return common | {
            "model_type": "mamba2",
            "state_size": ssm.get("d_state", 128),
            "head_dim": head_dim,
            "num_heads": expand * hidden // head_dim,
            "n_groups": ssm.get("ngroups", 1),
        }
    return common | {
        "model_type": "mamba",
        "state_size": ssm.get("d_state", 16),
        "intermediate_size": expand * hidden,
    }


def _mamba_int(fields: dict[str, Any], key: str, default: int | None) -> int:
    """A width the translation computes with: a positive integer of sane size, or an InputError naming it (the
    other fields are checked where the translated config is sized)."""
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_WIDTH:
        raise InputError(f"mamba_ssm config: {key} must be a positive integer up to {MAX_WIDTH:,}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_DERIVED = ("layer_types", "num_hidden_layers", "head_dim", "hidden_size", "vocab_size", "max_position_embeddings")


def _dtype_name(value: Any) -> str | None:
    return None if value in (None, "auto") else str(value).removeprefix("torch.")


def _cleaned(raw: dict[str, Any]) -> dict[str, Any]:
    # kvscope's own annotations (provenance) start with "_" and are not config fields.
    return {k: v for k, v in raw.items() if not k.startswith("_") or k == "_name_or_path"}


def derived_layer_types(cfg: dict[str, Any]) -> list[str]:
    """transformers' rule for configs without `layer_types`: sliding if a window is set, chunked if a chunk is."""
    n = cfg.get("num_hidden_layers")
    check_layer_count(n)
    if not isinstance(n, int) or n <= 0:
        raise InputError(f"num_hidden_layers must be a positive integer, got {n!r}")
    if cfg.get("sliding_window") is not None:
        return ["sliding_attention"] * n
    if cfg.get("attention_chunk_size") is not None:
        return ["chunked_attention"] * n
    return ["full_attention"] * n


def resolve(raw: dict[str, Any]) -> dict[str, Any]:
    """The decoder's text config with the architecture's defaults applied, as a plain JSON-able dict."""
    from core.model.architectures import ARCHITECTURES  # the table of what kvscope can size

    # A deep copy: transformers edits nested dicts in place (a VLM's vision_config), which would change the
    # caller's config and so its cache key.
    raw = from_mamba_ssm(_cleaned(copy.deepcopy(raw)))
    model_type = raw.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError(
            f'config: model_type must be a string naming the architecture (e.g. "llama"), got {_shown(model_type)}'
        )
    if not model_type:
        raise InputError('config has no model_type; kvscope needs it to know the architecture (e.g. "llama")')
    text_raw = raw.get("text_config")
    for where in (raw, text_raw if isinstance(text_raw, dict) else {}):
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            check_layer_count(where.get(key), key)
        for key in ("num_attention_heads", "num_key_value_heads"):  # transformers divides by them
            heads = where.get(key)
            if isinstance(heads, int) and not isinstance(heads, bool) and heads < 1:
                raise InputError(f"{key}={heads} in the config: a model has at least one attention head")
    top_dtype = _dtype_name(raw.get("dtype") or raw.get("torch_dtype"))

    from transformers import CONFIG_MAPPING

    if model_type in CONFIG_MAPPING:
        fields = {k: v for k, v in raw.items() if k != "model_type"}
        try:
            config, text = _transformers_text(model_type, fields)
            out = json.loads(text.to_json_string(use_diff=False))
            # Some configs derive fields in properties (Mamba's layer_types, Nemotron-H's num_hidden_layers),
            # which to_json_string leaves out; read them from the object. layer_types there is canonical.
            for key in _DERIVED:
                value = getattr(text, key, None)
                if value is not None and (key == "layer_types" or out.get(key) is None):
                    out[key] = list(value) if key == "layer_types" else value
        except InputError:
            raise
        except Exception as err:  # transformers' validators raise many types; the message is what matters
            reason = _one_line(err)
            culprit = _culprit(model_type, fields, reason)
            where = f" (traced to its field {culprit}; check its value)" if culprit else ""
            raise InputError(f"transformers rejected this {model_type} config: {reason}{where}") from None
        top_dtype = top_dtype or _dtype_name(getattr(config, "dtype", None))
        if text is not config and "tie_word_embeddings" in raw:
            out["tie_word_embeddings"] = raw["tie_word_embeddings"]
    elif model_type in ARCHITECTURES:
        text_raw = raw.get("text_config")
        if text_raw is not None and not isinstance(text_raw, dict):  # not read in place of the top level unsaid
            raise InputError(f"{model_type} config: text_config must be an object, got {_shown(text_raw)}")
        out = dict(text_raw) if isinstance(text_raw, dict) else dict(raw)
        out.setdefault("model_type", model_type)
    else:
        raise InputError(
            f"unknown model_type {model_type!r}: neither kvscope nor the installed transformers knows this "
            "architecture, so its cache layout cannot be derived. Supported: " + ", ".join(sorted(ARCHITECTURES))
        )
    if not out.get("layer_types"):
        out["layer_types"] = derived_layer_types(out)
    out["dtype"] = _dtype_name(out.get("dtype")) or top_dtype
    out["_top_model_type"] = model_type
    return out


def _transformers_text(model_type: str, fields: dict[str, Any]) -> tuple[Any, Any]:
    """transformers' config object for these fields, and its decoder's text config."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, **fields)
    return config, config.get_text_config(decoder=True)


MAX_BLAMED_FIELDS = 300  # configs have 20 to 60 top-level fields; each try costs about 1 ms
BLAME_BUDGET_S = 1.0


def _failure(model_type: str, fields: dict[str, Any]) -> str | None:
    """transformers' message for these fields, on one line; None when they resolve."""
    try:
        _transformers_text(model_type, fields)[1].to_json_string(use_diff=False)
    except Exception as err:
        return _one_line(err)
    return None


def _one_line(err: Exception) -> str:
    """transformers' message on one line (a front end shows it as a sentence, the command line as one line on
    stderr); _culprit compares failures by it, so both sides must read it alike."""
    return " ".join(str(err).split())


def _without_one(fields: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, the fields without it) for each key."""
    for key in fields:
        yield key, {k: v for k, v in fields.items() if k != key}


def _culprit(model_type: str, fields: dict[str, Any], reason: str, budget_s: float = BLAME_BUDGET_S) -> str | None:
    """The field a failure of transformers' comes from when its message names none ("list index out of range" for a
    dtype given as a list, "'str' object has no attribute 'to_dict'" for quantization_config "awq"): the first field
    without which that failure goes (the config resolves, or fails on another field), inside a sub-config
    (text_config.torch_dtype) where that is where it lies. None when the message names a field itself, or no one
    field is to blame within the budget."""
    if len(fields) > MAX_BLAMED_FIELDS or any(f"'{key}'" in reason or f"`{key}`" in reason for key in fields):
        return None
    deadline = time.monotonic() + budget_s
    for key, rest in _without_one(fields):
        if time.monotonic() > deadline:
            return None
        if _failure(model_type, rest) == reason:
            continue
        inner = fields[key]
        if isinstance(inner, dict) and key.endswith("_config") and len(inner) <= MAX_BLAMED_FIELDS:
            for sub, kept in _without_one(inner):
                if time.monotonic() < deadline and _failure(model_type, fields | {key: kept}) != reason:
                    return f"{key}.{sub}"
        return key
    return None


_CACHE_DIR = cache_dir() / "resolved"


def cache_key(raw: dict[str, Any]) -> str:
    from importlib.metadata import version

    blob = json.dumps(raw, sort_keys=True, default=str) + version("transformers")
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


# Bundled presets ship already resolved (written by `make presets`, checked by tests/test_presets.py), so the app's
# first render needs no child process. The key includes transformers' version: after an upgrade they are recomputed.
SHIPPED_DIR = Path(__file__).resolve().parent / "presets" / "resolved"


def _cached(key: str) -> dict[str, Any] | None:
    for folder in (SHIPPED_DIR, _CACHE_DIR):
        try:
            return json.loads((folder / f"{key}.json").read_text())
        except (OSError, json.JSONDecodeError):
            pass
    return None


def _store(key: str, out: dict[str, Any]) -> None:
    write_json_atomic(_CACHE_DIR / f"{key}.json", out)  # a read-only home only costs the next run a re-resolution


def resolve_cached(raw: dict[str, Any]) -> dict[str, Any]:
    """`resolve`, answered from the shipped presets or the disk cache when it can: the command line then imports
    neither transformers nor torch (2+ s) for a bundled preset or a config it has seen before."""
    key = cache_key(raw)
    out = _cached(key)
    if out is None:
        out = json.loads(json.dumps(resolve(raw)))  # as a cache hit returns it: plain JSON types
        _store(key, out)
    return out


def resolve_isolated(raw: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    """`resolve` run in the app's long-lived resolver process (transformers pulls in torch, which stays out of the
    server; core.model.resolver) and cached on disk by content."""
    from core.model.resolver import RESOLVER

    key = cache_key(raw)
    out = _cached(key)
    if out is not None:
        return out
    out = RESOLVER.resolve(raw, timeout)
    _store(key, out)
    return out
