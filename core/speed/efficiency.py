"""How close each engine gets to the hardware's roofline: fitted or assumed parameters, kept as data with their
provenance and shown wherever a speed is. efficiencies.json holds one entry per engine and device (priors, and the
CPU fits to this project's own runs); fitted.json (tests/bench/fit_corpus.py) one per engine, backend and card
class, fitted to published runs, with each group's held-out error. A group's entry wins over its device's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.errors import InputError

DATA = Path(__file__).resolve().parent / "efficiencies.json"
FITTED = Path(__file__).resolve().parent / "fitted.json"
DEVICES = ("gpu", "cpu")
# the overheads a pass pays per thing it counts, beside its fixed overhead_step_s: (Efficiency field, the thing, its
# plural). overhead_counts gives a pass's counts in this order; the formulas and rates shown are built from it
OVERHEAD_TERMS = (
    ("overhead_layer_s", "layer", "layers"),
    ("overhead_recurrent_s", "Gated DeltaNet layer", "Gated DeltaNet layers"),
    ("overhead_moe_s", "MoE layer", "MoE layers"),
    ("overhead_hop_s", "GPU hop", "GPU hops"),
    ("overhead_seq_s", "sequence past the first", "sequences past the first"),
)


def overhead_counts(
    layers: int, recurrent: int = 0, moe: int = 0, hops: int = 0, sequences: int = 1
) -> tuple[int, ...]:
    """A pass's count of each of OVERHEAD_TERMS: `layers` decoder layers of which `recurrent` update their state by a
    chain of kernels and `moe` route tokens to experts, `hops` GPUs past the first, `sequences` sequences."""
    return layers, recurrent, moe, hops, sequences - 1


def decode_basis(e: Mapping[str, object]) -> str:
    """What an entry's decode_compute is a share of, where not the card's dense peak: llama.cpp's CUDA mat-vec
    kernels run on the CUDA cores (core.speed.groups.CUDA_MATVEC_WHY)."""
    cuda = e.get("engine") == "llama.cpp" and e.get("device") == "gpu" and e.get("backend") == "cuda"
    return " × the FP32 peak in the mat-vec kernels" if cuda else ""


def overhead_rates(e: Mapping[str, float], per: str = " per ") -> str:
    """An entry's overheads as rates, its terms at 0 left out ("2.29 ms per pass + 0.21 ms per MoE layer"); `e` is an
    Efficiency's fields (vars) or the JSON the CLI prints them from."""
    rates = [f"{e['overhead_step_s'] * 1e3:.3g} ms{per}pass"]
    rates += [f"{e[field] * 1e3:.3g} ms{per}{one}" for field, one, _ in OVERHEAD_TERMS if e.get(field)]
    return " + ".join(rates)


