"""Tensor parallel's all-reduces. vLLM splits each decoder layer's matmuls over its TP GPUs and joins the shares with
two all-reduces of the hidden state a layer (after the attention's output projection and after the MLP's down
projection; RowParallelLinear). At one token a step each is a few KB, so its latency, not its bytes, sets its time,
and 160 of them (Llama 3.1 70B) add milliseconds to a step the roofline gives as a few.

The figures are assumed from published microbenchmarks, not fitted: the corpus' vLLM runs over several GPUs (8 MI300X
and 8 H200 at TP 8, 2 H100 at TP 2) are fitted with these all-reduces as fixed seconds of their steps
(tests/bench/fit_corpus.py Terms.fixed), so a gap of the fabric's lands in the fitted bandwidth and step.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.memory.gpus import Card
from core.speed.groups import card_class, default_backend

ALL_REDUCES_PER_LAYER = 2
ACTIVATION_BYTES = 2  # the hidden state reduced in bf16/fp16


@dataclass(frozen=True)
class Link:
    """How a card's GPUs reach each other for an all-reduce: its latency and its bus bandwidth (NCCL's busBw, which
    the bytes × 2(n−1)/n of a ring reduce divide by)."""

    name: str
    latency_s: float
    bus_gb_s: float
    source: str


# SXM/OAM parts on NVSwitch or Infinity Fabric: vLLM's custom all-reduce (one kernel, peers' buffers read over the
# fabric) on H100 took 8.5-11.8 us at TP 2, 4 and 8 for messages up to 32 KB, without CUDA graphs (sglang#2904's
# table of vLLM's kernel); NCCL moves ~370 GB/s busBw over H100's NVLink (nccl-tests#212). MI300X's xGMI fabric has
# its own kernels (QuickReduce), timed here as NVLink's for want of a published figure.
FABRIC = Link(
    "NVLink / Infinity Fabric",
    10e-6,
    370.0,
    "vLLM's custom all-reduce on H100, 8.5-11.8 µs at TP 2-8 up to 32 KB (sglang#2904); NCCL ~370 GB/s busBw on "
    "H100 NVLink (nccl-tests#212); MI300X's fabric assumed alike",
)
# PCIe cards: vLLM turns its custom all-reduce off past two GPUs without NVLink (custom_all_reduce.py; vllm#56128),
# and GeForce cards have no peer access, so NCCL runs it: 56.9 us at 8 KB and 63.8 at 16 KB on 8 A800 PCIe
# (vllm#50576); PCIe 4.0 x16's 31.5 GB/s at an assumed 80 % for the bytes
PCIE = Link(
    "PCIe",
    57e-6,
    25.0,
    "NCCL on 8 A800 PCIe, 56.9 µs at 8 KB (vllm#50576; vLLM's own kernel is off past two PCIe GPUs); PCIe 4.0 ×16 at "
    "an assumed 80 %",
)


PCIE_BOARDS = ("A30 ",)  # HBM cards sold only as PCIe boards whose names do not say so (the A30's bridge joins pairs)


def link_of(card: Card) -> Link:
    """The fabric of SXM/OAM parts (HBM datacenter cards not sold as PCIe boards), else PCIe."""
    hbm = card_class(card, default_backend(card)) == "datacenter"
    return FABRIC if hbm and "PCIe" not in card.name and not card.name.startswith(PCIE_BOARDS) else PCIE


@dataclass(frozen=True)
class AllReduces:
    """A pass's all-reduces: how many, of how many bytes each, over which link, and their time."""

    count: int
    message_bytes: int
    tp: int
    link: Link

    @property
    def each_s(self) -> float:
        ring = 2 * (self.tp - 1) / self.tp  # a ring reduce moves 2(n-1)/n of the message per GPU
        return self.link.latency_s + self.message_bytes * ring / (self.link.bus_gb_s * 1e9)

    @property
    def seconds(self) -> float:
        return self.count * self.each_s

    def text(self) -> str:
        return (
            f"{self.count} all-reduces (tensor parallel {self.tp}, {ALL_REDUCES_PER_LAYER} a layer) × ("
            f"{self.link.latency_s * 1e6:.3g} µs + {self.message_bytes:,} B × 2({self.tp}−1)/{self.tp} ÷ "
            f"{self.link.bus_gb_s:.3g} GB/s) over {self.link.name} = {self.seconds * 1e3:.3f} ms (assumed, not "
            f"fitted: {self.link.source})"
        )


def all_reduces(tp: int, layers: int, hidden: int, tokens: int, card: Card) -> AllReduces | None:
    """A pass of `tokens` tokens through `layers` decoder layers split over `tp` GPUs; None on one GPU."""
    if tp < 2:
        return None
    return AllReduces(ALL_REDUCES_PER_LAYER * layers, tokens * hidden * ACTIVATION_BYTES, tp, link_of(card))
