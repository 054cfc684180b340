"""Weight bytes per format, against figures worked out by hand from each model's config.json and against
published checkpoint and GGUF file sizes."""

from __future__ import annotations

from fractions import Fraction

import pytest

from core.errors import InputError
from core.memory.quant import FORMATS, default_format, format_named, weights_bytes
from core.model.loading import load_model
from core.model.params import Tensor, count_params, summarise

# Llama-3.1-8B's config.json
H, LAYERS, HEADS, KV, D, INTER, VOCAB = 4096, 32, 32, 8, 128, 14336, 128_256
Q_O = 2 * H * HEADS * D  # q_proj + o_proj
K_V = 2 * H * KV * D
MLP = 3 * H * INTER
NORMS = (2 * LAYERS + 1) * H  # two RMSNorms a layer + the final one
EMBED = VOCAB * H  # embed_tokens, and lm_head again (untied)


@pytest.fixture(scope="module")
def llama8b():
    return count_params(load_model("meta-llama/Llama-3.1-8B-Instruct"))


def test_bf16_is_two_bytes_a_parameter(llama8b):
    assert llama8b.total == 2 * EMBED + LAYERS * (Q_O + K_V + MLP) + NORMS == 8_030_261_248
    assert weights_bytes(llama8b, "bf16", 2).total == 2 * 8_030_261_248
    assert weights_bytes(llama8b, "fp32", 2).total == 4 * 8_030_261_248


def test_awq_and_gptq_by_hand(llama8b):
    linear = LAYERS * (Q_O + K_V + MLP)
    groups = linear // 128  # every input width (4096, 14336) is a multiple of 128
    int4 = linear // 2 + groups * 2 + groups // 2  # nibbles + fp16 scale + 4-bit zero per group
    rest = (2 * EMBED + NORMS) * 2  # embeddings, lm_head and norms stay bf16
    awq = weights_bytes(llama8b, "awq", 2)
    assert awq.linear == int4 and awq.total == int4 + rest
    # g_idx: one int32 per input column of each of the 7 matrices a layer
    g_idx = 4 * LAYERS * (3 * H + H + 3 * H)  # q,k,v and gate,up read H columns; o reads H; down reads INTER
    g_idx += 4 * LAYERS * (INTER - H)
    assert weights_bytes(llama8b, "gptq", 2).total == int4 + rest + g_idx
    assert format_named("awq").bits_per_weight == Fraction(133, 32)  # 4.15625


def test_fp8_int8_keep_embeddings_and_norms_in_model_dtype(llama8b):
    linear = LAYERS * (Q_O + K_V + MLP)
    rest = (2 * EMBED + NORMS) * 2
    assert weights_bytes(llama8b, "fp8", 2).total == linear + 4 * 7 * LAYERS + rest
    out_rows = LAYERS * (HEADS * D + 2 * KV * D + H + 2 * INTER + H)  # q, k, v, o, gate, up, down
    assert weights_bytes(llama8b, "int8", 2).total == linear + 2 * out_rows + rest


def test_gpt_oss_20b_mxfp4_by_hand():
    # config.json: hidden 2880, 24 layers, 32 experts of width 2880, 64 heads × 64, 8 kv heads, vocab 201,088
    h, layers, experts, inter, q, kv, vocab = 2880, 24, 32, 2880, 64 * 64, 8 * 64, 201_088
    expert_weights = layers * experts * (h * 2 * inter + inter * h)
    attention = (h * q + q) + 2 * (h * kv + kv) + (q * h + h) + 64  # biased q,k,v,o + sinks
    per_layer_bf16 = attention + (experts * h + experts) + experts * (2 * inter + h) + 2 * h  # router, biases, norms
    bf16 = 2 * vocab * h + h + layers * per_layer_bf16
    count = count_params(load_model("openai/gpt-oss-20b"))
    assert count.total == expert_weights + bf16
    got = weights_bytes(count, "mxfp4", 2)
    assert got.experts == expert_weights * 17 // 32  # 16 B of FP4 + one E8M0 scale per 32
    assert got.total == expert_weights * 17 // 32 + 2 * bf16 == 13_761_264_768
    # The released checkpoint is about 12.8 GiB (OpenAI's "fits in 16 GB"); the arithmetic lands there.
    assert 12.7 < got.total / 2**30 < 12.9


