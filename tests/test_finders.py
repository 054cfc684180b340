"""The finders agree with `fit` run on every candidate: the same answers, in the stated order."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from core.cli import main
from core.engines import configured
from core.errors import InputError
from core.finders import rank_cards, rank_models, weight_ladder
from core.fit import Setup, fit
from core.memory.gpus import Card, card_named, cards
from core.model.loading import load_model, presets
from core.model.params import count_params
from core.report import max_context_text
from core.units import GIB
from tests.conftest import ROOT

CASES = [("Qwen/Qwen3-8B", "llama.cpp", "q4_k_m", 32768), ("meta-llama/Llama-3.1-8B-Instruct", "vllm", None, 8192)]


def fit_each_card(
    model_name: str, engine: str, weights: str | None, context: int
) -> dict[str, tuple[bool, int, float]]:
    """(fits, max context, requests) per card, straight from `fit`."""
    model = load_model(model_name)
    out = {}
    for card in cards().values():
        result = fit(Setup(model=model, engine=configured(engine), card=card, weights=weights), [context])
        out[card.name] = (result.rows[0].fits, result.max_context, result.rows[0].max_concurrency)
    return out


@pytest.mark.parametrize(("model_name", "engine", "weights", "context"), CASES)
def test_cards_agree_with_fit_on_every_card(model_name, engine, weights, context):
    truth = fit_each_card(model_name, engine, weights, context)
    answers = rank_cards(load_model(model_name), configured(engine), context, weights)
    assert {a.card.name: (a.fits, a.max_context, a.requests) for a in answers} == truth
    fits = [a for a in answers if a.fits]
    assert fits and len(fits) < len(answers), "the cases should have cards on both sides"
    assert answers[: len(fits)] == fits, "every fitting card comes before every other"
    sizes = [a.card.memory_bytes for a in fits]
    assert sizes == sorted(sizes), "without prices, the smallest card that fits is first"
    misses = answers[len(fits) :]
    reach = [a.max_context for a in misses]
    assert reach == sorted(reach, reverse=True), "the closest misses come first"
    assert all(a.why_not for a in misses) and not any(a.why_not for a in fits)


def test_why_not_says_what_runs_out():
    answers = {a.card.name: a for a in rank_cards(load_model("Qwen/Qwen3-8B"), configured("transformers"), 8192)}
    # bf16 Qwen3-8B is 8.19e9 parameters × 2 B = 16.4 GB of weights: more than an 8 GB card holds
    assert "weights" in answers["GeForce RTX 4060 8GB"].why_not
    assert "exceed" in answers["GeForce RTX 4060 8GB"].why_not
    # and well under 80 GB
    assert answers["H100 80GB SXM5"].fits


def test_cards_cli_json_is_the_ranking_and_says_it_has_no_prices(capsys):
    assert (
        main(["cards", "Qwen/Qwen3-8B", "--engine", "llama.cpp", "--weights", "q4_k_m", "--context", "32k", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert "no prices" in out["ranked_by"]
    truth = fit_each_card("Qwen/Qwen3-8B", "llama.cpp", "q4_k_m", 32768)
    assert [(c["card"], c["fits"], c["max_context"]) for c in out["cards"]] == [
        (a.card.name, truth[a.card.name][0], truth[a.card.name][1])
        for a in rank_cards(load_model("Qwen/Qwen3-8B"), configured("llama.cpp"), 32768, "q4_k_m")
    ]
    assert len(out["cards"]) == len(cards())


def test_cards_text_output_names_every_card(capsys):
    assert main(["cards", "LiquidAI/LFM2-1.2B", "--context", "4k"]) == 0
    text = capsys.readouterr().out
    assert all(name[:48] in text for name in cards())


@pytest.mark.parametrize("engine", ["llama.cpp", "vllm", "transformers"])
def test_models_pick_the_largest_format_that_fit_checks(engine):
    card, context = card_named("RTX 4060 8GB"), 8192
    models = [load_model(name) for name in presets()]
    answers = rank_models(models, configured(engine), card, context)
    assert len(answers) == len(models)
    for a in answers:
        n = min(context, a.context)
        ladder = weight_ladder(a.model, configured(engine))
        setups = [
            Setup(model=a.model, engine=configured(engine), card=card, weights=w, kv_dtype=kv)
            for w in ladder
            for kv in (
                ("auto", "fp8")
                if engine == "vllm"
                else ("auto", "q8_0", "q4_0")
                if engine == "llama.cpp"
                else ("auto",)
            )
        ]
        sizes = [
            fit(Setup(model=a.model, engine=configured(engine), card=card, weights=w), [n]).weights_bytes
            for w in ladder
        ]
        assert sizes == sorted(sizes, reverse=True), f"{a.model.name}: the ladder runs from the largest weights down"
        verdicts = []
        for s in setups:
            try:
                verdicts.append(fit(s, [n]).rows[0].fits)
            except InputError:  # a combination the engine refuses counts as not fitting
                verdicts.append(False)
        if a.fits:
            first = verdicts.index(True)
            assert (setups[first].weights, setups[first].kv_dtype) == (a.weights_format, a.kv_dtype)
        else:
            assert not any(verdicts), f"{a.model.name}: some format fits but the finder says none"
    fits = [a for a in answers if a.fits]
    assert fits and answers[: len(fits)] == fits
    params = [count_params(a.model).total for a in fits]
    assert params == sorted(params, reverse=True), "the largest model that fits comes first"


def test_models_on_a_big_card_keep_the_checkpoint_format():
    # 141 GB holds an 8B model in bf16 (16 GB) with room for 32K of cache: nothing needs quantising
    answers = rank_models([load_model("Qwen/Qwen3-8B")], configured("vllm"), card_named("H200"), 32768)
    assert (answers[0].fits, answers[0].weights_format, answers[0].kv_dtype) == (True, "bf16", "auto")


def test_models_cli_takes_a_list_and_refuses_a_missing_card(capsys):
    assert main(["models", "Qwen/Qwen3-8B", "LiquidAI/LFM2-1.2B", "--gpu-mem-gib", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["models"][0]["model"] == "LiquidAI/LFM2-1.2B"  # a 1.2B model fits 4 GiB; 8B does not
    assert out["models"][1]["fits"] is False and out["models"][1]["why_not"]
    assert out["card_memory_bytes"] == 4 * GIB
    assert main(["models"]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_finders_page_shows_cores_ranking():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params.update({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4060 8GB", "ctx": "8K"})
    at.run()
    at.switch_page("pages/4_finders.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown_cards = at.dataframe[0].value
    at.segmented_control(key="in_ftab").set_value("models").run()  # one table at a time: the link's `ftab`
    assert not at.exception, [e.value for e in at.exception]
    shown_models = at.dataframe[0].value
    engine = configured("llama.cpp")
    model = load_model("Qwen/Qwen3-8B")
    expected = rank_cards(model, engine, 8192, "q4_k_m")
    truth = {c.name: fit(Setup(model=model, engine=engine, card=c, weights="q4_k_m"), [8192]) for c in cards().values()}
    assert list(shown_cards["card"]) == [a.card.name for a in expected]
    assert list(shown_cards["fits"]) == ["yes" if truth[a.card.name].rows[0].fits else "no" for a in expected]
    assert list(shown_cards["max context"]) == [max_context_text(truth[a.card.name]) for a in expected]
    card = card_named("GeForce RTX 4060 8GB")
    models = rank_models([load_model(n) for n in presets()], engine, card, 8192)
    assert list(shown_models["model"]) == [a.model.name for a in models]
    assert list(shown_models["best weights"]) == [a.weights_format for a in models]


def test_bad_context_is_refused_with_a_message():
    with pytest.raises(InputError, match="context must be positive"):
        rank_cards(load_model("Qwen/Qwen3-8B"), configured("llama.cpp"), 0)
    with pytest.raises(InputError, match="context must be positive"):
        rank_models([load_model("Qwen/Qwen3-8B")], configured("llama.cpp"), Card.custom(8), -1)


def test_the_finders_take_a_gpu_count_and_rank_each_card_on_that_many():
    """--gpus N (and the sidebar's GPUs on the page): every card is fitted as N of it, split the engine's own way;
    each answer is `fit` of that very setup, and no card fits fewer requests on 2 than on 1."""
    model, engine = load_model("Qwen/Qwen3-32B"), configured("llama.cpp")
    one = {a.card.name: a for a in rank_cards(model, engine, 32768, "q4_k_m")}
    two = rank_cards(model, engine, 32768, "q4_k_m", gpus=2)
    for a in two:
        setup = Setup(model=model, engine=engine, card=a.card, weights="q4_k_m", gpus=2, pp=2)
        assert a.result.setup == setup and a.fits == fit(setup, [32768]).rows[0].fits
        assert a.requests >= one[a.card.name].requests
    assert sum(a.fits for a in two) > sum(a.fits for a in one.values())
    with pytest.raises(InputError, match="64 layers cannot fill 65 GPUs"):
        rank_cards(model, engine, 32768, "q4_k_m", gpus=65)  # one error, not a column of them
    card = card_named("GeForce RTX 3090 24GB")
    on_two = {a.model.name: a for a in rank_models([model], configured("vllm"), card, 32768, gpus=2)}
    assert on_two["Qwen/Qwen3-32B"].result.setup.tp == 2  # vLLM shards heads over them


def test_vllm_on_gpus_its_heads_cannot_all_shard_over_runs_pipeline_stages_for_the_rest(capsys):
    """vLLM cannot shard Llama-3.1-8B's 32 heads over 3 GPUs (tensor parallel 3); `vllm serve` then needs pipeline
    stages: the finders size it as TP 1 × PP 3 and say so, where every model read "no"; 6 GPUs: TP 2 × PP 3."""
    model, card = load_model("meta-llama/Llama-3.1-8B-Instruct"), card_named("H100 80GB SXM")
    three = rank_models([model], configured("vllm"), card, 8192, gpus=3)[0]
    assert three.fits and (three.result.setup.tp, three.result.setup.pp) == (1, 3)
    six = rank_models([model], configured("vllm"), card, 8192, gpus=6)[0]
    assert (six.result.setup.tp, six.result.setup.pp) == (2, 3)
    assert main(["models", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--gpus", "3", "--engine", "vllm",
                 "--json"]) == 0  # fmt: skip
    record = json.loads(capsys.readouterr().out)["models"][0]
    assert record["fits"] and record["split"] == "TP 1 × PP 3"
    assert main(["cards", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "3", "--engine", "vllm"]) == 0
    assert "TP 1 × PP 3" in capsys.readouterr().out


def test_the_cards_and_models_commands_take_gpus(capsys):
    assert main(["cards", "Qwen/Qwen3-32B", "--engine", "llama.cpp", "--weights", "Q4_K_M", "--gpus", "2",
                 "--context", "32k", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 2
    fits = {c["card"] for c in out["cards"] if c["fits"]}
    assert "GeForce RTX 4060 Ti 16GB" in fits  # 19 GiB of weights: over one 16 GB card, under two
    assert main(["models", "Qwen/Qwen3-32B", "--gpu", "GeForce RTX 3090 24GB", "--gpus", "2", "--engine",
                 "llama.cpp"]) == 0  # fmt: skip
    assert "2× GeForce RTX 3090 24GB (24.00 GiB each)" in capsys.readouterr().out


def test_the_finders_page_uses_the_sidebars_gpu_count():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params.update({"model": "Qwen/Qwen3-32B", "engine": "llama.cpp", "weights": "Q4_K_M", "ctx": "32K",
                            "gpus": "2"})  # fmt: skip
    at.run()
    at.switch_page("pages/4_finders.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(c.value.startswith("2 GPUs of each card") for c in at.caption)
    shown = at.dataframe[0].value
    expected = rank_cards(load_model("Qwen/Qwen3-32B"), configured("llama.cpp"), 32768, "q4_k_m", gpus=2)
    assert list(shown["card"]) == [a.card.name for a in expected]
