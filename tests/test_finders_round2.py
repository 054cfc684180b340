"""Issue 20 on the finders page: one requests column at each row's own context, counted as Fit a card counts them
(item 12); decode tok/s and time to first token in both tables (item 5); "no limit" for a model without a position
limit (item 4); the chosen table travels in the link as `ftab` (item 1). Expected cells come from core, not the page.
"""

from __future__ import annotations

import pandas as pd
from streamlit.testing.v1 import AppTest

from core.engines import configured
from core.finders import SPEED_LAYER_PASSES, answer_speeds, rank_cards, rank_models, speed_cost
from core.fit import SSM_CONTEXT_LIMIT, Setup, fit
from core.memory.gpus import card_named, cards
from core.model.loading import load_model, model_from_config, presets
from core.report import requests_text, unlimited
from core.speed.predict import Hardware, predict, untimed
from core.units import format_tokens
from tests.test_app import open_page
from tests.test_budget import deep_dense

CARD = "GeForce RTX 4060 8GB"
MAMBA = "tiiuae/falcon-mamba-7b-pre-decay"
ANY_HOST = Hardware(ram_gb_s=1.0, threads=1)  # every layer is on the card in the finders' setups: the host never enters


def open_finders(query: dict[str, str]) -> AppTest:
    return open_page("pages/4_finders.py", query, timeout=300)


def expected_speed(setup: Setup, context: int, fits: bool) -> tuple[str, str]:
    """(decode tok/s, time to first token) cells: core.speed at the row's context, one request, or why not."""
    if not fits:
        return "— (does not fit)", "— (does not fit)"
    refused = untimed(setup)
    if refused:
        return f"— ({refused})", f"— ({refused})"
    s = predict(setup, ANY_HOST, context, 1)
    return f"{s.decode_tok_s:,.1f}", f"{s.ttft_s:,.2f} s"


def no_none(frame: pd.DataFrame) -> None:
    assert not frame.isna().any().any(), frame[frame.isna().any(axis=1)]
    assert not frame.isin(["None", "nan", ""]).drop(columns="why not").any().any()


def test_cards_table_counts_requests_as_fit_a_card_and_shows_speed():
    at = open_finders(
        {"model": "Qwen/Qwen3-8B", "card": CARD, "engine": "llama.cpp", "weights": "q4_k_m", "ctx": "32K"}
    )
    shown = at.dataframe[0].value
    assert [c for c in shown.columns if "requests" in c] == ["requests"]
    no_none(shown)
    model, engine = load_model("Qwen/Qwen3-8B"), configured("llama.cpp")
    truth = {
        c.name: fit(Setup(model=model, engine=engine, card=c, weights="q4_k_m"), [32768]) for c in cards().values()
    }
    rows = shown.set_index("card")
    assert set(rows.index) == set(truth)
    for name, result in truth.items():
        row = result.rows[0]
        assert rows.loc[name, "context"] == format_tokens(32768)
        # Fit a card's rule (core.report.requests_text): whole requests on llama.cpp, "3" not "3.00"
        assert rows.loc[name, "requests"] == (requests_text(result, row) if row.fits else "— (does not fit)"), name
        speed = (rows.loc[name, "decode tok/s"], rows.loc[name, "time to first token"])
        assert speed == expected_speed(result.setup, 32768, row.fits), name
        if not speed[0].startswith("—"):  # a figure carries its held-out error, decode / prefill
            s = predict(result.setup, ANY_HOST, 32768, 1)
            assert rows.loc[name, "error (decode / prefill)"] == f"{s.decode_error.short} / {s.prefill_error.short}"
    fitting = [r for r in truth.values() if r.rows[0].fits]
    assert fitting and any(r.rows[0].max_concurrency > 1 for r in fitting)
    assert all("." not in rows.loc[r.setup.card.name, "requests"] for r in fitting)
    assert len(at.dataframe) == 1, "only the chosen table is drawn"


def test_choosing_models_puts_it_in_the_link_and_shows_one_requests_column():
    at = open_finders({"model": "Qwen/Qwen3-8B", "card": CARD, "engine": "llama.cpp", "ctx": "32K"})
    assert "ftab" not in at.query_params  # the default view, cards, stays out of the link
    at.segmented_control(key="in_ftab").set_value("models").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["ftab"] == "models"
    assert len(at.dataframe) == 1
    shown = at.dataframe[0].value
    answers = rank_models([load_model(n) for n in presets()], configured("llama.cpp"), card_named(CARD), 32768)
    assert list(shown["model"]) == [a.model.name for a in answers]
    # a model whose limit is under the 32K asked does not fit, and says why (it was once shown at its own limit)
    short = [a for a in answers if a.model.max_context and a.model.max_context < 32768]
    assert short and all(not a.fits and a.why_not.startswith("its limit is") for a in short)
    assert {a.context for a in answers} == {32768}
    assert [c for c in shown.columns if "requests" in c] == ["requests"]
    no_none(shown)
    assert list(shown["context"]) == [format_tokens(a.context) for a in answers]
    assert list(shown["requests"]) == [
        requests_text(a.result, a.result.rows[0]) if a.fits else "— (does not fit)" for a in answers
    ]
    for a, decode, ttft in zip(answers, shown["decode tok/s"], shown["time to first token"], strict=True):
        speeds = expected_speed(a.result.setup, a.context, a.fits) if a.result else ("— (does not fit)",) * 2
        assert (decode, ttft) == speeds, a.model.name


