"""What a fourth audit (cross-command consistency) found: two surfaces giving two answers to one question. Each test
holds the surfaces to one answer, on the input that showed the split."""

from __future__ import annotations

import json
import math

from core.cli import main
from core.engines import configured
from core.finders import RunOptions, rank_cards, rank_models
from core.fit import Setup, fit
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.report import requests_text, verdict


def run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, json.loads(out)


LFM2 = ["LiquidAI/LFM2-1.2B", "--gpu", "GeForce RTX 4090 24GB", "--context", "4k"]


def test_vllm_runs_no_more_requests_at_once_than_its_scheduler_takes(capsys):
    """The cache holds 382.66 requests of 4K, but `vllm serve` on a 4090 runs at most 256 (max_num_seqs): fit, the
    app's count, speed and cluster say 256; the cache's own figure stays as vLLM logs it."""
    _, out = run(capsys, "fit", *LFM2, "--engine", "vllm")
    row = out["contexts"][0]
    assert row["max_concurrency"] > 300 and row["max_num_seqs"] == 256
    result = fit(Setup(load_model("LiquidAI/LFM2-1.2B"), configured("vllm"), card_named("RTX 4090")), [4096])
    assert requests_text(result, result.rows[0]).startswith("256 (--max-num-seqs")
    assert "256 requests of 4K can run at once" in verdict(result, result.rows[0]).sentence
    _, cluster = run(capsys, "cluster", *LFM2, "--nodes", "1", "--gpus-per-node", "1")
    assert {plan["requests"] for plan in cluster["plans"]} == {256}
    _, speed = run(capsys, "speed", *LFM2, "--engine", "vllm", "--batch", "256", "--batch", "257")
    timed, refused = speed["rows"]
    assert timed["decode_tok_s"] and refused["decode_tok_s"] is None and "at most 256 at once" in refused["why"]


def test_max_num_seqs_as_given_bounds_the_requests_and_sizes_the_samplers_logits(capsys):
    """`vllm serve --max-num-seqs 64`: 64 run at once, and the start-up profile run samples 64 rows of the vocabulary
    (min(batched tokens, max_num_seqs) rows of fp32 logits and probabilities), not the card's default 256."""
    _, default = run(capsys, "fit", *LFM2, "--engine", "vllm")
    _, given = run(capsys, "fit", *LFM2, "--engine", "vllm", "--max-num-seqs", "64")
    vocab = load_model("LiquidAI/LFM2-1.2B").vocab_size
    assert given["contexts"][0]["max_num_seqs"] == 64 and given["engine_options"]["max_num_seqs"] == 64
    overhead = default["contexts"][0]["overhead_bytes"] - given["contexts"][0]["overhead_bytes"]
    assert overhead == (256 - 64) * vocab * 4 * 2
    _, speed = run(capsys, "speed", *LFM2, "--engine", "vllm", "--max-num-seqs", "64", "--batch", "65")
    assert "at most 64 at once" in speed["rows"][0]["why"]
    _, cluster = run(capsys, "cluster", *LFM2, "--nodes", "1", "--gpus-per-node", "1", "--max-num-seqs", "64")
    assert {plan["requests"] for plan in cluster["plans"]} == {64}
    assert main(["fit", *LFM2, "--max-num-seqs", "64"]) == 2  # transformers has no such flag
    assert "--max-num-seqs is vllm's" in capsys.readouterr().err


def test_the_finders_command_line_counts_what_vllm_runs_at_once(capsys):
    """`cards` and `models` printed the cache's 382.65 requests for LFM2 on a 4090 where fit says 256 run at once;
    they now print 256, starred and explained, and the JSON keeps both as fit's does."""
    args = ["LiquidAI/LFM2-1.2B", "--engine", "vllm", "--context", "4k"]
    _, cards = run(capsys, "cards", *args)
    (row,) = [c for c in cards["cards"] if c["card"] == "GeForce RTX 4090 24GB"]
    assert row["max_num_seqs"] == 256 and row["requests"] > 382
    assert main(["cards", *args]) == 0
    text = capsys.readouterr().out
    (line,) = [x for x in text.splitlines() if x.startswith("GeForce RTX 4090 24GB ")]
    assert " 256*  " in line and "382" not in line and "* at once: vLLM's --max-num-seqs" in text
    _, models = run(capsys, "models", "LiquidAI/LFM2-1.2B", "--gpu", "RTX 4090", "--engine", "vllm", "--context", "4k")
    assert models["models"][0]["max_num_seqs"] == 256


def test_a_fractional_count_is_cut_not_rounded_up(capsys):
    """One token past the longest context vLLM's blocks hold: 0.9996 of a request shows as 0.99, not 1.00 beside
    "no", and the verdict names how much is missing where the two totals print alike."""
    model = "meta-llama/Llama-3.1-70B-Instruct"
    setup = Setup(load_model(model), configured("vllm"), card_named("A100 80GB PCIe"), gpus=2, tp=2)
    result = fit(setup, [36481])
    row = result.rows[0]
    assert not row.fits and 0.99 < row.max_concurrency < 1
    assert requests_text(result, row) == "none (0.99 of one)"
    short = row.total_bytes - result.usable_bytes
    assert 0 < short < 2 << 20 and "1.12 MiB more than the 73.60 GiB usable" in verdict(result, row).sentence
    # speed's reason counts whole requests: ⌊c⌋, never c rounded up
    llama = ["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4090", "--engine", "vllm", "--weights", "bf16"]
    _, speed = run(capsys, "speed", *llama, "--context", "16k", "--batch", "3")
    (row,) = speed["rows"]
    whole = math.floor(row["max_concurrency"])
    assert row["max_concurrency"] % 1 > 0.5 and f"{whole} fit at this context" in row["why"]