@dataclass(frozen=True)
class Efficiency:
    """One engine on one kind of device.

    On a GPU the compute figures are fractions of the card's dense peak; on a CPU there is no datasheet peak to take
    a fraction of, so they are effective GFLOP/s per thread. `bandwidth` is a fraction of the memory bandwidth (the
    card's, or the RAM copy bandwidth measured on the machine; a fitted CPU figure may exceed 1, since several
    threads streaming reads outrun one thread's numpy copy)."""

    engine: str
    device: str
    bandwidth: float
    decode_compute: float  # weights: matrix × vector (one token per sequence)
    decode_attention: float  # one query's q·k and p·v over the cached keys (vector work, far below peak)
    prefill_compute: float  # weights: matrix × matrix (a chunk of tokens)
    prefill_attention: float  # a chunk's queries against the keys (matrix work)
    overhead_step_s: float  # per forward pass: scheduling, sampling, graph build, launches
    overhead_layer_s: float  # per decoder layer and pass (framework dispatch, e.g. eager PyTorch)
    status: str  # "fitted" | "assumed"
    provenance: str
    fitted_on: str = ""
    checked_on: str = ""
    backend: str = ""  # set on fitted.json's entries: the group they were fitted to
    card_class: str = ""
    # (kernel family, decode factor, prefill factor): the matmul rate of a weight format's family against the
    # float kernels' (core.speed.groups.format_family); a family not listed runs at 1
    families: tuple[tuple[str, float, float], ...] = ()
    # (vector ISA, kernel family, decode factor, prefill factor) on a CPU whose ISA is known (core.speed.ram
    # .vector_isa): on one Zen 4 core, llama.cpp's Q4_K_M prefill ran 2.5x F16's with AVX-512 and 1.2x without.
    # None: no factor of the ISA's own for that kind (the pooled one applies)
    isa_families: tuple[tuple[str, str, float | None, float | None], ...] = ()
    # (vector ISA, GB/s per thread): a decode step streams the attention cache at this rate on a CPU of that ISA.
    # llama.cpp's CPU flash attention walks every cached key once per query head; on two AVX2 EPYCs the time per key
    # followed the K/V bytes, not the FLOPs (llamacpp_cpu_hosts.jsonl). An ISA not listed: the RAM bandwidth's rate
    isa_cache: tuple[tuple[str, float], ...] = ()
    flash_off: float = 1.0  # attention rates × this without flash attention (llama.cpp -fa 0: KQ materialised)
    prefill_half_tokens: float = 0.0  # a prefill pass of this many tokens reaches half the matmul rate (0: no such)
    # routed experts' weights stream at this × `bandwidth`: mul_mat_id reads each selected expert's rows as its own
    # small matrix (gathered by id), further from the bandwidth roofline than one dense matrix of the same bytes
    expert_bandwidth: float = 1.0
    # a routed expert's GEMM in a prompt reaches half the matmul rate at this many tokens routed to it in the pass:
    # mul_mat_id's tiles fill per expert with a curve of their own; 0: the dense pass's (prefill_half_tokens)
    expert_half_tokens: float = 0.0
    # per pass and layer whose state update is a chain of small kernels (LayerKind.chained_update: Gated DeltaNet in
    # llama.cpp), whose launches a decode step pays on top of the layer's bytes
    overhead_recurrent_s: float = 0.0
    # per pass and layer with routed experts: the router's and mul_mat_id's chain of small kernels (top-k, the ids'
    # grouping, the gathered expert matmuls), which a decode step pays on top of the experts' bytes
    overhead_moe_s: float = 0.0
    # per pass and GPU past the first that llama.cpp's layer split (-sm layer) runs it through: the hidden state's
    # copy to the next GPU and the wait for it. In one source's b2824 runs of a model on 1 and on 4 identical cards,
    # a decode step took 0.2-0.5 ms more per card added (xiongjiedai: A40, L40S, RTX A6000 and Ada, 3090, 4090)
    overhead_hop_s: float = 0.0
    # per pass and sequence past the first in it: an engine's per-sequence work on the host each step (vLLM's input
    # preparation, sampling and output processing). AMD's and Oracle's vLLM runs on 8 MI300X grew 0.14-0.44 ms a
    # step per sequence added, where the weights' and the attention's rooflines grow 0.03-0.07 ms
    overhead_seq_s: float = 0.0
    max_batch: int = 0  # the most sequences a step ran in the runs overhead_seq_s was fitted on (0: not fitted)
    # the share of a prompt's MMQ tile traffic (weights once per column tile, activations once per row tile: core
    # .speed.groups.mmq_traffic_bytes) that crosses memory, the most no fitted run of the group beats; 0: not timed
    tile_traffic: float = 0.0
    # the weights' conversion to FP16 for cuBLAS (core.speed.groups.fp16_dequant: Volta's long passes) moves its
    # bytes at this × `bandwidth`
    dequant_bandwidth: float = 1.0
    tp: tuple[int, ...] = ()  # tensor-parallel sizes of the runs a fitted entry was fitted on (); priors: none

    @property
    def compute_unit(self) -> str:
        return "GFLOP/s per thread" if self.device == "cpu" else "× card dense peak"

    def overhead_s(self, layers: int, recurrent: int = 0, moe: int = 0, hops: int = 0, sequences: int = 1) -> float:
        """Per pass: the fixed term and each of OVERHEAD_TERMS × its count (overhead_counts)."""
        counts = overhead_counts(layers, recurrent, moe, hops, sequences)
        terms = zip(OVERHEAD_TERMS, counts, strict=True)
        return self.overhead_step_s + sum(getattr(self, field) * n for (field, _, _), n in terms)

    def isa_factor(self, family: str, prefill: bool, isa: str) -> float | None:
        """The family's factor fitted on CPUs of this ISA alone, if there is one."""
        for i, name, decode, pre in self.isa_families:
            if isa and (i, name) == (isa, family):
                return pre if prefill else decode
        return None

    def isa_cache_rate(self, isa: str) -> float | None:
        """GB/s per thread at which a CPU of this ISA streams the decode's attention cache, if fitted."""
        return next((rate for i, rate in self.isa_cache if isa and i == isa), None)

    def family_factor(self, family: str, prefill: bool, isa: str = "") -> float:
        """The family's factor on this ISA where the fit has one, else the one pooled over every CPU (or card)."""
        own = self.isa_factor(family, prefill, isa)
        if own is not None:
            return own
        for name, decode, pre in self.families:
            if name == family:
                return pre if prefill else decode
        return 1.0


