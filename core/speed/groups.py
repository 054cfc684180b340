"""Which published runs a speed figure resembles, and how far off kvscope was on those it was not fitted to.

A figure's group is (engine, backend, card class): the backend the card runs (llama.cpp's ggml backends; default
from the card's vendor), the class of card (HBM datacenter parts, GDDR consumer and workstation cards, Apple
silicon, other unified-memory APUs, CPUs; on CUDA, Turing and pre-Turing NVIDIA cards apart, on ROCm, AMD cards
without matrix cores apart, and on Vulkan the class is the matrix-core path llama.cpp takes). fitted.json
(tests/bench/fit_corpus.py) holds each group's held-out error; a group with none says so.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from core.errors import InputError
from core.memory.gpus import Card, card_named
from core.memory.llamacpp_compute import OP_OFFLOAD_MIN_BATCH
from core.speed.efficiency import fitted
from core.speed.published import error_figures
from core.units import plural

BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl", "cpu")
BACKEND_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "metal": "Metal", "sycl": "SYCL", "cpu": "CPU"}
CLASSES = {
    "datacenter": "datacenter cards (HBM)",
    "consumer": "consumer cards",
    "workstation": "workstation and GDDR datacenter cards",
    "apple": "Apple silicon",
    "apu": "APUs with unified memory",
    "cpu": "CPUs",
    "turing": "NVIDIA Turing GeForce cards (RTX 20x0, GTX 16x0)",
    "turing-pro": "NVIDIA Turing workstation and datacenter cards (T4, Quadro RTX)",
    "volta": "NVIDIA Volta cards (V100, TITAN V)",
    "pascal": "NVIDIA Pascal cards (GTX 10x0, TITAN Xp, Tesla P40)",
    "coopmat2": "NVIDIA cards (cooperative matrix 2)",
    # any vendor but NVIDIA and Intel, a custom card's among them: in the corpus, Radeons alone
    "coopmat": "cards with cooperative-matrix cores (Radeon RX 7000/9000)",
    "coopmat-intel": "Intel cards with cooperative-matrix cores (Arc B)",
    "no-coopmat": "cards without cooperative-matrix cores (Radeon RX 6000 and older, GTX 16x0, Pascal, Volta)",
    "no-coopmat-intel": "Intel cards without cooperative-matrix cores (Arc A)",
    "no-wmma": "AMD cards without matrix cores (Radeon RX 6000 and older)",
}
# HBM parts: the cards llama.cpp reaches the smallest share of the bandwidth of at one sequence
_HBM = ("A100", "H100", "H200", "H20 ", "GH200", "B200", "GB200", "A30 ", "V100", "MI210", "MI250", "MI300", "MI325")
# Professional NVIDIA parts run tensor cores at full rate with FP32 accumulation, where GeForce halves it: against
# the datasheet BF16 peak, llama.cpp's int8 (MMQ) kernels reach a different share on them
_PRO = re.compile(r"^(RTX (A\d|PRO|\d+ Ada)|Quadro|L40|L4 |A40|A10|A16|A2 |T4|Tesla)")
# llama.cpp's CUDA matmul path by architecture (ggml-cuda/mmq.cu ggml_cuda_should_use_mmq, common.cuh @ 0c1e570):
# Turing (cc 7.5) runs quantised matmuls as MMQ on INT8 MMA (turing_mma_available) but without Ampere's cp.async
# loads (cp_async_available) and with a smaller FP16-accumulate peak than the one the MMQ rate was fitted against;
# Volta has no INT8 MMA: dp4a MMQ below MMQ_DP4A_MAX_BATCH_SIZE (64) tokens, and for longer prompt batches the
# weights are dequantised to FP16 for cuBLAS (fp16_mma_hardware_available). Pascal GP10x (sm_61) has neither tensor
# cores nor usable FP16: dp4a MMQ at every batch size, timed against its FP32 peak (matmul_peak). Neither runs at
# the share of the peak fitted on Ampere and newer, so each is its own class on CUDA. (P100, sm_60, has no dp4a and
# is in neither.)
_TURING = re.compile(r"RTX 20\d0|TITAN RTX|Quadro RTX|^T4 |GTX 16\d0")
_VOLTA = re.compile(r"V100|TITAN V\b")
_PASCAL = re.compile(r"TITAN Xp?\b|GTX 10\d0|^Tesla P(4|40|6)\b|^Quadro P\d")
# llama.cpp's Vulkan matmuls by matrix-core path (ggml-vulkan.cpp @ 0c1e570): NVIDIA drivers get the
# NV_cooperative_matrix2 shaders (coopmat2), other cards VK_KHR_cooperative_matrix (coopmat) only where
# ggml_vk_khr_cooperative_matrix_support allows it: not on Intel Xe1 discrete cards (Arc A: "performance
# regressions") nor on AMD before RDNA3 under AMD's drivers; those run the plain shader matmuls (no-coopmat). Intel's
# cards are classes of their own on either path (coopmat-intel, no-coopmat-intel): ggml-vulkan tunes its shaders per
# vendor (Intel's subgroup size and shared-memory padding, its mat-vec kernel choices, its matmul tile shapes). In the
# corpus a Radeon AI PRO R9700's and an RX 9070 XT's K-quant prompts ran 2.4-5.9x faster than the constants the Arc B
# runs had fitted, and an Arc A770's decodes ran 1.4-2.5x slower than those RDNA2 and Pascal cards fit.
# AMD cards without WMMA or MFMA matrix cores (RDNA2 and older): llama.cpp's HIP build runs their quantised matmuls
# as dp4a MMQ on the vector ALUs (ggml-cuda's amd_wmma_available / amd_mfma_available false), not a matrix-core path
_NO_WMMA = re.compile(r"RX [56]\d\d0|Vega|Radeon VII|RX [45]\d0")
# those AMD cards, Intel's Arc A and GTX 16 cards (Turing without tensor cores) have no cooperative matrices at all
_NO_COOPMAT = re.compile(rf"Arc A\d|Arc Pro A\d|GTX 16\d0|{_NO_WMMA.pattern}")
# GPUs without 8-bit integer dot products (the device line's "int dot: 0"): RDNA1's Navi 1x, Vega 10 and Polaris.
# ggml-vulkan's integer-dot MMQ shaders need them; these cards run legacy quants through the FP16 shaders too.
_NO_INT_DOT = re.compile(r"RX 5\d00|RX [45]\d0\b|Vega (56|64)")
# llama.cpp's Vulkan decode on an Intel card depends on the driver, which kvscope is not told. Under Linux's Mesa
# driver one Arc A770 decoded at 0.58-0.79x its rate under Intel's Windows driver on the same build (b8191: Llama
# 3.1 8B Q4_K_M 32 against 52 t/s, gpt-oss-20b 36 against 62, Llama 2 7B Q4_0 44 against 56; llama.cpp PR #19988),
# and one Arc Pro B70 at 0.36-0.86x its SYCL rate on the same machine (b9739, Mesa 26.0.3; 0.36-0.49x for dense
# models). Both are in measurements/speed/corpus; tests/test_speed_groups.py reads these ranges from there.
INTEL_VULKAN_DRIVER_RANGES = {"windows": (0.58, 0.79), "sycl": (0.36, 0.86)}


def driver_caveat(card: Card | None, backend: str) -> str:
    """What an Intel card's Vulkan decode figure does not know: its driver (INTEL_VULKAN_DRIVER_RANGES)."""
    if backend != "vulkan" or card is None or vendor_of(card) != "Intel":
        return ""
    (wlo, whi), (slo, shi) = INTEL_VULKAN_DRIVER_RANGES["windows"], INTEL_VULKAN_DRIVER_RANGES["sycl"]
    return (
        f"llama.cpp's Vulkan decode on an Intel card depends on its driver, which kvscope is not told: under Linux's "
        f"Mesa driver one Arc A770 decoded at {wlo:.2f}-{whi:.2f}x its Windows rate (llama.cpp PR #19988), and one Arc "
        f"Pro B70 at {slo:.2f}-{shi:.2f}x its SYCL rate"
    )


