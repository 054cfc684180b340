"""Fact-check: each seed figure's verdict, pinned by arithmetic worked here from the published numbers and the
configs' fields (Qwen3.5-9B: 32 layers, 8 full attention with 4 KV heads × 256, 24 Gated DeltaNet layers with 16
key heads and 32 value heads of 128, conv kernel 4; Qwen3-8B: 36 layers × 8 KV heads × 128; both bf16)."""

from __future__ import annotations

import json
import math
import re

import pytest

from core.check import AGREES, CANNOT, DISAGREES, check_all, figure_from, load_figures
from core.cli import main
from core.errors import InputError

GIB, MIB = 1 << 30, 1 << 20
HYBRID_RATE = 8 * 4 * 256 * 2 * 2  # attention layers × KV heads × head_dim × (K, V) × bf16
DENSE_RATE = 36 * 8 * 128 * 2 * 2
SKELETON_RATE = 32 * 4 * 256 * 2 * 2  # every one of Qwen3.5-9B's 32 layers full attention
CONV_CHANNELS = 2 * 16 * 128 + 32 * 128  # q, k (16 heads each) and v (32 heads) of 128
RECURRENT = 32 * 128 * 128  # one 128 × 128 matrix per value head
HF_STATE = 24 * (CONV_CHANNELS * 4 * 2 + RECURRENT * 4)  # transformers: 4 conv columns in bf16, fp32 recurrent
VLLM_STATE = 24 * (CONV_CHANNELS * 3 * 2 + RECURRENT * 4)  # vLLM keeps d_conv - 1 columns


@pytest.fixture(scope="module")
def checks():
    return {c.figure.id: c for c in check_all()}


def _find(checks, **where):
    hits = [c for c in checks.values() if all(getattr(c.figure, k) == v for k, v in where.items())]
    assert len(hits) == 1, where
    return hits[0]


def test_the_32768_byte_rate_agrees_in_both_seeds(checks):
    assert HYBRID_RATE == 32_768
    for c in (checks["s004-rate"], _find(checks, metric="kv_bytes_per_token", file="published.jsonl")):
        assert c.kvscope == HYBRID_RATE and c.verdict == AGREES
    assert checks["s000-dense-skeleton-rate"].kvscope == SKELETON_RATE == 131_072


def test_the_056_mib_fixed_state_counts_vectors_not_matrices(checks):
    c = checks["s000-fixed-state"]
    vectors = 24 * (16 * 128 + 32 * 128) * 4  # the source's own count
    assert vectors == 589_824 and round(vectors / MIB, 2) == c.figure.value
    assert c.kvscope == pytest.approx(VLLM_STATE / MIB)  # checked on the source's engine, vLLM
    assert c.verdict == DISAGREES and c.ratio == pytest.approx(VLLM_STATE / (0.56 * MIB))
    assert f"{vectors / MIB:.3f}" in c.reason  # the slip named reproduces the figure


def test_the_25_mb_bf16_state_is_the_recurrent_matrix_in_bf16_without_the_conv_buffer(checks):
    c = checks["s001-state-bf16"]
    bf16_no_conv = 24 * RECURRENT * 2
    assert round(bf16_no_conv / 1e6) == 25
    assert c.kvscope == pytest.approx(HF_STATE / 1e6) and HF_STATE == 51_904_512
    assert c.verdict == DISAGREES
    assert f"{bf16_no_conv / 1e6:.1f} MB" in c.reason and f"{HF_STATE / 1e6:.1f} MB" in c.reason


def test_the_4x_skeleton_ratio_agrees_and_the_4_6x_asymptote_is_4_5(checks):
    four = checks["s000-skeleton-ratio"]
    assert four.kvscope == SKELETON_RATE / HYBRID_RATE == 4.0 and four.verdict == AGREES
    asym = checks["s001-asymptotic-ratio"]
    assert DENSE_RATE / HYBRID_RATE == 4.5  # 147,456 / 32,768: "147 / 32" divides decimal KB by binary KiB
    assert asym.kvscope == 4.5 and asym.verdict == DISAGREES
    # the blog's per-token figures themselves are right, each in its own unit
    assert checks["s001-dense-rate"].verdict == AGREES and round(DENSE_RATE / 1000) == 147
    assert checks["s001-hybrid-rate"].verdict == AGREES and HYBRID_RATE / 1024 == 32


