"""Fit kvscope's GPU speed efficiencies to the published corpus (measurements/speed/corpus/*.jsonl) and check them
on the sources held out; write them, with each group's held-out error, to core/speed/fitted.json.

    python tests/bench/fit_corpus.py            # fit, then print the held-out table
    python tests/bench/fit_corpus.py --check    # only the table, with the constants as they are

Split: the unit is one source's runs on one card (`source_id` + `card`: a scoreboard thread gathers many people's
cards, a results file is one machine's); a unit is held out when sha256("<source_id>|<card>") mod 3 == 0, so every
run of one machine in one source lands on one side and the split never depends on the rows' values. This
project's own runs on a lent machine (measurements/speed/llamacpp_device.jsonl) are always held out. vLLM's runs
(corpus files vllm-*) are too few to spare a third: every one is fitted, and its error is cross-checked instead
(cross_checked): each lab's runs on one card are predicted from a fit on every other lab's, the CPU fit's
leave-one-out (tests/bench/fit_cpu.py).
Fit, in three levels, each a coordinate descent on the sum of |log(predicted ÷ measured)| (one slow run pulls
less than with squares):
1. all fit rows of an engine, each backend and each machine within it weighing alike (backend_weighted): bandwidth,
   matmul and attention rates (decode, prefill), per-pass overhead, the flash-attention-off factor and one matmul
   factor per weight-format family (k-quant, legacy, i-quant, mxfp4 against float), starting from efficiencies.json's
   priors, the family factors pulled toward 1 by LAMBDA × |log(factor)|;
2. per backend, pulled toward level 1 by a penalty of LAMBDA × |log(value ÷ parent)| per parameter; here, and only
   where a backend has MoE rows beside dense ones, the routed experts' share of the bandwidth (expert_bandwidth), an
   overhead per MoE layer and pass (overhead_moe_s) and, with MoE prompts among them, the experts' own fill curve
   (expert_half_tokens); the last two are not pulled toward a parent that never fitted them (UNPOOLED);
3. per backend and card class with at least MIN_ROWS fit rows, pulled toward level 2.
Levels 2 and 3 fit, where their runs convert the weights to FP16 for cuBLAS (Volta), that conversion's share of the
bandwidth (dequant_bandwidth).
At any level whose rows hold runs of old builds beside current ones (old_run), two free terms (OLD_KEYS) time the
old ones: a factor on the bandwidth and seconds added per pass. They are written beside the entry (`old_build`) for
the check alone: a held-out run of an old build is timed with them (old_build_table), every other figure without.
Each level descends from its parent's values and from each of HALF_STARTS for the prompts' fill curve, and keeps the
least loss (best_descent): the curve has two basins a single descent does not leave.
After the descents, levels 2 and 3 get the share of MMQ's tile traffic their CUDA prompts are timed by
(tile_ceiling: a roofline ceiling, the most no fit run beats, at most 1), which no descent sees.
Prompt passes of MATVEC_MAX_TOKENS tokens or fewer run llama.cpp's mat-vec kernels and are left out of both.
APU runs (the Strix Halo's ROCm and Vulkan, the DGX Spark's CUDA) from builds before APU_CURRENT_BUILD are superseded
and left out of the fit and the check, as is any run that a newer build of the same test ran faster at a deeper
context (superseded).
The terms each row is fitted on are kvscope's own roofline at unit efficiencies (core.speed.predict with an
all-ones table), so the fit and the prediction are one formula; the error table runs core.speed.predict itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.engines import configured
from core.errors import InputError
from core.fit import Setup
from core.memory.gpus import Card, card_named
from core.memory.quant import format_named
from core.memory.weightfiles import WeightFile
from core.model.loading import load_model
from core.speed import efficiency as eff_module
from core.speed.efficiency import FITTED, Efficiency, efficiency_for, efficiency_in, entry
from core.speed.groups import (
    FAMILIES,
    MATVEC_MAX_TOKENS,
    PATHS,
    SPLIT_PROMPT,
    TILED_EXPERTS,
    card_class,
    error_stats,
    format_family,
    group_label,
    matmul_peak,
)
from core.speed.predict import (
    ADDITIVE,
    Hardware,
    Timing,
    chained_layers,
    flash_attn,
    moe_layers,
    predict,
    prefill_chunk,
    prompt_path,
    setup_weights,
)
from tests.bench.device_llamacpp import SOURCE_ID_PREFIX as DEVICE_SOURCE
from tests.bench.speed_fit import descend as coordinate_descent

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "measurements" / "speed" / "corpus"
# this project's own llama-bench runs on a lent machine (tests/bench/device_llamacpp.py): a card and a CPU nothing
# was fitted on, so they are never fitted here either, and always checked
DEVICE_RUNS = ROOT / "measurements" / "speed" / "llamacpp_device.jsonl"
CONFIGS = (ROOT.parent / "shared" / "reference",)  # the project's shared configs, beside the checkout
LAMBDA = 2.0
MIN_ROWS = 8
OVERHEAD_STARTS = (1e-4, 5e-4, 2e-3)  # seconds per pass
# tokens: the prompt GEMMs' fill curve had a basin near each end (about 11 and 140 tokens pooled over backends): a
# descent from one start stays in its basin, so each level descends from its parent's value and from each of these
HALF_STARTS = (8.0, 32.0, 128.0)
OLD_BUILD = 3000
OLD_KEYS = ("old_overhead_s", "old_bandwidth")
# classes fitted apart from the pooled levels (fit_all)
OWN_KERNELS = ("volta", "no-coopmat", "no-coopmat-intel", "no-wmma")
# backends fitted on their own runs only, never in the level pooled over backends (fit_all): SYCL runs quantised
# prompts as a dequantisation and a GEMM (ggml-sycl keeps MMQ off), and its four fit runs, weighing as much there as
# CUDA's hundreds, moved every backend's pooled start (Metal's per-MoE-layer overhead to its floor)
OWN_BACKENDS = ("sycl",)
# APUs' runs from builds before this are superseded: kyuz0's logs of one Strix Halo over a year show llama.cpp's
# ROCm prefill of Llama 2 7B Q4_0 going 687 (b6182) → 1,105 (b6486) → 1,545 t/s (b9187) and RADV's 957 → 1,338,
# and lhl's b6077 ran it at 322; llama.cpp's own DGX Spark tables, rerun on the same machine, went from b6918 to
# b7941 (benches/dgx-spark) 3,783 → 4,506 t/s for gpt-oss-20b's pp2048 and 3,668 → 5,023 for Gemma 3 4B's at depth
# 32,768. kvscope predicts current builds; the older runs stay in the corpus, out of the fit and the check (the
# count is printed with the skipped rows).
APU_CURRENT_BUILD = 7000
# Until PR #8075 (merged 2024-06-24, after b3000) llama.cpp's CUDA backend multiplied quantised weights by a prompt
# batch of more than 32 tokens on cards with tensor cores by dequantising them to FP16 for cuBLAS; since then it runs
# its own int8 kernels (MMQ) there, on every NVIDIA card from Turing on. Such runs timed cuBLAS, a path current
# builds no longer take for these formats, so they stay out of the fit and the check. F16 weights still go through
# cuBLAS, Volta and older cards (no int8 MMA) still take it for long batches, and the MMQ PRs' own tables forced
# their kernels (LLAMA_CUDA_FORCE_MMQ): those runs stand.
MMQ_DEFAULT_BUILD = 3000
# ggml-vulkan's DP4A MMQ shaders (integer dot products for Q4_0 … Q8_0, PR #12135) landed in March 2025; a Vulkan
# prompt of legacy quants from an earlier build ran the FP16 shaders, a path current builds no longer take on a card
# with integer dot products, so it stays out of the fit and the check. A bound, not the PR's own build (no source
# here names it): b3999 is October 2024's (its device line prints no "int dot"), b4500 January 2025's, and no
# Vulkan run in the corpus lies between b4000 and b5600
VULKAN_DP4A_BUILD = 4500
# llama.cpp runs a prompt's passes over several GPUs as a pipeline only where every GPU backend reports async compute
# and events (llama-context.cpp's pipeline_parallel). ggml-vulkan reported neither until PR #18047 ("vulkan:
# Implement set_tensor_async and the event interfaces", merged 2025-12-21 20:52 UTC), so a Vulkan prompt over several
# GPUs from an earlier build ran its passes one after another: the check times such a run without the pipeline
# (unpipelined), as its build ran it. A bound, as VULKAN_DP4A_BUILD: b7495 (#18031, that morning) predates the PR and
# b7540 (2025-12-25) holds it; b7502 is the likeliest first build with it. No corpus run lies between b7495 and b7548
VULKAN_EVENTS_BUILD = 7496
# Until PR #15525 ("CUDA: MoE helper in device code", opened 2025-08-23, in the b6131..b6301 changes) ggml-cuda's MMQ
# path for routed experts built each expert's row mapping on the host, so every MoE layer of every prompt pass
# waited for the GPU to hand back its routing. Its own table shows the device helper up to 1.55x faster on a P40's
# DeepSeek-V2-Lite prompts. Discussion #15396's gpt-oss-20b prompts from before it (b6205-b6210, August 2025) flatten
# on the larger cards: an RTX 4090 ran pp2048 at 8,022 t/s and an RTX 5080 at 7,476 on the same build, 1.07x for
# 1.47x the matrix peak, where b6316's RTX 4080 SUPER (after it) ran 8,171. kvscope predicts current builds, so such
# runs are set aside as the cuBLAS ones are. The bound is the first build after the latest one known to predate the
# PR (b6210, 2025-08-20 or earlier); no corpus row lies between it and b6301 but #15451's b6263, kept as current.
CUDA_MOE_DEVICE_BUILD = 6211
# sources that print no build number but date from before both CUDA graphs and MMQ-by-default: PR #4766's tables
# (2024-01) and PR #6017's (2024-03); each of their runs counts as a build before OLD_BUILD and MMQ_DEFAULT_BUILD
EARLY_2024_SOURCES = frozenset(
    {"llamacpp-pr-4766-backend-sched", "llamacpp-pr-4766-backend-sched-jg", "llamacpp-pr-6017-pipeline-parallelism"}
)
# sources that print a commit but no build number and date from the second half of 2026, long after
# APU_CURRENT_BUILD: issue #25356 (2026-07, master 20a04b2, after the b9293 it also names) and PR #27332 (2026-08,
# its parent ed1c3a20f)
LATE_2026_SOURCES = frozenset({"llamacpp-issue-25356-vulkan-batched-moe", "llamacpp-pr-27332-vulkan-mmv-id"})
# the fields a run must share with another to count as the same test on the same machine (superseded)
SAME_TEST = ("source_id", "card", "backend", "kind", "model", "weights", "n_prompt", "n_gen", "n_ubatch", "flash_attn")
FLOORS = {
    "overhead_step_s": 1e-5, "old_overhead_s": 1e-5, "prefill_half_tokens": 1.0, "overhead_recurrent_s": 1e-6,
    "overhead_moe_s": 1e-6, "expert_half_tokens": 1.0, "overhead_hop_s": 1e-6, "overhead_seq_s": 1e-6,
}  # fmt: skip
# a share of the card's bandwidth is at most all of it: above 1 the term would stand for some other term's
# correction (a fit left free took CUDA's consumer cards to 1.12, its per-step overhead pinned by the levels above)
CEILINGS = {"bandwidth": 1.0, "expert_bandwidth": 1.0}
DEEP = 4096  # runs whose context reaches this many tokens (cached + their own) time the attention kernels
HOST = Hardware(ram_gb_s=50.0, threads=8)  # unused: every corpus layer is on the GPU (-ngl 99)
RATE_KEYS = ("bandwidth", "decode_compute", "decode_attention", "prefill_compute", "prefill_attention")
# fitted per backend only (never pooled over backends); 0 where nothing fitted them: seconds added per MoE layer, and
# the experts' own fill curve (0: the dense one's)
UNPOOLED = ("overhead_moe_s", "expert_half_tokens", "overhead_hop_s", "overhead_seq_s")
KEYS = (
    *RATE_KEYS, "overhead_step_s", "flash_off", "prefill_half_tokens", "expert_bandwidth", "overhead_recurrent_s",
    "overhead_moe_s", "expert_half_tokens", "dequant_bandwidth", "overhead_hop_s", "overhead_seq_s",
)  # fmt: skip
UNIT = Efficiency("unit", "gpu", 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, "unit", "")
# a family's stand-in where kvscope does not know the exact llama.cpp type (bytes come from size_bytes anyway)
STAND_IN = {"k-quant": "q4_k_m", "legacy": "q8_0", "i-quant": "iq4_xs", "float": "fp16", "mxfp4": "mxfp4"}


# engines with too few published runs to hold a third out: all are fitted, each lab's runs on a card checked by a fit
# on the others' (cross_checked)
CROSS_CHECKED = ("vllm",)
# sources of one lab (its host, its recipe) that a cross-check leaves out together: AMD's ROCm hub pages ran the
# dev-docker page's latency recipe on the same Supermicro MI300X host; GPUStack's performance-lab pages are one lab's
LABS = {
    "vllm-rocm-dev-docker-mi300x": "AMD", "vllm-amd-rocm-hub-performance-results": "AMD",
    "vllm-gpustack": "GPUStack", "vllm-ree2raz": "ree2raz",
}  # fmt: skip


def held_out(source_id: str, card: str) -> bool:
    if source_id.startswith(DEVICE_SOURCE):  # never fitted: a card and a CPU nothing else was fitted on
        return True
    return int(hashlib.sha256(f"{source_id}|{card}".encode()).hexdigest(), 16) % 3 == 0


def lab(source_id: str) -> str:
    """The lab whose runs a cross-check leaves out together: LABS' by prefix, else the source itself."""
    return next((name for prefix, name in LABS.items() if source_id.startswith(prefix)), source_id)


