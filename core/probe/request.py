"""What a probe is asked to do and what it reports: plain frozen data, JSON both ways (it crosses a process)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core.engines import configured
from core.engines.vllm_engine import VllmEngine, VllmOptions
from core.errors import InputError
from core.units import format_tokens, parse_tokens

BACKENDS = ("transformers", "vllm")
DEVICES = ("auto", "cpu", "cuda")
WEIGHTS = ("auto", "random")
# A CPU probe's KV pool, in requests at max_model_len: left unset, vLLM's CPU backend takes gpu_memory_utilization of
# the host's RAM (cpu_worker.py), 92 % of a server that runs other things
CPU_KV_REQUESTS = 4
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


def vllm_args_text(args: dict[str, Any]) -> str:
    """vLLM's engine arguments as a probe reports them: `name=value`, integers with thousands separators."""
    return ", ".join(f"{k}={v:,}" if type(v) is int else f"{k}={v}" for k, v in args.items())


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
    kv_dtype: str = "auto"  # vLLM only: its kv_cache_dtype, in kvscope's names (bf16, fp8, ...)
    batch: int = 1
    tensor_parallel_size: int = 1
    # vLLM only, and what its prediction is made with (vllm_engine): None keeps kvscope's default, which the probe
    # then passes to vLLM explicitly (the LLM class's own defaults differ from `vllm serve`'s that kvscope models)
    gpu_memory_utilization: float = 0.92  # kvscope's (and `vllm serve`'s) default
    kv_cache_memory_bytes: int | None = None  # None: on CUDA gpu_memory_utilization sizes the pool; on CPU see worker
    max_num_batched_tokens: int | None = None  # None: 2048 (SchedulerConfig's)
    max_num_seqs: int | None = None  # None: 256
    prefix_caching: bool = True
    block_size: int | None = None  # None: vLLM's (16 on CUDA, 128 on its CPU backend)
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
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InputError(f"GPU memory utilization must be in (0, 1], got {self.gpu_memory_utilization:g}")
        for what in ("kv_cache_memory_bytes", "max_num_batched_tokens", "max_num_seqs", "block_size"):
            if getattr(self, what) is not None and getattr(self, what) <= 0:
                raise InputError(f"vLLM {what} must be positive (or left to its default), got {getattr(self, what)}")
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

    def vllm_engine(self, platform: str, version: str = VllmOptions.version, **host: bool) -> VllmEngine:
        """The one vLLM engine a probe both launches vLLM with and predicts with (core.probe.worker.vllm_args):
        its options are this request's; `platform` is where it runs (cuda or cpu), `version` vLLM's release,
        `host` the CPU features vLLM's CPU backend reads (cpu_amx, cpu_avx512_bf16)."""
        engine = configured(
            "vllm",
            platform=platform,
            version=version,
            **host,
            tensor_parallel=self.tensor_parallel_size,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            prefix_caching=self.prefix_caching,
            block_size=self.block_size,
        )
        assert isinstance(engine, VllmEngine)
        return engine

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeRequest:
        known = {f.name for f in fields(cls)}
        return cls(**{k: tuple(v) if k == "contexts" else v for k, v in data.items() if k in known})


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    return measured / predicted if measured is not None and predicted else None


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
    predicted_kv_capacity_tokens: int | None = None  # vLLM: kvscope's "KV cache size: N tokens" for the same pool
    # kvscope's speed for the same run (core.speed.predict, as `python -m core speed` times it: worker.probe_speed);
    # None on a GPU whose name gpus.csv does not hold
    predicted_prefill_tok_s: float | None = None
    predicted_decode_tok_s: float | None = None
    speed_basis: str = ""  # what the prediction timed: the card, the host's calibration or RAM figure; or why none

    @property
    def decode_speed_ratio(self) -> float | None:
        """measured ÷ predicted decode tok/s; 1.0 is an exact prediction."""
        return _ratio(self.decode_tok_s, self.predicted_decode_tok_s)

    @property
    def prefill_speed_ratio(self) -> float | None:
        """measured ÷ predicted prefill tok/s."""
        return _ratio(self.prefill_tok_s, self.predicted_prefill_tok_s)

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
    vllm_args: dict[str, Any] = field(default_factory=dict)  # vLLM: the engine arguments it ran (and predicted) with
    results_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["request"] = self.request.to_dict()
        out["contexts"] = [c.to_dict() for c in self.contexts]
        return out