def test_the_cache_at_40k_is_1_25_gib_of_kv_plus_a_state_and_5_gib_for_the_skeleton(checks):
    kv = HYBRID_RATE * 40_960
    assert kv / GIB == 1.25 and SKELETON_RATE * 40_960 / GIB == 5.0
    hybrid = checks["s000-cache-40k"]
    assert hybrid.kvscope == pytest.approx((kv + HF_STATE) / GIB)
    assert round(hybrid.kvscope, 2) == 1.30 and hybrid.verdict == DISAGREES
    dense = checks["s000-dense-cache-40k"]
    assert dense.kvscope == 5.0 and dense.verdict == AGREES


def test_the_9_77_and_35_1_concurrency_on_54_94_gib(checks):
    pool = int(54.94 * GIB)
    # Qwen3-8B: 16-token blocks of 36 layers × 8 heads × 128 × 2 × 2 B; a 40,960-token request takes 2,560 blocks
    dense_blocks = pool // (16 * DENSE_RATE)
    dense = _find(checks, metric="max_concurrency", model="Qwen/Qwen3-8B", context=40960)
    assert dense.kvscope == pytest.approx(dense_blocks / 2560) and round(dense_blocks / 2560, 2) == 9.77
    assert dense.verdict == AGREES
    # Qwen3.5-9B: the attention block grows until one layer's page (4,096 B a token) holds a state page
    state_page = CONV_CHANNELS * 3 * 2 + RECURRENT * 4
    block = 16 * math.ceil(state_page / (16 * 4096))
    assert block == 528
    blocks = pool // (block * 4096 * 8)  # 4 groups of 8 layers share one pool; a block spans 8 layers
    per_request = math.ceil(40_960 / block) + 3 * 2  # attention blocks + 2 per state group (prefix caching)
    hybrid = _find(checks, metric="max_concurrency", model="Qwen/Qwen3.5-9B", file="published.jsonl")
    assert hybrid.kvscope == pytest.approx(blocks / per_request)
    assert hybrid.verdict == DISAGREES and hybrid.kvscope > 35.1 * 1.1
    ratio = checks["s000-concurrency-ratio"]
    assert round(35.1 / 9.77, 1) == ratio.figure.value  # the source's ratio follows from its own figures
    assert ratio.kvscope == pytest.approx(hybrid.kvscope / dense.kvscope, rel=1e-3) and ratio.verdict == DISAGREES


def test_the_8_gb_table_agrees_as_kv_only(checks):
    for ctx in (8192, 32768, 131072, 262144):
        hybrid, dense = checks[f"s004-table-{ctx // 1024}k"], checks[f"s004-table-{ctx // 1024}k-all-full"]
        assert hybrid.kvscope == HYBRID_RATE * ctx / GIB == hybrid.figure.value and hybrid.verdict == AGREES
        assert dense.kvscope == SKELETON_RATE * ctx / GIB == dense.figure.value and dense.verdict == AGREES
    assert checks["s004-saving"].kvscope == 4.0


def test_the_32000_vs_4000_sentence_on_8_gb(checks):
    hybrid, dense, ratio = checks["s004-8gb-hybrid"], checks["s004-8gb-dense"], checks["s004-8gb-ratio"]
    # what the stated 6.6 GB of weights leaves on an 8 GiB card, before llama.cpp's own buffers
    left = 8 * GIB - 6_600_000_000
    assert left // SKELETON_RATE > 4000 * 2  # even with nothing else on the card the dense figure is off
    assert dense.kvscope > 4000 and dense.verdict == DISAGREES
    assert hybrid.kvscope < 32_000 and hybrid.verdict == DISAGREES
    # whatever the budget, the contexts differ by about the rates' 4x (the hybrid also pays a fixed state), not 8x
    assert 32_000 / 4_000 == 8 and ratio.verdict == DISAGREES
    assert 3.5 < ratio.kvscope < SKELETON_RATE / HYBRID_RATE


