"""The real llama.cpp referees kvscope's llama.cpp rules, byte for byte.

Tiny random-weight checkpoints of kvscope's own tiny configs (tests/engines/llamacpp_models.py) go through
llama.cpp's converter once per session; libllama (llama-cpp-python, built from the same sdist) then creates a context
for every case below in one process and reports, from its own accessors, the K, V, R and S bytes of every cache of
its memory object. kvscope's `LlamaCppEngine.caches` must give the same numbers for the same options. The table
lands in tests/artifacts/llamacpp_referee.md.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from core.engines.llamacpp import FRONTENDS, LlamaCppEngine, LlamaCppOptions
from core.model.loading import model_from_config
from tests.engines.engine_env import ROOT, convert_tiny, run_in_engines
from tests.engines.llamacpp_models import MODELS

HERE = Path(__file__).resolve().parent
ARTIFACT = ROOT / "tests" / "artifacts" / "llamacpp_referee.md"
WINDOWED = ("gemma3", "gemma3_pattern3", "gpt_oss", "llama4")
QUANT_OK = tuple(m for m in MODELS if m != "mamba")  # every attention head here is whole q8_0/q4_0 blocks
ROLLBACK = ("qwen3_5", "qwen3_next", "nemotron_h", "lfm2", "mamba")  # the last two: supported / clamped to 0


@dataclass(frozen=True)
class Case:
    model: str
    context: int
    batch: int = 1
    kv: str = "f16"
    options: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{self.model} c={self.context} b={self.batch} {self.kv}" + (f" {opts}" if opts else "")

    @property
    def engine(self) -> LlamaCppEngine:
        return LlamaCppEngine(LlamaCppOptions(**self.options))

    def request(self) -> dict:
        o = self.engine.options
        return {
            "id": self.id,
            "model": self.model,
            # batch sequences of `context` tokens each: n_ctx = batch × context, n_seq_max = batch or, for a unified
            # cache made for more slots (llama-server's 4), the slots
            "n_ctx": self.context * self.batch,
            "n_seq_max": self.engine.slots(self.batch),
            "n_ubatch": o.n_ubatch,
            "n_batch": o.n_batch,
            "type_k": self.kv,
            "type_v": self.kv,
            "flash_attn": "auto" if o.flash_attn else "off",
            "swa_full": o.swa_full,
            "kv_unified": o.kv_unified,
            "n_rs_seq": o.n_rs_seq,
        }


def _cases() -> list[Case]:
    cases = []
    for m in MODELS:
        cases += [
            Case(m, 1000),  # not a multiple of 256
            Case(m, 4096, 4),  # a multiple, 4 streams
            Case(m, 1000, 4, options={"kv_unified": True}),
            Case(m, 700, 3),  # 3 × 700 = 2100 → 2304 cells / 3 = 768 per stream
        ]
    for m in QUANT_OK:
        cases += [Case(m, 1000, kv="q8_0"), Case(m, 3000, 4, kv="q4_0")]
    for m in WINDOWED:
        cases += [
            Case(m, 4096, options={"swa_full": True}),
            Case(m, 4096, 2, kv="q8_0", options={"swa_full": True}),
            Case(m, 4096, options={"n_ubatch": 64}),
            Case(m, 4096, 4, options={"kv_unified": True}),
            Case(m, 4096, 4, kv="q4_0", options={"kv_unified": True, "n_ubatch": 128}),
            Case(m, 300, 2, options={"n_batch": 100}),
            # a unified cache made for more slots than sequences in flight: a window per slot (40 of them, so that
            # the tiny window of 8 shows past the 256-cell padding)
            Case(m, 4096, 1, options={"kv_unified": True, "n_seq_max": 40, "n_ubatch": 64}),
            Case(m, 2000, 2, options={"kv_unified": True, "n_seq_max": 30}),
        ]
    for m in ("llama", "gemma3", "deepseek_v3", "qwen3_5", "granite_h"):
        cases.append(Case(m, 1000, 2, options={"flash_attn": False}))
    for m in ROLLBACK:
        cases.append(Case(m, 1000, 2, options={"n_rs_seq": 3}))
    for m in ("qwen3_5", "mamba", "granite_h", "llama"):  # a recurrent state per slot; plain attention unchanged
        cases.append(Case(m, 4096, 1, options={"kv_unified": True, "n_seq_max": 4}))
    for front in FRONTENDS.values():
        for m in ("gemma3", "qwen3_5"):
            options = {k: v for k, v in asdict(front.options).items() if v != getattr(LlamaCppOptions(), k)}
            cases.append(Case(m, 4096, front.n_parallel, options=options))
    return list({c.id: c for c in cases}.values())  # a front end's defaults may repeat a case above


CASES = _cases()


def spec(name: str):
    return model_from_config(MODELS[name], name)


def kvscope_caches(case: Case) -> dict[str, dict[str, int]]:
    out = {}
    for cache in case.engine.caches(spec(case.model), case.context, case.batch, case.kv):
        sizes = {"k": cache.k_bytes, "v": cache.v_bytes} if cache.role != "recr" else {}
        out[cache.role] = sizes | ({"r": cache.r_bytes, "s": cache.s_bytes} if cache.role == "recr" else {})
    return out


def engine_caches(result: dict) -> dict[str, dict[str, int]]:
    out = {}
    for role, sizes in result["caches"].items():
        out[role] = {k: sizes[k] for k in ("k", "v", "r", "s") if k in sizes}
    return out


@pytest.fixture(scope="session")
def referee(tmp_path_factory) -> dict[str, dict]:
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("llamacpp-gguf")
    ggufs = convert_tiny(folder, MODELS, timeout=300)
    (folder / "cases.json").write_text(json.dumps({"models": ggufs, "cases": [c.request() for c in CASES]}))
    ran = run_in_engines([str(HERE / "llamacpp_runner.py"), str(folder / "cases.json")], timeout=300)
    results = {r["id"]: r for r in json.loads(ran.stdout.strip().splitlines()[-1])["cases"]}
    write_table(results, time.monotonic() - started)
    return results


def write_table(results: dict[str, dict], seconds: float) -> None:
    rows = [
        "# llama.cpp referee",
        "",
        f"libllama from llama-cpp-python 0.3.36 (llama.cpp 0c1e57098) vs kvscope `LlamaCppEngine.caches`; "
        f"{len(CASES)} cases, {seconds:.0f} s for conversion and all contexts. Bytes per cache: K/V for attention "
        "caches, R (conv)/S (state) for recurrent ones.",
        "",
        "| case | memory | cache | engine bytes | kvscope bytes | match |",
        "|---|---|---|---|---|---|",
    ]
    for case in CASES:
        result = results.get(case.id, {"error": "no result"})
        if "error" in result:
            rows.append(f"| {case.id} | error | | {result['error']} | | no |")
            continue
        try:
            ours = kvscope_caches(case)
        except Exception as err:
            ours = {"error": {"raised": str(err)}}
        theirs = engine_caches(result)
        for role in sorted(set(theirs) | set(ours)):
            a, b = theirs.get(role), ours.get(role)
            fmt = lambda d: " ".join(f"{k.upper()}={v:,}" for k, v in d.items()) if d else "—"  # noqa: E731
            rows.append(
                f"| {case.id} | {result['memory']} | {role} | {fmt(a)} | {fmt(b)} | {'yes' if a == b else '**NO**'} |"
            )
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cache_bytes_equal_libllama(referee, case):
    result = referee[case.id]
    assert "error" not in result, f"{case.id}: {result['error']}\n{result['log']}"
    assert engine_caches(result) == kvscope_caches(case), "\n".join(result["log"])
    for sizes in result["caches"].values():
        assert sizes.get("p", 0) == 0  # no PLE conv rows in these architectures


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_memory_class_cells_and_streams_match_the_log(referee, case):
    result = referee[case.id]
    assert "error" not in result, result["error"]
    engine = case.engine
    model = spec(case.model)
    assert engine.memory_class(model) == result["memory"]
    ours = engine.caches(model, case.context, case.batch, case.kv)
    kv_logged = [
        tuple(map(int, m.groups()))
        for line in result["log"]
        if (m := re.search(r"llama_kv_cache: size = .*\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs", line))
    ]
    expected = [(c.cells, c.layers, engine.slots(case.batch), c.streams) for c in ours if c.role != "recr"]
    assert kv_logged == expected, "\n".join(result["log"])
    rs_logged = [
        tuple(map(int, m.groups()))
        for line in result["log"]
        if (m := re.search(r"llama_memory_recurrent: size = .*\(\s*(\d+) cells,.*?(\d+) rs_seq", line))
    ]
    assert rs_logged == [(c.cells, c.streams - 1) for c in ours if c.role == "recr"], "\n".join(result["log"])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_account_total_equals_libllama(referee, case):
    """What the app shows (`account`) is the bytes libllama holds: K + V + R + S over all its caches."""
    result = referee[case.id]
    assert "error" not in result, result["error"]
    held = sum(sum(sizes.values()) for sizes in engine_caches(result).values())
    assert case.engine.account(spec(case.model), case.context, case.batch, case.kv).total == held
