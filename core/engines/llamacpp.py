"""llama.cpp's cache, checked byte for byte against libllama from llama-cpp-python 0.3.36, which vendors
ggml-org/llama.cpp@0c1e57098 (llama.cpp 0.5.0-dev; tests/engines/test_llamacpp_engine.py is the referee).

Read in src/llama-context.cpp, llama-model.cpp (create_memory), llama-kv-cache.cpp, llama-kv-cache-iswa.cpp,
llama-memory-hybrid.cpp, llama-memory-recurrent.cpp, llama-hparams.cpp and ggml/src/ggml-common.h:

- Memory objects: attention-only models get one `llama_kv_cache`; with sliding/chunked layers a
  `llama_kv_cache_iswa` (a "base" cache for the full layers, an "swa" cache for the windowed ones); pure SSMs a
  `llama_memory_recurrent`; hybrids a `llama_memory_hybrid` (an attention cache beside a recurrent one).
- Cells and streams (llama-context.cpp: `n_ctx = GGML_PAD(n_ctx, 256)`; `n_ctx_seq = GGML_PAD(n_ctx / n_seq_max,
  256)` unless unified; llama-kv-cache.cpp: `n_stream = unified ? 1 : n_seq_max`): every K/V tensor is
  [row, cells, streams]. kvscope's `account(model, context, batch)` means `batch` sequences of `context` tokens each,
  i.e. n_seq_max = batch and n_ctx = batch × context (what `llama-server -np batch -c batch×context` asks for). Split
  across streams that is pad(context, 256) cells per sequence; with kv_unified one stream of pad(batch × context,
  256) cells that all sequences share. A unified cache may be made for more slots than sequences in flight
  (`LlamaCppOptions.n_seq_max`: llama-server's automatic -np starts 4); then n_seq_max is the slots, which the
  windows, the recurrent states and the graph's token rounding below follow.
- Windowed layers (llama-kv-cache-iswa.cpp): `size_swa = GGML_PAD(min(size_base, n_swa × (unified ? n_seq_max : 1)
  + n_ubatch), 256)` cells per stream, or the base size with swa_full. n_ubatch is min(n_ubatch, n_batch, n_ctx)
  (llama-context.cpp). The SWA cache has the requested -ctk/-ctv types like the base (PR 21277, which kept it F16,
  was reverted by PR 21332).
- K and V rows are kv_heads × head_dim in the cache type: f16 by default; q8_0 is 34 B per 32 values, q4_0 18 B per
  32. A quantised V needs flash attention; with it off, V is stored transposed and every layer's V row is padded to
  the widest one (llama-kv-cache.cpp, TAG_V_CACHE_VARIABLE).
- MLA keeps only the latent + rope key as K (no V tensor at all: `has_v = !is_mla`).
- Recurrent layers (Mamba, Gated DeltaNet, short conv) keep R = conv with d_conv − 1 columns and S = state, both
  f32 whatever the KV type (create_memory passes GGML_TYPE_F32), in max(1, n_seq_max) slots, each with n_rs_seq
  rollback snapshots on the architectures that support them (llm_arch_supports_rs_rollback).
- Conversion and loading: Mistral and Mixtral GGUFs carry no window (they load as "llama"); Gemma 3 is global every
  6th layer whatever its config says (models/gemma3.cpp: load_swa_pattern(ml, 6), the converter writes no pattern);
  Llama 4's chunk is 8192 with every 4th layer global (models/llama4.cpp).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date

from core.dtypes import FP16, FP32, CacheDtype
from core.engines.base import Engine, KindLine
from core.errors import InputError
from core.model.layers import (
    ChunkedAttention,
    FullAttention,
    LayerKind,
    LightningAttention,
    SlidingWindow,
    Storage,
)
from core.model.spec import ModelSpec
from core.units import round_up

CELL_PAD = 256
# Architectures whose llama.cpp loader builds a windowed cache (src/models/*.cpp at 0c1e57098 reading
# LLM_KV_ATTENTION_SLIDING_WINDOW into a swa_type, or fixing one: FIXED_PATTERNS), by their config's model_type. Any
# other model's windows are full attention there: Mistral and Mixtral convert to plain "llama", Qwen2/Qwen3 with
# use_sliding_window to "qwen2"/"qwen3", whose loaders read no window, and phi3's loader drops the window it reads
# ("Phi SWA is currently disabled", models/phi3.cpp, PR #13676). libllama referees phi3 and qwen2 (tests/engines).
SWA_ARCHS = frozenset(
    {
        "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "cohere2", "gpt_oss", "llama4", "llama4_text",
        "exaone4", "olmo3", "lfm2", "lfm2_moe", "phimoe", "smallthinker",
    }
)  # fmt: skip
# Window patterns llama.cpp fixes at load time, whatever the config's layer_types: (period, chunk or None).
# The last layer of each period is global (llama-hparams.cpp set_swa_pattern: swa iff il % period < period - 1).
FIXED_PATTERNS = {
    "gemma3": (6, None),  # models/gemma3.cpp: load_swa_pattern(ml, 6); conversion/gemma.py writes no pattern
    "gemma3_text": (6, None),
    "llama4": (4, 8192),  # models/llama4.cpp: n_swa = 8192; load_swa_pattern(ml, 4)
    "llama4_text": (4, 8192),
}
# llm_arch_supports_rs_rollback (src/llama-arch.cpp): where n_rs_seq snapshots are kept; elsewhere it is clamped to 0.
RS_ROLLBACK = frozenset(
    {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "nemotron_h", "lfm2", "lfm2_moe"}
)


@dataclass(frozen=True)
class Change:
    """A llama.cpp pull request whose rule kvscope applies by build. Build numbers are commit counts on master
    (release tags bNNNN); no clone of llama.cpp was reachable here to count the merge's own number, so a change
    carries the highest build known to lack it and the lowest known to carry it, from logs that print both a
    version and a date. A build number between the two cannot be placed: give the build's date instead."""

    pr: int
    title: str
    merged: str  # YYYY-MM-DD; a build of that day or later carries it
    last_without: int
    first_with: int | None  # None: no build carrying it is known here (the bundled build does)
    evidence: str


