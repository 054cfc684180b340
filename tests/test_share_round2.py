"""Issue 20 (a new user, round 2), the sidebar's share box: a link carries the view as it is, problems included,
and nothing the sender no longer sees."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from tests.test_app import APP, app, metrics
from tests.test_app_issue9 import main_errors, reopen, share_link, through_chat
from tests.tiny_configs import tiny_raw


def test_an_unreadable_context_travels_as_typed():
    """Item 9: the box said 'fix the inputs marked in red' (nothing was red) and the link held the last valid
    context, so the receiver saw figures the sender did not. Now the link carries the text and the receiver meets
    the same problem, named."""
    sender = app()
    sender.text_input(key="in_ctx_text").input("32k tokens").run()
    assert not sender.metric
    link = share_link(sender)
    assert through_chat(link)["ctx"] == "32k tokens"
    captions = " ".join(c.value for c in sender.sidebar.caption)
    assert "marked in red" not in captions and "Context included" in captions
    receiver = reopen(link)
    assert not receiver.metric
    assert receiver.text_input(key="in_ctx_text").value == "32k tokens"
    assert main_errors(receiver) == main_errors(sender)


def test_an_upload_after_a_bad_hub_entry_drops_it_from_the_link():
    """Item 10: the Hub box's rejected text stayed in the link as model=… under the upload, and the receiver got a
    warning about it that the sender never saw."""
    at = app({"source": "Hub"})
    at.text_input(key="in_model").input("https://huggingface.co/Qwen/Qwen3-8B").run()
    assert main_errors(at)
    at.radio(key="in_source").set_value("Upload").run()
    at.text_area[0].input(json.dumps(tiny_raw("llama"))).run()
    assert metrics(at)
    link = share_link(at)
    assert "model" not in through_chat(link) and "https" not in link
    receiver = reopen(link)
    assert [w.value for w in receiver.warning] == [w.value for w in at.warning]  # nothing about the Hub entry
    assert metrics(receiver) == metrics(at)


def test_a_broken_paste_is_not_shared_as_the_config_before_it():
    """A valid paste, then a broken one: the page showed the JSON error but the link still carried the first config,
    so the receiver saw its results. Now the link carries no config and says so; the receiver is asked for one."""
    at = app({"source": "Upload"})
    at.text_area[0].input(json.dumps(tiny_raw("llama"))).run()
    assert metrics(at) and "config" in through_chat(share_link(at))
    at.text_area[0].input('{"model_type": "llama", "hidden_size": 4096,').run()
    assert any("not valid JSON" in e for e in main_errors(at)) and not at.metric
    link = share_link(at)
    assert "config" not in through_chat(link)
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "It carries no config.json" in captions and "an input included" not in captions
    receiver = reopen(link)
    assert not receiver.metric and any("Upload or paste a config.json" in e for e in main_errors(receiver))


OLLAMA = "pages/5_ollama.py"


def test_the_ollama_pages_settings_travel_in_the_link():
    """Item 1: with num_ctx 32k, q8_0 and flash attention on, the link carried only model, card and kv, and the
    receiver saw Ollama's defaults (4K, f16, every layer) under a box that said it reproduced every input."""
    sender = app({"model": "Qwen/Qwen3-8B"})
    sender.switch_page(OLLAMA).run()
    sender.multiselect(key="ol_cards").set_value(["GeForce RTX 4060 8GB", "GeForce RTX 3060 12GB"])
    sender.multiselect(key="ol_models").set_value(["microsoft/phi-4"])
    settings = {"octx": "32k", "onp": 2, "okv": "q8_0", "ofa": "on", "oover": 512, "ow": "q5_k_m", "oram": "given"}
    for key, value in (settings | {"ogbs": 40.0, "othr": 12}).items():  # as the widgets bound to them would
        sender.session_state[f"in_{key}"] = value
    sender.run()
    assert not sender.exception, [e.value for e in sender.exception]
    link = share_link(sender)
    sent = through_chat(link)
    for key in ("ocards", "omodels", "octx", "onp", "okv", "ofa", "oover", "ow", "oram", "ogbs", "othr"):
        assert key in sent, key
    receiver = reopen(link, OLLAMA)
    assert not receiver.exception and not receiver.warning
    table = receiver.dataframe[0].value
    assert table.equals(sender.dataframe[0].value)
    assert set(table[table["model"] == "Qwen/Qwen3-8B"]["num_ctx"]) == {"32K"}  # phi-4 stops at its own 16K
    assert set(table["KV"]) == {"q8_0"}
    assert len(table) == 4  # two models × two cards


