"""Where a model's config comes from (bundled preset, local file, Hugging Face Hub) and how it becomes a ModelSpec."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.dtypes import dtype_named
from core.errors import InputError
from core.files import read_regular_file
from core.memory.gguf_hub import GGUFName, base_model, gguf_name, read_hub_gguf, shape_mismatch
from core.model.architectures import Cfg, build_layers
from core.model.config import MAX_CONFIG_BYTES, parse_json, resolve_cached, resolve_isolated
from core.model.spec import ModelSpec

PRESET_DIR = Path(__file__).resolve().parent / "presets"
DEFAULT_MODEL = "Qwen/Qwen3.5-9B"
# the Hub's ids are ASCII (\w alone takes any letter), each part at most 96 characters (huggingface_hub's check, whose
# message repeats the whole id: a 500-character one came back twice); \Z, as $ also matches before a final newline
_REPO_ID = re.compile(r"^[\w.-]{1,96}/[\w.-]{1,96}\Z", re.ASCII)


@lru_cache(maxsize=1)
def presets() -> dict[str, Path]:
    """Bundled configs by Hugging Face repo id (file `org__name.json` is repo `org/name`)."""
    return {p.stem.replace("__", "/", 1): p for p in sorted(PRESET_DIR.glob("*.json"))}


def preset_path(name: str) -> Path | None:
    table = presets()
    if name in table:
        return table[name]
    lowered = {k.lower(): v for k, v in table.items()}
    by_tail = {k.split("/", 1)[1].lower(): v for k, v in table.items()}
    return lowered.get(name.lower()) or by_tail.get(name.lower())


HUB_TIMEOUT_S = 5.0  # one HEAD request: past this the Hub counts as unreachable and only the local cache is read


def _hub_reachable(repo_id: str, token: str | None) -> bool:
    """One HEAD with a short timeout and no retries. hf_hub_download alone retries a failed connection five times
    with back-off (about 23 s) before it looks in the cache: too long for a page, which says at once instead."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url, is_offline_mode
    from huggingface_hub.errors import HTTPError

    if is_offline_mode():
        return False
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT_S, token=token)
    except HTTPError:  # httpx's connection errors and time-outs: nothing answered
        return False
    except Exception:  # the Hub answered (missing, gated, …): hf_hub_download raises the specific error
        return True
    return True


def fetch_hub_config(repo_id: str) -> dict[str, Any]:
    """config.json from the Hub or its local cache; honours HF_HUB_OFFLINE and HF_TOKEN. Never runs repo code.
    An unreachable Hub costs one short request, then the local cache answers."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        HTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    token = os.environ.get("HF_TOKEN") or None
    try:
        online = _hub_reachable(repo_id, token)
        path = hf_hub_download(
            repo_id, "config.json", token=token, local_files_only=not online, etag_timeout=HUB_TIMEOUT_S
        )
    except GatedRepoError:
        raise InputError(f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise InputError(f"no Hugging Face repo {repo_id!r} (or it is private: set HF_TOKEN)") from None
    except LocalEntryNotFoundError:  # before EntryNotFoundError: it is a subclass
        raise InputError(
            f"{repo_id}: the Hub cannot be reached (offline or HF_HUB_OFFLINE=1) and its config.json is not in the "
            "local Hugging Face cache; pick a bundled preset or upload the config.json"
        ) from None
    except EntryNotFoundError:
        raise InputError(f"{repo_id} has no config.json; upload one instead") from None
    except HFValidationError as err:
        raise InputError(f"{repo_id!r} is not a valid Hub repo id ({err})") from None
    except (HfHubHTTPError, HTTPError, OSError) as err:  # HTTPError: the connection dropped mid-download
        raise InputError(f"{repo_id}: could not fetch config.json ({err}); try again or upload it") from None
    return parse_json(_read_config(Path(path)), f"{repo_id}/config.json")


def _read_config(path: Path) -> bytes:
    """A config file's bytes: a regular file only (a FIFO or a device would block or never end), refused when too
    large to be a config before it is read into memory."""
    return read_regular_file(path, MAX_CONFIG_BYTES, "a config.json")


def config_label(raw: dict[str, Any]) -> str | None:
    """The model a config.json names in `_name_or_path` when that is a Hub id (not a path on whoever saved it)."""
    named = raw.get("_name_or_path")
    return named if isinstance(named, str) and _REPO_ID.match(named) and not named.startswith(".") else None


def load_raw(source: str, prefer_hub: bool = False, local_files: bool = True) -> tuple[str, dict[str, Any], str]:
    """(name, raw config, where it came from) for a preset name, a config.json path or a Hub repo id.

    A bundled preset wins unless `prefer_hub`; then the Hub is tried first and the bundled copy is the fallback.
    Without `local_files` (the app: it runs on a shared server) a source is a preset or a Hub id whatever its
    shape, and the file system is never consulted: `core/cli.py` is asked of the Hub, not opened.
    """
    source = source.strip()
    if not source:
        raise InputError("no model given; name a preset (e.g. Qwen/Qwen3.5-9B), a repo id or a config.json path")
    bundled = preset_path(source)
    if bundled and not prefer_hub:
        return bundled.stem.replace("__", "/", 1), parse_json(bundled.read_bytes(), bundled.name), "bundled preset"
    path = Path(source).expanduser()
    if local_files and (path.suffix == ".json" or path.is_file()):
        if not path.exists():
            raise InputError(f"no file {source}; give a config.json path, a preset or a Hub repo id")
        return path.stem, parse_json(_read_config(path), str(path)), f"file {path}"
    hub_gguf = gguf_name(source)
    if hub_gguf is not None:
        repo, tag = hub_gguf.repo_id, hub_gguf.tag
        if not tag and not repo.lower().endswith("gguf"):  # a model page's address (huggingface.co/org/name)
            return load_raw(repo, prefer_hub=prefer_hub, local_files=False)
        try:
            return _gguf_config(hub_gguf, prefer_hub)
        except InputError as err:
            if not preset_path(repo):
                raise
            raise InputError(
                f"{err}. {repo} itself is a bundled preset: give {repo} and the format as --weights "
                f"{(tag or 'Q4_K_M').lower()} (the app: its Weights box)"
            ) from None
    if not _REPO_ID.match(source):
        what = "a preset, a file" if local_files else "a bundled preset"
        raise InputError(
            f"{source[:80]!r} is not {what} or a Hub repo id (org/name, each at most 96 ASCII letters, digits, '-', "
            "'_' or '.')"
        )
    try:
        return source, fetch_hub_config(source), "Hugging Face Hub"
    except InputError as err:
        if bundled:
            return source, parse_json(bundled.read_bytes(), bundled.name), f"bundled preset ({err})"
        raise


GGUF_ORIGIN = "GGUF "  # how load_raw's origin begins for a Hub GGUF name: load_model then notes which config


def _gguf_config(name: GGUFName, prefer_hub: bool) -> tuple[str, dict[str, Any], str]:
    """A Hub GGUF's architecture: the config.json of the model its header names (core.memory.gguf_hub.base_model),
    as a bundled preset or from the Hub; never a local file, whatever the header says."""
    found = read_hub_gguf(name)
    base, key = base_model(found.metadata)
    if gguf_name(base) is not None:
        raise InputError(f"{name}: its {key} names {base}, itself a GGUF repo; give the model's config instead")
    _, raw, origin = load_raw(base, prefer_hub=prefer_hub, local_files=False)
    mismatch = shape_mismatch(found.metadata, raw)
    warning = f"; warning: {mismatch}" if mismatch else ""
    return str(name), raw, f"{GGUF_ORIGIN}{found.summary()}: config of {base} ({origin}), named by its {key}{warning}"


# a model's sizes, each with the other names configs give it. transformers writes a config without the values equal
# to its class's defaults (Gemma 3's text_config has no num_attention_heads: 8 is the default), so one missing size is
# normal; a config giving neither the layer count nor the hidden size describes no model, and its defaults (for a bare
# {"model_type": "llama"}, a whole 7B Llama) are nobody's
SIZES = {
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "hidden_size": ("d_model", "n_embd", "dim"),
    "num_attention_heads": ("n_head", "n_heads", "num_heads"),
    "vocab_size": (),
}


def defaulted_sizes(raw: dict[str, Any], resolved: dict[str, Any]) -> list[str]:
    """The sizes the config leaves out and the resolution filled in (with its value), in SIZES' order."""
    given = [raw, raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}]
    return [
        f"{key} {resolved[key]:,}"
        for key, aliases in SIZES.items()
        if isinstance(resolved.get(key), int) and not any(k in where for where in given for k in (key, *aliases))
    ]


