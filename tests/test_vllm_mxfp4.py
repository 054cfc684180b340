"""gpt-oss's MXFP4 experts as vLLM holds them, against the weight sizes vLLM logged at start-up.

Published "Model loading took" figures: gpt-oss-120b 64.38 GiB on Hopper (OAI Triton kernels) and 65.97 GiB with
Marlin; gpt-oss-20b 13.72 GiB. The checkpoint-only estimate is 5-8 % under each.
"""

from __future__ import annotations

import pytest

from core.engines.vllm_engine import VllmEngine
from core.engines.vllm_mxfp4 import KERNELS, expert_bytes, kernel_for, loading_growth
from core.fit import Setup, Solver
from core.memory.gpus import card_named
from core.memory.quant import weights_bytes
from core.model.loading import load_model
from core.model.params import count_params

GIB = 1 << 30


def _checkpoint_bytes(name: str) -> int:
    return weights_bytes(count_params(load_model(name)), "mxfp4", 2).total


def _loaded_bytes(name: str, kernel: str) -> int:
    model = load_model(name)
    return _checkpoint_bytes(name) + loading_growth(model.config, KERNELS[kernel])


def test_checkpoint_expert_is_fp4_plus_e8m0_scales_plus_bf16_biases():
    h = i = 2880
    assert expert_bytes(h, i) == (3 * h * i) // 2 + (3 * h * i) // 32 + 2 * (2 * i + h)


def test_marlin_pads_to_its_tiles():
    # gpt-oss: intermediate 2880 → 2944 (128), hidden 2880 → 3072 (256): values + scales of both matrices
    h, i = 3072, 2944
    fp4 = 3 * h * i // 2 + 3 * h * i // 32
    assert expert_bytes(2880, 2880, KERNELS["marlin"]) == fp4 + 2 * (2 * i + h)


def test_hopper_swizzle_pads_packed_rows_to_64_and_columns_to_256():
    # gate_up stored as (H/2 bytes) × 2I: 1440 → 1472 rows, 5760 → 5888 columns; down: 1440 → 1472, 2880 → 3072
    values = 1472 * 5888 + 1472 * 3072
    # scales: gate_up (2I rows → 5888) × 90, down (H rows → 3072) × 90
    scales = 5888 * 90 + 3072 * 90
    assert expert_bytes(2880, 2880, KERNELS["triton-hopper"]) == values + scales + 4 * (2 * 2880 + 2880)


@pytest.mark.parametrize(
    ("name", "kernel", "published_gib"),
    [
        ("openai/gpt-oss-120b", "triton-hopper", 64.38),
        ("openai/gpt-oss-120b", "marlin", 65.97),
        ("openai/gpt-oss-20b", "marlin", 13.72),
    ],
)
def test_loaded_weights_match_published_logs_where_the_checkpoint_estimate_does_not(name, kernel, published_gib):
    published = published_gib * GIB
    assert abs(_checkpoint_bytes(name) / published - 1) > 0.05
    assert _loaded_bytes(name, kernel) / published == pytest.approx(1, abs=0.005)


def test_kernel_follows_the_card_and_platform():
    assert kernel_for(card_named("H100 80GB SXM5")).name == "triton-hopper"
    assert kernel_for(card_named("A100 80GB SXM4")).name == "marlin"
    assert kernel_for(card_named("GeForce RTX 4090 24GB")).name == "marlin"
    assert kernel_for(card_named("H100 80GB SXM5"), platform="cpu").name == "cpu"


def test_fit_adds_the_relaid_experts_only_on_vllm_with_mxfp4():
    model = load_model("openai/gpt-oss-20b")
    card = card_named("A100 80GB SXM4")
    vllm = Solver(Setup(model=model, engine=VllmEngine(), card=card))
    assert vllm.weights == _loaded_bytes("openai/gpt-oss-20b", "marlin")
    bf16 = Solver(Setup(model=model, engine=VllmEngine(), card=card, weights="bf16"))
    assert bf16.relaid == 0