def test_a_link_to_the_models_view_opens_it_and_a_model_without_a_position_limit_has_no_limit():
    query = {"model": MAMBA, "card": "H100 80GB SXM5", "engine": "vllm", "weights": "bf16", "ftab": "models"}
    at = open_finders(query)
    assert at.segmented_control(key="in_ftab").value == "models"
    assert len(at.dataframe) == 1
    models = at.dataframe[0].value.set_index("model")
    mamba = load_model(MAMBA)
    on_h100 = fit(Setup(model=mamba, engine=configured("vllm"), card=card_named("H100"), weights="bf16"), [32768])
    assert mamba.max_context is None and unlimited(on_h100)
    assert on_h100.max_context == SSM_CONTEXT_LIMIT  # the 16M is kvscope's search cap, not the model's
    assert models.loc[MAMBA, "max context"] == "no limit"


def test_cards_for_a_model_without_a_position_limit_say_no_limit():
    at = open_finders({"model": MAMBA, "engine": "vllm", "weights": "bf16"})
    shown = at.dataframe[0].value.set_index("card")
    mamba, engine = load_model(MAMBA), configured("vllm")
    results = [fit(Setup(model=mamba, engine=engine, card=c, weights="bf16"), [32768]) for c in cards().values()]
    assert sum(unlimited(r) for r in results) > 10
    for result in results:
        if unlimited(result):
            assert shown.loc[result.setup.card.name, "max context"] == "no limit", result.setup.card.name
    assert format_tokens(SSM_CONTEXT_LIMIT) not in set(shown["max context"])


def test_speed_is_bounded_per_table_and_says_which_rows_it_left():
    """Issue 17: a 10,000-layer config is timed on the first cards only; a bundled model on every card."""
    deep = model_from_config(deep_dense(), "deep", isolated=True)
    answers = rank_cards(deep, configured("llama.cpp"), 1024, "q4_k_m")
    speeds = answer_speeds(answers)
    fitting = [(a, s) for a, s in zip(answers, speeds, strict=True) if a.fits]
    timed = [a for a, s in fitting if s.decode_tok_s is not None]
    assert timed and sum(speed_cost(a.result.setup, a.context) for a in timed) <= SPEED_LAYER_PASSES
    left = [i for i, (_, s) in enumerate(fitting) if (s.why_none or "").startswith("not timed")]
    done = [i for i, (_, s) in enumerate(fitting) if s.decode_tok_s is not None]
    assert left and max(done) < min(left), "the budget is spent in table order: the first cards are timed"
    small = rank_cards(load_model("Qwen/Qwen3-8B"), configured("vllm"), 8192)
    for a, s in zip(small, answer_speeds(small), strict=True):
        assert (s.why_none or "").startswith("not timed") is False, a.card.name


def test_a_model_whose_limit_is_under_the_context_gets_the_format_that_holds_its_limit():
    """phi-4 stops at 16K: asked for 32K on a 24 GB card, it said "max context 0" in bf16 (which does not fit) while
    int8 holds all of its 16K. The row names the format that holds its own limit, and still says it does not fit."""
    from core.finders import best_model_answer

    answer = best_model_answer(load_model("microsoft/phi-4"), configured("vllm"), card_named("RTX 4090"), 32768)
    assert not answer.fits and "its limit is 16K tokens" in answer.why_not
    assert (answer.weights_format, answer.max_context) == ("int8", 16384)


def test_the_llama_cpp_ladder_names_formats_as_fit_does_and_tries_only_ggufs():
    """models printed 'bf16' where fit and cards print gguf_bf16 for the same file, and started DeepSeek-V3 from its
    fp8_block checkpoint, which llama.cpp cannot load."""
    from core.finders import weight_ladder

    llama = configured("llama.cpp")
    assert weight_ladder(load_model("Qwen/Qwen3-8B"), llama)[:2] == ["gguf_bf16", "q8_0"]
    assert weight_ladder(load_model("deepseek-ai/DeepSeek-V3"), llama)[0] == "gguf_bf16"
    assert weight_ladder(load_model("deepseek-ai/DeepSeek-V3"), configured("vllm"))[0] == "fp8_block"
    setup = Setup(load_model("Qwen/Qwen3-8B"), llama, card_named("H100"))
    assert fit(setup, [8192]).weights_format == "gguf_bf16"