def entry(row: dict) -> Efficiency:
    """An Efficiency from its JSON form (families as lists there)."""
    known = {k: v for k, v in row.items() if k in Efficiency.__dataclass_fields__}
    families = tuple((str(f), float(d), float(p)) for f, d, p in known.pop("families", ()))
    isa_families = tuple(
        (str(i), str(f), None if d is None else float(d), None if p is None else float(p))
        for i, f, d, p in known.pop("isa_families", ())
    )
    isa_cache = tuple((str(i), float(r)) for i, r in known.pop("isa_cache", ()))
    tp = tuple(int(n) for n in known.pop("tp", ()))
    return Efficiency(**known, families=families, isa_families=isa_families, isa_cache=isa_cache, tp=tp)


@lru_cache(maxsize=1)
def efficiencies() -> dict[tuple[str, str], Efficiency]:
    rows = json.loads(DATA.read_text(encoding="utf-8"))["entries"]
    return {(r["engine"], r["device"]): entry(r) for r in rows}


@lru_cache(maxsize=1)
def fitted() -> dict:
    """fitted.json as written by tests/bench/fit_corpus.py; empty until a fit has been run."""
    try:
        return json.loads(FITTED.read_text(encoding="utf-8"))
    except OSError:
        return {}


@lru_cache(maxsize=1)
def fitted_groups() -> dict[tuple[str, str, str], Efficiency]:
    return {(r["engine"], r["backend"], r["card_class"]): entry(r) for r in fitted().get("groups", ())}


def efficiency_for(engine: str, device: str, backend: str = "", card_class: str = "") -> Efficiency:
    """The group's fitted entry (engine, backend, card class), else its backend's pooled one ('*'), else the
    engine's on that device (efficiencies.json)."""
    return efficiency_in(fitted_groups(), engine, device, backend, card_class)


def efficiency_in(
    groups: dict[tuple[str, str, str], Efficiency], engine: str, device: str, backend: str = "", card_class: str = ""
) -> Efficiency:
    """efficiency_for's choice among `groups` (fitted.json's, or a fit's in the making: fit_corpus' cross-check)."""
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":  # a CPU's backend and class are the CPU's own (core.speed.groups)
        backend, card_class = "cpu", "cpu"
    for key in ((engine, backend, card_class), (engine, backend, "*")):
        if key in groups:
            return groups[key]
    try:
        return efficiencies()[(engine, device)]
    except KeyError:
        raise InputError(f"no speed parameters for {engine} on {device}") from None
