"""What a probe is asked to do and what it reports: plain frozen data, JSON both ways (it crosses a process)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core.errors import InputError
from core.units import format_tokens, parse_tokens

BACKENDS = ("transformers", "vllm")
DEVICES = ("auto", "cpu", "cuda")
WEIGHTS = ("auto", "random")
RANDOM_LABEL = "random weights: cache size and speed are real, output text is not"


# A comma separates contexts, except one grouping thousands as a token count is written (64,000: a digit, then
# exactly three): split there, "64,000" was the contexts 64 and 0, and was refused as "got '000'".
_CONTEXT_SEPARATOR = re.compile(r",(?!(?<=\d,)\d{3}(?!\d))")
MAX_QUOTED = 40  # of a piece that is not a token count, the characters a message repeats


def parse_contexts(text: str) -> tuple[int, ...]:
    """The contexts typed in a box ("512, 2k, 64,000"), distinct and ascending; an InputError names a piece that
    cannot be read by at most its first MAX_QUOTED characters."""
    contexts = set()
    for piece in filter(None, (p.strip() for p in _CONTEXT_SEPARATOR.split(text))):
        if len(piece) > MAX_QUOTED and not piece.isdigit():  # a long number: parse_tokens says it has too many digits
            raise InputError(f"{piece[:MAX_QUOTED]!r}… is not a token count; separate contexts by commas: 1k, 4k")
        contexts.add(parse_tokens(piece))
    return tuple(sorted(contexts))


@dataclass(frozen=True)
class ProbeRequest:
    model: str  # preset name, Hub repo id, config.json path or a local checkpoint folder
    local_files: bool = True  # False: `model` is a preset or Hub id only, never opened as a path (the app's links)
    name: str = ""  # what results call the model (an uploaded config's label); "" = the name kvscope resolves
    contexts: tuple[int, ...] = (4096,)
    backend: str = "transformers"
    device: str = "auto"
    decode_steps: int = 32
    scale_layers: int | None = None  # None: full size when it fits (on CPU: ≤ 1.5B and in time), else a small copy
    weights: str = "auto"  # auto: real weights when already on disk (never downloaded), else random
    dtype: str = "auto"  # compute dtype (also the transformers KV dtype); auto = the config's
    kv_dtype: str = "auto"  # vLLM only: its kv_cache_dtype
    batch: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    compile: bool = True  # CUDA decode: static cache + torch.compile (CUDA graphs); False forces eager
    seed: int = 0
    debug: str = ""  # tests only: "sleep:SECONDS" before starting, "crash" after the first context, "oom" at once

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError(f"unknown backend {self.backend!r}; choose one of: {', '.join(BACKENDS)}")
        if self.device not in DEVICES:
            raise InputError(f"unknown device {self.device!r}; choose one of: {', '.join(DEVICES)}")
        if self.weights not in WEIGHTS:
            raise InputError(f"weights must be one of {', '.join(WEIGHTS)}, got {self.weights!r}")
        if not self.contexts:
            raise InputError("contexts: give at least one token count, e.g. 512, 2k")
        if any(int(c) <= 0 for c in self.contexts):
            raise InputError(f"contexts must be positive token counts, got {', '.join(map(str, self.contexts))}")
        if self.decode_steps < 2 or self.batch <= 0 or self.tensor_parallel_size <= 0:
            raise InputError("decode steps must be ≥ 2; batch and tensor parallel size positive")
        if self.scale_layers is not None and self.scale_layers <= 0:
            raise InputError(f"--scale-layers must be positive, got {self.scale_layers}")
        object.__setattr__(self, "contexts", tuple(int(c) for c in self.contexts))

    def check_limit(self, limit: int | None) -> None:
        """Refuse a context past the model's own limit before a process allocates its cache (a 100M-token cache
        is terabytes)."""
        over = [c for c in self.contexts if limit and c > limit]
        if over:
            raise InputError(
                f"context {format_tokens(max(over))} is above the model's limit of {format_tokens(limit or 0)} "
                "tokens; probe at or below it"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeRequest:
        known = {f.name for f in fields(cls)}
        return cls(**{k: tuple(v) if k == "contexts" else v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ContextResult:
    """One context length: kvscope's prediction beside what the real cache and clock said."""

    context: int
    predicted_cache_bytes: int | None
    measured_cache_bytes: int | None  # summed from the real cache object (transformers); None under vLLM
    peak_bytes: int | None  # torch.cuda.max_memory_allocated over the prefill; None on CPU (see peak_source)
    peak_source: str
    prefill_s: float | None
    prefill_tok_s: float | None
    decode_tok_s: float | None
    decode_mode: str  # "static+compile", "static", "eager", "vllm"
    pinned_cache_bytes: int | None = None  # buffers the cache keeps alive (a sliding layer pins the whole prompt)
    kv_capacity_tokens: int | None = None  # vLLM: "GPU KV cache size: N tokens"
    max_concurrency: float | None = None  # vLLM: "Maximum concurrency for L tokens per request: X"
    predicted_max_concurrency: float | None = None

    @property
    def ratio(self) -> float | None:
        """measured ÷ predicted; 1.0 is an exact prediction."""
        if not self.predicted_cache_bytes or self.measured_cache_bytes is None:
            return None
        return self.measured_cache_bytes / self.predicted_cache_bytes

    @property
    def concurrency_ratio(self) -> float | None:
        """vLLM's reported maximum concurrency ÷ kvscope's for the same free memory; 1.0 is exact."""
        if not self.predicted_max_concurrency or self.max_concurrency is None:
            return None
        return self.max_concurrency / self.predicted_max_concurrency

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ProbeResult:
    status: str  # "ok", "timeout", "cancelled", "error"
    request: ProbeRequest
    contexts: tuple[ContextResult, ...] = ()
    model: str = ""  # the name kvscope resolved the request's model to
    device: str = ""  # what ran: "cpu", "cuda:0 (NVIDIA H200)"
    weights: str = ""  # RANDOM_LABEL or "real weights from <path>"
    scale: str = ""  # "full size (36 layers)" or "scaled down: 4 of 32 layers (...)"
    decode_mode: str = ""
    dtype: str = ""  # the compute dtype the run used (the request's "auto" resolved), also the prediction's KV dtype
    weights_bytes: int | None = None  # parameters as loaded: with cache bytes, what each decode step reads
    notes: tuple[str, ...] = ()
    env: dict[str, Any] = field(default_factory=dict)  # host, GPU, driver, library versions
    error: str | None = None
    elapsed_s: float = 0.0
    log_tail: str = ""  # the child's last stderr lines: what a crash said
    results_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["request"] = self.request.to_dict()
        out["contexts"] = [c.to_dict() for c in self.contexts]
        return out