def model_from_config(raw: dict[str, Any], name: str, isolated: bool = False) -> ModelSpec:
    """A ModelSpec from a raw config.json dict. Both ways read the shipped/cached resolution first; on a miss
    `isolated` resolves in a child process (keeps torch out of a long-lived server), else in this process."""
    resolved = resolve_isolated(raw) if isolated else resolve_cached(raw)
    model = model_from_resolved(resolved, name)
    filled = defaulted_sizes(raw, resolved)
    if not {"num_hidden_layers", "hidden_size"} <= {f.split()[0] for f in filled}:
        return model
    note = (
        f"the config gives neither its layer count nor its hidden size, so these figures are transformers' defaults "
        f"for {resolved.get('model_type')} ({', '.join(filled)}), not a model's; give the checkpoint's config.json"
    )
    return replace(model, notes=(*model.notes, note))


def model_from_resolved(cfg: dict[str, Any], name: str) -> ModelSpec:
    c = Cfg(cfg)
    notes = []
    dtype = cfg.get("dtype")
    if dtype is None:
        dtype = "bfloat16"
        notes.append("the config names no dtype; bf16 assumed")
    ssm = cfg.get("mamba_ssm_dtype")
    return ModelSpec(
        name=name,
        model_type=c.model_type,
        layers=build_layers(cfg),
        dtype=_named_dtype(dtype, "dtype (or torch_dtype)"),
        hidden_size=c.int("hidden_size", "d_model"),
        vocab_size=c.int("vocab_size"),
        max_context=c.int("max_position_embeddings", hi=1 << 34) if c.has("max_position_embeddings") else None,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        ssm_dtype=_named_dtype(ssm, "mamba_ssm_dtype") if ssm else None,
        notes=tuple(notes),
        config=cfg,
    )


def _named_dtype(value: Any, key: str) -> str:
    try:
        return dtype_named(value).name
    except InputError as err:
        raise InputError(f"config field {key}: {err}") from None


def load_model(source: str, isolated: bool = False, prefer_hub: bool = False, local_files: bool = True) -> ModelSpec:
    name, raw, origin = load_raw(source, prefer_hub=prefer_hub, local_files=local_files)
    model = model_from_config(raw, name, isolated=isolated)
    return replace(model, notes=(*model.notes, origin)) if origin.startswith(GGUF_ORIGIN) else model