def kvscope_format(printed: str) -> str:
    """llama-bench's type description ('Q4_K - Medium', 'IQ3_S mix - 3.66 bpw', 'F16') as a kvscope format."""
    text = re.sub(r"\(.*?\)", "", printed).strip()
    base, _, size = text.partition(" - ")
    base = base.replace(" mix", "").strip().lower().replace(" ", "_")  # 'MXFP4 MoE': llama.cpp's mxfp4_moe
    name = base + {"Medium": "_m", "Small": "_s", "Large": "_l"}.get(size.strip(), "") if "_k" in base else base
    name = {"f16": "gguf_f16", "bf16": "gguf_bf16", "f32": "gguf_f32"}.get(name, name)
    try:
        return format_named(name).name
    except InputError:
        return STAND_IN.get(format_family(name), "fp16")


def config_for(model_id: str) -> str:
    """The config.json of a corpus model: the shared reference configs, else the corpus' own (models only the
    corpus needs, e.g. the CPU runs' Llama 3.2 3B and TinyLlama), else the id itself (a bundled preset)."""
    name = f"{model_id.replace('/', '__')}.json"
    for path in [base / folder / name for base in CONFIGS for folder in ("configs", "configs-realworld")]:
        if path.exists():
            return str(path)
    own = CORPUS / "configs" / name
    return str(own) if own.exists() else model_id


