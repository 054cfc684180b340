"""llama.cpp's --n-cpu-moe / --cpu-moe (common/arg.cpp: blk.i.ffn_*_exps of the first N layers to the CPU buffer):
what leaves the GPU and what the speed model then reads from RAM, by hand from the tensor list."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from core.cli import main
from core.engines import configured
from core.errors import InputError
from core.fit import Setup, fit
from core.memory.gpus import card_named
from core.memory.quant import tensor_bytes
from core.model.loading import load_model
from core.model.params import count_params
from core.report import max_context_text
from core.speed.predict import Hardware, predict
from core.speed.work import experts_touched
from tests.conftest import ROOT

MOE = load_model("Qwen/Qwen3-30B-A3B")  # 48 layers, 128 experts, top 8
CARD = card_named("RTX 4090")
HW = Hardware(ram_gb_s=60.0, threads=8)


def setup(**changes) -> Setup:
    return replace(Setup(MOE, configured("llama.cpp"), CARD, weights="q4_k_m"), **changes)


def expert_bytes(layers: range) -> int:
    return sum(s for t, s in tensor_bytes(count_params(MOE), "q4_k_m", 2) if t.routed and t.layer in layers)


def test_experts_of_the_first_layers_leave_the_gpu():
    whole = fit(setup(), [8192])
    for n in (1, 20, 48):
        moved = fit(setup(cpu_experts=range(n)), [8192])
        assert whole.weights_bytes - moved.weights_bytes == expert_bytes(range(n))
        assert moved.rows[0].cache_bytes == whole.rows[0].cache_bytes  # attention stays on the GPU
        assert f"routed experts of {'layer 0' if n == 1 else f'layers 0–{n - 1}'}" in " ".join(moved.notes)
    every = fit(setup(cpu_experts=range(48)), [8192]).weights_bytes
    assert fit(setup(cpu_experts=range(10**6)), [8192]).weights_bytes == every  # --cpu-moe
    # llama.cpp's --fit keeps the experts of the last layers in RAM instead: any run of layers is accounted
    assert whole.weights_bytes - fit(setup(cpu_experts=range(30, 48)), [8192]).weights_bytes == expert_bytes(
        range(30, 48)
    )


def test_layers_already_in_ram_keep_their_experts_there():
    # -ngl 31: the output layer and layers 18-47 on the GPU; --n-cpu-moe 20 moves the experts of 18 and 19 only
    both = fit(setup(gpu_layers=31, cpu_experts=range(20)), [8192])
    ngl = fit(setup(gpu_layers=31), [8192])
    assert ngl.weights_bytes - both.weights_bytes == expert_bytes(range(18, 20))


def test_decode_reads_the_moved_experts_from_ram():
    n = 24
    s = setup(cpu_experts=range(n))
    speed = predict(s, HW, 8192)
    cpu = next(p for p in speed.decode.parts if p.device == "cpu")
    touched = experts_touched(128, 8, 1) / 128  # one token: top 8 of 128
    assert cpu.layers == 0 and cpu.cache_bytes == 0
    assert cpu.weight_bytes == pytest.approx(expert_bytes(range(n)) * touched, rel=1e-9)
    gpu = next(p for p in speed.decode.parts if p.device == "gpu")
    alone = next(p for p in predict(setup(), HW, 8192).decode.parts if p.device == "gpu")
    assert gpu.weight_bytes + cpu.weight_bytes == pytest.approx(alone.weight_bytes, rel=1e-9)
    assert gpu.matmul_flops + cpu.matmul_flops == pytest.approx(alone.matmul_flops, rel=1e-9)
    rates = [predict(setup(cpu_experts=range(k)), HW, 8192).decode_tok_s for k in (0, 12, 24, 48)]
    assert rates == sorted(rates, reverse=True)


def test_dense_models_and_other_engines():
    dense = load_model("Qwen/Qwen3-8B")
    base = Setup(dense, configured("llama.cpp"), CARD, weights="q4_k_m")
    assert fit(replace(base, cpu_experts=range(10)), [8192]).weights_bytes == fit(base, [8192]).weights_bytes
    with pytest.raises(InputError, match=r"llama\.cpp setting"):
        fit(replace(base, engine=configured("vllm"), weights=None, cpu_experts=range(2)), [8192])


def test_cli_flags(capsys):
    args = ["fit", "Qwen/Qwen3-30B-A3B", "--gpu", "RTX 4090", "--engine", "llama.cpp", "--weights", "q4_k_m"]
    assert main([*args, "--cpu-moe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weights_bytes"] == fit(setup(cpu_experts=range(48)), [8192]).weights_bytes
    assert main([*args, "--n-cpu-moe", "-3"]) == 2
    assert "--n-cpu-moe must be 0 or more" in capsys.readouterr().err


def test_the_sidebar_input_reaches_the_solver_and_the_link():
    params = {"model": "Qwen/Qwen3-30B-A3B", "card": "GeForce RTX 4060 8GB", "ctx": "8k", "ncmoe": "48"}
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params.update(params)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="in_ncmoe").value == 48
    assert any("routed experts of layers 0–47 and the token embedding" in i.value for i in at.info)
    eight = card_named("GeForce RTX 4060 8GB")
    moved = fit(setup(card=eight, cpu_experts=range(48)), [8192])
    shown = {m.label: m.value for m in at.metric}
    assert shown["Fits?"] == "yes" and moved.rows[0].fits  # 17 GiB of weights, but only ~1 GiB of it on the GPU
    assert shown["Max context, one sequence"] == max_context_text(moved)
    ram = at.number_input(key="in_ram")  # the RAM bandwidth box appears: the experts are read from RAM
    assert ram.value is None and ram.placeholder.startswith("measured here: ")  # empty: this server's own figure
    at.number_input(key="in_ncmoe").set_value(0).run()
    assert {m.label: m.value for m in at.metric}["Fits?"] == "no"
    assert not any("routed experts of layers 0–47 and the token embedding" in i.value for i in at.info)


def test_the_hosts_ram_threads_and_isa_for_layers_in_ram_travel_in_the_link():
    """Fit a card's three host inputs for layers left in RAM are in the link, so the receiver sees the sender's speed;
    an empty RAM box is this server's measured figure and stays out of the link."""
    from tests.test_app import app
    from tests.test_app_gguf_and_card import _frame

    query = {"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4060 8GB", "ngl": "20"}
    at = app(query)
    assert "ram" not in at.query_params and "thr" not in at.query_params
    measured = list(_frame(at)["decode tok/s"])
    at.number_input(key="in_ram").set_value(20.0).run()
    at.number_input(key="in_thr").set_value(4).run()
    at.selectbox(key="in_isa").set_value("avx2").run()
    assert not at.exception, [e.value for e in at.exception]
    sent = {k: at.query_params[k] for k in ("ram", "thr", "isa")}
    assert sent == {"ram": "20", "thr": "4", "isa": "avx2"}
    shown = list(_frame(at)["decode tok/s"])
    assert shown != measured
    received = app(query | sent)
    assert list(_frame(received)["decode tok/s"]) == shown
    assert received.number_input(key="in_ram").value == 20.0 and received.selectbox(key="in_isa").value == "avx2"


def test_n_cpu_moe_on_a_dense_model_says_it_changes_nothing():
    dense = Setup(load_model("Qwen/Qwen3-8B"), configured("llama.cpp"), card_named("GeForce RTX 4090 24GB"),
                  weights="q4_k_m")  # fmt: skip
    plain, asked = fit(dense, [4096]), fit(replace(dense, cpu_experts=range(5)), [4096])
    assert asked.rows[0].total_bytes == plain.rows[0].total_bytes
    assert "--n-cpu-moe changes nothing here: Qwen/Qwen3-8B has no routed experts" in asked.notes
    assert not any("--n-cpu-moe" in note for note in plain.notes + fit(setup(cpu_experts=range(5)), [4096]).notes)