# -ngl counts the output layer first: before, the GPU took the last -ngl decoder layers and the output layer only
# when -ngl exceeded the layer count (src/llama-model.cpp load_tensors: i_gpu_start = n_layer - n_gpu_layers).
OUTPUT_FIRST = Change(
    18148,
    "llama: offload output layer to GPU first",
    "2025-12-18",
    7414,
    7524,
    "merged 2025-12-18 (github.com/ggml-org/llama.cpp/pull/18148); b7414 is issue #18085's version (2025-12-16); "
    "b7524 is issue #18337's (2025-12-24), the bug PR #18415 fixed as a follow-up to #18148",
)
# --fit multiplies the context it starts from and its floor by the streams (-np without a unified cache) and keeps
# the context a multiple of 256 × streams; before, it fitted n_ctx_train and --fit-ctx as totals, aligned to 256.
FIT_STREAMS = Change(
    27496,
    "fit: also take into account n_streams",
    "2026-08-21",
    10509,
    None,
    "opened and tested 2026-08-21 (github.com/ggml-org/llama.cpp/pull/27496; its merge date is taken as that day); "
    "b10509 is issue #27447's version (2026-08-20)",
)
# Flash attention's KQ masks as f16 graph inputs. Before, they were f32 inputs even with flash attention and the
# graph cast them to f16 (llm_graph_input_attn_kv::self_kq_mask_cnv = ggml_cast(mask, F16)): the host buffer holds
# the f32 masks, and the GPU its copy of them beside the cast while the first attention layer's q/k/v are live.
F16_MASK = Change(
    23764,
    "llama: use f16 mask for FA to save VRAM",
    "2026-05-27",
    9293,
    9592,
    "merged 2026-05-27 (github.com/ggml-org/llama.cpp/pull/23764); b9293 is issue #23546's version (2026-05-22); "
    "b9592 is the latest tag ollama PR #16671 bumped to (2026-06-11)",
)
CHANGES = (OUTPUT_FIRST, FIT_STREAMS, F16_MASK)
FIRST_COMMIT = date(2023, 3, 10)  # github.com/ggml-org/llama.cpp's "Initial release": no build is older
BUNDLED_BUILD = "0c1e57098"  # llama-cpp-python 0.3.36's vendored commit: every change is in its source


