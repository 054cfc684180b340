"""The real vLLM (its CPU backend) referees kvscope's vLLM rules, exactly.

Every case starts vLLM with dummy weights on a tiny config (tests/engines/vllm_models.py) and a fixed KV budget
(`kv_cache_memory_bytes`), in one process (tests/engines/vllm_runner.py). The engine's own kv_cache_config and its
"CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X" line are compared with
`VllmEngine(platform="cpu", version="0.32")`: blocks, block size, groups, tokens and concurrency must match exactly.
The comparison table is written to tests/artifacts/vllm_referee.md while the tests run.

The engine must start: a missing engines' virtualenv or a crashed runner fails these tests, never skips them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from core.engines.vllm_engine import RULES_VERSION, Capacity, Plan, VllmEngine
from core.engines.vllm_pipeline import pipeline_capacity
from core.model.loading import model_from_config
from tests.engines.engine_env import ROOT, run_in_engines
from tests.engines.vllm_models import MODELS, REFUSED

RUNNER = Path(__file__).with_name("vllm_runner.py")
ARTIFACT = ROOT / "tests" / "artifacts" / "vllm_referee.md"
BUDGET = 48 * 1024 * 1024 + 12_345  # not a whole number of blocks for any case
BATCH = 2048  # `vllm serve`'s max_num_batched_tokens on CPU (the LLM class would use 4096); passed to both
FP8_NEEDS = "FP8 KV cache on CPU requires x86 with AVX-512 or AMX."  # vllm/v1/attention/backends/cpu_attn.py


@cache
def host_isa() -> dict[str, bool]:
    """The CPU features vLLM's CPU backend reads, asked of the engines' own torch: AVX512-BF16 stores Mamba/GDN
    states in float32, AMX tiles pick the MLA kernel, and an FP8 cache needs AVX-512 or AMX (this project's Zen 3
    host has none of them; its Sapphire Rapids VM had AVX512-BF16)."""
    code = (
        "import json, torch; c = torch.cpu; print(json.dumps({'avx512': c._is_avx512_supported(), "
        "'avx512_bf16': c._is_avx512_bf16_supported(), 'amx': c._is_amx_tile_supported()}))"
    )
    return json.loads(run_in_engines(["-c", code], timeout=300).stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    max_model_len: int = 500  # not a multiple of 16, 32 or 128
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    block_size: int | None = None
    mamba_ssm_cache_dtype: str = "auto"
    budget: int = BUDGET
    pp: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    def runner_case(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "config": MODELS[self.model],
            "kv_cache_memory_bytes": self.budget,
            "max_model_len": self.max_model_len,
            "kv_cache_dtype": self.kv_cache_dtype,
            "enable_prefix_caching": self.prefix_caching,
            "block_size": self.block_size,
            "mamba_ssm_cache_dtype": None if self.mamba_ssm_cache_dtype == "auto" else self.mamba_ssm_cache_dtype,
            "max_num_batched_tokens": BATCH,
            "pipeline_parallel_size": self.pp,
        }

    def engine(self) -> VllmEngine:
        return VllmEngine().with_options(
            platform="cpu",
            version="0.32",
            block_size=self.block_size,
            prefix_caching=self.prefix_caching,
            max_num_batched_tokens=BATCH,
            mamba_ssm_cache_dtype=self.mamba_ssm_cache_dtype,
            pipeline_parallel=self.pp,
            cpu_avx512_bf16=host_isa()["avx512_bf16"],
            # AMX only picks the MLA backend, and the runner forces vLLM's reference CPU_MLA for MLA models (AMX_MLA
            # refuses the tiny widths): kvscope's rule for a CPU without AMX, whatever this host has
            cpu_amx=False,
        )


GQA, MHA, GQA32 = "llama (GQA 4q/2kv)", "llama MHA (4q/4kv)", "llama head 32 (GQA 4q/2kv)"
MISTRAL, GEMMA3 = "mistral (sliding 8)", "gemma3 (sliding 8 + full)"
MLA = "deepseek_v2 (MLA)"
QWEN35, QWEN35_BIG, QWEN3_NEXT = "qwen3.5 (GDN + full)", "qwen3.5 big state", "qwen3-next (GDN + full, MoE)"
GRANITE, NEMOTRON, LFM2 = (
    "granite-4.0-h (Mamba2 + full)",
    "nemotron-h dense (Mamba2 + full)",
    "lfm2 (short conv + full)",
)

CASES = [
    Case("gqa L=500", GQA),
    Case("gqa L=512", GQA, max_model_len=512),
    Case("gqa head 32 auto", GQA32),
    Case("gqa head 32 fp8", GQA32, kv_cache_dtype="fp8"),
    Case("gqa block 64 (user)", GQA, block_size=64),
    Case("gqa no prefix caching", GQA, prefix_caching=False),
    Case("mha L=1000", MHA, max_model_len=1000),
    Case("mistral L=500", MISTRAL),
    Case("mistral L=8192", MISTRAL, max_model_len=8192),
    Case("gemma3 L=8192", GEMMA3, max_model_len=8192),
    Case("gemma3 L=640 block 32", GEMMA3, max_model_len=640, block_size=32),
    Case("mla L=500", MLA),
    Case("mla L=512 block 64 (user)", MLA, max_model_len=512, block_size=64),
    Case("qwen3.5 L=500", QWEN35),
    Case("qwen3.5 no prefix caching", QWEN35, prefix_caching=False),
    Case("qwen3.5 fp8", QWEN35, kv_cache_dtype="fp8"),
    Case("qwen3.5 ssm bfloat16", QWEN35, mamba_ssm_cache_dtype="bfloat16"),
    Case("qwen3.5 big state L=1000", QWEN35_BIG, max_model_len=1000),
    Case("qwen3.5 big state block 64", QWEN35_BIG, max_model_len=1000, block_size=64),
    Case("qwen3.5 big state block 16 (user)", QWEN35_BIG, max_model_len=1000, block_size=16),
    Case("qwen3.5 big state fp8", QWEN35_BIG, max_model_len=1000, kv_cache_dtype="fp8"),
    Case("qwen3-next L=512", QWEN3_NEXT, max_model_len=512),
    Case("granite-4.0-h L=500", GRANITE),
    Case("granite-4.0-h no prefix caching", GRANITE, prefix_caching=False),
    Case("granite-4.0-h ssm bfloat16", GRANITE, mamba_ssm_cache_dtype="bfloat16"),
    Case("nemotron-h dense L=500", NEMOTRON),
    Case("lfm2 L=500", LFM2),
    Case("lfm2 no prefix caching", LFM2, prefix_caching=False),
]
# Pipeline parallel: every stage gets the same budget; the stage with the most cache per block decides.
PP_CASES = [
    Case("pp2 llama 3 layers [2, 1]", "llama 3 layers", pp=2, max_model_len=1000),
    Case("pp2 MLA 3 layers [2, 1]", "deepseek_v2 (MLA) 3 layers", pp=2),
    Case("pp2 qwen3.5 9 layers [5, 4]", "qwen3.5 9 layers", pp=2),
]
BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES)

KIND_OF_SPEC = {
    "FullAttentionSpec": "full",
    "MLAAttentionSpec": "full",
    "SlidingWindowSpec": "sliding",
    "ChunkedLocalAttentionSpec": "chunked",
    "MambaSpec": "state",
}


@dataclass
class Outcome:
    engine: dict[str, Any]
    plan: Plan | None = None
    capacity: Capacity | None = None
    error: str | None = None  # kvscope's own error, if any


def _engine_groups(result: dict[str, Any]) -> list[tuple[str, int, int]]:
    return sorted(
        (KIND_OF_SPEC.get(g["spec"]["type"], g["spec"]["type"]), len(g["layer_names"]), g["spec"]["page_size_bytes"])
        for g in result["groups"]
    )


def _kvscope_groups(plan: Plan) -> list[tuple[str, int, int]]:
    # A padded group still spans group_size pages per block in vLLM's pool, but lists only its real layers.
    return sorted((g.page.kind, g.layers, plan.page_bytes[g.page]) for g in plan.groups)


def _attention_block_sizes(result: dict[str, Any]) -> list[int]:
    """Block sizes of the token-holding groups. A state group's block_size counts tokens per state block: the
    attention block size with prefix caching, max_model_len without (MambaModelConfig sets mamba_block_size);
    it does not change any page."""
    return sorted({g["spec"]["block_size"] for g in result["groups"] if g["spec"]["type"] != "MambaSpec"})


def _table(outcomes: dict[str, Outcome], refused: dict[str, dict], seconds: float, version: str) -> str:
    lines = [
        "# vLLM referee: the real engine (CPU backend) against kvscope's VllmEngine(platform='cpu')",
        "",
        f"vLLM {version}, written by tests/engines/test_vllm_engine.py; kvscope rules: {RULES_VERSION}. "
        f"KV budget {BUDGET:,} bytes (kv_cache_memory_bytes), max_num_batched_tokens {BATCH}. "
        f"Runner wall time {seconds:.0f} s.",
        "",
        "Each cell is engine / kvscope. Tokens and concurrency are the engine's log line; blocks, block size and "
        "groups come from the engine's own kv_cache_config.",
        "",
        "| case | L | kv dtype | prefix cache | blocks | block size | groups (kind×layers) | blocks/request | "
        "KV cache size (tokens) | concurrency | match |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES + PP_CASES:
        out = outcomes[case.id]
        e = out.engine
        if "error" in e or out.capacity is None:
            why = e.get("error") or out.error
            lines.append(
                f"| {case.id} | {case.max_model_len} | {case.kv_cache_dtype} | {case.prefix_caching} | "
                f"error: {str(why)[:120]} | | | | | | no |"
            )
            continue
        cap, plan = out.capacity, out.plan
        e_block = _attention_block_sizes(e)
        e_groups = ", ".join(f"{k}×{n}" for k, n, _ in _engine_groups(e))
        k_groups = ", ".join(f"{k}×{n}" for k, n, _ in _kvscope_groups(plan))
        e_per_request = round(e["num_blocks"] / e["cache_config"]["kv_cache_max_concurrency"])
        ok = (
            e["num_blocks"] == cap.num_blocks
            and e_block == [plan.block_size]
            and e["log_tokens"] == cap.kv_cache_tokens
            and e["log_concurrency"] == round(cap.max_concurrency, 2)
            # under PP the scheduler lists the first stage's share of each group, kvscope the model's groups
            and (case.pp > 1 or _engine_groups(e) == _kvscope_groups(plan))
        )
        lines.append(
            f"| {case.id} | {case.max_model_len} | {case.kv_cache_dtype} | "
            f"{e['cache_config']['enable_prefix_caching']} / {plan.prefix_caching} | "
            f"{e['num_blocks']:,} / {cap.num_blocks:,} | {'/'.join(map(str, e_block))} / {plan.block_size} | "
            f"{e_groups} / {k_groups} | {e_per_request} / {cap.blocks_per_request} | "
            f"{e['log_tokens']:,} / {cap.kv_cache_tokens:,} | {e['log_concurrency']:.2f} / {cap.max_concurrency:.2f} | "
            f"{'yes' if ok else '**no**'} |"
        )
    lines += ["", "## Architectures the CPU backend refuses", ""]
    for name, result in refused.items():
        lines.append(f"- {name}: `{result.get('error', 'started (no longer refused)')[:300]}`")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def referee(tmp_path_factory) -> dict[str, Any]:
    cases = [c.runner_case() for c in CASES + PP_CASES]
    cases += [
        {
            "id": f"refused: {name}",
            "config": config,
            "kv_cache_memory_bytes": BUDGET,
            "max_model_len": 500,
            "max_num_batched_tokens": BATCH,
            "kv_cache_dtype": kv_dtype,
        }
        for name, (config, kv_dtype, _) in REFUSED.items()
    ]
    path = tmp_path_factory.mktemp("vllm") / "cases.json"
    path.write_text(json.dumps(cases))
    started = time.monotonic()
    proc = run_in_engines([str(RUNNER), str(path)], timeout=900)
    seconds = time.monotonic() - started
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("KVSCOPE_CASE "):
            result = json.loads(line.removeprefix("KVSCOPE_CASE "))
            results[result["id"]] = result
    missing = [c["id"] for c in cases if c["id"] not in results]
    if missing:
        pytest.fail(f"the runner gave no result for {missing}:\n{proc.stderr[-6000:]}")

    outcomes: dict[str, Outcome] = {}
    for case in CASES:
        out = Outcome(results[case.id])
        try:
            model = model_from_config(MODELS[case.model], case.model)
            engine = case.engine()
            out.plan = engine.plan(model, case.kv_cache_dtype)
            out.capacity = engine.capacity(model, case.budget, case.max_model_len, case.kv_cache_dtype)
        except Exception as err:  # shown in the table; the case's test fails on it
            out.error = f"{type(err).__name__}: {err}"
        outcomes[case.id] = out
    for case in PP_CASES:
        out = Outcome(results[case.id])
        model = model_from_config(MODELS[case.model], case.model)
        out.plan = case.engine().plan(model, case.kv_cache_dtype)
        stages = [case.budget] * case.pp
        out.capacity = pipeline_capacity(case.engine(), model, stages, case.max_model_len, case.kv_cache_dtype)
        outcomes[case.id] = out
    refused = {name: results[f"refused: {name}"] for name in REFUSED}
    version = next(iter(results.values()))["vllm_version"]
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(_table(outcomes, refused, seconds, version))
    return {"outcomes": outcomes, "refused": refused, "seconds": seconds, "version": version}


def test_the_engine_is_the_cpu_build_kvscope_verifies(referee):
    assert referee["version"].startswith("0.32"), referee["version"]
    assert referee["seconds"] < 600, f"the referee took {referee['seconds']:.0f} s; keep it under 10 minutes"


@pytest.mark.parametrize("case_id", list(BY_ID))
def test_kvscope_matches_the_engine(referee, case_id):
    case = BY_ID[case_id]
    out: Outcome = referee["outcomes"][case_id]
    engine = out.engine
    if case.kv_cache_dtype.startswith("fp8") and not (host_isa()["avx512"] or host_isa()["amx"]):
        # this host cannot hold an FP8 cache: the engine must refuse for that reason; no layout to compare here
        assert FP8_NEEDS in engine.get("error", ""), f"{case_id} on a host without AVX-512 or AMX: {engine}"
        return
    assert "error" not in engine, f"vLLM refused {case_id}: {engine.get('error')}\n{engine.get('traceback', '')}"
    assert out.error is None, f"kvscope failed on {case_id}: {out.error}"
    plan, cap = out.plan, out.capacity
    # the engine's layout
    assert _attention_block_sizes(engine) == [plan.block_size]
    state_blocks = {g["spec"]["block_size"] for g in engine["groups"] if g["spec"]["type"] == "MambaSpec"}
    assert state_blocks <= {plan.block_size if plan.prefix_caching else case.max_model_len}
    assert _engine_groups(engine) == _kvscope_groups(plan)
    assert engine["cache_config"]["enable_prefix_caching"] == plan.prefix_caching
    assert engine["num_blocks"] == cap.num_blocks
    # the capacity vLLM computed and logged
    assert engine["cache_config"]["kv_cache_max_concurrency"] == pytest.approx(cap.max_concurrency, rel=1e-12)
    assert engine["cache_config"]["kv_cache_size_tokens"] == cap.kv_cache_tokens
    assert engine["log_max_model_len"] == case.max_model_len
    assert engine["log_tokens"] == cap.kv_cache_tokens
    assert engine["log_concurrency"] == round(cap.max_concurrency, 2)


def test_the_cpu_backend_defaults_kvscope_assumes(referee):
    """Hypotheses of the CPU rules, read from the engine itself rather than from kvscope."""
    outcomes = referee["outcomes"]
    gqa = outcomes["gqa L=500"].engine
    assert gqa["cache_config"]["block_size"] == 128 and not gqa["cache_config"]["user_specified_block_size"]
    assert gqa["scheduler"]["async_scheduling"] is False
    assert outcomes["gqa block 64 (user)"].engine["cache_config"]["block_size"] == 64
    mla = outcomes["mla L=512 block 64 (user)"].engine
    assert mla["cache_config"]["block_size"] == 16 and mla["cache_config"]["enable_prefix_caching"] is False
    states = [g["spec"] for g in outcomes["granite-4.0-h L=500"].engine["groups"] if g["spec"]["type"] == "MambaSpec"]
    # a bf16 model's SSM state: float32 where AVX512-BF16 runs the accelerated GDN kernel, else the model's dtype
    fp32_states = host_isa()["avx512_bf16"]
    assert states and all(spec["dtypes"][-1] == f"torch.{'float32' if fp32_states else 'bfloat16'}" for spec in states)
    kept = [g["spec"] for g in outcomes["qwen3.5 ssm bfloat16"].engine["groups"] if g["spec"]["type"] == "MambaSpec"]
    assert kept and all(spec["dtypes"][-1] == "torch.bfloat16" for spec in kept)
    big = outcomes["qwen3.5 big state L=1000"].engine["cache_config"]["block_size"]
    # a float32 state outgrows a 128-token attention page, so the hybrid alignment raises the block (multiples of 32)
    assert (big > 128 and big % 32 == 0) if fp32_states else big == 128


@pytest.mark.parametrize("name", list(REFUSED))
def test_architectures_the_cpu_backend_refuses_still_refuse(referee, name):
    """If vLLM starts one of these, it moves to the compared cases."""
    result = referee["refused"][name]
    _, _, reason = REFUSED[name]
    assert "error" in result, f"{name} now starts on the CPU backend: compare it"
    assert reason in result["error"] or reason in result.get("traceback", "")


@pytest.mark.parametrize("case_id", [c.id for c in PP_CASES])
def test_pipeline_parallel_pool_is_sized_by_the_fullest_stage(referee, case_id):
    case = next(c for c in PP_CASES if c.id == case_id)
    out: Outcome = referee["outcomes"][case_id]
    engine = out.engine
    assert "error" not in engine, f"vLLM refused {case_id}: {engine.get('error')}\n{engine.get('traceback', '')}"
    cap = out.capacity
    assert engine["num_blocks"] == cap.num_blocks
    assert engine["cache_config"]["kv_cache_max_concurrency"] == pytest.approx(cap.max_concurrency, rel=1e-12)
    assert engine["log_tokens"] == cap.kv_cache_tokens
    # the rule this replaced, the whole model's pool shared out evenly over the stages, gives more blocks
    model = model_from_config(MODELS[case.model], case.model)
    whole = case.engine().with_options(pipeline_parallel=1)
    averaged = whole.capacity(model, case.budget * case.pp, case.max_model_len, case.kv_cache_dtype)
    assert averaged.num_blocks > cap.num_blocks