def test_gguf_q8_0_by_hand(llama8b):
    matrices = llama8b.total - NORMS  # every matrix's row length is a multiple of 32
    assert weights_bytes(llama8b, "q8_0", 2).total == matrices // 32 * 34 + NORMS * 4  # norms stay F32


def test_gguf_q4_k_m_mix_by_hand(llama8b):
    # llama.cpp llama_tensor_get_type_impl for Q4_K_M: output → Q6_K; token_embd stays Q4_K (untied); attn_v and
    # ffn_down → Q6_K in layers where use_more_bits(i, 32): i < 4, i ≥ 28, or (i − 4) % 3 == 2 → 16 of 32 layers.
    more = [i for i in range(32) if i < 4 or i >= 28 or (i - 4) % 3 == 2]
    assert len(more) == 16
    q4k, q6k = Fraction(144, 256), Fraction(210, 256)
    upgraded = H * KV * D + INTER * H  # attn_v + ffn_down of one layer
    expected = EMBED * q4k + EMBED * q6k + NORMS * 4
    expected += LAYERS * (Q_O + K_V + MLP) * q4k + len(more) * upgraded * (q6k - q4k)
    got = weights_bytes(llama8b, "q4_k_m", 2).total
    assert got == expected
    # bartowski/Meta-Llama-3.1-8B-Instruct-GGUF lists Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf at 4.92 GB
    # (4,920,739,232 bytes; the file also holds the tokenizer and a rope_freqs tensor).
    assert abs(got - 4_920_739_232) / 4_920_739_232 < 0.03


def test_gguf_q4_k_m_llama_70b_near_published_size():
    # bartowski's Llama-3.1-70B-Instruct listing: Q4_K_M 42.52 GB (with llama.cpp's LLM_TYPE_70B bump of the Q4_K
    # attn_v layers to Q5_K, which the referee checks on an 80-layer tiny llama).
    got = weights_bytes(count_params(load_model("meta-llama/Llama-3.1-70B-Instruct")), "q4_k_m", 2).total
    # The listing rounds to 10 MB, and the file also holds ~8 MB of tokenizer and rope_freqs (as the 8B's does).
    assert 0 < 42.52e9 - got < 15e6


def test_block_and_tile_scales_on_a_small_matrix():
    count = summarise((Tensor("attn_q", "linear", 300, 200), Tensor("attn_norm", "other", 1, 300)))
    # DeepSeek fp8: 1 B a weight + an fp32 scale per 128 × 128 tile: ceil(300/128) × ceil(200/128) = 3 × 2 tiles
    assert weights_bytes(count, "fp8_block", 2).total == 300 * 200 + 6 * 4 + 300 * 2
    # NVFP4: 4 bits + an fp8 scale per 16 (200 → 13 groups, the last partial) + an fp32 per-tensor scale
    assert weights_bytes(count, "nvfp4", 2).linear == 300 * 200 // 2 + 300 * 13 + 4
    # GGUF (llama.cpp tensor_type_fallback): a row of 224 is no multiple of 256, so Q4_K falls back to Q5_0
    # (22 B / 32, 7 blocks a row); a row of 200 is no multiple of 32 either, so it stays F16.
    assert weights_bytes(count, "q4_k_m", 2).linear == 300 * 200 * 2
    wide = summarise((Tensor("attn_q", "linear", 300, 224),))
    assert weights_bytes(wide, "q4_k_m", 2).linear == 300 * 7 * 22


def test_default_format_follows_the_checkpoint():
    assert default_format(load_model("openai/gpt-oss-20b")) == "mxfp4"
    assert default_format(load_model("deepseek-ai/DeepSeek-V3")) == "fp8_block"
    assert default_format(load_model("meta-llama/Llama-3.1-8B-Instruct")) == "bf16"


def test_every_format_is_smaller_than_fp32(llama8b):
    fp32 = weights_bytes(llama8b, "fp32", 2).total
    for name in FORMATS:
        got = weights_bytes(llama8b, name, 2)
        assert 0 < got.total <= fp32, name
        assert got.total == got.embedding + got.lm_head + got.linear + got.experts + got.router + got.other


