"""Fit a card: the solver's answers, the 8 GB story for Qwen3.5-9B, and clear errors for bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.engines import engine_named
from core.errors import InputError
from core.fit import Setup, Solver, fit
from core.memory.gpus import Card, card_named
from core.model.loading import load_model
from core.model.whatif import all_full_attention
from tests.test_cli import run_cli

GIB = 1 << 30
QWEN35 = load_model("Qwen/Qwen3.5-9B")
SKELETON = all_full_attention(QWEN35)
CONTEXTS = [8192, 32768, 131072, 262144]


def eight_gb(model, engine="llama.cpp", **kw) -> Setup:
    return Setup(model=model, engine=engine_named(engine), card=Card.custom(8), weights="q4_k_m", **kw)


def test_skeleton_is_all_full_attention_with_the_same_attention_shape():
    assert SKELETON.layer_counts() == {"full_attention": 32}
    llama = engine_named("llama.cpp")
    # 32 layers × (K + V) × 4 KV heads × 256 × f16 against 8 of them in the hybrid
    assert llama.kv_bytes_per_token(SKELETON) == 32 * 2 * 4 * 256 * 2 == 4 * llama.kv_bytes_per_token(QWEN35)


def test_eight_gb_table_hybrid_vs_skeleton_attention_cache_is_four_times_at_every_length():
    hybrid, dense = fit(eight_gb(QWEN35), CONTEXTS), fit(eight_gb(SKELETON), CONTEXTS)
    for h, d in zip(hybrid.rows, dense.rows, strict=True):
        assert d.account.token_bytes == 4 * h.account.token_bytes
        assert d.account.fixed_bytes == 0 and h.account.fixed_bytes > 0
        # the whole cache ratio stays under 4 (the hybrid's fixed state) and climbs toward it
        assert 3 < d.cache_bytes / h.cache_bytes < 4
    ratios = [d.cache_bytes / h.cache_bytes for h, d in zip(hybrid.rows, dense.rows, strict=True)]
    assert ratios == sorted(ratios)
    # on an 8 GiB card with 4-bit weights the hybrid holds a 32K conversation, the dense skeleton does not
    by_ctx = {r.context: r.fits for r in hybrid.rows}, {r.context: r.fits for r in dense.rows}
    assert by_ctx[0][32768] and not by_ctx[1][32768]
    assert hybrid.max_context > 3 * dense.max_context


def test_eight_bit_kv_halves_attention_but_not_the_recurrent_state():
    vllm = engine_named("vllm")
    assert vllm.kv_bytes_per_token(QWEN35, "fp8") * 2 == vllm.kv_bytes_per_token(QWEN35, "bf16")
    assert vllm.fixed_bytes_per_sequence(QWEN35, "fp8") == vllm.fixed_bytes_per_sequence(QWEN35, "bf16")
    llama = engine_named("llama.cpp")
    # q8_0 stores 34 bytes per 32 values: 17/32 of f16, not exactly half
    assert llama.kv_bytes_per_token(QWEN35, "q8_0") * 32 == llama.kv_bytes_per_token(QWEN35, "f16") * 17
    assert llama.fixed_bytes_per_sequence(QWEN35, "q8_0") == llama.fixed_bytes_per_sequence(QWEN35, "f16")


def test_max_context_is_the_boundary():
    for setup in (eight_gb(QWEN35), eight_gb(SKELETON), eight_gb(QWEN35, "transformers")):
        solver = Solver(setup)
        best = solver.max_context()
        assert best < solver.limit
        assert (best == 0 or solver.fits(best)) and not solver.fits(best + 1)


def test_transformers_pipeline_split_halves_weights_and_cache_per_gpu():
    one = fit(eight_gb(QWEN35, "transformers"), [32768]).rows[0]
    two = fit(replace(eight_gb(QWEN35, "transformers"), gpus=2, pp=2), [32768]).rows[0]
    assert two.weights_bytes == -(-one.weights_bytes // 2)
    assert two.cache_bytes == -(-one.cache_bytes // 2)


def test_vllm_fit_reports_what_the_startup_log_would():
    budget, max_len = 20 * GIB, 40960
    proc = run_cli(
        "fit",
        "Qwen/Qwen3-8B",
        "--engine",
        "vllm",
        "--gpu",
        "A100 80GB SXM4",
        "--kv-cache-memory-bytes",
        str(budget),
        "--max-model-len",
        str(max_len),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    blocks = budget // (36 * 16 * 8 * 256 * 2)
    concurrency = blocks / (max_len // 16)
    assert out["kv_budget_bytes"] == budget
    assert out["vllm"]["num_blocks"] == blocks
    assert out["vllm"]["kv_cache_tokens"] == int(concurrency * max_len)
    assert out["vllm"]["log"].endswith(f"Maximum concurrency for 40,960 tokens per request: {concurrency:.2f}x")
    for key in ("weights_bytes", "overhead_bytes", "kv_budget_bytes", "max_context"):
        assert isinstance(out[key], int)
    row = out["contexts"][0]
    assert set(row) >= {"cache_bytes", "total_bytes", "fits", "max_concurrency"}


def test_fit_cli_table_for_the_eight_gb_card():
    proc = run_cli(
        "fit",
        "Qwen/Qwen3.5-9B",
        "--gpu-mem-gib",
        "8",
        "--weights",
        "Q4_K_M",
        "--engine",
        "llama.cpp",
        "--context",
        "8k",
        "--context",
        "32k",
        "--context",
        "128k",
        "--context",
        "256k",
    )
    assert proc.returncode == 0, proc.stderr
    assert "max context for one sequence" in proc.stdout and "GiB" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-mem-gib", "0"], "must be positive"),
        (["--gpu-mem-gib", "-8"], "must be positive"),
        (["--gpu", "RTX 9999"], "unknown card"),
        (["--gpu", "H100", "--engine", "vllm", "--gpus", "3"], "does not divide"),
        (["--gpu", "H100", "--engine", "llama.cpp", "--gpus", "4", "--pp", "2"], "leave --tp and --pp out"),
        (["--gpu", "H100", "--context", "1M"], "above the limit"),
        (["--gpu", "H100", "--engine", "vllm", "--max-model-len", "1M"], "above"),
        (["--gpu", "H100", "--weights", "q7_z"], "q7_z"),
        (["--gpu", "H100", "--weights", " "], "--weights: is empty"),  # it read as the checkpoint's format
        ([], "give the card"),
        (["--gpu", "H100", "--gpu-mem-gib", "8"], "give the card"),
        (["--gpu", "H100", "--engine", "vllm", "--gpu-memory-utilization", "1.5"], "gpu_memory_utilization"),
    ],
)
def test_bad_fit_input_gives_a_clear_message(args, message):
    proc = run_cli("fit", "Qwen/Qwen3-8B", *args)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_card_lookup_names_the_ambiguity():
    with pytest.raises(InputError, match="ambiguous"):
        card_named("4060")  # the 4060, 4060 Ti and 4060 Laptop all hold "4060" as a word
    assert card_named("h200").memory_bytes == 143771 << 20


def test_a_name_held_as_whole_words_by_one_card_picks_it():
    """'Arc A770' begins both 'Intel Arc A770 16GB' and 'Intel Arc A770M 16GB', but only the first holds it as whole
    words: it names the desktop card; 'A770M' names the laptop one."""
    assert card_named("Arc A770").name == "Intel Arc A770 16GB"
    assert card_named("a770m").name == "Intel Arc A770M 16GB"
    assert card_named("RX 7900 XT").name == "Radeon RX 7900 XT 20GB"  # not the XTX
    with pytest.raises(InputError, match="ambiguous"):
        card_named("SXM")  # no model number: several SXM cards, whichever holds it as a word


def test_a_short_name_matches_from_the_start_of_a_word_only():
    """'T4' is in 'Radeon PRO W7900 Dual Slot 48GB' once spaces are dropped ('Slot' + '48GB'); it must still name the
    T4 alone, while a name typed across words ('rtx 3060', 'max+ 395') keeps matching."""
    from core.memory.gpus import _key, cards

    assert any("t4" in _key(n) and not n.startswith("T4") for n in cards())  # the trap exists in the table
    assert card_named("T4").name == "T4 16GB"
    assert card_named("rtx 3060").name == "GeForce RTX 3060 12GB"
    assert card_named("W7900 Dual").name == "Radeon PRO W7900 Dual Slot 48GB"
    assert card_named("max+ 395").name.startswith("AMD Ryzen AI Max+ 395")


@pytest.mark.parametrize(
    ("typed", "card"),
    [("H100 PCIe", "H100 80GB PCIe"), ("h100 sxm", "H100 80GB SXM5"), ("A100 PCIe", "A100 80GB PCIe"),
     ("PCIe A100", "A100 80GB PCIe"), ("4060 Ti 16GB", "GeForce RTX 4060 Ti 16GB")],
)  # fmt: skip
def test_a_card_is_found_by_its_words_in_any_order(typed, card):
    """'H100 PCIe' was an unknown card: no name holds 'h100pcie' whole, though one holds both words."""
    assert card_named(typed).name == card


def test_llamacpp_partial_offload_keeps_the_rest_in_ram():
    from core.memory.quant import tensor_bytes
    from core.model.params import count_params

    setup = replace(eight_gb(QWEN35), gpu_layers=16)
    row = fit(setup, [32768]).rows[0]
    tensors = tensor_bytes(count_params(QWEN35), "q4_k_m", 2)
    # llama.cpp's -ngl 16 of 32 layers + output: the output layer and the last 15 layers (17-31) go to the GPU
    head = sum(b for t, b in tensors if t.role in ("output", "output_norm"))
    assert row.weights_bytes == sum(b for t, b in tensors if t.layer is not None and t.layer >= 17) + head
    # layers 19, 23, 27, 31 are the full-attention ones among 17-31; 11 Gated DeltaNet states go along
    llama = engine_named("llama.cpp")
    cells = 32768
    assert row.cache_bytes == 4 * cells * 2 * 4 * 256 * 2 + 11 * llama.fixed_bytes_per_sequence(QWEN35) // 24
    full = fit(eight_gb(QWEN35), [32768]).rows[0]
    embedding = next(b for t, b in tensors if t.category == "embedding")
    assert full.weights_bytes == sum(b for _, b in tensors) - embedding
    with pytest.raises(InputError, match=r"llama\.cpp setting"):
        Solver(replace(setup, engine=engine_named("vllm")))


def test_vllm_overhead_stays_on_the_safe_side_of_the_one_measured_budget():
    """The seed's A100 80GB run of Qwen3-8B (vLLM, utilization 0.90) reported 54.94 GiB for the KV cache; kvscope's
    budget must not promise more, and should not be far below it either."""
    setup = Setup(
        model=load_model("Qwen/Qwen3-8B"),
        engine=engine_named("vllm"),
        card=card_named("A100 80GB PCIe"),
        gpu_memory_utilization=0.90,
        max_model_len=40960,
    )
    budget = Solver(setup).budget(40960)
    assert 54.44 * GIB < budget <= 54.94 * GIB


@pytest.mark.parametrize("engine", ["llama.cpp", "vllm", "transformers"])
def test_the_breakdown_bars_add_up_to_each_rows_total_on_several_gpus(engine):
    """The chart's parts per GPU are the row's own: llama.cpp's deciding GPU, vLLM's fullest pipeline stage (its
    cache is not an even share), transformers' even share; the hybrid's fixed state is parted out as the account
    parts it."""
    from core.report import breakdown_records

    setup = replace(eight_gb(QWEN35, engine), card=Card.custom(40), gpus=2, pp=2, weights=None)
    result = fit(setup, CONTEXTS[:2])
    for bars, row in zip(breakdown_records(result), result.rows, strict=True):
        assert bars["weights"] + bars["attention cache"] + bars["fixed state"] + bars["overhead"] == row.total_bytes
        assert bars["fixed state"] > 0 and bars["attention cache"] > 0
        assert bars["gpu"] == row.gpu and bool(row.gpu) == (engine == "llama.cpp")  # the hover names it
    if engine == "llama.cpp":  # each bar's hover names its row's GPU
        from ui.charts import breakdown

        fig = breakdown(breakdown_records(result))
        assert list(fig.data[0].customdata) == [row.gpu for row in result.rows]
        assert "on %{customdata}" in fig.data[0].hovertemplate
        assert fig.layout.yaxis.title.text == "GiB on the deciding GPU"


def test_transformers_requests_each_bring_their_prefill_overhead():
    """transformers' generate() prefills a batch's prompts in one pass: n requests of 8K hold n × 8K tokens of
    activations and n last-token logits. Llama-3.1-70B on 8 RTX 3090s allowed 16 requests of 8K (one sequence's
    activations counted) while one 32K request did not fit; 8K × 16 is 4 × 32K of prefill."""
    model = load_model("meta-llama/Llama-3.1-70B-Instruct")
    setup = Setup(model, engine_named("transformers"), card_named("RTX 3090"), gpus=8, pp=8, weights="bf16")
    result = fit(setup, [8192, 32768])
    row, long = result.rows
    h, ffn, vocab = model.hidden_size, model.config["intermediate_size"], model.vocab_size
    each = 8192 * 2 * (4 * h + 3 * ffn) + vocab * 4 + row.cache_bytes  # activations, logits, cache per request
    fixed = row.weights_bytes + row.overhead_bytes - (each - row.cache_bytes)  # weights, CUDA context, NCCL
    n = row.max_concurrency
    assert fixed + n * each <= result.usable_bytes < fixed + (n + 1) * each
    assert not long.fits and n * 8192 < 32768  # as many 8K prompts as one 32K prompt's room holds, not 16
