"""Start the real vLLM (its CPU backend) on tiny configs and print the KV cache layout it builds.

Run with the engines' Python (tests/engines/engine_env.py), never imported by kvscope:

    python tests/engines/vllm_runner.py cases.json

`cases.json` is a JSON list of cases:

    {"id": "...", "config": {config.json dict}, "kv_cache_memory_bytes": int, "max_model_len": int,
     "kv_cache_dtype": "auto", "enable_prefix_caching": bool, "block_size": int | null,
     "mamba_ssm_cache_dtype": "auto", "max_num_batched_tokens": int | null, "pipeline_parallel_size": int,
     "tensor_parallel_size": int}

vLLM is imported once; every case starts an `LLM` with dummy weights from a directory holding only that config.json,
reads the engine's own `kv_cache_config` (the scheduler's copy: num_blocks and each group's spec) and the
"CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X" log line, then shuts the engine down
and frees it before the next case. Each case prints one line `KVSCOPE_CASE {json}` on stdout; a case vLLM refuses
prints its error instead of figures, so the caller can show why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# vLLM re-applies its dictConfig whenever an engine starts, which strips handlers from every "vllm.*" logger; the
# runner configures logging itself instead: vLLM's records go to stderr and into the capture.
os.environ["VLLM_CONFIGURE_LOGGING"] = "0"

# transformers 5.19's Qwen2-VL image processor imports torchvision unconditionally, and vLLM's Qwen3.5 module imports
# it through qwen3_vl. PyPI's torchvision is built for CUDA torch and cannot load next to the CPU torch, so
# install.sh removes it. The referee never touches images: a stub package (every attribute a dummy class) lets the
# module import. It is put on PYTHONPATH so vLLM's model-inspection subprocess sees it too.
TORCHVISION_STUB = '''"""kvscope referee stub: not torchvision. Only lets image-processor modules import."""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kvscope.stub"


class _Dummy(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy(name, (), {})

    def __call__(cls, *args, **kwargs):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Dummy(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__getattr__ = __getattr__
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
'''


def install_torchvision_stub() -> None:
    try:
        import torchvision  # noqa: F401  (a working one is used as is)

        return
    except Exception:
        pass
    folder = Path(tempfile.mkdtemp(prefix="kvscope-stubs-"))
    (folder / "torchvision").mkdir()
    (folder / "torchvision" / "__init__.py").write_text(TORCHVISION_STUB)
    sys.path.insert(0, str(folder))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]


LOG_LINE = re.compile(
    r"(?P<pools>[A-Za-z +]+) KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"
)


class Capture(logging.Handler):
    """Every vLLM log record of the current case, formatted."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def clear(self) -> None:
        self.lines.clear()
        self.warnings.clear()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not kill the referee
            message = str(record.msg)
        self.lines.append(message)
        if record.levelno >= logging.WARNING:
            self.warnings.append(message)