def test_format_names_forgive_case_and_dashes():
    assert format_named("Q4_K_M").name == "q4_k_m"
    assert format_named("int4-awq").name == "awq"
    assert format_named("fp8-block").name == "fp8_block"
    # as llama-quantize prints them (tools/quantize/quantize.cpp QUANT_OPTIONS), any case
    assert format_named("IQ2_XXS").name == "iq2_xxs"
    assert format_named("q4_k_s").name == "q4_k_s"
    assert format_named("Q5-K-S").name == "q5_k_s"
    assert format_named("MXFP4_MOE").name == "mxfp4_moe"


def test_llama_quantize_aliases():
    # QUANT_OPTIONS: "Q3_K" / "Q4_K" / "Q5_K" are "alias for Q3_K_M" etc.
    assert [format_named(a).name for a in ("Q3_K", "q4_k", "Q5_K")] == ["q3_k_m", "q4_k_m", "q5_k_m"]
    # llama.cpp's F16 and F32 are the GGUF files; BF16 stays the HF checkpoint's name (gguf_bf16 is the GGUF one)
    assert format_named("F16").name == "gguf_f16" and format_named("f32").name == "gguf_f32"
    assert format_named("BF16").name == "bf16" and format_named("GGUF_BF16").name == "gguf_bf16"
    assert format_named("fp16").name == "fp16" and format_named("float16").name == "fp16"


def test_gguf_f16_keeps_norms_and_router_f32_where_fp16_does_not():
    count = summarise(
        (
            Tensor("attn_q", "linear", 64, 200),  # no multiple of any block: F16 either way
            Tensor("attn_norm", "other", 1, 200),
            Tensor("ffn_gate_inp", "router", 8, 200),
        )
    )
    assert weights_bytes(count, "F16", 2).total == 64 * 200 * 2 + 200 * 4 + 8 * 200 * 4
    assert weights_bytes(count, "gguf_bf16", 2).total == 64 * 200 * 2 + 200 * 4 + 8 * 200 * 4
    assert weights_bytes(count, "fp16", 2).total == (64 + 1 + 8) * 200 * 2
    assert weights_bytes(count, "f32", 2).total == weights_bytes(count, "fp32", 2).total == (64 + 1 + 8) * 200 * 4