# packed FP16: two 16-bit multiply-adds per FP32 lane and clock on AMD (Vega and later) and Intel Xe-HPG vector ALUs
VECTOR_FP16_PER_FP32 = 2.0
# llama.cpp's Vulkan backend multiplies BF16 weights on the matrix cores only where the device has BF16 cooperative
# matrices (VK_KHR_shader_bfloat16 and a BF16 coopmat shape); Mesa's RADV turns that on from RDNA4, so on RDNA3/3.5
# BF16 is widened to FP32 and run by the plain FP32 matmul shaders (ggml-vulkan.cpp at b8577; PR #19793), on the
# vector ALUs at their single-issue FP32 rate: a quarter of the dual-issue WMMA 16-bit peak gpus.csv lists for these
# cards (Radeon 8060S: 40 CUs x 64 lanes x 2 FLOP x 2.9 GHz = 14.85 of 59.4 TFLOPS; RX 7900 XTX: 30.7 of 122.8)
VULKAN_BF16_SCALAR_SHARE = 0.25
_RDNA4 = re.compile(r"RX 9\d{3}")
# ggml kernel families: llama.cpp's quantised matmuls (mmq/mmvq, ggml-cpu's vec_dot) differ per block layout
FAMILIES = ("float", "legacy", "k-quant", "i-quant", "mxfp4", "other")
_LEGACY = frozenset({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1"})
_FLOAT = frozenset({"f32", "fp32", "f16", "fp16", "bf16", "float16", "bfloat16", "float32"})
ERROR_BAND = 0.20  # "within" counts held-out runs within ±20 %
TYPICAL_ROWS = 3  # an error bar on fewer runs says it is too few to be typical


def vendor_of(card: Card) -> str:
    """The card's vendor; a few rows of gpus.csv leave it blank (the name says it)."""
    if card.vendor:
        return card.vendor
    name = card.name.lower()
    return "AMD" if ("amd" in name or "radeon" in name) else "Apple" if "apple" in name else ""


def default_backend(card: Card) -> str:
    """The backend llama.cpp is usually built with for this vendor (docs/build.md): CUDA for NVIDIA (and a card
    given only by its memory), ROCm/HIP for AMD, Metal for Apple, SYCL for Intel."""
    return {"AMD": "rocm", "Apple": "metal", "Intel": "sycl"}.get(vendor_of(card), "cuda")


def card_class(card: Card | None, backend: str) -> str:
    if backend == "cpu" or card is None:
        return "cpu"
    if vendor_of(card) == "Apple":
        return "apple"
    if card.unified_memory:
        return "apu"
    if backend == "vulkan":
        vendor = vendor_of(card)
        if any(r.search(card.name) for r in (_NO_COOPMAT, _VOLTA, _PASCAL)):  # Pascal/Volta: no coopmat2 either
            return "no-coopmat-intel" if vendor == "Intel" else "no-coopmat"
        return {"NVIDIA": "coopmat2", "Intel": "coopmat-intel"}.get(vendor, "coopmat")
    if backend == "rocm" and _NO_WMMA.search(card.name):
        return "no-wmma"
    if backend == "cuda" and _TURING.search(card.name):  # the peak's basis differs as for _PRO below
        return "turing-pro" if _PRO.match(card.name) else "turing"
    if backend == "cuda" and _VOLTA.search(card.name):
        return "volta"
    if backend == "cuda" and _PASCAL.search(card.name):
        return "pascal"
    if any(tag in card.name for tag in _HBM):
        return "datacenter"
    return "workstation" if _PRO.match(card.name) else "consumer"


@dataclass(frozen=True)
class MatmulPeak:
    """A card's matmul peak for one weight format on one backend, as a multiple of its listed peak, and why."""

    scale: float = 1.0
    why: str = ""
    # the kernels' FLOPs take their own time after their weights' read instead of hiding under it (CUDA_MATVEC_WHY)
    matvec: bool = False


# sm_61's dp4a: a 4-way int8 dot product with accumulate per FP32 lane and clock (Tesla P40 datasheet: 47 TOPS INT8
# beside 12 TFLOPS FP32)
DP4A_PER_FP32 = 4.0


# Hopper (sm_90) reaches its listed dense peak only through the asynchronous warpgroup wgmma instructions. ggml-cuda's
# own kernels issue none (no wgmma anywhere in ggml-cuda @ 0c1e570): its int8 MMQ matmuls (mma.cuh: m16n8k32 for the
# legacy quants, Q4_K and Q5_K) and its flash-attention prompt kernel (fattn-mma-f16: m16n8k16 FP16; timed by
# GA102_FA_SHARE below, which it does not reach even on mma.sync) run the warp-level mma.sync. On an H100 SXM, Luo
# et al.'s microbenchmark suite, rerun in Johnsonms/NVIDIA-Hopper-Benchmark (reproduction/H100-dapperdingo/raw @
# 374a9f16), timed whole kernels of mma.sync at 668.3 TFLOPS (m16n8k16 FP16, FP32 accumulate) and 1,329.0 TOPS
# (m16n8k32 INT8) against wgmma's 976.6 and 1,950.7: 0.675 and 0.672 of the listed 989.4 and 1,978.9. (Q2_K, Q3_K
# and Q6_K's kernels use the int8 m16n8k16 shape, which reached 995 TOPS, 0.50; not told apart here.) F16/BF16
# prompt matmuls go to cuBLAS (mmf.cu ggml_cuda_should_use_mmf: none past 16 columns), which issues wgmma, and keep
# the listed peak.
HOPPER_MMA_SYNC_SHARE = 0.67
_HOPPER_WHY = (
    "llama.cpp's CUDA kernels issue the warp-level mma.sync, never Hopper's wgmma, and mma.sync ran at "
    f"{HOPPER_MMA_SYNC_SHARE:.2f} of the listed peak in an H100 microbenchmark (FP16 and INT8)"
)


# llama.cpp's flash-attention prompt kernel (fattn-mma-f16: mma.sync m16n8k16, FP16 in, FP32 softmax) is timed at a
# share of the listed peak fitted on GeForce cards, whose listing is GA102's tensor rate per SM and clock: 512 dense
# FP16 FLOP with FP32 accumulate (RTX 3090: 71 TFLOPS = 82 SMs × 1,695 MHz × 512; NVIDIA's GA102 whitepaper). The
# datacenter dies list 4 and 8 times that per SM and clock (A100: 312 TFLOPS = 108 × 1,410 MHz × 2,048; H100 SXM5:
# 989 = 132 × 1,830 MHz × 4,096; their whitepapers), but the kernel does not reach more per SM and clock there:
# this project's H200 run (llama 7B, pp512 at depth 4,096, measurements/speed/llamacpp_device.jsonl) spent 41-43 µs
# a token more than at depth 0, about 55 TFLOPS of attention, 210 FLOP per SM and clock against the RTX 3090's 290
# in the fit's #17505 sweep, where the listed-peak share gave it 374 TFLOPS. The rule is read off those held-out runs
# and the whitepapers' per-SM rates; GA100 takes it by the same reasoning, unchecked (no deep A100 prompt is known).
GA102_FA_SHARE = {"GA100": 512 / 2048, "GH100": 512 / 4096}


def flash_attention_peak(card: Card, backend: str, prefill: bool, flash: bool) -> MatmulPeak:
    """A card's peak for a pass's attention, as a multiple of its listed peak: on the GA100 and GH100 dies, llama.cpp's
    CUDA flash attention for prompts runs at GA102's tensor rate per SM and clock (GA102_FA_SHARE). Decode keeps the
    listed peak: one query mostly takes the vector kernel (fattn.cu ggml_cuda_get_best_fattn_kernel: fattn-vec from
    Ada on, but the mma kernel for more than 4 query heads per KV head at 256-wide heads or 8,192 keys), and a decode
    step's attention is bound by the cache's bytes, not by the matrix rate. Without -fa the attention's matmuls go to
    cuBLAS (wgmma)."""
    if backend != "cuda" or not (prefill and flash):
        return MatmulPeak()
    die = "GH100" if card.hopper else "GA100" if card.ga100 else ""
    if not die:
        return MatmulPeak()
    share = GA102_FA_SHARE[die]
    return MatmulPeak(
        share,
        f"llama.cpp's flash-attention prompt kernel reaches no more per SM and clock on {die} than on GeForce "
        f"cards, whose listed peak is GA102's rate per SM and clock, {share:.3g} of {die}'s (an H200 run at depth "
        "4,096 measured about 55 TFLOPS of attention)",
    )


# ggml's scheduler runs a matmul whose weight sits in host memory on the GPU once its batch has this many rows
# (ggml-backend.cpp "1.off", the backend's offload_op: ggml-cuda.cu, also HIP's, and ggml-vulkan.cpp:
# op_offload_min_batch_size, GGML_OP_OFFLOAD_MIN_BATCH, 32), copying the weight over PCIe for every such pass
OP_OFFLOAD_BACKENDS = ("cuda", "rocm", "vulkan")
# the copy's rate: PCIe 4.0 x16, one direction (16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s), at an assumed 80 %;
# no run in the corpus offloads, so the rate is not checked (`--pcie-gbs` gives another)
PCIE_GB_S = 25.0


def op_offload(backend: str, tokens: int) -> str:
    """Why llama.cpp runs the matmuls of layers left in RAM on the GPU for a pass of `tokens` tokens, or ""."""
    if backend not in OP_OFFLOAD_BACKENDS or tokens < OP_OFFLOAD_MIN_BATCH:
        return ""
    return (
        f"llama.cpp's op offload: a pass of {tokens} tokens (≥ {OP_OFFLOAD_MIN_BATCH}) runs the matmuls of the "
        "layers in system RAM on the GPU, each weight copied over PCIe first (ggml-backend.cpp, offload_op)"
    )


# ggml-sycl keeps its MMQ kernels off (ggml_sycl_supports_mmq: "accuracy issues") and, past its mat-vec kernels'
# 8 tokens, multiplies a pass's weights by converting them for a GEMM: to FP16 for oneDNN only in a build with
# GGML_SYCL_F16 (off by default), else to FP32 for an FP32 GEMM, which runs on the vector ALUs, not the XMX engines
# the listed peak counts (ggml_sycl_op_mul_mat_sycl at 0.3.36's vendored llama.cpp). BF16 weights go to oneDNN as
# BF16 (GGML_SYCL_DNN, on by default). One Arc Pro B70's K-quant prompts ran at about 17 TFLOPS (75 % of its FP32
# rate) and an A770's Q4_0 at 12 (72 %), a tenth of their XMX peaks
SYCL_FP32_GEMM_WHY = (
    "llama.cpp's SYCL backend, as built by default (GGML_SYCL_F16 off), converts a prompt's weights to FP32 for an "
    "FP32 GEMM on the vector ALUs (its MMQ kernels are off): the FP32 peak"
)


def vulkan_bf16_scalar(card: Card, backend: str, fmt: str) -> bool:
    """Whether llama.cpp's Vulkan backend widens this card's BF16 weights to FP32 for its plain shaders
    (VULKAN_BF16_SCALAR_SHARE)."""
    return (
        backend == "vulkan" and fmt.removeprefix("gguf_") == "bf16" and vendor_of(card) == "AMD"
        and card_class(card, backend) in ("coopmat", "apu") and not _RDNA4.search(card.name)
        and "Instinct" not in card.name
    )  # fmt: skip


def vulkan_whole_tiles(card: Card, backend: str, fmt: str) -> bool:
    """Whether ggml-vulkan's tiled matmul computes every column of a routed expert's tile however few tokens it holds:
    its plain shaders do (no cooperative-matrix path on the card, or BF16 widened to FP32); its cooperative-matrix
    shaders skip the loads and the matrix work of a tile's missing tokens (PR #25483, merged July 2026)."""
    plain = card_class(card, backend) in ("no-coopmat", "no-coopmat-intel")
    return backend == "vulkan" and (plain or vulkan_bf16_scalar(card, backend, fmt))


# ggml-cuda multiplies a pass of up to MATVEC_MAX_TOKENS tokens with its mat-vec kernels (mmvq for quantised weights,
# mmvf for float ones), which run on the CUDA cores, not the tensor cores, and whose unpacking and dot products take
# time of their own beside the weights' read. On the CUDA scoreboard's Llama 2 7B Q4_0 decodes (discussion #15013:
# 58 runs on 29 cards from Turing to Blackwell), least squares puts a step's time at the weights' read plus a fixed
# time plus the model's FLOPs over the card's FP32 peak with a median |log error| of 0.050, all but an RTX 2070
# SUPER's two runs within 20 %, where the read plus a fixed time alone leaves 0.111 and 8 runs outside: the A100 and
# A30, whose FP32 peak is a sixteenth of their tensor one, decoded as slowly as GeForce cards with half their
# bandwidth. So such a pass is timed at the FP32 peak, its read and its FLOPs added.
CUDA_MATVEC_WHY = (
    "llama.cpp's CUDA mat-vec kernels (mmvq, mmvf; passes of up to 8 tokens) run on the CUDA cores: timed at the "
    "FP32 peak, their FLOPs after their weights' read"
)
# a card whose FP32 peak is not listed (one given by its figures): half its 16-bit peak, the ratio of every GeForce
# card in gpus.csv from Ampere to Blackwell (workstation cards list 4x, the A100 and H100 15-16x)
GEFORCE_TENSOR_PER_FP32 = 2.0
CUDA_FP32_GUESSED = (
    f"this card's FP32 peak is not known: taken as 1/{GEFORCE_TENSOR_PER_FP32:.0f} of its 16-bit one, as on GeForce "
    "cards since Ampere (a datacenter card's is 1/8 to 1/16 of it, which would slow its decode)"
)


def matmul_peak(card: Card, backend: str, fmt: str, tokens: int = 1) -> MatmulPeak:
    """llama.cpp's matmul peak on a card for a pass of `tokens` tokens: the listed one, except a pass of up to
    MATVEC_MAX_TOKENS tokens on CUDA (its mat-vec kernels, at the FP32 peak: CUDA_MATVEC_WHY; where none is listed,
    GEFORCE_TENSOR_PER_FP32's guess), quantised weights on CUDA on Hopper (HOPPER_MMA_SYNC_SHARE), BF16 on Vulkan on
    AMD's RDNA3/3.5 (VULKAN_BF16_SCALAR_SHARE), quantised weights on CUDA on a card timed by its FP32 peak
    (DP4A_PER_FP32: ggml-cuda runs them as dp4a MMQ at every batch size where fp16_mma_hardware_available is false,
    mmq.cu ggml_cuda_should_use_mmq) or on Volta in passes too short for its cuBLAS path (fp16_dequant; DP4A_PER_FP32
    times its FP32 peak), and legacy quants on Vulkan on a card without a cooperative-matrix path whose vector FP32 peak
    is listed: DP4A_PER_FP32 times that (ggml-vulkan's integer-dot MMQ shaders for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, llama.cpp
    PR #12135, 2025-03; there it doubled pp512 over the FP16 shaders on an RX 6800 XT and tripled it on an RTX 3090 run
    without coopmat), on cards with int8 dot products (not _NO_INT_DOT's). Every other format there runs the FP16
    shaders on the vector ALUs: at most VECTOR_FP16_PER_FP32 times the FP32 peak where the listed peak is a matrix
    engine's Vulkan does not reach (Intel Arc A's XMX: llama.cpp keeps cooperative matrices off on Xe1). On SYCL, passes
    past its mat-vec kernels' tokens of any weights but BF16 run at the listed FP32 peak (SYCL_FP32_GEMM_WHY)."""
    if backend == "cuda" and tokens <= MATVEC_MAX_TOKENS and card.dense_tflops:
        if card.fp32_tflops:
            return MatmulPeak(card.fp32_tflops / card.dense_tflops, CUDA_MATVEC_WHY, matvec=True)
        return MatmulPeak(1 / GEFORCE_TENSOR_PER_FP32, f"{CUDA_MATVEC_WHY}; {CUDA_FP32_GUESSED}", matvec=True)
    if backend == "cuda" and card.fp32_only and format_family(fmt) != "float":
        return MatmulPeak(
            DP4A_PER_FP32,
            "llama.cpp's CUDA backend multiplies quantised weights with dp4a int8 dot products on this card (no "
            "tensor cores): 4 multiply-adds per FP32 lane and clock",
        )
    if (
        backend == "cuda" and card_class(card, backend) == "volta" and format_family(fmt) in MMQ_FAMILIES
        and card.fp32_tflops and card.dense_tflops and tokens < MMQ_DP4A_MAX_BATCH_SIZE  # fp16_dequant's MMQ side
    ):  # fmt: skip
        return MatmulPeak(
            DP4A_PER_FP32 * card.fp32_tflops / card.dense_tflops,
            f"llama.cpp's CUDA backend multiplies quantised weights with dp4a int8 dot products on Volta in passes of "
            f"fewer than {MMQ_DP4A_MAX_BATCH_SIZE} tokens (no INT8 MMA): 4 multiply-adds per FP32 lane and clock",
        )
    if backend == "cuda" and card.hopper and format_family(fmt) != "float":  # int8 MMQ on mma.sync
        return MatmulPeak(HOPPER_MMA_SYNC_SHARE, _HOPPER_WHY)
    if (
        backend == "sycl" and tokens > MATVEC_MAX_TOKENS and fmt.removeprefix("gguf_") != "bf16"
        and card.fp32_tflops and card.dense_tflops
    ):  # fmt: skip
        return MatmulPeak(card.fp32_tflops / card.dense_tflops, SYCL_FP32_GEMM_WHY)
    if (
        backend == "vulkan" and card_class(card, backend) in ("no-coopmat", "no-coopmat-intel")
        and card.fp32_tflops and card.dense_tflops
    ):  # fmt: skip
        if format_family(fmt) == "legacy" and not _NO_INT_DOT.search(card.name):
            return MatmulPeak(
                DP4A_PER_FP32 * card.fp32_tflops / card.dense_tflops,
                "llama.cpp's Vulkan backend multiplies legacy quants (Q4_0 … Q8_0) with integer dot products on this "
                "card's vector ALUs (DP4A MMQ shaders; no cooperative-matrix path): 4 multiply-adds per FP32 lane and "
                "clock",
            )
        vector = VECTOR_FP16_PER_FP32 * card.fp32_tflops / card.dense_tflops
        if vector < 0.99:  # a matrix engine's peak is listed (a packed-FP16 one is 2 × FP32 within rounding)
            return MatmulPeak(
                vector,
                "llama.cpp's Vulkan backend multiplies this format with its FP16 shaders on this card's vector ALUs "
                "(no cooperative-matrix path to its matrix engine): 2 multiply-adds per FP32 lane and clock",
            )
    if not vulkan_bf16_scalar(card, backend, fmt):
        return MatmulPeak()
    return MatmulPeak(
        VULKAN_BF16_SCALAR_SHARE,
        "llama.cpp's Vulkan backend multiplies BF16 with its FP32 shaders on this card (no BF16 cooperative matrix "
        "before RDNA4)",
    )


# llama.cpp multiplies a pass of up to 8 tokens with its mat-vec kernels, a batched decode's (ggml-cuda
# MMVQ_MAX_BATCH_SIZE, ggml-metal ne11_mm_min, ggml-vulkan's mul_mat_vec path), not the prompt GEMMs kvscope's
# prefill times (tests/bench/fit_corpus.py neither fits nor checks such prompt rows)
MATVEC_MAX_TOKENS = 8
# ggml-vulkan's mul_mat_id takes its mat-vec shaders only for F32, F16 and quantised experts at up to 8 tokens a pass
# (ggml_vk_use_mul_mat_vec_id @ 0c1e570; BF16 is not among ggml's quantised types): BF16 experts at any batch, and
# any experts past 8 tokens, run the tiled matmul shader, one tile per expert holding the tokens routed to it. The
# dense mul_mat takes the mat-vec shaders for BF16 too.
VULKAN_MMV_ID_MAX_TOKENS = 8
TILED_EXPERTS = "tiled-experts"  # the kernel path's name in fitted.json's errors (error_bar)
# the columns of the tile ggml-vulkan's tiled matmul gives an expert with few tokens (matmul_id_tile_selector: the
# small tile for up to its width; ggml-vulkan.cpp of llama-cpp-python 0.3.36's vendored llama.cpp): 32 on cards
# without NV_coopmat2 (s_wg_denoms), 64 with it (s_mmqid_wg_denoms)
VULKAN_EXPERT_TILE = {"coopmat2": 64}
VULKAN_EXPERT_TILE_DEFAULT = 32


def vulkan_expert_tile(klass: str) -> int:
    """The columns of ggml-vulkan's small tile for routed experts on a card of this class."""
    return VULKAN_EXPERT_TILE.get(klass, VULKAN_EXPERT_TILE_DEFAULT)


def tiled_experts(backend: str, fmt: str, tokens: int) -> str:
    """Why llama.cpp multiplies a decode step's routed experts with its tiled matmul (a GEMM of the tokens routed to
    each expert) rather than a mat-vec kernel, or "" where it takes the mat-vec one."""
    if backend != "vulkan":
        return ""
    if fmt.removeprefix("gguf_") == "bf16":
        return "llama.cpp's Vulkan backend has no mat-vec path for BF16 experts (ggml_vk_use_mul_mat_vec_id)"
    if tokens > VULKAN_MMV_ID_MAX_TOKENS:
        return (
            f"llama.cpp's Vulkan backend takes its mat-vec path for experts only up to {VULKAN_MMV_ID_MAX_TOKENS} "
            "tokens a pass (ggml_vk_use_mul_mat_vec_id)"
        )
    return ""


# ggml-cuda's mul_mat_id (ggml-cuda.cu and mmf.cu at 0c1e570; HIP builds take the same code) multiplies float experts
# (F16, BF16, F32) of a prompt pass with its MMF kernel only while the pass holds at most 512 tokens, 128 where an
# expert matrix has more than 1,024 rows (ggml_cuda_should_use_mmf, its mul_mat_id branch); past that it copies the
# routing to the host, waits for the stream, and runs one cuBLAS/hipBLAS GEMM per expert. The down projection's rows
# are the hidden size, past 1,024 in every MoE model kvscope bundles. Cards without MMF's matrix cores for the type
# (BF16 before Ampere or RDNA3) loop at any size; that is not told apart here.
MMF_ID_MAX_ROWS = 1024
MMF_ID_MAX_TOKENS = {False: 512, True: 128}  # by "an expert matrix has more than MMF_ID_MAX_ROWS rows"
EXPERT_LOOP = "expert-loop"


def expert_loop(backend: str, fmt: str, tokens: int, hidden: int) -> str:
    """Why llama.cpp multiplies a prompt pass's routed experts one GEMM per expert after a host sync (float experts
    on CUDA or ROCm past MMF's batch limit), or "" where it runs them in one kernel."""
    if backend not in ("cuda", "rocm") or format_family(fmt) != "float":
        return ""
    limit = MMF_ID_MAX_TOKENS[hidden > MMF_ID_MAX_ROWS]
    if tokens <= limit:
        return ""
    return (
        f"llama.cpp's {BACKEND_NAMES[backend]} backend runs float experts past {limit} tokens a pass one GEMM per "
        "expert, after copying the routing to the host (ggml_cuda_mul_mat_id)"
    )


# ggml-cuda's MMQ (mmq.cuh mul_mat_q_switch_J) picks the column tile J up to 128: the first with the fewest tiles
# over the columns it is told to optimise for. For routed experts (ggml_cuda_mul_mat_q) those are the pass's
# tokens (ncols_opt = ne12), not the tokens an expert gets, so each expert's GEMM computes its tokens padded to a
# multiple of J: 128 columns for an expert with 24 tokens in a 256-token pass. PR #26977 (open, 2026-08) measures
# picking J by the tokens per expert on NVIDIA cards; since PR #28552 (2026-09) RDNA3 and RDNA4 pick it that way,
# so the rule is taken for NVIDIA's backend only (the corpus's ROCm runs predate that change, and their own fit
# absorbs it). The mat-vec path (8 tokens or fewer) and float experts (MMF, expert_loop) have no such tiles.
# The tiles it has on NVIDIA's tensor cores: multiples of 8 up to 48, of 16 past it (mmq-config-ampere.cuh; older
# builds' mmq_get_granularity_host: 16 from 48 on). Matrices whose rows are not a multiple of 128 take a fallback
# set (8, 16, 32, 64, 128) that differs only for micro-batches that are not powers of two; not told apart here.
MMQ_TILES = (8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128)
MMQ_FAMILIES = frozenset({"legacy", "k-quant", "i-quant", "mxfp4"})


def mmq_tile(tokens: int) -> int:
    """The column tile J llama.cpp's MMQ picks for `tokens` columns (mul_mat_q_switch_J): the first of MMQ_TILES
    with the fewest tiles."""
    tiles = math.ceil(tokens / MMQ_TILES[-1])
    return next(j for j in MMQ_TILES if j * tiles >= tokens)


def expert_columns(backend: str, fmt: str, tokens: int, routed: int) -> int:
    """Columns each routed expert's GEMM computes in a prompt pass of `tokens` tokens of which `routed` go to it:
    on CUDA, its tokens padded to the MMQ tile chosen for the whole pass; elsewhere, its tokens."""
    if backend != "cuda" or format_family(fmt) not in MMQ_FAMILIES or tokens <= MATVEC_MAX_TOKENS:
        return routed
    tile = mmq_tile(tokens)
    return tile * math.ceil(routed / tile)


# Volta (cc 7.0) has FP16 tensor cores but no INT8 MMA: ggml_cuda_should_use_mmq (mmq.cu) runs its quantised
# matmuls as dp4a MMQ only in passes of fewer than MMQ_DP4A_MAX_BATCH_SIZE tokens (mmq.cuh) and otherwise dequantises
# each weight matrix to FP16 (to_fp16_cuda into a pool buffer, every matmul of every pass) for a cuBLAS GEMM on the
# tensor cores (ggml_cuda_op_mul_mat_cublas). On a V100, llama.cpp PR #22298's llama 8B pp2048 ran at micro-batch 64
# at about half its rate at 32 (Q4_0: 641 and 1,164 t/s): each pass pays for the conversion whatever its tokens.
# Routed experts take the same road from that size: ggml_cuda_should_use_mmq fails for mul_mat_id too, and
# ggml_cuda_mul_mat_id copies the routing to the host and multiplies expert by expert (volta_expert_loop). kvscope
# times them as MMQ still; such a figure carries the per-expert loop's own error (EXPERT_LOOP).
MMQ_DP4A_MAX_BATCH_SIZE = 64


def fp16_dequant(card: Card, backend: str, fmt: str, tokens: int) -> str:
    """Why llama.cpp dequantises a pass's quantised weights to FP16 for cuBLAS instead of running its MMQ kernels
    (Volta, MMQ_DP4A_MAX_BATCH_SIZE tokens a pass or more), or ""."""
    if (
        backend != "cuda" or tokens < MMQ_DP4A_MAX_BATCH_SIZE or format_family(fmt) not in MMQ_FAMILIES
        or card_class(card, backend) != "volta"
    ):  # fmt: skip
        return ""
    return (
        "llama.cpp's CUDA backend dequantises these weights to FP16 for a cuBLAS GEMM on Volta's tensor cores in "
        f"passes of {MMQ_DP4A_MAX_BATCH_SIZE} tokens or more (no INT8 MMA for its MMQ kernels: "
        "ggml_cuda_should_use_mmq), once per matrix and pass"
    )


def volta_expert_loop(card: Card, backend: str, fmt: str, tokens: int) -> str:
    """Why llama.cpp multiplies a prompt pass's quantised routed experts one expert at a time after a host sync on
    Volta (MMQ_DP4A_MAX_BATCH_SIZE tokens a pass or more: ggml-cuda.cu's ggml_cuda_mul_mat_id), or ""."""
    if not fp16_dequant(card, backend, fmt, tokens):
        return ""
    return (
        f"llama.cpp's CUDA backend runs quantised experts on Volta in passes of {MMQ_DP4A_MAX_BATCH_SIZE} tokens or "
        "more one GEMM per expert, after copying the routing to the host (ggml_cuda_mul_mat_id)"
    )


# ggml-cuda's MMQ computes a prompt pass's quantised matmul in tiles of MMQ_ROWS weight rows by J token columns
# (mmq-config-ampere.cuh: I = 128 for every type and J on cards with int8 MMA), and each tile reads its weight rows
# and its columns of the activations (quantised to block_q8_1_mmq, 144 bytes per 128 values) along the whole inner
# dimension; the tiles of one block share a row tile and walk the column tiles (mul_mat_q's stream-k order, `it`
# outermost). Where the L2 keeps nothing between tiles, a pass moves the weights through memory once per column tile
# and the activations once per row tile. How much the L2 saves is not in the source: the share of that traffic a
# prompt is timed by (Efficiency.tile_traffic) is the most that no fitted run beats (fit_corpus.tile_ceiling).
MMQ_ROWS = 128
Q8_1_MMQ_BYTES = 144 / 128


def mmq_traffic(card: Card, backend: str, fmt: str, tokens: int) -> bool:
    """Whether a prompt pass of `tokens` tokens runs its quantised matmuls through MMQ's int8-MMA tiles: CUDA on
    Turing and later (Pascal's dp4a MMQ tiles otherwise, Volta's long batches go to cuBLAS), past the mat-vec path."""
    return (
        backend == "cuda"
        and format_family(fmt) in MMQ_FAMILIES
        and tokens > MATVEC_MAX_TOKENS
        and card_class(card, backend) not in ("pascal", "volta")
    )


def mmq_traffic_bytes(dense_bytes: float, expert_bytes: float, flops: float, tokens: int, columns: int) -> float:
    """Bytes a prompt's MMQ tiles move with no reuse between them: the dense weights once per column tile of the
    pass's `tokens`, the routed experts' once per tile of the `columns` each computes (expert_columns), and the
    activations (flops ÷ 2 weight-activation products) once per row tile."""
    tile = mmq_tile(tokens)
    return (
        dense_bytes * math.ceil(tokens / tile)
        + expert_bytes * math.ceil(columns / tile)
        + flops / 2 * Q8_1_MMQ_BYTES / MMQ_ROWS
    )


def format_family(fmt: str) -> str:
    """The kernel family of a weight format name (llama.cpp type or ftype name, or a checkpoint format)."""
    key = fmt.strip().lower().replace("-", "_").removeprefix("gguf_")
    if key in _FLOAT:
        return "float"
    if key.startswith("iq"):
        return "i-quant"
    if key.split("_")[0] in ("q2", "q3", "q4", "q5", "q6") and "_k" in key:
        return "k-quant"
    if key in _LEGACY:
        return "legacy"
    if key.startswith("mxfp4"):  # mxfp4_moe: llama.cpp's ftype for gpt-oss (experts MXFP4)
        return "mxfp4"
    return "other"


def group_label(engine: str, backend: str, klass: str) -> str:
    return f"{engine} {BACKEND_NAMES.get(backend, backend)} on {CLASSES.get(klass, klass)}"


# the engine whose CPU kernels `python -m core calibrate` times (through llama-cpp-python, or a portable kernel standing
# in for them): a calibration replaces its constants only; other engines' CPU figures take just its RAM figure
CALIBRATED_ENGINE = "llama.cpp"


@dataclass(frozen=True)
class ErrorBar:
    """The held-out error of a figure's group: how far kvscope's prediction was from published runs it was not
    fitted to. `median` is the median |predicted ÷ measured − 1|; None when no held-out run is in the group."""

    kind: str  # "decode" | "prefill"
    group: str
    rows: int = 0
    median: float | None = None
    within: float | None = None  # share of the rows within ±ERROR_BAND
    ratio: float | None = None  # typical predicted ÷ measured (the median)
    calibrated: str = ""  # "calibrated on this host at <date>" when a host calibration set the rates
    on_cpu: bool = False  # a CPU group's error: calibrating the host replaces the constants it measures
    caveat: str = ""  # what of this figure the group's held-out runs do not cover
    # "held-out" (published runs the fit never saw), "cross-checked" (each lab's runs from a fit on the others') or
    # "published" (an unfitted engine's)
    basis: str = "held-out"

    @property
    def checked(self) -> bool:
        return self.median is not None and self.rows > 0

    @property
    def short(self) -> str:
        """For a table cell: '±6 % (13 held-out runs)', or 'not checked'; its label says of which group."""
        if not self.checked:
            return "not checked"
        assert self.median is not None
        return f"±{self.median * 100:.0f} % ({plural(self.rows, f'{self.basis} run')}){' *' if self.caveat else ''}"

    @property
    def label(self) -> str:
        if not self.checked:
            text = f"not checked: no held-out published {self.kind} runs of {self.group}"
        else:
            assert self.median is not None
            runs = plural(self.rows, f"{self.basis} {self.kind} run")
            if self.rows >= TYPICAL_ROWS:
                text = f"±{self.median * 100:.0f} % typical, {runs} of {self.group}"
            else:  # one or two runs show the error they had, not a typical one
                text = f"±{self.median * 100:.0f} % on only {runs} of {self.group}, too few to call it typical"
        text += f"; {self.caveat}" if self.caveat else ""
        if self.calibrated:  # the group's error is that of uncalibrated constants on another CPU
            return f"{self.calibrated}; {calibrated_check_text()} (uncalibrated: {text})"
        if self.on_cpu:
            return f"{text}; `python -m core calibrate` times this host"
        return text


CALIBRATED_CHECK = Path(__file__).resolve().parents[2] / "measurements" / "speed" / "calibrated_check.json"


@lru_cache(maxsize=1)
def calibrated_check() -> dict | None:
    """`make bench-speed`'s checks of calibrated CPU figures against real llama.cpp runs of models the calibration
    never ran, one record per host (tests/bench/bench_speed.py writes them), pooled: the hosts, the figures within
    the band, and each host's median error; None if none was recorded."""
    try:
        hosts = json.loads(CALIBRATED_CHECK.read_text(encoding="utf-8"))["hosts"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not hosts:
        return None
    return {
        "cpus": [h["cpu"] for h in hosts], "band": hosts[0]["band"], "figures": sum(h["figures"] for h in hosts),
        "within": sum(h["within"] for h in hosts), "medians": [h["median"] for h in hosts],
    }  # fmt: skip


def calibrated_check_text() -> str:
    c = calibrated_check()
    if not c:
        return "calibrated figures not checked against other models"
    n = len(c["cpus"])
    hosts = f"one host ({c['cpus'][0]})" if n == 1 else f"{n} hosts ({'; '.join(c['cpus'])})"
    medians = ", ".join(f"{m * 100:.0f} %" for m in c["medians"]) + (" by host" if n > 1 else "")
    return (
        f"calibrated figures checked on {hosts}: {c['within']} of {c['figures']} figures of models "
        f"the calibration never ran within ±{c['band'] * 100:.0f} % (median error {medians})"
    )


def error_stats(ratios: list[float]) -> tuple[float, float, float]:
    """(median |error|, share within ±ERROR_BAND, median ratio) of predicted ÷ measured ratios."""
    errors = [abs(x - 1) for x in ratios]
    return statistics.median(errors), sum(e <= ERROR_BAND for e in errors) / len(errors), statistics.median(ratios)


# A prompt of a model with routed experts multiplies each expert by the few tokens routed to it (llama.cpp's
# mul_mat_id): the held-out MoE prompt sweeps read 0.7-2.8x of measured where the group's dense prompts read within a
# fifth, so such a prompt carries the error of its group's held-out MoE prompts.
MOE_PROMPT = "moe-prompt"
# A dense model's prompt over llama.cpp's layer split: its passes overlap across the GPUs (predict.Pipeline), timed
# from the layer split alone, nothing fitted; such a prompt carries the error of its group's held-out ones
SPLIT_PROMPT = "split-prompt"
# kernel paths whose held-out runs fitted.json keeps apart from their group's (fit_corpus.path_of): a figure on one
# carries that path's own error, not the group's
PATHS = {
    TILED_EXPERTS: "whose routed experts take Vulkan's tiled matmul",
    MOE_PROMPT: "for prompts of models with routed experts",
    EXPERT_LOOP: "for prompts whose experts run one GEMM per expert (ggml-cuda's mul_mat_id loop)",
    SPLIT_PROMPT: "for prompts over several GPUs (llama.cpp's layer split, its passes pipelined)",
}
# paths whose group holds no held-out run on them fall back to the group's own error, which then names what it never
# had (a MoE prompt: "no MoE model among them"; a prompt over several GPUs, FALLBACK_NOTES); a decode on Vulkan's
# tiled experts says "not checked"
GROUP_FALLBACK = (MOE_PROMPT, SPLIT_PROMPT)
FALLBACK_NOTES = {
    SPLIT_PROMPT: "no held-out prompt among them ran on several GPUs: the pipelining of its passes is not checked here"
}


def error_bar(
    engine: str,
    backend: str,
    klass: str,
    kind: str,
    calibrated: str = "",
    chained: int = 0,
    path: str = "",
    moe: int = 0,
) -> ErrorBar:
    """The group's held-out error from fitted.json; for an engine without a fit, its error on the published figures
    of the group (measurements/speed/published_speed.jsonl); else an unchecked ErrorBar. `chained`: the model's
    layers with a chained state update (core.speed.predict.chained_layers), whose overhead the error covers only
    where the group's held-out runs include such a model (`chained_rows`); `moe`, its layers with routed experts,
    likewise (`moe_rows`). `path`: a kernel path of PATHS the figure takes: the error of the group's held-out runs on
    that path, or where none took it the group's own (GROUP_FALLBACK) or "not checked"."""
    label = group_label(engine, backend, klass) + (f" {PATHS[path]}" if path else "")
    on_cpu = calibrates(engine, backend)
    for e in fitted().get("errors", ()):
        key = (e["engine"], e["backend"], e["card_class"], e["kind"], e.get("path", ""))
        if key != (engine, backend, klass, kind, path) or not e["rows"]:
            continue
        if "ratios" in e:  # an unfitted or cross-checked engine's published runs (fit_corpus), beside the seeds'
            seeds = _seeds(engine, kind, backend, klass)
            return _published_bar(kind, label, e["ratios"], seeds, calibrated, on_cpu, e.get("basis", "published"))
        if path:
            caveat = f"on them kvscope's figure was {e['ratio']:.2f}× the measured one (median)"
        else:
            unchecked = []
            if chained and not e.get("chained_rows"):
                unchecked.append(
                    f"no Gated DeltaNet model among them: its {chained} DeltaNet layers' overhead is not checked here"
                )
            if moe and not e.get("moe_rows"):
                unchecked.append(
                    f"no MoE model among them: its {moe} MoE layers' router and expert kernels are not checked here"
                )
            caveat = "; ".join(unchecked)
        return ErrorBar(kind, label, e["rows"], e["median"], e["within"], e["ratio"], calibrated, on_cpu,
                        caveat)  # fmt: skip
    if path in GROUP_FALLBACK:
        bar = error_bar(engine, backend, klass, kind, calibrated, chained, moe=moe)
        return replace(bar, caveat="; ".join(filter(None, (bar.caveat, FALLBACK_NOTES.get(path, "")))))
    if path:  # no held-out run of the group took it
        return ErrorBar(kind, label, calibrated=calibrated)
    if seeds := _seeds(engine, kind, backend, klass):
        return _published_bar(kind, label, [], seeds, calibrated, on_cpu)
    return ErrorBar(kind, label, calibrated=calibrated, on_cpu=on_cpu)


def calibrates(engine: str, backend: str) -> bool:
    """Whether `python -m core calibrate` replaces this group's constants with the host's measured rates."""
    return backend == "cpu" and engine == CALIBRATED_ENGINE


def _seeds(engine: str, kind: str, backend: str, klass: str) -> list[dict]:
    """The seeds' published figures of the engine's group (measurements/speed/published_speed.jsonl)."""
    return [r for r in error_figures(engine, f"{kind}_tok_s") if _group_of(r["setup"]["gpu"]) == (backend, klass)]


def _published_bar(
    kind: str, label: str, runs: list[float], seeds: list[dict], calibrated: str, on_cpu: bool, basis: str = "published"
) -> ErrorBar:
    """An engine's error on every published check of its group pooled, the corpus' runs (predicted ÷ measured) and
    the seeds' figures. `basis` "published": an unfitted engine's, none of which chose its assumed efficiencies;
    "cross-checked": an engine fitted on all its few runs (fit_corpus.CROSS_CHECKED), each lab's runs predicted from
    a fit on the other labs', and the seeds' figures, which no fit saw."""
    where = [plural(len(runs), "run") + " from the speed corpus"] if runs else []
    if seeds:
        cards = ", ".join(sorted({r["setup"]["gpu"] for r in seeds}))
        where.append(f"{plural(len(seeds), 'figure')} from the seeds on {cards}")
    median, within, ratio = error_stats(runs + [1 + r["kvscope"]["error"] for r in seeds])
    if basis == "cross-checked":
        how = "each lab's runs predicted from a fit on the other labs' runs" + (
            ", the seeds' never fitted to" * bool(seeds)
        )
    else:
        how = "this engine's efficiencies are assumed, never fitted to them"
    return ErrorBar(kind, label, len(runs) + len(seeds), median, within, ratio, calibrated, on_cpu,
                    f"{' and '.join(where)}; {how}", basis)  # fmt: skip


def _group_of(card_name: str) -> tuple[str, str]:
    card = card_named(card_name)
    backend = default_backend(card)
    return backend, card_class(card, backend)


_RUNS_ON = {"cuda": ("NVIDIA", "custom"), "rocm": ("AMD",), "metal": ("Apple",), "sycl": ("Intel",)}


AUTO_BACKEND = "auto"  # the app's choice for the card's own backend (default_backend)
BACKEND_CHOICES = (AUTO_BACKEND, "cuda", "rocm", "vulkan", "metal", "sycl")  # the app's; no GPU is -ngl 0 there


def chosen_backend(card: Card, choice: str, engine: str) -> tuple[str | None, str]:
    """The app's backend choice as Hardware.backend (None: the card's own), and why a choice was not taken ("" when
    it was): only llama.cpp picks among ggml backends, so another engine's choice is ignored without a word."""
    if choice == AUTO_BACKEND or engine != "llama.cpp":
        return None, ""
    try:
        return checked_backend(card, choice), ""
    except InputError as err:
        return None, f"{err}; timed on {BACKEND_NAMES[default_backend(card)]} instead"


def checked_backend(card: Card, backend: str, engine: str = "llama.cpp") -> str:
    """The backend, if it can drive this card (Vulkan drives any; CPU runs without it) under this engine: the choice
    among ggml backends is llama.cpp's; vLLM and transformers run a card through its vendor's own stack."""
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    vendors = _RUNS_ON.get(backend)
    if vendors and vendor_of(card) not in vendors:
        raise InputError(
            f"{BACKEND_NAMES[backend]} does not run on {card.name}; choose the backend "
            f"{default_backend(card)} or vulkan (or cpu)"
        )
    own = default_backend(card)
    if engine != "llama.cpp" and backend not in (own, "cpu"):
        raise InputError(
            f"--backend {backend} picks one of llama.cpp's ggml backends; {engine} runs {card.name} on "
            f"{BACKEND_NAMES[own]}: drop --backend, or choose --engine llama.cpp"
        )
    return backend