@cache
def model_of(model_id: str):
    return load_model(config_for(model_id))


@dataclass(frozen=True)
class Row:
    raw: dict
    setup: Setup
    backend: str
    klass: str
    family: str
    kind: str

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.setup.engine.name, self.backend, self.klass)

    @property
    def batch(self) -> int:
        """Sequences per decode step: a vLLM run's batch or concurrency, or llama-batched-bench's (corpus
        `concurrency`), else 1."""
        return self.raw.get("concurrency") or 1

    @property
    def unit(self) -> tuple[str, str]:
        """What a cross-check leaves out together: a lab's runs on one card."""
        return lab(self.raw["source_id"]), self.raw["card"]

    @property
    def held_out(self) -> bool:
        """By its source and card (`held_out`), never for a cross-checked engine; a prompt over several cards
        always: `terms` times the passes one after another, and the pipeline that overlaps them
        (core.speed.predict.Pipeline) has nothing to fit."""
        if self.setup.engine.name in CROSS_CHECKED:
            return False
        several = self.kind == "prefill" and self.raw.get("n_devices", 1) > 1
        return several or held_out(self.raw["source_id"], self.raw["card"])


def corpus_lines() -> list[dict]:
    """The published corpus' rows, then this project's own device runs."""
    rows = []
    for path in sorted(CORPUS.glob("*.jsonl")) + ([DEVICE_RUNS] if DEVICE_RUNS.exists() else []):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def to_row(r: dict) -> Row:
    """A corpus line as a kvscope Setup; InputError (with the reason) when kvscope cannot take it."""
    if r["engine"] == "vllm":
        return vllm_row(r)
    if r["engine"] != "llama.cpp":
        raise InputError(f"engine {r['engine']} not fitted yet")
    common_checks(r)
    # llama.cpp's default -sm layer gives each card its layers; a decode step runs them in turn (each card reads its
    # share, then hands the hidden state on: one card's roofline plus a hop per card, overhead_hop_s), and a prompt's
    # passes overlap across the cards (core.speed.predict.Pipeline; such rows are held out: Row.held_out)
    devices = r.get("n_devices", 1)
    if r["kind"] == "prefill" and min(r["n_prompt"], r.get("n_ubatch") or 512) <= MATVEC_MAX_TOKENS:
        raise InputError(f"a prompt pass of {MATVEC_MAX_TOKENS} tokens or fewer (llama.cpp's mat-vec kernels)")
    card = timed_card(r)
    backend = r["backend"]
    klass = card_class(card, backend)
    if (
        klass == "apu"
        and r["source_id"] not in LATE_2026_SOURCES
        and (build_number(r.get("build")) or 0) < APU_CURRENT_BUILD
    ):
        raise InputError(f"an APU run from before b{APU_CURRENT_BUILD} (superseded)")
    fmt = kvscope_format(r["weights"])
    if cublas_prefill(r, klass, format_family(fmt)):
        raise InputError(f"quantised prefill on CUDA before b{MMQ_DEFAULT_BUILD} (cuBLAS, not MMQ: superseded)")
    if before_vulkan_dp4a(r, card, fmt):
        raise InputError(f"a Vulkan prompt of legacy quants before b{VULKAN_DP4A_BUILD} (FP16 shaders, not DP4A MMQ)")
    ub = r.get("n_ubatch") or 512
    engine = configured(
        "llama.cpp",
        n_ubatch=ub,
        n_batch=max(ub, r.get("n_batch") or 2048),
        flash_attn=bool(r.get("flash_attn")),  # unset: llama-bench's -fa 0 before its 'auto' default
    )
    model = model_of(r["model_id"])
    size = r.get("size_bytes")
    wfile = WeightFile("llama-bench size", "gguf", int(size), (), 0, 0) if size else None
    setup = Setup(model, engine, card, gpus=devices, weights=fmt, weights_file=wfile)
    if host_moe_helper(r, klass, format_family(fmt)) and moe_layers(setup):
        raise InputError(f"a quantised MoE prompt on CUDA before b{CUDA_MOE_DEVICE_BUILD} (a host-side MoE helper)")
    return Row(r, setup, backend, klass, format_family(fmt), r["kind"])


def common_checks(r: dict) -> None:
    """What every engine's run needs before kvscope can time it: one sequence, but for decodes (vLLM's, and
    llama-batched-bench's: a step of `concurrency` sequences, as predict's batch)."""
    if r["backend"] == "cpu":
        raise InputError("a CPU run (tests/bench/fit_cpu.py fits those)")
    if not r.get("model_id"):
        raise InputError("no model_id")
    if r.get("concurrency", 1) != 1 and r["kind"] != "decode":
        raise InputError("concurrency > 1")
    if "SUSPECT" in (r.get("notes") or ""):  # the corpus' own flag: a figure its source contradicts
        raise InputError("flagged SUSPECT in the corpus")
    if r.get("sbc_host"):  # kvscope times a card in a desktop or server, not behind a one-lane link to an Arm board
        raise InputError("a card on a single-board computer (Raspberry Pi)")


def timed_card(r: dict) -> Card:
    card: Card = card_named(r["card"])
    if not card.bandwidth_gb_s or not card.dense_tflops:
        raise InputError(f"no bandwidth or peak for {card.name} in gpus.csv")
    return card


def vllm_row(r: dict) -> Row:
    """A vLLM run: `vllm serve`'s defaults for the card (chunked prefill of its max_num_batched_tokens), its tensor
    parallel over n_devices, the checkpoint's format as the source names it (bf16, fp8, awq, ...)."""
    common_checks(r)
    if r["kind"] == "decode" and r.get("eager"):
        # each step's kernels launched one by one from Python (vllm#20469: 20.6 ms a step where kvscope's roofline
        # with graphs gives 9); kvscope times vllm serve's default, which replays captured CUDA graphs
        raise InputError("vLLM decode with --enforce-eager (no CUDA graphs, unlike the default)")
    card = timed_card(r)
    fmt = format_named(r["weights"]).name
    n = r.get("n_devices", 1)
    setup = Setup(model_of(r["model_id"]), configured("vllm"), card, gpus=n, tp=n, weights=fmt)
    return Row(r, setup, r["backend"], card_class(card, r["backend"]), format_family(fmt), r["kind"])


def before_vulkan_dp4a(r: dict, card: Card, fmt: str) -> bool:
    """A Vulkan prompt that current builds run with integer dot products (groups.matmul_peak) from a build before
    VULKAN_DP4A_BUILD, which ran it with the FP16 shaders."""
    if r["backend"] != "vulkan" or r["kind"] != "prefill" or not built_before(r, VULKAN_DP4A_BUILD):
        return False
    return "integer dot" in matmul_peak(card, "vulkan", fmt).why


def quantised_cuda_prompt(r: dict, family: str) -> bool:
    """A prompt of quantised weights on CUDA: the runs the build rules below can set aside."""
    return r["backend"] == "cuda" and r["kind"] == "prefill" and family != "float"


def cublas_prefill(r: dict, klass: str, family: str) -> bool:
    """A prompt of quantised weights that a build before MMQ_DEFAULT_BUILD ran through cuBLAS on a card whose current
    builds run it as MMQ (every CUDA class but Volta's, cuBLAS then and now, and Pascal's, dp4a MMQ then and now)."""
    return quantised_cuda_prompt(r, family) and klass not in ("volta", "pascal") and built_before(r, MMQ_DEFAULT_BUILD)


