"""The engines kvscope models, by the name used on the command line and in the app."""

from __future__ import annotations

from core.engines.base import CacheAccount, Engine, KindLine
from core.engines.hf_transformers import TransformersEngine
from core.engines.llamacpp import LlamaCppEngine
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError

ENGINES: dict[str, Engine] = {e.name: e for e in (TransformersEngine(), VllmEngine(), LlamaCppEngine())}


def engine_named(name: str) -> Engine:
    try:
        return ENGINES[name.strip().lower()]
    except KeyError:
        raise InputError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINES)}") from None


__all__ = ["ENGINES", "CacheAccount", "Engine", "KindLine", "engine_named"]