def test_the_8_49_and_1_94_caches_at_61839_tokens_are_gib(checks):
    dense = _find(checks, metric="cache_bytes", model="Qwen/Qwen3-8B", context=61839)
    hybrid = _find(checks, metric="cache_bytes", model="Qwen/Qwen3.5-9B", context=61839)
    dense_bytes, hybrid_bytes = DENSE_RATE * 61_839, HYBRID_RATE * 61_839 + HF_STATE
    assert (round(dense_bytes / GIB, 2), round(hybrid_bytes / GIB, 2)) == (8.49, 1.94)
    assert dense.kvscope == pytest.approx(dense_bytes / 1e9) and hybrid.kvscope == pytest.approx(hybrid_bytes / 1e9)
    assert dense.verdict == hybrid.verdict == DISAGREES  # as printed, GB: 7 % short
    assert "GiB printed as GB" in dense.reason and "GiB printed as GB" in hybrid.reason
    assert checks["s001-ratio-64k"].verdict == AGREES and round(dense_bytes / hybrid_bytes, 1) == 4.4


def test_30_vs_7_sequences_at_64k(checks):
    dense, hybrid = DENSE_RATE * 65_536, HYBRID_RATE * 65_536 + HF_STATE
    c = checks["s001-sequences-64k"]
    assert c.kvscope == 7 * dense // hybrid == 30 and c.verdict == AGREES
    # the premise: 7 Qwen3-8B sequences of 64K beside 8.19B bf16 parameters leave under 2 GiB of an 80 GiB card for
    # everything else (CUDA context, a 64K prefill's activations): kvscope's overhead does not fit there
    assert 80 * GIB - (7 * dense + 2 * 8_190_735_360) < 2 * GIB
    premise = checks["s001-dense-sequences-a100"]
    assert premise.kvscope < 7 and premise.verdict == DISAGREES


def test_the_two_sources_disagree_on_the_32k_decode_gain(checks, capsys):
    c = checks["s001-vllm-decode-gain-32k"]
    assert c.verdict == DISAGREES and c.compared_with == "another source" and c.kvscope is None
    assert c.other == pytest.approx((93.9 / 63.4 - 1) * 100)
    # kvscope computed nothing: no kvscope ÷ published ratio, the other source's figure beside the published one,
    # and the count says which disagreement is not kvscope's
    record = c.record()
    assert record["ratio"] is None and record["other_source"] == pytest.approx(c.other)
    assert main(["check", "--id", "s001-vllm-decode-gain-32k"]) == 0
    text = capsys.readouterr().out
    assert "another source 48.1073 % (kvscope computes nothing here)" in text and "ratio" not in text
    assert "1 disagrees (1 of them between two sources)" in text


def test_shown_arithmetic_gives_the_shown_count(checks):
    """transformers prefills a batch's prompts together: the count divides the budget plus one sequence's prefill
    activations by a sequence's cache plus its activations, and the line shows both terms, so it comes out as the
    figure (the bare budget ÷ cache, 57.74 / 9.00, is 6)."""
    for fid in ("s001-dense-sequences-a100", "s001-hybrid-sequences-a100"):
        c = checks[fid]
        line = c.kvscope_lines[-1]
        numbers = [float(x) for x in re.findall(r"(\d+\.\d+) GiB", line.split("→")[1])]
        budget, grows, cache, grows_again = numbers
        assert grows == grows_again and math.floor((budget + grows) / (cache + grows)) == c.kvscope, line


