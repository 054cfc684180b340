"""Every card timed: cards without BF16 units by their FP16 peak, and any card by its figures (--gpu-mem-gib with
--gpu-gbs and --gpu-tflops, or over a named card's own), in the library and in a real `python -m core` process."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from core.engines import configured
from core.errors import InputError
from core.fit import Setup
from core.memory.gpus import DATA, Card, card_named, cards, with_figures
from core.model.loading import load_model
from core.speed.groups import default_backend
from core.speed.predict import Hardware, predict
from core.units import GIB
from tests.conftest import ROOT

MODEL = "Qwen/Qwen3-8B"
HOST = Hardware(ram_gb_s=50.0, threads=8)


def csv_rows() -> dict[str, dict[str, str]]:
    """gpus.csv as the file has it, read apart from core.memory.gpus."""
    with DATA.open(newline="", encoding="utf-8") as f:
        return {row["name"]: row for row in csv.DictReader(f)}


def gpu_part(card: Card):
    setup = Setup(load_model(MODEL), configured("llama.cpp"), card, weights="q4_k_m")
    speed = predict(setup, HOST, 4096)
    (part,) = [p for p in speed.prefill.parts if p.device == "gpu"]
    return speed, part


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("T4", "T4 16GB"),
        ("RTX 2080 Ti", "GeForce RTX 2080 Ti 11GB"),
        ("V100", "V100 16GB SXM2"),
        ("Apple M4 Pro 24GB", "Apple M4 Pro 24GB"),
        ("Quadro RTX 6000", "Quadro RTX 6000 24GB"),
        ("Radeon RX 6900 XT", "Radeon RX 6900 XT 16GB"),
        ("Arc A750", "Intel Arc A750 8GB"),
    ],
)
def test_cards_without_bf16_are_timed_by_their_fp16_peak(name, row):
    listed = csv_rows()[row]
    assert not listed["bf16_tflops"] and listed["fp16_tflops"], "the case this test is about: FP16 only"
    card = card_named(name)
    assert card.name == row
    speed, part = gpu_part(card)
    assert speed.decode_tok_s > 0 and speed.prefill_tok_s > 0
    assert part.attention_peak_gflops == float(listed["fp16_tflops"]) * 1e3
    # an Intel card's default backend, SYCL, runs a prompt's weights as an FP32 GEMM (groups.SYCL_FP32_GEMM_WHY)
    sycl = default_backend(card) == "sycl"
    assert part.peak_gflops == float(listed["fp32_tflops" if sycl else "fp16_tflops"]) * 1e3
    assert part.bandwidth_gb_s == float(listed["bandwidth_gb_s"])


def test_a_card_with_bf16_keeps_its_bf16_peak():
    listed = csv_rows()["GeForce RTX 4060 Laptop GPU 8GB"]
    _, part = gpu_part(card_named("RTX 4060 Laptop"))
    assert part.peak_gflops == float(listed["bf16_tflops"]) * 1e3


def test_the_fp16_peak_moves_prefill_and_not_memory_bound_decode():
    t4 = card_named("T4")
    fast, _ = gpu_part(t4)
    slow, part = gpu_part(with_figures(t4, None, t4.fp16_tflops / 4))  # the same card (and efficiency group)
    assert part.peak_gflops == t4.fp16_tflops / 4 * 1e3
    assert slow.prefill_tok_s < fast.prefill_tok_s / 2  # prefill is compute bound on a T4
    assert slow.decode.memory_s == pytest.approx(fast.decode.memory_s)


def test_only_cards_without_a_usable_peak_are_left_untimed():
    # TU116 has no tensor cores and a FP16 rate llama.cpp does not reach (the file says why per row); the RTX PRO
    # 6000 Server Edition has no published dense figure. Pascal runs FP16 at 1/64 of FP32: timed by its FP32 peak
    untimed = {n for n, c in cards().items() if not c.dense_tflops}
    said = {n for n, r in csv_rows().items() if "fp16 left empty" in r["source"] and not r["fp32_tflops"]}
    assert untimed == said | {"RTX PRO 6000 Blackwell Server Edition 96GB"}
    assert {"GeForce GTX 1660 6GB", "GeForce GTX 1660 Ti Laptop GPU 6GB"} <= untimed
    pascal = {n for n, c in cards().items() if c.fp32_only}
    assert "Tesla P40 24GB" in pascal and all("Pascal" in csv_rows()[n]["source"] for n in pascal)


def test_a_vector_fp32_peak_beside_a_16_bit_one_is_below_it_and_says_where_it_comes_from():
    # Listed beside the 16-bit peak for NVIDIA's cards (the base of llama.cpp's CUDA mat-vec kernels, which run on
    # the CUDA cores: groups.CUDA_MATVEC_WHY), for cards Vulkan runs without matrix cores (the base of their int8
    # rate) and for Intel cards' SYCL prompts (an FP32 GEMM). The 16-bit peak is 2x it (RDNA2's packed FP16, GeForce
    # tensor cores at FP32 accumulation), 4x (workstation cards, Turing GeForce), 8x (Volta, Turing workstation, Arc)
    # or 15-16x (A100, A30, H100, H200), never below it
    both = {n: r for n, r in csv_rows().items() if r["fp32_tflops"] and r["fp16_tflops"]}
    assert {"Radeon RX 6800 XT 16GB", "Intel Arc A750 8GB", "V100 16GB SXM2", "A100 80GB PCIe"} <= set(both)
    for name, r in both.items():
        ratio = float(r["fp16_tflops"]) / float(r["fp32_tflops"])
        assert 1.99 <= ratio <= 16.1, name
        assert "fp32 " in r["source"].lower(), name
    nvidia = [r for r in csv_rows().values() if r["vendor"] == "NVIDIA" and (r["bf16_tflops"] or r["fp16_tflops"])]
    assert all(r["fp32_tflops"] for r in nvidia if "Server Edition" not in r["name"] and "B200" not in r["name"])


def test_the_file_keeps_crlf_and_one_width():
    raw = DATA.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n") > 100
    with DATA.open(newline="", encoding="utf-8") as f:
        assert len({len(row) for row in csv.reader(f)}) == 1


def test_custom_card_figures_and_their_errors():
    card = Card.custom(16, 320, 65)
    assert (card.memory_bytes, card.bandwidth_gb_s, card.dense_tflops) == (16 * GIB, 320, 65)
    with pytest.raises(InputError, match=r"GB/s and dense 16-bit peak in TFLOPS \(--gpu-gbs and --gpu-tflops;"):
        Card.custom(16).timing_figures()
    with pytest.raises(InputError, match=r"TFLOPS \(--gpu-tflops; in the app, the custom card's boxes\), choose"):
        predict(Setup(load_model(MODEL), configured("llama.cpp"), Card.custom(16, 320), weights="q4_k_m"), HOST, 4096)
    for gb_s, tflops in ((0, 65), (-1, 65), (320, 0), (320, float("nan")), (float("inf"), 65), (320, 1e9)):
        with pytest.raises(InputError, match="must be positive and at most"):
            Card.custom(16, gb_s, tflops)


# --- the command line --------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "core", *args], capture_output=True, text=True, cwd=ROOT, env=env)


def run_json(*args: str) -> dict:
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


LLAMA = ("--engine", "llama.cpp", "--weights", "q4_k_m", "--context", "4k")


def test_speed_of_a_card_by_its_figures():
    out = run_json("speed", MODEL, "--gpu-mem-gib", "16", "--gpu-gbs", "320", "--gpu-tflops", "65", *LLAMA)
    assert (out["device"], out["card_bandwidth_gb_s"], out["card_dense_tflops"]) == ("16 GiB GPU", 320, 65)
    wider = run_json("speed", MODEL, "--gpu-mem-gib", "16", "--gpu-gbs", "640", "--gpu-tflops", "65", *LLAMA)
    (row,), (wide,) = out["rows"], wider["rows"]
    assert row["decode_tok_s"] > 0 and row["prefill_tok_s"] > 0
    assert wide["decode_tok_s"] > 1.5 * row["decode_tok_s"]  # memory bound: twice the bandwidth, nearly twice as fast


def test_speed_of_t4_by_the_list_and_with_its_peak_replaced():
    t4 = csv_rows()["T4 16GB"]
    listed = run_json("speed", MODEL, "--gpu", "T4", *LLAMA)
    assert listed["card_dense_tflops"] == float(t4["fp16_tflops"]) and listed["card_bf16_tflops"] is None
    slower = run_json("speed", MODEL, "--gpu", "T4", "--gpu-tflops", "16", *LLAMA)
    assert slower["card_dense_tflops"] == 16 and slower["card_bandwidth_gb_s"] == float(t4["bandwidth_gb_s"])
    assert slower["rows"][0]["prefill_tok_s"] < listed["rows"][0]["prefill_tok_s"] / 2


def test_speed_of_a_pascal_card_by_its_fp32_peak_and_vllm_refused():
    p40 = csv_rows()["Tesla P40 24GB"]
    listed = run_json("speed", MODEL, "--gpu", "P40", *LLAMA)
    assert listed["card_dense_tflops"] == listed["card_fp32_tflops"] == float(p40["fp32_tflops"])
    assert listed["rows"][0]["decode_tok_s"] > 0 and listed["rows"][0]["decode_error"]["group"].endswith("P40)")
    proc = run_cli("speed", MODEL, "--gpu", "P40", "--engine", "vllm")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "has no FP16 or BF16 matrix units (Pascal)" in proc.stderr and "choose llama.cpp" in proc.stderr


def test_fit_cards_and_ollama_take_the_figures():
    fit = run_json("fit", MODEL, "--gpu-mem-gib", "16", "--gpu-gbs", "320", "--gpu-tflops", "65", *LLAMA)
    assert (fit["card"], fit["card_memory_bytes"]) == ("16 GiB GPU", 16 * GIB)
    ranked = run_json("cards", MODEL, "--gpu-mem-gib", "13", "--gpu-gbs", "300", "--gpu-tflops", "40", *LLAMA)
    (mine,) = [c for c in ranked["cards"] if c["card"] == "13 GiB GPU"]
    assert mine["memory_bytes"] == 13 * GIB and mine["fits"]
    assert len(ranked["cards"]) == len(csv_rows()) + 1
    ollama = run_json("ollama", MODEL, "--gpu-mem-gib", "16", "--gpu-gbs", "320", "--gpu-tflops", "65")
    (row,) = ollama["rows"]
    assert row["card"] == "16 GiB GPU" and row["decode_tok_s"] > 0 and row["prefill_tok_s"] > 0
    t4 = run_json("ollama", MODEL, "--gpu", "T4")["rows"][0]
    wider = run_json("ollama", MODEL, "--gpu", "T4", "--gpu-gbs", "640")["rows"][0]
    assert wider["decode_tok_s"] > 1.5 * t4["decode_tok_s"] and wider["prefill_tok_s"] == t4["prefill_tok_s"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("speed", MODEL, "--gpu-mem-gib", "16", *LLAMA), "peak in TFLOPS (--gpu-gbs and --gpu-tflops"),
        (("speed", MODEL, "--gpu-mem-gib", "16", "--gpu-tflops", "65", *LLAMA), "bandwidth in GB/s (--gpu-gbs;"),
        (("speed", MODEL, "--gpu-tflops", "65", *LLAMA), "give its memory too (--gpu-mem-gib 16)"),
        (("speed", MODEL, "--gpu-mem-gib", "16", "--gpu-gbs", "0", *LLAMA), "--gpu-gbs: must be positive"),
        (("speed", MODEL, "--gpu", "T4", "--gpu-tflops", "-3", *LLAMA), "--gpu-tflops: must be positive"),
        (("speed", MODEL, "--gpu", "T4", "--gpu-tflops", "inf", *LLAMA), "--gpu-tflops: must be a finite number"),
        (("speed", MODEL, "--device", "cpu", "--gpu-gbs", "300", *LLAMA), "drop --gpu / --gpu-mem-gib / --gpu-gbs"),
        (("fit", MODEL, "--gpu-gbs", "300"), "give its memory too"),
        (("cards", MODEL, "--gpu-tflops", "40"), "give --gpu-mem-gib"),
        (("ollama", MODEL, "--gpu-gbs", "300"), "name it (--gpu) or give --gpu-mem-gib too"),
        (("ollama", MODEL, "--gpu-mem-gib", "16", "--gpu-gbs", "300"), "peak in TFLOPS (--gpu-tflops;"),
    ],
)
def test_errors_say_which_flag(args, message):
    proc = run_cli(*args)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