@dataclass(frozen=True)
class LlamaCppBuild:
    """Which llama.cpp build's rules apply: the one place that says which rule holds for which build."""

    spec: str = BUNDLED_BUILD  # as given: bNNNN or a release date; the bundled commit by default
    output_first: bool = True  # OUTPUT_FIRST: -ngl counts the output layer as the first layer offloaded
    fit_streams: bool = True  # FIT_STREAMS: --fit scales its contexts by the streams
    f16_mask: bool = True  # F16_MASK: flash attention's KQ masks are f16 inputs (core.memory.llamacpp_compute)

    @classmethod
    def parse(cls, text: str) -> LlamaCppBuild:
        """`b6500`, `6500` or a release date `2025-09-01`."""
        given = text.strip()
        if re.fullmatch(r"[bB]?\d{1,6}", given):
            number = int(given.lstrip("bB"))
            if number < 1:
                raise InputError(f"llama.cpp build {text!r}: build numbers start at b1")
            return cls(f"b{number}", *(_by_number(c, number) for c in CHANGES))
        try:
            day = date.fromisoformat(given) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", given) else None
        except ValueError:
            day = None
        if day is None:
            raise InputError(
                f"llama.cpp build {text!r} is neither a build number (b6500 or 6500) nor a release date (2025-09-01)"
            )
        if day > date.today():
            raise InputError(f"llama.cpp build {text!r}: that date has not come yet; give the build's release date")
        if day < FIRST_COMMIT:
            raise InputError(
                f"llama.cpp build {text!r}: llama.cpp's first commit is of {FIRST_COMMIT.isoformat()}; give the "
                "build's release date"
            )
        return cls(given, *(given >= c.merged for c in CHANGES))

    @property
    def bundled(self) -> bool:
        return self.spec == BUNDLED_BUILD


def _by_number(change: Change, number: int) -> bool:
    if number <= change.last_without:
        return False
    if change.first_with is not None and number >= change.first_with:
        return True
    known = f"b{change.first_with} carries it" if change.first_with else "no later build number is known here"
    raise InputError(
        f"llama.cpp b{number}: kvscope cannot tell whether it has PR #{change.pr} ({change.title}, merged "
        f"{change.merged}): b{change.last_without} lacks it and {known}. Give the build's release date instead "
        f"(e.g. --llamacpp-build {change.merged}), or leave the flag out for the bundled build's rules"
    )


