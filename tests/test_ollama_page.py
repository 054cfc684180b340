"""The "Ollama on your card" page under AppTest: its table is what core's estimator, fit and speed model give for
the same inputs, computed here from core (ollama_layers, fit, predict, default_num_ctx), not read off the page."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.engines.runtimes import MINIMUM_MEMORY, OllamaSettings, default_num_ctx, llama_engine, ollama_layers
from core.fit import Setup, fit
from core.llamacpp_autofit import fit_params
from core.memory.gpus import card_named
from core.model.loading import load_model, presets
from core.ollama_report import MEASURED
from core.speed.efficiency import fitted
from core.speed.groups import MOE_PROMPT, card_class
from core.speed.predict import Hardware, moe_layers, predict
from core.units import GIB, MIB, format_bytes, format_tokens
from tests.test_app import app, opened
from tests.test_runtimes import CARDS
from ui.state import from_query, to_query

PAGE = "pages/5_ollama.py"
# estimateGPULayers sized only the llama.cpp runner's loads; llama was not in OllamaEngineRequired @v0.12.10
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
TYPICAL = Hardware(ram_gb_s=2 * 8 * 5600 / 1000, threads=8)  # dual-channel DDR5-5600 peak, 8 threads


def ollama_page(params: dict[str, str]):
    at = app(params)
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def expected(name: str, card_name: str, settings: OllamaSettings, hw: Hardware, weights: str = "q4_k_m") -> dict:
    model, card = load_model(name), card_named(card_name)
    split = ollama_layers(model, card.memory_bytes, settings, weights)
    setup = Setup(model=model, engine=llama_engine(settings), card=card, weights=weights, kv_dtype=split.kv_type)
    # current Ollama: -c num_ctx × np -np np and no -ngl, so llama-server's --fit places the layers
    np = settings.num_parallel
    choice = fit_params(setup, split.num_ctx * np, np)
    setup = replace(setup, gpu_layers=choice.gpu_layers, cpu_experts=choice.cpu_experts)
    slots = len(model.layers) + 1
    row = fit(setup, [split.num_ctx]).rows[0]
    cache = (
        llama_engine(settings).account(setup_model(setup), split.num_ctx, settings.num_parallel, split.kv_type).total
    )
    speed = predict(setup, hw, split.num_ctx, 1)
    # the held-out error of the card's group, read from fitted.json itself (every layer's pass is driven by the GPU)
    group = ("llama.cpp", "cuda", card_class(card, "cuda"))
    own = [e for e in fitted()["errors"] if (e["engine"], e["backend"], e["card_class"]) == group]
    bars = {e["kind"]: e for e in own if "path" not in e}
    # a MoE model's prompt carries its group's held-out MoE prompts' error, where the group has any
    if moe_layers(setup):
        bars |= {e["kind"]: e for e in own if e.get("path") == MOE_PROMPT}
    return {
        # starred where the group's held-out runs do not cover all of the figure (ErrorBar.caveat)
        "decode ±": f"±{bars['decode']['median'] * 100:.0f} %" + (" *" if speed.decode_error.caveat else ""),
        "prefill ±": f"±{bars['prefill']['median'] * 100:.0f} %" + (" *" if speed.prefill_error.caveat else ""),
        "num_ctx": format_tokens(split.num_ctx),
        "KV": split.kv_type,
        "Ollama layers": f"{slots if choice.gpu_layers is None else choice.gpu_layers}/{slots}",
        "v0.12.10 layers": f"{split.layers}/{slots}",  # the estimate, beside
        "Ollama VRAM (GiB)": split.vram_bytes / GIB,
        "kvscope GPU (GiB)": (row.weights_bytes + row.overhead_bytes + cache) / GIB,
        "decode tok/s": speed.decode_tok_s,
        "prefill tok/s": speed.prefill_tok_s,
    }


def setup_model(setup: Setup):
    """The layers the Setup keeps on the GPU (their cache is the one on the card): llama.cpp's -ngl N counts the
    output layer as the last of n_layers + 1 slots and offloads the last N of them."""
    layers = setup.model.layers
    slots = len(layers) + 1 if setup.gpu_layers is None else min(setup.gpu_layers, len(layers) + 1)
    return setup.model.with_layers(layers[min(len(layers), len(layers) + 1 - slots) :])


def check(table, name: str, card_name: str, settings: OllamaSettings, hw: Hardware) -> None:
    shown = table[(table["model"] == name) & (table["card"] == card_name)]
    assert len(shown) == 1, (name, card_name)
    got = shown.iloc[0]
    for column, value in expected(name, card_name, settings, hw).items():
        if isinstance(value, float):
            assert got[column] == pytest.approx(value, rel=1e-9), column
        else:
            assert got[column] == value, column


def test_default_cards_show_cores_split_context_and_speed():
    at = ollama_page({"model": LLAMA})
    table = at.dataframe[0].value
    assert list(table["card"]) == CARDS
    for card_name in CARDS:
        check(table, LLAMA, card_name, OllamaSettings(), TYPICAL)
    # Ollama's default context by VRAM: 4K below 23 GiB, 32K on the 24 GB card
    assert list(table["num_ctx"]) == [format_tokens(default_num_ctx(card_named(c).memory_bytes)) for c in CARDS]
    assert "89.6 GB/s" in " ".join(c.value for c in at.caption)
    assert any("held-out decode runs of llama.cpp CUDA on consumer cards" in c.value for c in at.caption)


def test_settings_host_and_a_second_model_reach_the_table():
    at = ollama_page({"model": LLAMA})
    at.multiselect(key="ol_cards").set_value(["GeForce RTX 4060 8GB", "GeForce RTX 4090 24GB"])
    at.multiselect(key="ol_models").set_value(["microsoft/phi-4"])
    at.text_input(key="in_octx").input("8k")
    at.number_input(key="in_onp").set_value(2)
    at.selectbox(key="in_okv").set_value("q8_0")
    at.radio(key="in_ofa").set_value("on")
    at.number_input(key="in_oover").set_value(1024)
    at.radio(key="in_oram").set_value("given").run()  # the figure box opens once "given" is chosen
    at.number_input(key="in_ogbs").set_value(40.0)
    at.number_input(key="in_othr").set_value(12)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    settings = OllamaSettings(num_ctx=8192, num_parallel=2, kv_cache_type="q8_0", flash_attention=True,
                              gpu_overhead=1024 * MIB)  # fmt: skip
    hw = Hardware(ram_gb_s=40.0, threads=12)
    assert len(table) == 4
    for name in (LLAMA, "microsoft/phi-4"):
        for card_name in ("GeForce RTX 4060 8GB", "GeForce RTX 4090 24GB"):
            check(table, name, card_name, settings, hw)
    assert set(table["KV"]) == {"q8_0"}
    # phi-4 does not fit whole on the 8 GB card with 1 GiB reserved: some of it runs from RAM, and slower
    phi = table[table["model"] == "microsoft/phi-4"].set_index("card")
    layers, total = phi.loc["GeForce RTX 4060 8GB", "Ollama layers"].split("/")
    assert int(layers) < int(total)
    assert phi.loc["GeForce RTX 4060 8GB", "decode tok/s"] < phi.loc["GeForce RTX 4090 24GB", "decode tok/s"]


def test_the_settings_box_keeps_its_label_while_its_settings_change():
    """Its label carried the settings: each change made a new expander, which the browser drew folded, so every
    change meant opening the box again. The settings now stand in a caption beside it."""
    at = ollama_page({"model": LLAMA})
    labels = [at.expander[0].label]
    at.text_input(key="in_octx").input("8k").run()
    at.selectbox(key="in_okv").set_value("q8_0").run()
    labels.append(at.expander[0].label)
    assert labels == ["Ollama settings and host"] * 2
    assert any(c.value.startswith("Set: num_ctx 8k, KV q8_0") for c in at.caption)


def test_a_num_ctx_past_the_models_context_says_ollama_caps_it():
    at = ollama_page({"model": "Qwen/Qwen3-8B", "octx": "1M"})
    limit = load_model("Qwen/Qwen3-8B").max_context
    assert set(at.dataframe[0].value["num_ctx"]) == {format_tokens(limit)}
    assert any(f"num_ctx 1M is past its training context {format_tokens(limit)}" in i.value for i in at.info)


def test_a_quantised_cache_follows_current_ollamas_flash_attention():
    """v0.32.15 passes OLLAMA_KV_CACHE_TYPE as given and flash attention auto (on) unless the variable is set: a
    q8_0 cache with the variable unset is q8_0 for Llama too (v0.12.10 sized it f16), and with it off llama-server
    refuses to start, which the page says instead of a table."""
    at = ollama_page({"model": LLAMA, "okv": "q8_0"})
    assert set(at.dataframe[0].value["KV"]) == {"q8_0"}
    at = ollama_page({"model": LLAMA, "okv": "q8_0", "ofa": "off"})
    assert not at.dataframe and "refuses a quantised V cache" in at.error[0].value


def test_the_explanation_is_drawn_only_while_open_and_keeps_its_row():
    """Closed, the box holds nothing (its long markdown would be drawn, hidden, into a fresh tab's first render);
    the row picked in it stays when it is closed and opened again."""
    at = ollama_page({"model": LLAMA})
    (box,) = [e for e in at.expander if e.label == "How is each figure computed?"]
    assert not box.markdown and not [s for s in at.selectbox if s.key == "ol_row"]
    opened(at, "ol_how")
    assert at.selectbox(key="ol_row").value == at.selectbox(key="ol_row").options[0]
    picked = at.selectbox(key="ol_row").options[-1]
    assert picked != at.selectbox(key="ol_row").options[0]
    at.selectbox(key="ol_row").set_value(picked).run()
    at.session_state["ol_how"] = False
    at.run()
    assert not [s for s in at.selectbox if s.key == "ol_row"]
    at.run()  # a rerun while closed: a widget not drawn would lose its state here
    opened(at, "ol_how")
    assert at.selectbox(key="ol_row").value == picked
    (box,) = [e for e in at.expander if e.label == "How is each figure computed?"]
    assert picked.split(" on ")[1] in "\n".join(m.value for m in box.markdown)


def test_the_explanation_shows_the_estimators_terms():
    at = opened(ollama_page({"model": LLAMA}), "ol_how")
    at.selectbox(key="ol_row").set_value("meta-llama/Llama-3.1-8B-Instruct on GeForce RTX 4060 8GB").run()
    expander = next(e for e in at.expander if e.label == "How is each figure computed?")
    text = "\n".join(m.value for m in expander.markdown)
    model, card = load_model(LLAMA), card_named("GeForce RTX 4060 8GB")
    terms = ollama_layers(model, card.memory_bytes).terms
    # KV per layer by hand: 4096 tokens × (128 + 128) × 8 KV heads × 2 B
    assert terms.kv_per_layer[0] == 4096 * 256 * 8 * 2
    for figure in (
        f"{terms.kv_per_layer[0]:,} B",
        f"= {format_bytes(terms.buffer)}",
        f"partial offload {format_bytes(terms.graph_partial)}",
        f"full offload {format_bytes(terms.graph_full)}",
        format_bytes(MINIMUM_MEMORY["cuda"]),
        "457.00 MiB",
        "Decode step",
        "tok/s",
    ):
        assert figure in text, figure


def fit_split(name: str, card_name: str) -> str:
    """llama-server's --fit for the request current Ollama sends with every variable unset (-c num_ctx -np 1, no
    -ngl), as "N/M"."""
    model, card = load_model(name), card_named(card_name)
    num_ctx = min(default_num_ctx(card.memory_bytes), model.max_context or 1 << 30)
    setup = Setup(model, llama_engine(OllamaSettings()), card, weights="q4_k_m", kv_dtype="f16")
    choice = fit_params(setup, num_ctx, 1)
    slots = len(model.layers) + 1
    return f"{slots if choice.gpu_layers is None else choice.gpu_layers}/{slots}"


def test_the_apps_default_hybrid_answers_on_every_card_with_its_runner():
    at = ollama_page({"model": "Qwen/Qwen3.5-9B"})  # the app's default: Gated DeltaNet layers beside attention
    assert not at.error
    table = at.dataframe[0].value
    assert list(table["card"]) == CARDS
    for card_name in CARDS:
        got = table[table["card"] == card_name].iloc[0]
        assert got["runner"] == "llama-server" and got["v0.12.10 layers"] == ""  # the Go engine's, then
        assert got["Ollama layers"] == fit_split("Qwen/Qwen3.5-9B", card_name)
        assert got["v0.24.0 runner"] == "Ollama engine" and got["Go engine KV (GiB)"] > 0
    why = " ".join(c.value for c in at.caption)
    assert "9db4bdbad" in why and "'qwen35' is in fs/ggml/ggml.go KV.OllamaEngineRequired @v0.24.0" in why


@pytest.mark.parametrize("batch", range(0, len(presets()), 5))
def test_every_bundled_preset_answers_on_the_page(batch):
    names = sorted(presets())[batch : batch + 5]
    at = ollama_page({"model": names[0], "omodels": ",".join(names[1:]), "ocards": "GeForce RTX 4060 8GB"})
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    assert sorted(table["model"]) == sorted(names) and set(table["runner"]) == {"llama-server"}


def test_free_memory_travels_in_the_link_and_reaches_the_split():
    at = ollama_page({"model": LLAMA, "ofree": "5.5GiB", "ocards": "GeForce RTX 4060 8GB"})
    assert at.text_input(key="in_ofree").value == "5.5GiB"
    got = at.dataframe[0].value.iloc[0]
    free = int(5.5 * GIB)
    total = card_named("GeForce RTX 4060 8GB").memory_bytes
    split = ollama_layers(load_model(LLAMA), free, OllamaSettings(), total_bytes=total)
    assert got["v0.12.10 layers"] == f"{split.layers}/{split.blocks + 1}"
    assert split.layers < ollama_layers(load_model(LLAMA), 8 * GIB).layers  # less free memory, fewer layers
    # current Ollama's split: llama-server's fit into the 5.5 GiB free (less its CUDA context), fewer layers too
    assert int(got["Ollama layers"].split("/")[0]) < int(fit_split(LLAMA, "GeForce RTX 4060 8GB").split("/")[0])
    inputs, ignored = from_query({"model": LLAMA, "ofree": "5.5GiB"})
    assert inputs.ofree == "5.5GiB" and not ignored and to_query(inputs)["ofree"] == "5.5GiB"
    # a value the page cannot read travels as typed: whoever opens the link meets the sender's message, not defaults
    inputs, ignored = from_query({"ofree": "lots", "octx": "abc"})
    assert (inputs.ofree, inputs.octx) == ("lots", "abc") and not ignored
    for params, said in (({"ofree": "lots"}, "cannot read free memory"), ({"octx": "abc"}, "cannot read 'abc'")):
        at = ollama_page({"model": LLAMA} | params)
        assert any(said in e.value for e in at.error), [e.value for e in at.error]


def test_the_servers_measured_ram_names_no_path_on_the_server(tmp_path, monkeypatch):
    """ "Measured on the server" shows where the figure comes from (when, how many threads), never the cache file's
    path: the page is served to a team, and the server's folders are not theirs to read."""
    import json

    from core.speed import ram as ram_mod

    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    record = {"host": ram_mod._host_key(), "gb_s": 31.5, "thread_gb_s": 12.0, "cores": 4, "time": "2026-12-05T10:00Z"}
    ram_mod.cache_path().write_text(json.dumps(record))  # a cached measurement: nothing is timed in the test
    at = ollama_page({"model": LLAMA})
    at.radio(key="in_oram").set_value(MEASURED).run()
    assert not at.exception, [e.value for e in at.exception]
    caption = next(c.value for c in at.caption if c.value.startswith("Speed:"))
    assert "31.5 GB/s (measured 2026-12-05T10:00Z by a numpy copy on 4 threads, cached" in caption
    assert str(tmp_path) not in caption and "ram_bandwidth.json" not in caption