def _plain(value):
    """A JSON-able view of a spec field (dtypes and enums as their names)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _spec(spec) -> dict:
    out = {"type": type(spec).__name__, "block_size": spec.block_size, "page_size_bytes": spec.page_size_bytes}
    if dataclasses.is_dataclass(spec):
        for field in dataclasses.fields(spec):
            if field.name not in out and field.name != "kv_cache_specs":
                out[field.name] = _plain(getattr(spec, field.name))
    return out


def _group_key(spec) -> str:
    return json.dumps(_spec(spec), sort_keys=True)


def rank_report(worker) -> dict:
    """What one worker (one rank) holds: its ranks, every parameter's shape and dtype size, and each fused-MoE
    layer's expert split. Sent to the workers by `collective_rpc`, so it must only import inside."""
    from vllm.distributed import parallel_state
    from vllm.model_executor.layers.linear import ReplicatedLinear

    model = worker.model_runner.model
    params = {name: [list(p.shape), p.element_size()] for name, p in model.named_parameters()}
    # the CPU backend repacks linear weights after loading (the Parameter is left empty): read each linear's own
    # per-rank sizes instead
    linears = {}
    moe = {}
    for name, module in model.named_modules():
        if hasattr(module, "input_size_per_partition") and hasattr(module, "output_size_per_partition"):
            linears[name] = {
                "type": type(module).__name__,
                "input": module.input_size_per_partition,
                "output": module.output_size_per_partition,
                "tp_size": getattr(module, "tp_size", None),
            }
        elif isinstance(module, ReplicatedLinear) or (
            getattr(module, "weight", None) is not None and module.weight.numel() == 0
        ):  # the MoE router: repacked (emptied) on a Sapphire Rapids host, kept whole on a Zen 3 one
            linears[name] = {
                "type": type(module).__name__,
                "input": getattr(module, "input_size", None),
                "output": getattr(module, "output_size", None),
                "tp_size": getattr(module, "tp_size", None),
            }
        elif hasattr(module, "num_embeddings_per_partition"):
            linears[name] = {
                "type": type(module).__name__,
                "input": module.embedding_dim,
                "output": module.num_embeddings_per_partition,
                "tp_size": getattr(module, "tp_size", None),
            }
        if hasattr(module, "w13_weight") and hasattr(module, "w2_weight"):
            moe_config = getattr(module, "moe_config", None)
            config = getattr(moe_config, "moe_parallel_config", None)
            moe[name] = {
                "intermediate_size_per_partition": getattr(moe_config, "intermediate_size_per_partition", None),
                "intermediate_size_per_partition_unpadded": getattr(
                    moe_config, "intermediate_size_per_partition_unpadded", None
                ),
                "type": type(module).__name__,
                "local_num_experts": getattr(module, "local_num_experts", None),
                "global_num_experts": getattr(module, "global_num_experts", None),
                "w13_weight": list(module.w13_weight.shape),
                "w2_weight": list(module.w2_weight.shape),
                "parallel": None
                if config is None
                else {
                    k: getattr(config, k, None)
                    for k in ("tp_size", "tp_rank", "dp_size", "dp_rank", "ep_size", "ep_rank", "use_ep")
                },
            }
    ranks = {}
    for what, getter in (
        ("tp", "get_tp_group"),
        ("pp", "get_pp_group"),
        ("dp", "get_dp_group"),
        ("ep", "get_ep_group"),
    ):
        try:
            group = getattr(parallel_state, getter)()
            ranks[what] = [group.rank_in_group, group.world_size]
        except Exception:
            ranks[what] = None
    return {"ranks": ranks, "params": params, "linears": linears, "moe": moe}