FACT_CHECK = "pages/3_fact_check.py"


def test_fact_check_has_every_page_and_a_share_box_that_carries_its_filters():
    at = app()
    at.switch_page(FACT_CHECK).run()
    links = [p.proto.page for p in at.sidebar.get("page_link")]
    assert len(links) == 7 and "ollama" in links and "cluster" in links, links
    verdict = at.sidebar.multiselect[2]
    verdict.set_value([verdict.options[0]]).run()
    link = share_link(at)
    assert through_chat(link)["verdict"] == verdict.value[0]
    receiver = AppTest.from_file(APP, default_timeout=180)  # opened on the fact-check page itself, as a browser
    receiver.query_params.update(through_chat(link))
    receiver.switch_page(FACT_CHECK).run()
    assert receiver.sidebar.multiselect[2].value == verdict.value
    assert [m.value for m in receiver.metric] == [m.value for m in at.metric]


def test_the_eight_bit_cache_survives_a_pass_through_transformers():
    """Item 12: llama.cpp q8_0 → transformers (no 8-bit cache: auto) → vLLM came back as auto, not fp8."""
    at = app({"engine": "llama.cpp", "kv": "q8_0"})
    for engine, kv in (("transformers", "auto"), ("vllm", "fp8"), ("llama.cpp", "q8_0")):
        at.selectbox(key="in_engine").set_value(engine).run()
        assert at.selectbox(key="in_kv").value == kv, engine
    at.selectbox(key="in_engine").set_value("transformers").run()
    at.selectbox(key="in_kv").set_value("fp32").run()  # an explicit choice there ends the wish
    at.selectbox(key="in_engine").set_value("vllm").run()
    assert at.selectbox(key="in_kv").value == "fp32"  # kept as chosen (vLLM has it), not turned into fp8


def test_the_csv_names_the_kv_dtype_used_and_rounds_as_shown(monkeypatch):
    """Item 12: the CSV said kv=auto where the page said "KV fp16", with floats to 16 digits."""
    import io

    import pandas as pd
    from streamlit.delta_generator import DeltaGenerator

    sent: dict[str, str] = {}
    monkeypatch.setattr(
        DeltaGenerator, "download_button", lambda self, label, data, *a, **k: sent.update({label: data})
    )
    at = app({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4090 24GB"})
    assert any("KV fp16" in s.value for s in at.success)
    frame = pd.read_csv(io.StringIO(sent["Download table (CSV)"]))
    assert set(frame["kv"]) == {"fp16"}
    assert not {"ocards", "ccard", "ftab"} & set(frame.columns)  # other pages' settings made no figure here
    floats = frame.select_dtypes("float")
    assert len(floats.columns) >= 3 and (floats.round(3) == floats).all().all()


def test_a_link_to_the_root_page_has_its_slash_before_the_query():
    from ui.layout import link_base

    assert link_base("http://host:8501") == "http://host:8501/"
    assert link_base("http://host:8501/?model=x") == "http://host:8501/"
    assert link_base("https://kv.example/ollama?ow=q8_0") == "https://kv.example/ollama"
    assert link_base("") == ""


def test_the_probe_form_and_the_ollama_column_toggle_travel_in_the_link():
    """Measure live's form (contexts as typed, device, backend, layers, steps, timeout) and the Ollama page's "Every
    column" are link fields, as every other page's own controls."""
    from tests.test_app import open_page

    query = {"pctx": "1k, 4k", "pdev": "cpu", "pbe": "vllm", "players": "4", "psteps": "16", "ptime": "120"}
    page = open_page("pages/2_measure_live.py", query)
    assert not page.exception, [e.value for e in page.exception]
    assert next(t for t in page.text_input if t.label == "Contexts").value == "1k, 4k"
    assert {s.label: s.value for s in page.selectbox if s.label in ("Device", "Backend")} == {
        "Device": "cpu", "Backend": "vllm",
    }  # fmt: skip
    assert [n.value for n in page.number_input][-3:] == [4, 16, 120]
    assert {k: page.query_params[k] for k in query} == query
    ollama = open_page("pages/5_ollama.py", {"oall": "on"})
    assert ollama.toggle(key="ol_every").value is True
    ollama.toggle(key="ol_every").set_value(False).run()
    assert "oall" not in ollama.query_params
    ollama.toggle(key="ol_every").set_value(True).run()
    assert ollama.query_params["oall"] == "on"