@pytest.mark.parametrize(
    ("name", "block_bytes", "block_weights"),
    [
        # ggml-common.h's static_asserts, QK_K = 256, ggml_half = 2 bytes
        ("iq2_xxs", 2 + 256 // 8 * 2, 256),  # d + QK_K/8 uint16: 66, "2.06 bpw"
        ("iq2_xs", 2 + 256 // 8 * 2 + 256 // 32, 256),  # + QK_K/32 scales: 74
        ("iq3_xxs", 2 + 3 * (256 // 8), 256),  # 98
        ("iq3_s", 2 + 13 * (256 // 32) + 256 // 64, 256),  # 110
        ("iq1_s", 2 + 256 // 8 + 256 // 16, 256),  # 50, "1.56 bpw"
        ("iq1_m", 256 // 8 + 256 // 16 + 256 // 32, 256),  # 56: no d, "1.75 bpw"
        ("tq1_0", 2 + 256 // 64 + (256 - 4 * 256 // 64) // 5, 256),  # 54, "1.69 bpw"
        ("tq2_0", 2 + 256 // 4, 256),  # 66
        ("q4_1", 2 * 2 + 32 // 2, 32),  # 20
        ("q5_0", 2 + 4 + 32 // 2, 32),  # 22
        ("mxfp4_moe", 1 + 32 // 2, 32),  # E8M0 scale + FP4: 17
        ("q2_0", 2 + 64 // 4, 64),  # 18, "2.25 bpw (group 64)"
        ("q1_0", 2 + 128 // 8, 128),  # 18, "1.125 bpw"
    ],
)
def test_ggml_block_sizes_by_hand(name, block_bytes, block_weights):
    assert format_named(name).bits_per_weight == Fraction(8 * block_bytes, block_weights)
    # two stacked experts' ffn_up keep the ftype's own type in every mix (no rule of these ftypes reaches them)
    count = summarise((Tensor("ffn_up_exps", "experts", 3, 2 * 256, count=2, active=1),))
    assert weights_bytes(count, name, 2).experts == 2 * 3 * (2 * 256 // block_weights) * block_bytes


def test_rows_no_block_divides_fall_back_as_llama_quantize_does():
    # tensor_type_fallback: IQ2_XXS → IQ4_NL (18 B / 32) for a row of 288; Q1_0 has no fallback: llama-quantize stops
    odd = summarise((Tensor("attn_q", "linear", 3, 288),))
    assert weights_bytes(odd, "IQ2_XXS", 2).linear == 3 * 9 * 18
    with pytest.raises(InputError, match=r"cannot make Q1_0 of this model: attn_q has rows of 288, no multiple of 128"):
        weights_bytes(odd, "q1_0", 2)


def test_unknown_format_lists_the_valid_names(llama8b):
    with pytest.raises(InputError, match=r"unknown weight format 'int3'.*awq.*iq2_xxs.*q4_k_m.*gguf_bf16.*F16"):
        weights_bytes(llama8b, "int3", 2)


def test_bf16_on_llama_cpp_is_the_bf16_gguf_it_loads():
    """llama.cpp users type BF16 for the GGUF; llama.cpp loads nothing else, so on it the checkpoint's bf16 is that
    GGUF too: Llama-3.1-8B's norm vectors (2 per layer + the final one) are F32, 2 B more a value. llama.cpp's GPU
    holds everything but the token embedding (kept in RAM), vLLM's everything."""
    from core.engines import engine_named
    from core.fit import Setup, fit
    from core.memory.gpus import Card

    model = load_model("meta-llama/Llama-3.1-8B-Instruct")

    def weights(engine: str, name: str) -> int:
        return fit(Setup(model, engine_named(engine), Card.custom(80), weights=name), [4096]).weights_bytes

    gguf = weights("vllm", "bf16") - 2 * EMBED + 2 * NORMS
    assert weights("llama.cpp", "BF16") == weights("llama.cpp", "bf16") == gguf
    assert weights("llama.cpp", "F16") == weights("llama.cpp", "fp16")


def test_gptq_int8_and_w4a16_by_hand(llama8b):
    linear = LAYERS * (Q_O + K_V + MLP)
    groups = linear // 128
    rest = (2 * EMBED + NORMS) * 2
    g_idx = 4 * LAYERS * (6 * H + INTER)  # one int32 per input column: q, k, v, gate, up and o read H; down INTER
    # a byte a weight, an fp16 scale and an 8-bit zero per group of 128
    assert weights_bytes(llama8b, "gptq_int8", 2).total == linear + groups * 3 + g_idx + rest
    # symmetric INT4: nibbles and a 16-bit scale per group, no zero point
    assert weights_bytes(llama8b, "w4a16", 2).total == linear // 2 + groups * 2 + rest


def _with_quantization(qc: object):
    from dataclasses import replace

    spec = load_model("meta-llama/Llama-3.1-8B-Instruct")
    return replace(spec, config={**spec.config, "quantization_config": qc})


def _ct(weights: dict) -> dict:
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


@pytest.mark.parametrize(
    ("qc", "fmt"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "gptq_int8"),  # Qwen's *-GPTQ-Int8
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "awq"),
        (_ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}), "w4a16"),
        (_ct({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}), "int8"),
        (_ct({"num_bits": 8, "type": "float", "strategy": "channel"}), "fp8"),
        (_ct({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}), "fp8_block"),
        (_ct({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}), "nvfp4"),
    ],
)
def test_the_checkpoints_quantization_config_names_its_format(qc, fmt):
    assert default_format(_with_quantization(qc)) == fmt


@pytest.mark.parametrize(
    ("qc", "named"),
    [
        # sized as bf16 before: 2-4x over
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "'bitsandbytes'"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 32}, "gptq at 4 bits, group size 32"),
        ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "gptq at 3 bits"),
        ({"quant_method": "awq", "bits": 4, "group_size": 64}, "awq at 4 bits, group size 64"),
        (_ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": False}), "int 4-bit"),
        ({"quant_method": "compressed-tensors", "config_groups": {}}, "0 weight schemes"),
        ("awq", "quant_method 'awq'"),
    ],
)
def test_a_quantization_config_kvscope_cannot_count_is_refused_naming_it(qc, named):
    with pytest.raises(InputError) as err:
        default_format(_with_quantization(qc))
    assert named in str(err.value) and "--weights" in str(err.value)


def test_a_checkpoint_it_cannot_count_is_sized_as_the_format_asked_for(tmp_path):
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    raw = json.loads((ROOT / "core/model/presets/Qwen__Qwen3-8B.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw | {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}))

    def fit(*more: str) -> subprocess.CompletedProcess:
        args = ["fit", str(path), "--gpu", "RTX 4090", "--context", "8k", *more]
        return subprocess.run([sys.executable, "-m", "core", *args], capture_output=True, text=True, cwd=ROOT)

    refused = fit()
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "bitsandbytes" in refused.stderr
    asked = fit("--weights", "awq")
    assert asked.returncode == 0 and "weights awq" in asked.stdout, asked.stderr


def test_the_explorer_says_when_it_sizes_another_format_than_the_checkpoint_ships():
    """The explorer sizes its Weights box's format (default q4_k_m), so an uploaded GPTQ-Int8 config read as q4_k_m
    without a word; Fit a card now names the checkpoint's own format beside it, or why kvscope cannot count it."""
    import json

    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    raw = json.loads((ROOT / "core/model/presets/Qwen__Qwen3-8B.json").read_text())

    def captions(qc: dict, weights: str | None = None) -> list[str]:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
        at.radio(key="in_source").set_value("Upload").run()
        at.text_area[0].input(json.dumps(raw | {"quantization_config": qc})).run()
        if weights:
            at.selectbox(key="in_weights").set_value(weights).run()
        assert not at.exception, [e.value for e in at.exception]
        return [c.value for c in at.caption if "checkpoint" in c.value or "quantization_config" in c.value]

    gptq8 = {"quant_method": "gptq", "bits": 8, "group_size": 128}
    (said,) = captions(gptq8)
    assert "ships its weights as gptq_int8" in said and "for q4_k_m, the format chosen" in said
    assert captions(gptq8, "gptq_int8") == []
    (said,) = captions({"quant_method": "bitsandbytes", "load_in_4bit": True})
    assert "sized as q4_k_m, the format chosen" in said and "'bitsandbytes'" in said


def test_the_explorer_offers_the_checkpoints_own_format_one_click_away():
    """The Weights box's default, q4_k_m, is a GGUF type vLLM serves only experimentally, and an uploaded GPTQ-Int8
    config was sized as whatever the box held: a button beside the note now sizes the checkpoint's own format as the
    engine loads it, and the figures and the link follow. Where the engine would not load that one as such either
    (llama.cpp dequantizes GPTQ), or kvscope cannot count it (bitsandbytes), nothing is offered."""
    import json

    from core.units import format_tokens
    from tests.conftest import ROOT
    from tests.test_app import app, expected, metrics
    from ui.state import Inputs, pack_config

    def offers(at) -> list:
        assert not at.exception, [e.value for e in at.exception]
        return [b for b in at.button if "checkpoint's own" in b.label]

    card = "GeForce RTX 4090 24GB"
    at = app({"engine": "vllm", "card": card, "model": "Qwen/Qwen3-8B"})
    assert any("experimentally" in w.value for w in at.warning)
    (button,) = offers(at)
    assert button.label == "Size the weights as bf16, the checkpoint's own"
    button.click().run()
    assert offers(at) == [] and not any("experimentally" in w.value for w in at.warning)
    assert at.selectbox(key="in_weights").value == "bf16" and at.query_params["weights"] == "bf16"
    result, _ = expected(Inputs(engine="vllm", card=card, model="Qwen/Qwen3-8B", weights="bf16"))
    assert metrics(at)["Max context, one sequence"] == format_tokens(result.max_context)

    raw = json.loads((ROOT / "core/model/presets/Qwen__Qwen3-8B.json").read_text())
    gptq8 = pack_config(raw | {"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 128}})
    at = app({"engine": "vllm", "card": card, "config": gptq8, "weights": "awq"})
    (button,) = offers(at)
    assert button.label == "Size the weights as gptq_int8, the checkpoint's own"
    button.click().run()
    assert offers(at) == [] and at.query_params["weights"] == "gptq_int8"
    assert not [c for c in at.caption if "ships its weights" in c.value]
    assert offers(app({"card": card, "config": gptq8})) == []  # llama.cpp: converted to a GGUF first
    bnb = pack_config(raw | {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}})
    assert offers(app({"engine": "vllm", "card": card, "config": bnb})) == []
