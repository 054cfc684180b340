"""The engine options in the explorer: chosen in the sidebar, carried in the link, applied to core's answer."""

from __future__ import annotations

from dataclasses import replace

from core.engines import configured
from core.fit import Setup, context_limit, fit, table_contexts
from core.memory.gpus import Card
from core.model.loading import load_model
from core.units import format_bytes
from tests.rendered import shown
from tests.test_app import app, metrics

GEMMA = "google/gemma-3-4b-it"


def _cache_shown(params: dict[str, str]) -> str:
    at = app(params)
    assert not at.exception, [e.value for e in at.exception]
    return metrics(at)["Cache at this context"]


def _cache_expected(engine, model_name: str = GEMMA, ctx: int = 32768) -> str:
    setup = Setup(model=load_model(model_name), engine=engine, card=Card.custom(8.0), weights="q4_k_m")
    result = fit(setup, sorted(set(table_contexts(context_limit(setup))) | {ctx}))
    return format_bytes(next(r for r in result.rows if r.context == ctx).cache_bytes)


def test_swa_full_from_the_link_reaches_the_llamacpp_rules():
    on = _cache_shown({"model": GEMMA, "swa": "on"})
    off = _cache_shown({"model": GEMMA, "swa": "off"})
    assert on == _cache_expected(configured("llama.cpp", swa_full=True))
    assert off == _cache_expected(configured("llama.cpp", swa_full=False))
    assert on != off


def test_swa_radio_changes_the_view_and_the_link():
    at = app({"model": GEMMA})
    at.radio(key="in_swa").set_value("on").run()
    assert not at.exception
    assert at.query_params["swa"] == "on"
    assert metrics(at)["Cache at this context"] == _cache_expected(configured("llama.cpp", swa_full=True))


def test_vllm_platform_is_offered_only_for_vllm_and_carried_in_the_link():
    at = app({"model": "Qwen/Qwen3-8B", "engine": "vllm", "weights": "bf16", "plat": "cpu"})
    assert not at.exception
    assert at.selectbox(key="in_plat").value == "cpu"
    assert at.query_params["plat"] == "cpu"
    assert not [w for w in at.warning if "plat" in w.value]
    llama = app({"model": "Qwen/Qwen3-8B"})
    assert "in_plat" not in [s.key for s in llama.selectbox]


def test_bad_option_values_in_a_link_are_named_and_ignored():
    at = app({"swa": "maybe", "plat": "tpu"})
    assert not at.exception
    text = " ".join(shown(w.value) for w in at.warning)
    assert "swa=" in text and "plat=" in text


def test_llamacpp_front_end_defaults_apply_and_options_override_them():
    library = _cache_shown({"model": GEMMA, "fe": "library"})
    assert library == _cache_expected(configured("llama.cpp", frontend="library"))
    # the library keeps a full-size sliding-window cache; forcing it off gives llama-cli's answer
    forced = _cache_shown({"model": GEMMA, "fe": "library", "swa": "off"})
    assert forced == _cache_expected(configured("llama.cpp", frontend="library", swa_full=False))
    assert forced != library


def test_the_sidebar_names_the_rules_each_engine_follows():
    for engine in ("llama.cpp", "vllm", "transformers"):
        at = app({"model": "Qwen/Qwen3-8B", "engine": engine, "weights": "bf16"})
        captions = " ".join(c.value for c in at.sidebar.caption)
        assert configured(engine).rules_version in captions


def test_flash_attention_and_ubatch_from_the_sidebar_reach_llamacpp_memory():
    """-fa off buffers a micro-batch's attention scores over the whole context, and -ub sizes that micro-batch: both
    change how long a context fits, and travel in the link."""
    from core.memory.gpus import card_named
    from core.report import max_context_text
    from tests.test_app import metrics

    params = {"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4090 24GB", "weights": "q4_k_m", "ctx": "16k"}
    at = app(params)
    default = metrics(at)["Max context, one sequence"]
    at.radio(key="in_fa").set_value("off").run()
    at.number_input(key="in_ub").set_value(4096).run()
    assert not at.exception, [e.value for e in at.exception]
    assert (at.query_params["fa"], at.query_params["ub"]) == ("off", "4096")
    engine = configured("llama.cpp", flash_attn=False).with_ubatch(4096, 4096)  # the app's one knob: -b N -ub N
    setup = Setup(load_model("Qwen/Qwen3-8B"), engine, card_named("GeForce RTX 4090 24GB"), weights="q4_k_m")
    result = fit(setup, sorted(set(table_contexts(context_limit(setup))) | {16384}))
    assert metrics(at)["Max context, one sequence"] == max_context_text(result) != default
    refused = app({**params, "fa": "off", "kv": "q8_0"})  # llama.cpp's own refusal, with the fix
    assert not refused.exception
    assert any("without flash attention: turn flash attention on" in e.value for e in refused.error)


def test_max_num_seqs_from_the_sidebar_bounds_the_requests_as_vllm_serve_does():
    """vLLM's --max-num-seqs in the sidebar (link field mns): LFM2 at 4K on a 4090 holds 384 requests; 64 run at
    once, and the overhead drops by the profile run's sampler logits of the rows no longer sampled."""
    from core.memory.gpus import card_named
    from core.report import requests_text

    params = {"model": "LiquidAI/LFM2-1.2B", "engine": "vllm", "card": "GeForce RTX 4090 24GB", "weights": "bf16"}
    at = app(params | {"ctx": "4k", "mns": "64"})
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="in_mns").value == 64 and at.query_params["mns"] == "64"
    setup = Setup(load_model("LiquidAI/LFM2-1.2B"), configured("vllm", max_num_seqs=64), card_named("RTX 4090"))
    result = fit(replace(setup, weights="bf16"), [4096])
    shown = metrics(at)["Requests at 4K"]
    assert shown == requests_text(result, result.rows[0]) and shown.startswith("64 (--max-num-seqs")
    served = app(params | {"ctx": "4k"})
    assert metrics(served)["Requests at 4K"].startswith("256 (--max-num-seqs")  # the card's vllm serve default
    assert "in_mns" not in [n.key for n in app({"model": "Qwen/Qwen3-8B"}).number_input]  # vLLM's only