@dataclass(frozen=True)
class Offload:
    """Where llama.cpp's -ngl puts the model (src/llama-model.cpp:1589-1614 at 0c1e57098): the output layer counts
    as layer n_layers, and the GPU takes the last `-ngl` of those n_layers + 1 slots; the token embedding (the input
    layer) always stays on the CPU. So -ngl N ≤ n_layers puts the last N − 1 decoder layers and the output layer on
    the GPU, and each decoder layer's cache follows it. Builds before OUTPUT_FIRST put the last N decoder layers
    there and the output layer only for N > n_layers (i_gpu_start = n_layer - n_gpu_layers)."""

    layers: range  # decoder layers on the GPU
    output: bool  # the output layer (final norm and head) on the GPU
    cpu_experts: range = range(0)  # GPU layers whose routed experts stay in system RAM
    in_ram: int | None = None  # one GPU's part of a split (Offload.split): the leading layers the whole leaves in RAM

    @classmethod
    def of(
        cls, gpu_layers: int | None, n_layers: int, cpu_experts: range = range(0), output_first: bool = True
    ) -> Offload:
        """`cpu_experts`: layers whose routed experts a blk.i.ffn_*_exps override keeps in system RAM (common/arg.cpp:
        --n-cpu-moe N is range(N); llama.cpp's --fit picks the last layers); layers in RAM keep theirs there anyway."""
        slots = n_layers + 1 if gpu_layers is None else max(0, min(gpu_layers, n_layers + 1))
        if output_first:
            layers, output = range(min(n_layers, n_layers + 1 - slots), n_layers), slots >= 1
        else:
            layers, output = range(max(0, n_layers - slots), n_layers), slots > n_layers
        first = max(layers.start, cpu_experts.start)
        return cls(layers, output, range(first, max(first, min(cpu_experts.stop, n_layers))))

    @property
    def on_cpu(self) -> range:
        """The layers left in system RAM: those before the GPU's, or before the first GPU's for a part of a split."""
        return range(0, self.layers.start if self.in_ram is None else self.in_ram)

    @property
    def pipelines(self) -> bool:
        """With several GPUs llama.cpp runs them as a pipeline only when every layer and the output layer are
        offloaded and no tensor is overridden, as --n-cpu-moe's experts are (llama-context.cpp, pipeline_parallel;
        CUDA, ROCm, Vulkan and SYCL devices have the async compute and events it also needs)."""
        return self.layers.start == 0 and self.output and not self.cpu_experts

    def split(self, n_devices: int) -> tuple[Offload, ...]:
        """The part on each of `n_devices` GPUs with equal free memory (llama-model.cpp load_tensors, split mode
        layer): the default split is each device's share of the free memory, and offloaded slot i of `act` (the
        output layer last) goes to the first device whose cumulative share exceeds i ÷ act, i.e. device
        ⌊i × n_devices ÷ act⌋. So the first GPU holds the most layers and the last holds the output layer.
        A GPU with less free memory (one driving a display) gives a boundary layer to its neighbour."""
        n, act = len(self.layers), len(self.layers) + self.output  # the output layer is slot n

        def part(d: int) -> Offload:
            first, stop = -(-d * act // n_devices), -(-(d + 1) * act // n_devices)  # its slots: first .. stop - 1
            layers = range(self.layers.start + first, self.layers.start + min(stop, n))
            experts = range(max(layers.start, self.cpu_experts.start), min(layers.stop, self.cpu_experts.stop))
            output = self.output and first < stop == act
            return Offload(layers, output, experts if experts.start < experts.stop else range(0), self.layers.start)

        return tuple(part(d) for d in range(n_devices))


def _windowed(layer: LayerKind) -> bool:
    return isinstance(layer, (SlidingWindow, ChunkedAttention))


def windows_dropped(model: ModelSpec) -> str:
    """Why llama.cpp keeps every token on a model's windowed layers, where it does ("" otherwise)."""
    if model.model_type in SWA_ARCHS or not any(_windowed(layer) for layer in model.census):
        return ""
    return (
        f"llama.cpp: {model.model_type}'s sliding windows are full attention there (its loader builds no windowed "
        "cache for this architecture), so every layer keeps every token"
    )


def as_llamacpp_sees(model: ModelSpec) -> ModelSpec:
    """The model's layers as libllama builds them from the converted GGUF. A part of a model (`first_layer`) is
    patterned by its layers' indices in the whole model, so a part of a seen model is seen unchanged."""
    windows = [layer for layer in model.census if _windowed(layer)]  # distinct layers, first appearance first
    if not windows:  # nothing to change: the model itself (a copy would lose its cached census)
        return model
    if model.model_type not in SWA_ARCHS:
        full = {w: FullAttention(w.kv_heads, w.head_dim, w.v_head_dim) for w in windows}
        return model.with_layers(tuple(full.get(layer, layer) for layer in model.layers))
    fixed = FIXED_PATTERNS.get(model.model_type)
    if fixed is None:
        return model
    period, chunk = fixed
    first = windows[0]
    layers = []
    for il, layer in enumerate(model.layers, start=model.first_layer):
        if not isinstance(layer, FullAttention):
            layers.append(layer)
            continue
        full = FullAttention(layer.kv_heads, layer.head_dim, layer.v_head_dim)
        if il % period == period - 1:
            layers.append(full)
        elif chunk is not None:
            layers.append(ChunkedAttention(full.kv_heads, full.head_dim, full.v_head_dim, chunk=chunk))
        else:
            layers.append(SlidingWindow(full.kv_heads, full.head_dim, full.v_head_dim, window=first.token_cap or 0))
    return model.with_layers(tuple(layers), first_layer=model.first_layer)


@dataclass(frozen=True)
class LlamaCppOptions:
    """The context parameters that change the cache (llama_context_params; the CLI flags in brackets)."""

    n_ubatch: int = 512  # -ub
    swa_full: bool = False  # --swa-full: sliding layers keep the whole context
    kv_unified: bool = False  # --kv-unified: all sequences share one stream of cells
    # -np with a unified cache: the slots (n_seq_max) the context is made with, however few requests are in flight;
    # llama-server's automatic -np makes 4 (`slots`). 0, or a cache that is not unified: one slot per sequence
    n_seq_max: int = 0
    n_batch: int = 2048  # -b; the ubatch is capped by it
    flash_attn: bool = True  # -fa; "auto" counts as on when the cache is made (cparams.flash_attn = type != DISABLED)
    n_rs_seq: int = 0  # recurrent rollback snapshots per slot (llama-server sets --draft-max for MTP/EAGLE3 drafts)
    build: LlamaCppBuild = LlamaCppBuild()  # --llamacpp-build: its -ngl, --fit and mask rules (caches: 0c1e57098's)
    # logits rows the graph reserves per ubatch: 0 is n_batch (llama-context.cpp:250); llama-server passes its slots
    # (tools/server/server-context.cpp server_output_limits: n_parallel × (1 + draft tokens), capped at n_batch)
    n_outputs_max: int = 0


@dataclass(frozen=True)
class Frontend:
    """What a llama.cpp front end passes when the user gives no flags."""

    options: LlamaCppOptions
    n_parallel: int  # sequences (slots) it decodes at once: kvscope's `batch`
    source: str


FRONTENDS: dict[str, Frontend] = {
    "llama-cli": Frontend(
        LlamaCppOptions(),
        1,
        "common/common.h:453-457 (n_batch 2048, n_ubatch 512, n_parallel 1), common.h:574-575 (swa_full false, "
        "kv_unified false); tools/cli/cli.cpp parses them with LLAMA_EXAMPLE_CLI, which changes none of them",
    ),
    "llama-server": Frontend(
        LlamaCppOptions(kv_unified=True, n_outputs_max=4, n_seq_max=4),
        4,
        "common/arg.cpp:1403 (LLAMA_EXAMPLE_SERVER: n_parallel = -1, auto); tools/server/server.cpp:156-160 (auto → "
        "n_parallel = 4 and kv_unified = true); giving -np N keeps kv_unified false (arg.cpp:1724, -kvu)",
    ),
    "ollama": Frontend(
        LlamaCppOptions(n_ubatch=512, n_batch=512, n_outputs_max=1),
        1,
        "ollama v0.32.15 llm/llama_server.go:371-372 (-c num_ctx×np -np np: an explicit -np keeps kv_unified off), "
        ":590-591 (-b and -ub num_batch, 512 by default: api/types.go:1116), envconfig/config.go:275 "
        "(OLLAMA_NUM_PARALLEL 1); the context itself: core.engines.runtimes.default_num_ctx",
    ),
    "library": Frontend(
        LlamaCppOptions(swa_full=True),
        1,
        "src/llama-context.cpp:3755-3790 llama_context_default_params (n_ctx 512, n_batch 2048, n_ubatch 512, "
        "n_seq_max 1, swa_full true, kv_unified false), what llama-cpp-python's Llama() starts from "
        "(llama_cpp/llama.py: n_batch 512, flash_attn off, so a quantised V is refused there)",
    ),
}

DEFAULT_FRONTEND = "llama-cli"  # LlamaCppEngine()'s options: one sequence, the common.h defaults


@dataclass(frozen=True)
class LlamaCppCache:
    """One cache of llama.cpp's memory object, named as its accessors name it (get_base/get_swa, get_mem_attn/…)."""

    role: str  # "kv" | "base" | "swa" | "attn" | "attn_base" | "attn_swa" | "recr"
    layers: int  # layers holding tensors in this cache
    cells: int  # attention: cells per stream; recurrent: slots (max(1, n_seq_max))
    streams: int  # attention: streams; recurrent: rows per slot (1 + n_rs_seq snapshots)
    k_bytes: int = 0
    v_bytes: int = 0
    r_bytes: int = 0
    s_bytes: int = 0

    @property
    def total(self) -> int:
        return self.k_bytes + self.v_bytes + self.r_bytes + self.s_bytes


@dataclass(frozen=True)
class LlamaCppEngine(Engine):
    options: LlamaCppOptions = LlamaCppOptions()
    front_end: str = DEFAULT_FRONTEND  # whose defaults the options started from (FRONTENDS)
    name = "llama.cpp"
    rules_version = "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36; checked against libllama's own buffers)"
    kv_dtypes = ("auto", "f16", "fp16", "bf16", "fp32", "f32", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")

    def with_options(self, **changes) -> LlamaCppEngine:
        return replace(self, options=replace(self.options, **changes))

    def with_ubatch(self, n_ubatch: int | None, n_batch: int | None = None) -> LlamaCppEngine:
        """-ub N and -b M as given (None: the front end's). llama.cpp runs min(n_batch, n_ubatch) tokens a pass
        (llama-context.cpp: cparams.n_ubatch = min(n_batch, n_ubatch)), as kvscope reads them everywhere, so -ub
        past the front end's n_batch (2048 for llama-server and llama-cli) changes nothing unless -b is raised too
        (ubatch_note says so)."""
        for flag, value in (("n_ubatch", n_ubatch), ("n_batch", n_batch)):
            if value is not None and value <= 0:
                raise InputError(f"{flag} must be positive, got {value}")
        return self.with_options(n_ubatch=n_ubatch or self.options.n_ubatch, n_batch=n_batch or self.options.n_batch)

    def ubatch_note(self) -> str:
        """What llama.cpp makes of an -ub past -b; "" when it runs as given."""
        o = self.options
        if o.n_ubatch <= o.n_batch:
            return ""
        return (
            f"llama.cpp runs min(-b, -ub) prompt tokens a pass: -ub {o.n_ubatch:,} with -b {o.n_batch:,} runs "
            f"{o.n_batch:,}; raise -b (--batch-size) with it"
        )

    def offload(self, gpu_layers: int | None, n_layers: int, cpu_experts: range = range(0)) -> Offload:
        """Offload.of under this engine's build's -ngl convention."""
        return Offload.of(gpu_layers, n_layers, cpu_experts, self.options.build.output_first)

    @classmethod
    def frontend(cls, name: str) -> LlamaCppEngine:
        try:
            return cls(options=FRONTENDS[name].options, front_end=name)
        except KeyError:
            raise InputError(f"unknown llama.cpp front end {name!r}; choose one of: {', '.join(FRONTENDS)}") from None

    def kv_dtype(self, model: ModelSpec, kv_dtype: str) -> CacheDtype:
        # llama.cpp's cache defaults to f16 whatever the weights are
        return FP16 if kv_dtype.strip().lower() == "auto" else super().kv_dtype(model, kv_dtype)

    def storage(self, model: ModelSpec, kv_dtype: str = "auto") -> Storage:
        if any(isinstance(p, LightningAttention) for layer in model.census for p in layer.parts()):
            raise InputError(f"{model.name}: llama.cpp has no lightning-attention (MiniMax-Text-01) cache to model")
        kv = self.kv_dtype(model, kv_dtype)
        if kv.block_elems > 1 and not self.options.flash_attn:
            raise InputError(
                f"llama.cpp refuses a quantised V cache ({kv.name}) without flash attention: turn flash attention on "
                "(-fa on), or keep the cache f16"
            )
        return Storage(kv=kv, conv=FP32, ssm=FP32, linear=FP32, conv_columns_dropped=1)

    # --- geometry -----------------------------------------------------------------------------------------------

    def streams(self, batch: int) -> int:
        return 1 if self.options.kv_unified else batch

    def slots(self, batch: int) -> int:
        """n_seq_max for `batch` sequences in flight. A unified cache is made for the front end's slots (llama-server's
        4) whoever fills its cells; otherwise each sequence has its own stream (-np = batch)."""
        return max(batch, self.options.n_seq_max) if self.options.kv_unified else batch

    def front_end_runs(self) -> int:
        """Sequences the front end decodes at once however many its memory holds: Ollama the OLLAMA_NUM_PARALLEL
        slots it passes as -np (its logits rows, n_outputs_max), llama-cli one conversation, the library's context
        one sequence (n_seq_max 1); 0 for llama-server, whose slots (or -np) the cache itself is made for."""
        if self.front_end == "llama-server":
            return 0
        if self.front_end == "ollama":  # OLLAMA_NUM_PARALLEL as given (core.engines.runtimes.llama_engine)
            return max(1, self.options.n_outputs_max)
        return FRONTENDS[self.front_end].n_parallel

    def runs_phrase(self, requests: int) -> str:
        """How `requests` of them run at once under this front end, where it runs fewer by default."""
        return {
            "ollama": f"with OLLAMA_NUM_PARALLEL={requests}; Ollama runs {self.front_end_runs()} at a time",
            "llama-cli": f"as llama-server -np {requests}; llama-cli runs one conversation",
            "library": f"with n_seq_max={requests}; a llama-cpp-python Llama() runs one sequence",
        }[self.front_end]

    def fixed_slots(self) -> bool:
        """Whether the cache holds more slots than one sequence: then a windowed layer keeps a window per slot and a
        recurrent layer a state per slot whatever the requests, and at most `slots` requests run at once."""
        return self.slots(1) > 1

    def cells(self, context: int, batch: int = 1) -> int:
        """Cells per stream of the full-attention cache for `batch` sequences of `context` tokens."""
        if self.options.kv_unified:
            return round_up(context * batch, CELL_PAD)
        # n_ctx_seq = pad(pad(batch·context) / batch): the same as pad(context), since pad(b·c) ≤ b·pad(c)
        return round_up(round_up(context * batch, CELL_PAD) // batch, CELL_PAD)

    def ubatch(self, context: int, batch: int = 1) -> int:
        return min(self.options.n_ubatch, self.options.n_batch, context * batch)

    def window_cells(self, cap: int, context: int, batch: int = 1) -> int:
        base = self.cells(context, batch)
        if self.options.swa_full:
            return base
        return round_up(min(base, cap * self.windows(batch) + self.ubatch(context, batch)), CELL_PAD)

    def windows(self, batch: int = 1) -> int:
        """Windows a windowed layer keeps per stream: one per slot of a unified cache, else one
        (llama-kv-cache-iswa.cpp)."""
        return self.slots(batch) if self.options.kv_unified else 1

    def tokens_held(self, layer: LayerKind, context: int, batch: int = 1) -> int:
        cap = layer.token_cap
        return self.cells(context, batch) if cap is None else self.window_cells(cap, context, batch)

    def snapshots(self, model: ModelSpec) -> int:
        return 1 + (self.options.n_rs_seq if model.model_type in RS_ROLLBACK else 0)

    # --- bytes --------------------------------------------------------------------------------------------------

    def _attention_parts(self, layer: LayerKind) -> list[LayerKind]:
        return [p for p in layer.parts() if p.grows]

    def _row_bytes(self, model: ModelSpec, part: LayerKind, kv: CacheDtype) -> tuple[int, int]:
        """K and V bytes per cell of one attention part."""
        rows = part.token_rows()
        k = kv.bytes_for(rows[0])
        if len(rows) < 2:  # MLA: the latent is K; there is no V tensor
            return k, 0
        v_row = rows[1]
        if not self.options.flash_attn:  # V transposed: padded to the widest V row of the model
            v_row = max(
                (
                    p.token_rows()[1]
                    for layer in model.census
                    for p in self._attention_parts(layer)
                    if len(p.token_rows()) > 1
                ),
                default=v_row,
            )
        return k, kv.bytes_for(v_row)

    def caches(
        self, model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto"
    ) -> tuple[LlamaCppCache, ...]:
        """The caches llama.cpp allocates for `batch` sequences of `context` tokens, in its memory object's order."""
        if context <= 0 or batch <= 0:
            raise InputError(f"context and batch must be positive (got context={context}, batch={batch})")
        model = as_llamacpp_sees(model)
        storage = self.storage(model, kv_dtype)
        streams = self.streams(batch)
        base_cells = self.cells(context, batch)
        attn = [p for layer in model.layers for p in self._attention_parts(layer)]
        recurrent = [layer for layer in model.layers if any(p.state_tensors() for p in layer.parts())]
        windowed = [p for p in attn if p.token_cap is not None]
        hybrid = bool(recurrent) and bool(attn)
        prefix = "attn_" if hybrid else ""

        def kv_cache(role: str, parts: list[LayerKind], cells: int) -> LlamaCppCache:
            k = v = 0
            for part in parts:
                k_row, v_row = self._row_bytes(model, part, storage.kv)
                k += k_row * cells * streams
                v += v_row * cells * streams
            return LlamaCppCache(role, len(parts), cells, streams, k_bytes=k, v_bytes=v)

        out = []
        if windowed:
            caps = {p.token_cap for p in windowed}
            if len(caps) > 1:
                raise InputError(f"{model.name}: llama.cpp has one window size (n_swa) per model, not {sorted(caps)}")
            swa_cells = self.window_cells(caps.pop() or 0, context, batch)
            out.append(kv_cache(prefix + "base", [p for p in attn if p.token_cap is None], base_cells))
            out.append(kv_cache(prefix + "swa", windowed, swa_cells))
        elif attn:
            out.append(kv_cache("attn" if hybrid else "kv", attn, base_cells))
        if recurrent:
            rows = self.snapshots(model)
            slots = self.slots(batch) * rows
            r = s = 0
            for layer in recurrent:
                for part in layer.parts():
                    for tensor in part.state_tensors():
                        size = tensor.bytes(storage) * slots
                        if tensor.role == "conv":
                            r += size
                        else:
                            s += size
            out.append(LlamaCppCache("recr", len(recurrent), self.slots(batch), rows, r_bytes=r, s_bytes=s))
        return tuple(out)

    def memory_class(self, model: ModelSpec) -> str:
        """The llama.cpp class of the memory object (llama-model.cpp, create_memory)."""
        roles = {c.role for c in self.caches(model, 1)}
        if "recr" in roles:
            if "attn_swa" in roles:
                return "llama_memory_hybrid_iswa"
            return "llama_memory_hybrid" if "attn" in roles else "llama_memory_recurrent"
        return "llama_kv_cache_iswa" if "swa" in roles else "llama_kv_cache"

    def fixed_bytes_per_sequence(self, model: ModelSpec, kv_dtype: str = "auto") -> int:
        return super().fixed_bytes_per_sequence(model, kv_dtype) * self.snapshots(model)

    def seen(self, model: ModelSpec) -> ModelSpec:
        return as_llamacpp_sees(model)

    def kind_line(
        self, model: ModelSpec, label: str, layers: list[LayerKind], storage: Storage, context: int, batch: int
    ) -> KindLine:
        """The same bytes as `caches`. With kv_unified, tokens_held is the one shared stream's cells."""
        first = layers[0]
        per_token = sum(sum(self._row_bytes(model, p, storage.kv)) for p in self._attention_parts(first))
        held = self.tokens_held(first, context, batch) if first.grows else 0
        fixed = first.fixed_bytes(storage) * self.snapshots(model)
        streams, slots = self.streams(batch), self.slots(batch)
        return KindLine(
            label=label,
            count=len(layers),
            bytes_per_token=per_token,
            tokens_held=held,
            fixed_bytes=fixed,
            token_bytes_total=len(layers) * per_token * held * streams,
            fixed_bytes_total=len(layers) * fixed * slots,
            token_copies=streams,
            fixed_copies=slots,
            held_note=self.held_note(first, context, batch) if first.grows else "",
        )

    def slots_note(self, model: ModelSpec, counts: bool = True) -> str:
        """What a unified cache made for more slots than one sequence holds (fit's note; `size`'s, which counts no
        requests, without `counts`)."""
        slots = self.slots(1)
        roles = {c.role for c in self.caches(model, 1)}
        has = {role: any(r.endswith(role) for r in roles) for role in ("swa", "recr")}
        per_slot = [
            what
            for role, what in (
                ("swa", f"each sliding-window layer keeps {slots} windows and a micro-batch"),
                ("recr", f"each recurrent layer keeps {slots} states"),
            )
            if has[role] and not (role == "swa" and self.options.swa_full)
        ]
        held = f"; {' and '.join(per_slot)}, however few requests run" if per_slot else ""
        if has["swa"] and self.options.swa_full:
            held += "; each sliding-window layer keeps the whole -c (--swa-full)"
        return (
            f"llama.cpp: {slots} slots share one unified cache (llama-server's automatic -np, with --kv-unified): -c "
            f"is every request's tokens together, and one request may fill it{held}; at most {slots} requests run "
            "at once (-np N makes N streams instead, one per request)"
            + (". Each row's figures are one request's (-c the context); its request count names the -c they need"
               if counts else "")
        )  # fmt: skip

    def split_note(self) -> str:
        """A front end with slots (llama-server's 4) but the unified cache turned off: what llama-server does."""
        return (
            f"llama.cpp: llama-server without -np makes {self.options.n_seq_max} slots and turns the unified cache on "
            "whatever --kv-unified says (tools/server/server.cpp); with it off, these figures are llama-server -np N, "
            "one stream of the context per request, N the request count"
        )

    def held_note(self, layer: LayerKind, context: int, batch: int = 1) -> str:
        """How a windowed layer's cells come about, where the window rule sets them ("" otherwise)."""
        cap = layer.token_cap
        seqs = self.windows(batch)
        if cap is None or self.options.swa_full:
            return ""
        if cap * seqs + self.ubatch(context, batch) >= self.cells(context, batch):
            return ""  # the whole context, as the full-attention layers
        windows = f"{seqs} slots × {cap:,} window" if seqs > 1 else f"{cap:,} window"
        return f"{windows} + {self.ubatch(context, batch):,} micro-batch tokens, rounded up to {CELL_PAD} cells"


__all__ = [
    "BUNDLED_BUILD",
    "CHANGES",
    "DEFAULT_FRONTEND",
    "FRONTENDS",
    "Change",
    "Frontend",
    "LlamaCppBuild",
    "LlamaCppCache",
    "LlamaCppEngine",
    "LlamaCppOptions",
    "Offload",
    "as_llamacpp_sees",
]