def test_fit_json_names_the_engine_options_its_figures_used(capsys):
    """Under vLLM, fit sizes with `vllm serve`'s defaults for the card and the parallel sizes; its JSON said the
    options as parsed (2048 batched tokens, TP 1)."""
    _, out = run(capsys, "fit", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100", "--gpus", "2", "--engine", "vllm")
    options = out["engine_options"]
    assert options["tensor_parallel"] == out["tp"] == 2
    assert options["max_num_batched_tokens"] == 8192 and options["gdn_flashinfer"] is True


def test_the_finders_run_the_model_as_fit_a_card_does():
    """The finders dropped vLLM's memory utilisation and llama.cpp's -ngl / --n-cpu-moe: a card that Fit a card said
    does not fit was listed as fitting, and the other way round."""
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    card = card_named("RTX 4090")
    low = Setup(llama, configured("vllm"), card, weights="bf16", gpu_memory_utilization=0.6)
    assert not fit(low, [32768]).rows[0].fits
    answers = {a.card.name: a for a in rank_cards(llama, configured("vllm"), 32768, "bf16", run=RunOptions(0.6))}
    assert not answers[card.name].fits
    (model,) = rank_models([llama], configured("vllm"), card, 32768, utilization=0.6)
    assert model.weights_format != "bf16"  # bf16 no longer fits at 0.6: a smaller format is chosen
    oss = load_model("openai/gpt-oss-20b")
    small = card_named("RTX 4060 8GB")
    moe = Setup(oss, configured("llama.cpp"), small, weights="q4_k_m", cpu_experts=range(24))
    assert fit(moe, [32768]).rows[0].fits
    run_ = RunOptions(cpu_experts=range(24))
    answers = {a.card.name: a for a in rank_cards(oss, configured("llama.cpp"), 32768, "q4_k_m", run=run_)}
    assert answers[small.name].fits and answers[small.name].requests == fit(moe, [32768]).rows[0].max_concurrency


def test_a_front_end_that_runs_one_request_says_what_runs_more(capsys):
    """Ollama runs OLLAMA_NUM_PARALLEL (1) requests at a time and llama-cli one conversation, however many the
    memory holds: the count says which setting runs that many; llama-server's count is its slots' already."""
    base = ["fit", "Qwen/Qwen3-8B", "--gpu", "RTX 4060 8GB", "--engine", "llama.cpp", "--weights", "q4_k_m"]
    _, out = run(capsys, *base, "--frontend", "ollama", "--kv-dtype", "q8_0", "--context", "4k")
    row = out["contexts"][0]
    n = int(row["max_concurrency"])
    assert n > 1 and row["front_end_runs"] == 1
    assert row["runs_at_once"] == f"with OLLAMA_NUM_PARALLEL={n}; Ollama runs 1 at a time"
    _, out = run(capsys, *base, "--context", "4k")  # llama-cli, the default front end
    assert out["contexts"][0]["runs_at_once"].endswith("llama-cli runs one conversation")
    _, out = run(capsys, *base, "--frontend", "llama-server", "--context", "4k")
    assert "front_end_runs" not in out["contexts"][0]  # its 4 slots bound the count itself
    setup = Setup(load_model("Qwen/Qwen3-8B"), configured("llama.cpp", "ollama"), card_named("RTX 4060 8GB"),
                  weights="q4_k_m", kv_dtype="q8_0")  # fmt: skip
    result = fit(setup, [4096])
    assert (
        f"{n} requests of 4K can run at once with OLLAMA_NUM_PARALLEL={n}" in verdict(result, result.rows[0]).sentence
    )


def test_size_says_where_a_card_s_serve_defaults_change_vllm_s_cache(capsys):
    """`size` has no card: gpt-oss-20b's windowed blocks follow the batched tokens, which `vllm serve` sets by card
    (8,192 on an H100), and Qwen3.5's DeltaNet state follows FlashInfer on Hopper. size says so, and with the card's
    batched tokens given it sizes what fit does."""
    _, out = run(capsys, "size", "openai/gpt-oss-20b", "--engine", "vllm", "--context", "32k")
    assert any(n.startswith("vLLM: sized at --max-num-batched-tokens 2,048") for n in out["notes"])
    _, given = run(capsys, "size", "openai/gpt-oss-20b", "--engine", "vllm", "--context", "32k",
                   "--max-num-batched-tokens", "8192")  # fmt: skip
    _, on_card = run(capsys, "fit", "openai/gpt-oss-20b", "--engine", "vllm", "--context", "32k", "--gpu", "H100")
    assert given["contexts"][0]["cache_bytes"] == on_card["contexts"][0]["cache_bytes"]
    assert not any("--max-num-batched-tokens" in n for n in given["notes"])
    _, out = run(capsys, "size", "Qwen/Qwen3.5-9B", "--engine", "vllm", "--context", "32k")
    assert any("on Hopper vLLM runs FlashInfer's" in n for n in out["notes"])
    _, out = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--engine", "vllm", "--context", "32k")
    assert not any(n.startswith("vLLM: sized") for n in out["notes"])  # a full-attention cache: neither changes it