def test_a_ratios_reason_names_the_terms_it_divides(checks):
    """s004-8gb-ratio divides 26,624 by 6,912 (the source's stated 6.6 GB file); the reason listed the own-weights
    alternatives, 73,984 / 18,688, as if they were its terms."""
    c = checks["s004-8gb-ratio"]
    assert "numerator 26,624 (with kvscope's own" in c.reason and "denominator 6,912 (" in c.reason
    assert c.kvscope == pytest.approx(26_624 / 6_912)


def test_a_context_past_the_models_limit_is_said(checks):
    c = checks["s001-dense-sequences-a100"]  # Qwen3-8B at 65,536 tokens: its config stops at 40,960
    assert "past Qwen/Qwen3-8B's 40,960-token limit" in c.reason
    assert "limit" not in checks["s001-sequences-64k"].reason  # Qwen3.5-9B's 262,144 holds it


def test_speed_figures_cannot_be_checked(checks):
    speed = [c for c in checks.values() if c.figure.metric in ("decode_tok_s", "prefill_tok_s")]
    assert speed and all(c.verdict == CANNOT and c.kvscope is None and c.reason for c in speed)


def test_engine_logs_the_tests_reproduce_agree(checks):
    for fid in (
        "log-qwen35-27b-tp2-concurrency",
        "log-deepseek-v2-lite-pp2-tokens",
        "log-deepseek-v2-lite-pp2-concurrency",
        "log-gemma-3-270m-llamacpp-4-slots",
        "log-gemma-3-270m-llamacpp-3-slots",
    ):
        assert checks[fid].verdict == AGREES, fid
    assert _find(checks, metric="kv_cache_tokens", context=131072).kvscope == 302_921


def test_every_figure_has_a_source_and_settings_and_no_local_path():
    figures = load_figures()
    assert len({f.id for f in figures}) == len(figures)
    for f in figures:
        assert f.source and f.basis in ("measured", "derived")
        if f.file == "claims.jsonl":  # published.jsonl's paths are being replaced on another branch
            assert "/work/" not in json.dumps(f.record) and f.setup is not None, f.id


def test_verdict_follows_printed_precision():
    base = {"metric": "kv_bytes_per_token", "model": "Qwen/Qwen3.5-9B", "unit": "KB", "setup": {}}
    from core.check import check_figure

    assert check_figure(figure_from({**base, "value": 32.8, "printed": "32.8 KB"})).verdict == AGREES
    # 32,768 B is 32.768 KB: "33 KB" is within half a unit, "34 KB" is not; "about 30" allows a whole ten
    assert check_figure(figure_from({**base, "value": 33, "printed": "33 KB"})).verdict == AGREES
    assert check_figure(figure_from({**base, "value": 34, "printed": "34 KB"})).verdict == DISAGREES
    assert check_figure(figure_from({**base, "value": 30, "printed": "30 KB"})).verdict == AGREES
    assert check_figure(figure_from({**base, "value": 30.0, "printed": "30.0 KB"})).verdict == DISAGREES
    assert check_figure(figure_from({**base, "value": 30.0, "printed": "30.0 KB", "approx": True})).verdict == DISAGREES


def test_bad_records_give_clear_errors(tmp_path):
    with pytest.raises(InputError, match="no 'value'"):
        figure_from({"metric": "x", "model": "y"})
    (tmp_path / "claims.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match="line 1"):
        load_figures(tmp_path)
    from core.check import check_figure

    unknown = check_figure(figure_from({"metric": "kv_bytes_per_token", "model": "nobody/none", "value": 1}))
    assert unknown.verdict == CANNOT and "no bundled config" in unknown.reason


def test_cli_check_json_lists_the_contract_fields(capsys):
    assert main(["check", "--json", "--model", "Qwen3-8B"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["model"] == "Qwen/Qwen3-8B" for r in rows)
    for key in ("metric", "model", "published", "kvscope", "ratio", "verdict", "reason", "source"):
        assert all(key in r for r in rows)
    assert main(["check", "--id", "no-such-figure"]) == 2
    assert "no figure with id" in capsys.readouterr().err