def host_moe_helper(r: dict, klass: str, family: str) -> bool:
    """A quantised prompt on a CUDA card that runs it as MMQ (not Volta's cuBLAS) from a build before
    CUDA_MOE_DEVICE_BUILD: had its model routed experts, their row mapping was built on the host."""
    return quantised_cuda_prompt(r, family) and klass != "volta" and built_before(r, CUDA_MOE_DEVICE_BUILD)


def superseded(lines: list[dict]) -> set[int]:
    """The runs (indices into `lines`) that a newer build beat at a deeper context in the same test on the same
    machine: a deeper cache only adds work, so the older build's figure is its own slowness, which current builds
    no longer have. kyuz0's Strix Halo tables gather each depth from a different build and toolbox, and b7423's
    16,384-token column is slower than b8577's or b9187's 32,768 for 14 of its runs (pp2048 of Gemma 3 4B on Vulkan:
    777 against 1,760 t/s). A slower newer build leaves no such trace, so only this direction can be seen."""
    by_test: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(lines):
        by_test[tuple(r.get(k) for k in SAME_TEST)].append(i)
    gone = set()
    for runs in by_test.values():
        timed = [(i, build_number(lines[i].get("build")), lines[i].get("depth") or 0, lines[i]["tok_s"]) for i in runs]
        for i, build, depth, tok_s in timed:
            if build is not None and any((b or 0) > build and d > depth and t > tok_s for _, b, d, t in timed):
                gone.add(i)
    return gone


def load_rows() -> tuple[list[Row], Counter]:
    rows, skipped = [], Counter()
    lines = corpus_lines()
    gone = superseded(lines)
    for i, r in enumerate(lines):
        if i in gone:
            skipped["superseded: a newer build ran the same test deeper and faster"] += 1
            continue
        try:
            rows.append(to_row(r))
        except InputError as err:
            skipped[str(err).split(";")[0][:70]] += 1
    return rows, skipped


# -- kvscope's prediction for a row, and its roofline terms at unit efficiencies ---------------------------------


def _hw(row: Row) -> Hardware:
    return replace(HOST, backend=row.backend)


@cache
def _weights(setup: Setup):
    return setup_weights(setup)