def run_case(case: dict, capture: Capture) -> dict:
    import vllm
    import vllm.logger

    vllm.logger._print_info_once.cache_clear()  # the capacity line is logged "once" per process otherwise
    vllm.logger._print_warning_once.cache_clear()
    capture.clear()
    out: dict = {"id": case["id"], "vllm_version": vllm.__version__}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps(case["config"]))
        kwargs = {
            "model": folder,
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "kv_cache_memory_bytes": case["kv_cache_memory_bytes"],
            "max_model_len": case["max_model_len"],
            "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
            "enable_prefix_caching": case.get("enable_prefix_caching", True),
            "enforce_eager": True,
            "seed": 0,
            "trust_remote_code": False,  # vLLM's default, spelled out: no model repo's code runs
        }
        for key in ("block_size", "mamba_ssm_cache_dtype", "max_num_batched_tokens", "max_num_seqs"):
            if case.get(key) is not None:
                kwargs[key] = case[key]
        pp, tp = case.get("pipeline_parallel_size", 1), case.get("tensor_parallel_size", 1)
        if pp > 1 or tp > 1:
            # one worker process per rank; their threads cannot each get a NUMA node of a 2-core machine
            kwargs["pipeline_parallel_size"] = pp
            kwargs["tensor_parallel_size"] = tp
            kwargs["distributed_executor_backend"] = "mp"
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        if case.get("enable_expert_parallel"):
            kwargs["enable_expert_parallel"] = True
        if "kv_lora_rank" in case["config"]:
            # vLLM's reference CPU MLA backend, the one kvscope's platform "cpu" rules follow. On a CPU with AMX
            # vLLM 0.32 picks AMX_MLA instead (platforms/cpu.py:152-164), whose weight packing refuses the tiny
            # models' widths ("invalid weight out features 24") and whose block rules differ; not modelled here.
            kwargs["attention_backend"] = "CPU_MLA"
        llm = None
        try:
            llm = vllm.LLM(**kwargs)
            if case.get("report_ranks"):
                out["ranks"] = llm.collective_rpc(rank_report)
            core = llm.llm_engine.engine_core.engine_core
            config = core.scheduler.kv_cache_config
            vcfg = llm.llm_engine.vllm_config
            cache = vcfg.cache_config
            groups = []
            for group in config.kv_cache_groups:
                groups.append({"layer_names": list(group.layer_names), "spec": _spec(group.kv_cache_spec)})
            out.update(
                num_blocks=config.num_blocks,
                groups=groups,
                cache_config={
                    "block_size": cache.block_size,
                    "user_specified_block_size": getattr(cache, "user_specified_block_size", None),
                    "cache_dtype": str(cache.cache_dtype),
                    "mamba_ssm_cache_dtype": str(cache.mamba_ssm_cache_dtype),
                    "mamba_cache_dtype": str(getattr(cache, "mamba_cache_dtype", None)),
                    "mamba_cache_mode": str(getattr(cache, "mamba_cache_mode", None)),
                    "enable_prefix_caching": cache.enable_prefix_caching,
                    "kv_cache_size_tokens": getattr(cache, "kv_cache_size_tokens", None),
                    "kv_cache_max_concurrency": getattr(cache, "kv_cache_max_concurrency", None),
                    "kv_cache_layout": str(cache.get_resolved_kv_cache_layout())
                    if hasattr(cache, "get_resolved_kv_cache_layout")
                    else None,
                },
                scheduler={
                    "async_scheduling": vcfg.scheduler_config.async_scheduling,
                    "max_num_batched_tokens": vcfg.scheduler_config.max_num_batched_tokens,
                    "max_num_seqs": vcfg.scheduler_config.max_num_seqs,
                },
                model_dtype=str(vcfg.model_config.dtype),
            )
        except Exception as err:  # the caller shows vLLM's own refusal
            out["error"] = f"{type(err).__name__}: {err}"
            out["traceback"] = traceback.format_exc()[-3000:]
        finally:
            if llm is not None:
                with contextlib.suppress(Exception):
                    llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()
            try:
                from vllm.distributed.parallel_state import (
                    destroy_distributed_environment,
                    destroy_model_parallel,
                )

                destroy_model_parallel()
                destroy_distributed_environment()
            except Exception:
                pass
    for line in capture.lines:
        match = LOG_LINE.search(line)
        if match:
            out["log_line"] = match.group(0)
            out["log_tokens"] = int(match["tokens"].replace(",", ""))
            out["log_max_model_len"] = int(match["len"].replace(",", ""))
            out["log_concurrency"] = float(match["conc"])
    out["warnings"] = [line[:300] for line in capture.warnings][:12]
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    t0 = time.monotonic()
    install_torchvision_stub()
    import vllm  # noqa: F401  (import once, before the first case)

    capture = Capture()
    root = logging.getLogger("vllm")
    root.setLevel(logging.INFO)
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
    root.addHandler(stream)
    root.addHandler(capture)
    root.propagate = False
    print(f"KVSCOPE_IMPORT {time.monotonic() - t0:.1f}", flush=True)
    for case in cases:
        result = run_case(case, capture)
        print("KVSCOPE_CASE " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
