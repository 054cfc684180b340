"""The engines kvscope models, by the name used on the command line and in the app."""

from __future__ import annotations

from dataclasses import fields

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


def configured(name: str, frontend: str | None = None, **options: object) -> Engine:
    """The engine with those `options` it has; None keeps its default and options of other engines are ignored,
    so one set of choices (the command line's, the app's) serves every engine. `frontend` picks the defaults of a
    llama.cpp front end (llama-server, llama-cli, library) before the options apply."""
    engine = engine_named(name)
    if frontend is not None and isinstance(engine, LlamaCppEngine):
        engine = LlamaCppEngine.frontend(frontend)
    own = getattr(engine, "options", None)
    if own is None:
        return engine
    known = {f.name for f in fields(own)}
    chosen = {key: value for key, value in options.items() if value is not None and key in known}
    return engine.with_options(**chosen) if chosen else engine  # type: ignore[attr-defined]


__all__ = ["ENGINES", "CacheAccount", "Engine", "KindLine", "configured", "engine_named"]