def _timing(row: Row, table: dict | None) -> tuple[Timing, int]:
    """(the Timing of the row's measured work, tokens it produces): one decode step at the run's mean depth, or
    the prompt's prefill from `depth` on (the prefill to depth + n less the prefill to depth)."""
    r, s = row.raw, row.setup
    depth = r.get("depth") or 0
    if row.kind == "decode":
        speed = predict(s, _hw(row), depth + max(1, r["n_gen"] // 2), row.batch, table=table, weights=_weights(s))
        return speed.decode, 1
    full = predict(s, _hw(row), depth + r["n_prompt"], table=table, weights=_weights(s)).prefill
    if depth:
        before = predict(s, _hw(row), depth, table=table, weights=_weights(s)).prefill
        full = minus(full, before)
    if unpipelined(r):
        full = replace(full, pipeline=None, pipelined_s=0.0)
    return full, r["n_prompt"]


def unpipelined(r: dict) -> bool:
    """A prompt over several GPUs whose build ran its passes one after another (VULKAN_EVENTS_BUILD)."""
    several = r["kind"] == "prefill" and r.get("n_devices", 1) > 1
    return several and r["backend"] == "vulkan" and built_before(r, VULKAN_EVENTS_BUILD)


def minus(a: Timing, b: Timing) -> Timing:
    """The work of `a` beyond `b` (the same setup's prefills to two depths): its additive fields subtracted part by
    part, everything else (the per-pass routing, the notes, the layer counts its overhead is made of) as `a` has
    it."""
    parts = [
        replace(p, **{f: getattr(p, f) - getattr(q, f) for f in ADDITIVE})
        for p, q in zip(a.parts, b.parts, strict=True)
    ]
    return replace(
        a,
        parts=tuple(parts),
        overhead_s=a.overhead_s - b.overhead_s,
        all_reduce_s=a.all_reduce_s - b.all_reduce_s,
        pipelined_s=a.pipelined_s - b.pipelined_s,
    )


def predicted_tok_s(row: Row, table: dict | None = None) -> float:
    t, tokens = _timing(row, table)
    return tokens / t.seconds


@dataclass(frozen=True)
class Terms:
    """A row's roofline at unit efficiencies: seconds at 100 % of bandwidth and of peak, and its passes."""

    weights: float
    matmul: float
    cache: float
    attention: float
    passes: int
    prefill: bool
    flash: bool
    family: str
    tokens: int
    measured: float
    pass_tokens: int
    reach: int  # the context the run ends at (core.speed.fit_corpus.reach)
    experts: float = 0.0  # the routed experts' share of `matmul` (unit seconds; padded to their tiles, if they are)
    routed_tokens: int = 1  # tokens each expert sees per pass (pass tokens × top-k ÷ experts)
    old: bool = False  # a build before OLD_BUILD
    expert_weights: float = 0.0  # the routed experts' share of `weights` (unit seconds)
    weight: float = 1.0  # the row's share of the loss (pooled over backends: 1 ÷ its backend's rows)
    recurrent: int = 0  # layers updating their state by a chain of kernels (core.speed.predict.chained_layers)
    # a decode step's routed experts run the tiled matmul (core.speed.groups.tiled_experts): the columns it computes
    # per token routed (core.speed.predict.tiled_columns); 0 where they take the mat-vec kernels
    padding: float = 0.0
    whole_tiles: bool = False  # those tiles at a prompt tile's rate (core.speed.groups.vulkan_whole_tiles)
    moe: int = 0  # layers with routed experts (core.speed.predict.Timing.moe)
    expert_columns: int = 1  # the columns each expert's prompt GEMM computes (core.speed.groups.expert_columns)
    tiles: float = 0.0  # a prompt's MMQ tile traffic with no reuse (core.speed.groups.mmq_traffic_bytes; unit seconds)
    dequant: float = 0.0  # the weights' conversion to FP16 for cuBLAS (core.speed.groups.fp16_dequant; unit seconds)
    hops: int = 0  # GPUs past the first a pass runs through (core.speed.predict.gpu_hops)
    fixed: float = 0.0  # seconds no efficiency scales: tensor parallel's all-reduces (assumed, core.speed.allreduce)
    sequences: int = 1  # sequences a pass carries (core.speed.predict.Timing.sequences)
    matvec: bool = False  # mat-vec kernels: read and FLOPs added (core.speed.predict.DevicePart.matvec)

    def tok_s(self, p: dict) -> float:
        return self.tokens / sum(self.sides(p))

    def bandwidth(self, p: dict) -> float:
        """The share of the card's bandwidth this run's build streams at (old_run: the old builds' own factor)."""
        return p["bandwidth"] * (p.get("old_bandwidth", 1.0) if self.old else 1.0)

    def sides(self, p: dict) -> tuple[float, float]:
        """(the weight matmuls' time, the rest: attention and overhead), as core.speed.predict times them."""
        pre = "prefill" if self.prefill else "decode"
        rate = p[f"{pre}_compute"] * p.get(f"{self.family}:{pre}", 1.0)
        dense, experts = self.matmul - self.experts, self.experts
        expert_rate = rate
        half = p["prefill_half_tokens"]
        if self.prefill:  # core.speed.predict.fill: n ÷ (n + half) per pass, per expert for routed experts
            dense *= (self.pass_tokens + half) / self.pass_tokens
        if self.prefill or self.padding:
            expert_rate = p["prefill_compute"] * p.get(f"{self.family}:prefill", 1.0)
        if self.whole_tiles:  # tiles padded at a prompt tile's rate (core.speed.predict.tiled_columns): the fill at it
            experts *= (self.expert_columns + (p.get("expert_half_tokens") or half)) / self.expert_columns
        elif self.prefill:
            expert_half = p.get("expert_half_tokens") or half
            experts *= (max(self.routed_tokens, self.expert_columns) + expert_half) / self.routed_tokens
        attn = p[f"{pre}_attention"] * (1.0 if self.flash else p["flash_off"])
        bandwidth = self.bandwidth(p)
        # the dense matmuls' roofline plus the routed experts' (core.speed.predict.DevicePart.matmuls_s)
        read = (self.weights - self.expert_weights) / bandwidth
        expert_read = self.expert_weights / (p["expert_bandwidth"] * bandwidth)
        tiles = p.get("tile_traffic", 0.0) * self.tiles / bandwidth
        if self.matvec:  # core.speed.predict.DevicePart.rooflines_s: read and FLOPs added
            rooflines = read + dense / rate + expert_read + experts / expert_rate
        else:
            rooflines = max(read, dense / rate) + max(expert_read, experts / expert_rate)
        matmuls = max(tiles, rooflines)
        matmuls += self.dequant / (bandwidth * p["dequant_bandwidth"]) if self.dequant else 0.0
        overhead = p["overhead_step_s"] + p["overhead_recurrent_s"] * self.recurrent + p["overhead_moe_s"] * self.moe
        overhead += p.get("overhead_hop_s", 0.0) * self.hops + p.get("overhead_seq_s", 0.0) * (self.sequences - 1)
        overhead += p.get("old_overhead_s", 0.0) if self.old else 0.0
        return matmuls, max(self.cache / bandwidth, self.attention / attn) + overhead * self.passes + self.fixed


def terms(row: Row) -> Terms:
    engine = row.setup.engine.name
    t, tokens = _timing(row, {(engine, "gpu"): UNIT, (engine, "cpu"): UNIT})
    r = row.raw
    passes = 1 if row.kind == "decode" else math.ceil(r["n_prompt"] / prefill_chunk(row.setup, r["n_prompt"]))
    experts = max(t.parts, key=lambda p: p.expert_columns)  # the part whose experts' GEMMs are padded, if any
    return Terms(
        sum(p.weights_s for p in t.parts), sum(p.matmul_s for p in t.parts), sum(p.cache_s for p in t.parts),
        sum(p.attention_s for p in t.parts), passes, row.kind == "prefill", flash_attn(row.setup),
        row.family, tokens, r["tok_s"], math.ceil(tokens / passes), reach(r),
        sum(p.expert_flops * (p.expert_padding or 1.0) / (p.peak_gflops * 1e9) for p in t.parts), experts.routed_tokens,
        old_run(r, row.klass),
        sum(p.expert_bytes / (p.bandwidth_gb_s * 1e9) for p in t.parts), recurrent=chained_layers(row.setup),
        padding=max(p.expert_padding for p in t.parts), whole_tiles=any(p.whole_tiles for p in t.parts), moe=t.moe,
        expert_columns=experts.expert_columns,
        tiles=sum(p.tile_bytes / (p.bandwidth_gb_s * 1e9) for p in t.parts),
        dequant=sum(p.dequant_bytes / (p.bandwidth_gb_s * 1e9) for p in t.parts), hops=t.hops, fixed=t.all_reduce_s,
        sequences=t.sequences, matvec=any(p.matvec for p in t.parts),
    )  # fmt: skip


def reach(r: dict) -> int:
    """The context a run ends at: what was cached plus its own prompt or generated tokens. A pp4096 from an empty
    cache attends to 2,048 keys per query on average, as much as a pp512 at depth 1,792: the attention kernels'
    share of the time grows with this, not with the cached depth alone."""
    return (r.get("depth") or 0) + (r["n_prompt"] if r["kind"] == "prefill" else r["n_gen"])


def build_number(build: str | None) -> int | None:
    """llama.cpp's build number: 'b6077 (83bc2f28)' → 6077; None for a commit hash alone ('b8e09f0') or none."""
    m = re.match(r"b(\d+)(?:\s|$)", build or "")
    return int(m.group(1)) if m else None


def built_before(r: dict, number: int) -> bool:
    """A run of a build before b`number`, by its build number (a commit hash alone says nothing) or by its source's
    date (EARLY_2024_SOURCES)."""
    build = build_number(r.get("build"))
    return (build is not None and build < number) or r["source_id"] in EARLY_2024_SOURCES


def old_run(r: dict, klass: str = "") -> bool:
    """Builds before OLD_BUILD ran each decode step without CUDA graphs (ggml-cuda: graphs since May 2024), so
    their per-pass overhead is larger, and streamed their weights further from the bandwidth: in the corpus one
    RTX 3090 decoded Llama 2 7B Q4_0 at 119.9 tok/s early in 2024 (PR #4766) and an RTX 3090 Ti, 8 % more
    bandwidth, at 171-172 in 2025 (discussion #15013). kvscope predicts current builds, so both are fitted as
    nuisance terms (OLD_KEYS: seconds per pass, a factor on the bandwidth) on the rows they concern, written beside
    each entry as `old_build`, which core never reads; the check times the held-out old runs with them
    (old_build_table). Not on Pascal, where current builds run without graphs too (ggml-cuda.cu disables them
    below compute capability 7.0): its class's own overhead is the one without graphs."""
    return built_before(r, OLD_BUILD) and klass != "pascal"


# -- the fit ------------------------------------------------------------------------------------------------------


def loss(rows: list[Terms], p: dict, parent: dict | None) -> float:
    if any(p.get(k, 0.0) > ceiling for k, ceiling in CEILINGS.items()):
        return math.inf
    total = sum(t.weight * abs(math.log(t.tok_s(p) / t.measured)) for t in rows)
    if parent:
        # the nuisance term is free, as is a per-backend term the parent never fitted (0: a log pull from nothing
        # would pin it to its floor)
        pulled = (k for k in p if k in parent and k not in OLD_KEYS and (parent[k] or k not in UNPOOLED))
        total += LAMBDA * sum(abs(math.log(floored(k, p[k]) / floored(k, parent[k]))) for k in pulled)
    return total


def floored(key: str, value: float) -> float:
    """The smallest value a multiplicative step starts from (a parameter at 0 could never leave it)."""
    return max(value, FLOORS.get(key, 1e-9))


def best_descent(rows: list[Terms], starts: list[dict], keys: list[str], parent: dict | None) -> dict:
    """The least-loss fit of `descend` from each start, and from each with the fill curve at each of HALF_STARTS."""
    halves = HALF_STARTS if "prefill_half_tokens" in keys else ()
    tried = [s | {"prefill_half_tokens": h} for s in starts for h in halves]
    fits = [descend(rows, s, keys, parent) for s in [*starts, *tried]]
    return min(fits, key=lambda p: loss(rows, p, parent))


def descend(rows: list[Terms], start: dict, keys: Iterable[str], parent: dict | None, rounds: int = 400) -> dict:
    keys = [k for k in keys if k in start]
    if "expert_half_tokens" in keys and not start["expert_half_tokens"]:  # the experts' curve starts as the dense one
        start = start | {"expert_half_tokens": start["prefill_half_tokens"]}
    return coordinate_descent(lambda p: loss(rows, p, parent), start, keys, rounds, 2e-3, floored)[0]


def tile_ceiling(rows: list[Terms], p: dict) -> float:
    """The largest share of MMQ's no-reuse tile traffic (core.speed.groups.mmq_traffic_bytes) that none of these runs
    beat, and at most all of it. A roofline's ceiling is the best any run attains, so it is set, not descended: each
    run with tiles allows the share at which its tiles alone would take the time its measurement leaves beside the
    rest of the pass (the other terms as fitted), and the least of them is kept. Timed at that share, a run is never
    predicted slower than it measured, so the fit rows' loss can only fall. Above 1 the term would stand for more
    traffic than the tiles can move, a correction of some other term's, so 1 caps it. 0 where no run has tiles."""
    shares = [1.0] if any(t.tiles for t in rows) else []
    for t in rows:
        if t.tiles:
            rest = t.sides(p | {"tile_traffic": 0.0})[1]
            left = t.tokens / t.measured - rest
            if left > 0:
                shares.append(left * t.bandwidth(p) / t.tiles)
    return min(shares, default=0.0)


def fit_keys(rows: list[Terms], pooled: bool = False, per_sequence: bool = False) -> list[str]:
    """The parameters these rows can tell apart: bandwidth, matmul rates and overhead always; an attention rate (and
    the flash-attention-off factor) only where runs reaching DEEP tokens show it, and never pooled over backends (each
    backend's attention kernels differ: a backend without deep runs keeps efficiencies.json's assumed rate); a
    family's factor only if its rows are here."""
    keys = [k for k in KEYS if not k.endswith("_attention")]
    for kind in ("decode", "prefill"):
        if not pooled and any(t.reach >= DEEP and t.prefill == (kind == "prefill") for t in rows):
            keys.append(f"{kind}_attention")
    deep = [t for t in rows if t.reach >= DEEP]
    if pooled or len({t.flash for t in deep}) < 2:  # flash attention's effect shows only at depth, both ways
        keys.remove("flash_off")
    if any(t.old for t in rows) and any(not t.old for t in rows):
        keys += OLD_KEYS
    if pooled or not any(t.moe for t in rows) or all(t.moe for t in rows):
        # only dense rows beside MoE rows tell the experts' bandwidth share and their layers' overhead from the rest,
        # and never pooled over backends: a backend without MoE runs of its own keeps 1 and 0 (experts stream and
        # cost like any weights) rather than another backend's kernels
        keys.remove("expert_bandwidth")
        keys.remove("overhead_moe_s")
        keys.remove("expert_half_tokens")
    elif not any(t.moe and t.prefill for t in rows):  # only MoE prompts show their experts' fill
        keys.remove("expert_half_tokens")
    if not any(t.recurrent for t in rows):  # only models with such layers show their kernels' overhead
        keys.remove("overhead_recurrent_s")
    if pooled or not any(t.hops for t in rows) or all(t.hops for t in rows):
        # only runs of the same kind on one card beside several tell the hop from the rest, and never pooled over
        # backends (each has its own copy between devices); a backend without such runs keeps 0
        keys.remove("overhead_hop_s")
    if pooled or not any(t.dequant for t in rows):  # only runs converting their weights to FP16 show its rate
        keys.remove("dequant_bandwidth")
    if not per_sequence or not any(t.sequences > 1 for t in rows) or all(t.sequences > 1 for t in rows):
        # only decodes of several sequences beside single ones tell the host's work per sequence from the rest; an
        # engine whose host prepares and samples each sequence in Python (per_sequence: vLLM) fits it, llama.cpp's
        # batched decodes (llama-batched-bench, no sampling) keep 0
        keys.remove("overhead_seq_s")
    fams = {f"{t.family}:{'prefill' if t.prefill else 'decode'}" for t in rows if t.family != "float"}
    return keys + sorted(fams)


def start_params(prior: Efficiency) -> dict:
    p = {k: getattr(prior, k) for k in KEYS}
    p["overhead_step_s"] = max(p["overhead_step_s"], 1e-4)
    p["old_overhead_s"] = 1e-3
    p["old_bandwidth"] = 1.0
    p["tile_traffic"] = prior.tile_traffic  # set by tile_ceiling after the descent, never descended
    return p | {f"{f}:{k}": 1.0 for f in FAMILIES if f != "float" for k in ("decode", "prefill")}


def as_entry(engine: str, backend: str, klass: str, p: dict, fit_rows: list[Row], check: list[Row]) -> dict:
    families = [[f, p.get(f"{f}:decode", 1.0), p.get(f"{f}:prefill", 1.0)] for f in FAMILIES if f != "float"]
    where = lambda rows: f"{len(rows)} rows from {len({r.raw['source_id'] for r in rows})} sources"  # noqa: E731
    return {
        "engine": engine, "device": "gpu", "backend": backend, "card_class": klass,
        **{k: p[k] for k in RATE_KEYS}, "overhead_step_s": p["overhead_step_s"], "overhead_layer_s": 0.0,
        "flash_off": p["flash_off"], "prefill_half_tokens": p["prefill_half_tokens"],
        "expert_bandwidth": p["expert_bandwidth"], "expert_half_tokens": p["expert_half_tokens"],
        "overhead_recurrent_s": p["overhead_recurrent_s"],
        "overhead_moe_s": p["overhead_moe_s"], "overhead_hop_s": p["overhead_hop_s"], "tile_traffic": p["tile_traffic"],
        "overhead_seq_s": p["overhead_seq_s"],
        "max_batch": max(r.raw.get("concurrency", 1) for r in fit_rows) if p["overhead_seq_s"] else 0,
        "dequant_bandwidth": p["dequant_bandwidth"],
        "families": families,
        **({"old_build": {"bandwidth": p["old_bandwidth"], "overhead_s": p["old_overhead_s"]}}
           if any(old_run(r.raw, r.klass) for r in fit_rows) else {}),
        "status": "fitted",
        "provenance": f"fitted by tests/bench/fit_corpus.py to published {engine} runs (measurements/speed/corpus) "
        f"of {group_label(engine, backend, klass) if klass != '*' else engine + ' ' + backend}",
        "fitted_on": where(fit_rows), "tp": sorted({r.setup.tp for r in fit_rows}),
        "checked_on": f"{where(fit_rows)}, each lab's runs on a card predicted from a fit on the other labs'"
        if engine in CROSS_CHECKED else where(check),
    }  # fmt: skip


def backend_weighted(rows: list[Row], t: dict[int, Terms]) -> list[Terms]:
    """The rows' terms, each backend weighing 1 in all and, within it, each machine (Row.unit: a lab's runs on one
    card) alike: pooled over backends, the backend with the most runs (once 2025's Strix Halo builds, half the corpus)
    would otherwise set every other backend's starting point, and within one, a machine's long sweep every other
    machine's (one Radeon AI PRO R9700's 30 Vulkan runs of Qwen3.5 hybrids halved the pooled DeltaNet overhead the
    Strix Halo's and an A100's runs show). Five-fold cross-validation by machine on the fit rows alone (no held-out
    run) preferred this to weighing each run alike: decode 71.4 % of 182 within ±20 % against 66.5 % (mean |log
    error| 0.183 against 0.204), the prompts alike (median error 18.9 % both)."""
    units = Counter((r.backend, r.unit) for r in rows)
    per_backend = Counter(backend for backend, _ in units)
    return [replace(t[id(r)], weight=1 / (per_backend[r.backend] * units[(r.backend, r.unit)])) for r in rows]


def fit_all(rows: list[Row]) -> list[dict]:
    fit_rows = [r for r in rows if not r.held_out]
    t = {id(r): terms(r) for r in fit_rows}
    entries = []
    by_engine: dict[str, list[Row]] = defaultdict(list)
    for r in fit_rows:
        by_engine[r.setup.engine.name].append(r)
    for engine, all_rows in by_engine.items():
        if engine in CROSS_CHECKED:
            entries += class_fits(engine, all_rows, t)
            continue
        # runs on cards timed by their FP32 peak (Pascal: dp4a int8, no tensor cores), on Volta (dp4a int8 in short
        # passes, FP16 conversion and cuBLAS in long ones: groups.fp16_dequant), on AMD cards without matrix cores
        # under ROCm (dp4a MMQ) or on cards without a cooperative-matrix path under Vulkan (shader matmuls on the
        # vector ALUs) inform only their own class: their kernels' share of a peak says nothing of the matrix-core
        # kernels' share on every other card
        erows = [r for r in all_rows if not (r.setup.card.fp32_only or r.klass in OWN_KERNELS)]
        # pooled over backends: runs without a deep cache only (deep runs time each backend's own attention kernels,
        # whose slowdowns would otherwise land in the shared overhead)
        base = backend_weighted([r for r in erows if reach(r.raw) < DEEP and r.backend not in OWN_BACKENDS], t)
        # a few starting overheads (the per-pass overhead and the bandwidth trade off against each other on a
        # coordinate descent): the start whose fit has the least loss on the fit rows wins
        prior = start_params(efficiency_for(engine, "gpu"))
        keys = fit_keys(base, pooled=True)
        # the family factors pulled toward 1 (a family's kernels as fast as the float ones), the one pull at this
        # level: with the base rates and the fill curve they trade off along flat valleys of the loss, where an
        # unpulled descent took CUDA's MXFP4 prompts to 0.39 and the fill curve to either of two minima
        neutral = {k: 1.0 for k in keys if ":" in k}
        p0 = best_descent(base, [prior | {"overhead_step_s": o} for o in OVERHEAD_STARTS], keys, neutral)
        by_backend: dict[str, list[Row]] = defaultdict(list)
        for r in erows:
            by_backend[r.backend].append(r)
        for backend, brows in sorted(by_backend.items()):
            bt = [t[id(r)] for r in brows]
            p1 = best_descent(bt, [p0], fit_keys(bt), p0)
            check = [r for r in rows if r.held_out and r.backend == backend and r.setup.engine.name == engine]
            entries.append(as_entry(engine, backend, "*", p1 | {"tile_traffic": tile_ceiling(bt, p1)}, brows, check))
            by_class: dict[str, list[Row]] = defaultdict(list)
            for r in all_rows:
                if r.backend == backend:
                    by_class[r.klass].append(r)
            for klass, crows in sorted(by_class.items()):
                if len(crows) < MIN_ROWS:
                    continue
                ct = [t[id(r)] for r in crows]
                p2 = best_descent(ct, [p1], fit_keys(ct), p1)
                p2 |= {"tile_traffic": tile_ceiling(ct, p2)}
                held = [r for r in check if r.klass == klass]
                entries.append(as_entry(engine, backend, klass, p2, crows, held))
    return entries


def class_fits(engine: str, rows: list[Row], t: dict[int, Terms]) -> list[dict]:
    """A cross-checked engine's fit: each card class of each backend on its own runs, pulled toward the engine's
    priors (efficiencies.json), with no level pooled over backends or classes, and a cost per sequence past the first
    where the class's runs hold a batch sweep (batch_sweep). Its runs come from a few labs, one or two cards a class:
    pooled, 8 MI300X at 1.5x the priors' step time moved CUDA's runs (6 % off the priors) and a Strix Halo's (8 %) by
    a quarter and a half."""
    prior = start_params(efficiency_for(engine, "gpu"))
    by_class: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by_class[(r.backend, r.klass)].append(r)
    out = []
    for (backend, klass), crows in sorted(by_class.items()):
        ct = [t[id(r)] for r in crows]
        keys = fit_keys(ct, per_sequence=batch_sweep(crows))
        out.append(as_entry(engine, backend, klass, best_descent(ct, [prior], keys, prior), crows, []))
    return out


def batch_sweep(rows: list[Row]) -> bool:
    """Whether one lab ran one model on one card at two or more batch sizes: only such a sweep tells the host's work
    per sequence from what else differs between runs (a lab's 8B at batch 1 beside a 120B MoE at 4 would have the
    term stand for the models' difference)."""
    batches: dict[tuple, set[int]] = defaultdict(set)
    for r in rows:
        batches[(r.unit, r.raw["model_id"], r.raw.get("n_devices", 1))].add(r.raw.get("concurrency", 1))
    return any(len(b) > 1 for b in batches.values())


# -- held-out errors ------------------------------------------------------------------------------------------------


def checked(rows: list[Row]) -> list[tuple[Row, float]]:
    """predicted ÷ measured of every run the fit did not see: the held-out runs, and the cross-checked engines'."""
    return ratios([r for r in rows if r.held_out]) + cross_checked(rows)


def cross_checked(rows: list[Row]) -> list[tuple[Row, float]]:
    """predicted ÷ measured of the cross-checked engines' runs, each lab's runs on a card (Row.unit) timed with the
    constants fit_all gives every other unit's runs: the unit's group there, else its backend's, else the engine's
    priors (efficiencies.json) where no other unit ran that backend."""
    mine = [r for r in rows if r.setup.engine.name in CROSS_CHECKED]
    out = []
    for unit in sorted({r.unit for r in mine}):
        fits = {
            (e["engine"], e["backend"], e["card_class"]): entry(e) for e in fit_all([r for r in mine if r.unit != unit])
        }
        for r in (r for r in mine if r.unit == unit):
            engine, backend, klass = r.group
            out += ratios([r], {(engine, "gpu"): efficiency_in(fits, engine, "gpu", backend, klass)})
    return out


@dataclass(frozen=True)
class Stat:
    rows: int
    median: float
    within: float
    ratio: float
    chained_rows: int = 0  # rows of models with Gated DeltaNet layers (core.speed.predict.chained_layers)
    moe_rows: int = 0  # rows of models with routed experts (core.speed.predict.moe_layers)


def stat(ratios: list[float], chained_rows: int = 0, moe_rows: int = 0) -> Stat:
    return Stat(len(ratios), *error_stats(ratios), chained_rows, moe_rows)


def ratios(rows: list[Row], table: dict | None = None) -> list[tuple[Row, float]]:
    """predicted ÷ measured per row, through core.speed.predict with the constants on disk (or `table`'s)."""
    out = []
    for r in rows:
        try:
            out.append((r, predicted_tok_s(r, table or old_build_table(r)) / r.raw["tok_s"]))
        except InputError:
            continue
    return out


def old_build_table(row: Row, fits: list[dict] | None = None) -> dict | None:
    """The constants a run of an old build (old_run) is timed with: its group's (efficiency_for's choice), with the
    old builds' bandwidth factor and per-pass seconds fitted beside the nearest level whose fit rows held old runs;
    None for a current build's run, or where no fit row was an old build's. `fits`: fit_all's entries to choose
    from (a fit in the making: tests/bench/cv_corpus.py's folds); fitted.json's by default."""
    if not old_run(row.raw, row.klass):
        return None
    engine, backend, klass = row.group
    entries = eff_module.fitted().get("groups", ()) if fits is None else fits
    groups = {(g["engine"], g["backend"], g["card_class"]): g for g in entries}
    levels = ((engine, backend, klass), (engine, backend, "*"))
    old = next((groups[k]["old_build"] for k in levels if "old_build" in groups.get(k, {})), None)
    if old is None:
        return None
    e = efficiency_in({k: entry(groups[k]) for k in levels if k in groups}, engine, "gpu", backend, klass)
    return {(engine, "gpu"): replace(e, bandwidth=e.bandwidth * old["bandwidth"],
                                     overhead_step_s=e.overhead_step_s + old["overhead_s"])}  # fmt: skip


def error_groups(results: list[tuple[Row, float]]) -> dict[tuple[str, ...], Stat]:
    """Per kind (decode, prefill) × group (engine, backend, class), per backend, and overall."""
    buckets: dict[tuple[str, ...], list[float]] = defaultdict(list)
    chained: Counter = Counter()
    moe: Counter = Counter()
    for r, x in results:
        engine, backend, klass = r.group
        # once per row, not per key
        has_chained, has_moe = chained_layers(r.setup) > 0, moe_layers(r.setup, _weights(r.setup)) > 0
        for key in ((r.kind, engine, backend, klass), (r.kind, engine, backend, "*"), (r.kind, "*", "*", "*")):
            buckets[key].append(x)
            chained[key] += has_chained
            moe[key] += has_moe
    return {k: stat(v, chained[k], moe[k]) for k, v in sorted(buckets.items())}


def unit_interval(
    results: list[tuple[Row, float]], kind: str, statistic: Callable[[list[float]], float], draws: int = 2000
) -> tuple[float, float]:
    """A 90 % interval of `statistic` over the `kind` rows' ratios, the held-out units (source × card) resampled with
    replacement: rows of one unit share a machine and a build, so they are drawn together, as the split holds them
    out together. How far the figure could move with another draw of sources, not with another fit."""
    units: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r, x in results:
        if r.kind == kind:
            units[(r.raw["source_id"], r.raw["card"])].append(x)
    pool = list(units.values())
    rng = random.Random(0)  # the same interval every run
    values = sorted(statistic([x for _ in pool for x in rng.choice(pool)]) for _ in range(draws))
    return values[int(0.05 * draws)], values[int(0.95 * draws) - 1]


def path_of(row: Row) -> str:
    """The kernel path of core.speed.groups.PATHS a row's figure takes, or "": a decode whose routed experts run
    Vulkan's tiled matmul (core.speed.groups.tiled_experts); a prompt of a model with routed experts, or of float
    experts in ggml-cuda's per-expert loop (core.speed.predict.prompt_path, as a figure's error bar picks them)."""
    if row.kind != "decode":
        n = row.raw["n_prompt"]  # the passes that run the measured prompt, as predict picks a prompt's chunk
        path = prompt_path(
            row.setup, _hw(row), min(prefill_chunk(row.setup, n), n), moe_layers(row.setup, _weights(row.setup))
        )
        return "" if path == SPLIT_PROMPT and unpipelined(row.raw) else path
    timing, _ = _timing(row, None)
    return TILED_EXPERTS if any(p.expert_note for p in timing.parts) else ""


def path_errors(results: list[tuple[Row, float]]) -> list[dict]:
    """fitted.json's error entries of the rows on a kernel path, per kind and group: a figure on that path carries
    its path's error (core.speed.groups.error_bar); the group's own entry keeps every row."""
    buckets: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for r, x in results:
        if path := path_of(r):
            buckets[(r.kind, *r.group, path)].append(x)
    return [
        {"kind": k, "engine": e, "backend": b, "card_class": c, "path": p} | asdict(stat(v))
        for (k, e, b, c, p), v in sorted(buckets.items())
    ]


def path_table(entries: list[dict]) -> str:
    """path_errors' entries, one line each, as they sit inside their groups' rows of `table`."""
    return "\n".join(
        f"  of which {e['kind']} of {group_label(e['engine'], e['backend'], e['card_class'])} {PATHS[e['path']]}: "
        f"{e['rows']} rows, median |err| {e['median']:.1%}, ratio {e['ratio']:.2f}"
        for e in entries
    )


def table(stats: dict[tuple[str, ...], Stat], title: str) -> str:
    lines = [title, f"{'kind':<8} {'group':<58} {'rows':>5} {'median |err|':>12} {'±20 %':>6} {'ratio':>6}"]
    for (kind, engine, backend, klass), s in stats.items():
        name = group_label(engine, backend, klass) if klass != "*" else f"{engine} {backend}, all cards"
        name = "all" if engine == "*" else name
        lines.append(f"{kind:<8} {name:<58} {s.rows:>5} {s.median:>12.1%} {s.within:>6.0%} {s.ratio:>6.2f}")
    return "\n".join(lines)


def main() -> None:
    rows, skipped = load_rows()
    fit_n = sum(not r.held_out for r in rows)
    print(f"corpus: {len(rows)} usable rows ({fit_n} fit, {len(rows) - fit_n} held out); skipped: {dict(skipped)}")
    units = {(r.raw["source_id"], r.raw["card"]) for r in rows}
    print(f"units (source × card): {len(units)}, held out {sum(held_out(*u) for u in units)}")
    if "--check" not in sys.argv:
        start = time.time()
        entries = fit_all(rows)
        kept = json.loads(FITTED.read_text()) if FITTED.exists() else {}
        cpu = [g for g in kept.get("groups", ()) if g["backend"] == "cpu"]  # tests/bench/fit_cpu.py's
        data = {
            "schema_version": 1,
            "about": "Efficiencies per engine, backend and card class fitted to published runs, and each group's "
            "error on the sources held out (tests/bench/fit_corpus.py; see its docstring for the split and the fit).",
            "split": "a source's runs on one card are held out when sha256('<source_id>|<card>') mod 3 == 0; this "
            f"project's own runs on a lent machine ({DEVICE_SOURCE}*) always are. vLLM's are all fitted, and its "
            "errors are cross-checked: each lab's runs on a card predicted from a fit on the other labs'",
            "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "groups": entries + cpu,
            "errors": [e for e in kept.get("errors", ()) if e["backend"] == "cpu"],
        }
        FITTED.write_text(json.dumps(data, indent=1) + "\n")
        eff_module.fitted.cache_clear()
        eff_module.fitted_groups.cache_clear()
        print(f"fitted {len(entries)} groups in {time.time() - start:.0f} s")
    held = checked(rows)
    stats = error_groups(held)
    print(table(stats, "held-out error (predicted ÷ measured through core.speed.predict)"))
    paths = path_errors(held)
    print(path_table(paths))
    if "--check" not in sys.argv:
        data = json.loads(FITTED.read_text())
        fitted_engines = {g["engine"] for g in data["groups"]}
        runs: dict[tuple[str, ...], list[float]] = defaultdict(list)
        for r, x in held:
            runs[(r.kind, *r.group)].append(round(x, 4))
        data["errors"] = [
            {"kind": k, "engine": e, "backend": b, "card_class": c} | asdict(s)
            # an unfitted or cross-checked engine's ratios, which its error bar pools with the seeds' figures
            # (groups.error_bar)
            | ({"ratios": runs[(k, e, b, c)]} if e not in fitted_engines or e in CROSS_CHECKED else {})
            | ({"basis": "cross-checked"} if e in CROSS_CHECKED else {})
            for (k, e, b, c), s in stats.items() if e != "*" and c != "*"
        ] + paths + data["errors"]  # the CPU's last, as fit_cpu.py writes them  # fmt: skip
        FITTED.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
