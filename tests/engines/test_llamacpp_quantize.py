"""The real llama.cpp referees kvscope's GGUF weight sizes: every llama-quantize ftype, tensor by tensor, byte for byte.

Tiny random checkpoints (defined here) go through llama.cpp's converter (tests/engines/llamacpp_gguf.py) to F16
GGUFs; libllama's llama_model_quantize then writes each ftype (tests/engines/llamacpp_quantize_runner.py) and gguf-py
reads back every tensor's ggml type and bytes. kvscope's `gguf_tensors` and `tensor_bytes`, on the same config, must
give the same type and bytes for every tensor and the same total. The table lands in
tests/artifacts/llamacpp_quantize_referee.md.

Widths: hidden 256 and most matrix inputs multiples of 256, so the k- and i-quants apply; the llama_odd FFN (288) and
the MoE's shared expert (272) are no multiple of 256 (tensor_type_fallback: Q4_K → Q5_0, IQ2_XXS → IQ4_NL, ...) and
272 no multiple of 32 either (→ F16); Qwen3.5's Gated DeltaNet output reads 4 × 32 = 128 columns. The dense llama has
8 layers, so use_more_bits and the n_layer/8 rules pick different layers; the MoE has 8 experts (llama.cpp's
`n_expert == 8` rules) and a shared expert (two ffn_down tensors a layer); gpt-oss has 4 experts (the i-quants'
`n_expert >= 4`) and is MXFP4_MOE's model; llama_odd has GQA 4 and tied embeddings; DeepSeek-V3's MLA kv_b is
written as 3-D attn_k_b / attn_v_b (MXFP4 under MXFP4_MOE, rows of qk_nope 64 falling back); Granite-4.0-H starts
with a Mamba2 layer, so llama.cpp's n_gqa(0) is 0 although its attention has GQA 4; llama_80 is "70B" to llama.cpp.

The i-quants llama-quantize refuses without an importance matrix get one (all ones: the runner's docstring says why
that is enough); the others are made without, as llama-quantize makes them by default.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import InputError
from core.memory.quant import FTYPES, GGML, gguf_tensors, tensor_bytes
from core.model.loading import model_from_config
from core.model.params import Tensor, count_params
from tests.engines.engine_env import LLAMACPP_TREE, ROOT, convert_tiny, run_in_engines
from tests.engines.llamacpp_models import MODELS as LLAMACPP_MODELS
from tests.tiny_configs import tiny_raw

HERE = Path(__file__).resolve().parent
ARTIFACT = ROOT / "tests" / "artifacts" / "llamacpp_quantize_referee.md"
_WIDE = {"hidden_size": 256, "vocab_size": 256, "num_attention_heads": 4, "head_dim": 64}
MODELS = {
    "llama": tiny_raw("llama", **_WIDE, intermediate_size=256, num_hidden_layers=8, num_key_value_heads=2),
    "llama_odd": tiny_raw(
        "llama", **_WIDE, intermediate_size=288, num_hidden_layers=3, num_key_value_heads=1, tie_word_embeddings=True
    ),
    "qwen2_moe": dict(
        model_type="qwen2_moe",
        max_position_embeddings=512,
        **_WIDE,
        intermediate_size=256,
        num_hidden_layers=4,
        num_key_value_heads=2,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        shared_expert_intermediate_size=272,
    ),
    "gpt_oss": tiny_raw("gpt_oss", **_WIDE, intermediate_size=256, num_key_value_heads=1, num_hidden_layers=2),
    "qwen3_5": tiny_raw(
        "qwen3_5_text",
        **_WIDE,
        intermediate_size=256,
        num_key_value_heads=2,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
    ),
    # llama.cpp calls a llama with 80 layers and GQA "70B" (models/llama.cpp) and gives its attn_v more bits; kept
    # narrow (2 heads of 32, FFN 32) so 80 layers stay small; attn_v still reads 256 columns.
    "llama_80": tiny_raw(
        "llama",
        hidden_size=256,
        vocab_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=32,
        num_hidden_layers=80,
    ),
    # MLA: the converter writes kv_b_proj as 3-D attn_k_b (rows of qk_nope 64: the k-quants fall back) and attn_v_b
    "deepseek_v3": tiny_raw(
        "deepseek_v3",
        **(_WIDE | {"head_dim": 32}),  # DeepSeek's head_dim is its rope width
        num_key_value_heads=4,
        kv_lora_rank=256,
        q_lora_rank=256,
        qk_nope_head_dim=64,
        qk_rope_head_dim=32,
        v_head_dim=64,
        n_routed_experts=8,
        moe_intermediate_size=256,
        intermediate_size=256,
        num_hidden_layers=3,
    ),
    "granite_h": tiny_raw(
        "granitemoehybrid",
        **_WIDE,
        num_key_value_heads=1,
        intermediate_size=256,
        shared_intermediate_size=256,
        mamba_n_heads=8,
        mamba_d_head=64,
    ),
}
# Where the converter names a tensor otherwise than kvscope's role (conversion/gpt_oss.py, qwen.py map the norm after
# attention to post_attention_norm), and tensors it stores without a ".weight" suffix.
_RENAMED = {"gpt_oss": {"ffn_norm": "post_attention_norm"}, "qwen3_5_text": {"ffn_norm": "post_attention_norm"}}
_BARE = ("ssm_a", "ssm_d")
_BUFFERS = ("exp_probs_b.bias",)  # DeepSeek-V3's e_score_correction_bias: a buffer, not a parameter (core.model.params)
_SPLIT = {  # the experts' gate_up_proj (and gpt-oss's bias)
    "ffn_gate_up_exps": ("ffn_gate_exps", "ffn_up_exps"),
    "ffn_gate_up_exps_bias": ("ffn_gate_exps_bias", "ffn_up_exps_bias"),
}
_SPLIT_IN = {"granite_h": {"ffn_up_shexp": ("ffn_gate_shexp", "ffn_up_shexp")}}  # shared_mlp.input_linear
# llama.h enum llama_ftype; FTYPES' names are QUANT_OPTIONS' (tools/quantize/quantize.cpp), F16/BF16/F32 as gguf_*
LLAMA_FTYPE = {
    "gguf_f32": 0,
    "gguf_f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q8_0": 7,
    "q5_0": 8,
    "q5_1": 9,
    "q2_k": 10,
    "q3_k_s": 11,
    "q3_k_m": 12,
    "q3_k_l": 13,
    "q4_k_s": 14,
    "q4_k_m": 15,
    "q5_k_s": 16,
    "q5_k_m": 17,
    "q6_k": 18,
    "iq2_xxs": 19,
    "iq2_xs": 20,
    "q2_k_s": 21,
    "iq3_xs": 22,
    "iq3_xxs": 23,
    "iq1_s": 24,
    "iq4_nl": 25,
    "iq3_s": 26,
    "iq3_m": 27,
    "iq2_s": 28,
    "iq2_m": 29,
    "iq4_xs": 30,
    "iq1_m": 31,
    "gguf_bf16": 32,
    "tq1_0": 36,
    "tq2_0": 37,
    "mxfp4_moe": 38,
    "q1_0": 40,
    "q2_0": 41,
}
# llama_80 checks only LLM_TYPE_70B's attn_v bump (ftypes whose attn_v would be Q3_K/Q4_K); the rest, every ftype.
# Every architecture of the cache referee (tests/engines/llamacpp_models.py: 64 wide, so mostly fallbacks), at a few
# ftypes: its tensor names follow the converter's spelling (shortconv.in_proj, ssm_ba, token_embd_norm, ...), so
# these are compared as bytes per ggml type; the types, the never-quantised tensors and MLA's split still must agree.
EVERY = {f"every_{m}": raw for m, raw in LLAMACPP_MODELS.items()}
CONFIGS = MODELS | EVERY
# gpt-oss as its checkpoints ship it: routed experts as MXFP4 blocks (llamacpp_gguf.as_mxfp4_experts), the rest float
MXFP4_CHECKPOINT = "gpt_oss_mxfp4"
MXFP4_FTYPES = ("mxfp4_moe", "q4_k_m", "q8_0", "gguf_f16")
_MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": []}
CHECKPOINTS = CONFIGS | {MXFP4_CHECKPOINT: MODELS["gpt_oss"] | {"quantization_config": _MXFP4}}
_FEW = ("q4_k_m", "q3_k_l", "q2_k", "iq2_xxs", "iq3_xs", "iq4_xs", "mxfp4_moe", "q6_k", "gguf_bf16")
FTYPES_OF = {m: ("q4_k_m", "q3_k_s", "q2_k", "iq4_xs") if m == "llama_80" else tuple(LLAMA_FTYPE) for m in MODELS}
FTYPES_OF |= dict.fromkeys(EVERY, _FEW)
CASES = [(m, f) for m in CONFIGS for f in FTYPES_OF[m]]


def gguf_name(model: str, t: Tensor) -> str:
    """The tensor's name in llama.cpp's GGUF (kvscope's roles are its names, but for _RENAMED)."""
    base = t.role.removesuffix("_bias")
    base = _RENAMED.get(CHECKPOINTS[model]["model_type"], {}).get(base, base)  # the converter's, per architecture
    name = base if base in _BARE else f"{base}.{'bias' if t.role.endswith('_bias') else 'weight'}"
    return name if t.layer is None else f"blk.{t.layer}.{name}"


def kvscope_tensors(model: str, ftype: str) -> dict[str, tuple[str, int]]:
    """kvscope's ggml type and bytes per GGUF tensor name. A matrix HF fuses and the converter splits in two halves
    (_SPLIT) is compared as its halves: llama.cpp types them alike (its ffn_gate and ffn_up rules are the same)."""
    count = count_params(model_from_config(CHECKPOINTS[model], model))
    split = _SPLIT | _SPLIT_IN.get(model, {})
    out = {}
    for _, t, ggml, size in gguf_tensors(count, ftype):
        halves = split.get(t.role, (t.role,))
        out |= {gguf_name(model, replace(t, role=role)): (ggml, size // len(halves)) for role in halves}
    return out


def llamacpp_tensors(results: dict, model: str, ftype: str) -> dict[str, tuple[str, int]] | None:
    """The GGUF's (type, bytes) per tensor, less the buffers kvscope does not count as parameters (_BUFFERS)."""
    real = results[model][ftype]
    if real is None:
        return None
    return {name: (kind, size) for name, (kind, size) in real.items() if not name.endswith(_BUFFERS)}


@pytest.fixture(scope="session")
def referee(tmp_path_factory) -> dict[str, dict[str, dict[str, list]]]:
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("llamacpp-quantize")
    ggufs = convert_tiny(folder, CHECKPOINTS, timeout=300)
    ftypes = FTYPES_OF | {MXFP4_CHECKPOINT: MXFP4_FTYPES}
    job = {
        "tree": str(LLAMACPP_TREE),
        "out_dir": str(folder),
        "models": ggufs,
        "ftypes": {m: {f: LLAMA_FTYPE[f] for f in ftypes[m]} for m in CHECKPOINTS},
        "imatrix": [name for name, f in FTYPES.items() if f.imatrix],
    }
    (folder / "quantize.json").write_text(json.dumps(job))
    ran = run_in_engines([str(HERE / "llamacpp_quantize_runner.py"), str(folder / "quantize.json")], timeout=900)
    results = json.loads(ran.stdout.strip().splitlines()[-1])
    write_table(results, time.monotonic() - started)
    return results


def write_table(results: dict[str, dict[str, dict[str, list] | None]], seconds: float) -> None:
    lines = [
        "# llama.cpp referee: GGUF weight bytes per llama-quantize ftype",
        "",
        "Written by tests/engines/test_llamacpp_quantize.py: tiny random checkpoints converted by llama.cpp's",
        "convert_hf_to_gguf.py (F16), quantised by libllama's llama_model_quantize (llama-cpp-python 0.3.36) and read",
        "back with gguf-py; kvscope's from core.memory.quant.gguf_tensors and tensor_bytes on the same config. The",
        "last column counts the GGUF's tensors whose ggml type kvscope gets wrong. `refused`: llama-quantize stops",
        "(Q1_0 has no fallback for a row that is no multiple of 128), and kvscope raises an InputError.",
        "",
        "| ftype | model | kvscope bytes | llama.cpp bytes | equal | tensors typed otherwise |",
        "|---|---|---:|---:|---|---:|",
    ]
    for ftype in LLAMA_FTYPE:
        for model in CONFIGS:
            if ftype not in FTYPES_OF[model]:
                continue
            real = llamacpp_tensors(results, model, ftype)
            if real is None:
                lines.append(
                    f"| {ftype} | {model} | refused | refused | {'yes' if refuses(model, ftype) else 'NO'} | |"
                )
                continue
            ours = kvscope_tensors(model, ftype)
            real_total = sum(size for _, size in real.values())
            ours_total = sum(size for _, size in ours.values())
            wrong = sum(ours.get(name, ("?", 0))[0] != kind for name, (kind, _) in real.items())
            equal = "yes" if ours_total == real_total else "NO"
            lines.append(f"| {ftype} | {model} | {ours_total:,} | {real_total:,} | {equal} | {wrong} of {len(real)} |")
    lines += ["", f"{len(CASES)} cases in {seconds:.0f} s (conversion and quantisation)."]
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text("\n".join(lines) + "\n")


def refuses(model: str, ftype: str) -> bool:
    try:
        kvscope_tensors(model, ftype)
    except InputError:
        return True
    return False


@pytest.mark.parametrize(("model", "ftype"), CASES, ids=[f"{m}-{f}" for m, f in CASES])
def test_every_tensor_type_and_byte_equals_llama_quantize(referee, model, ftype):
    real = llamacpp_tensors(referee, model, ftype)
    if real is None:  # llama-quantize refused this model in this ftype: kvscope must refuse it too
        with pytest.raises(InputError, match="llama-quantize cannot make"):
            kvscope_tensors(model, ftype)
        return
    ours = kvscope_tensors(model, ftype)
    assert by_type(ours) == by_type(real), "bytes per ggml type (kvscope, llama.cpp) differ"
    if model in MODELS:
        assert sorted(ours) == sorted(real), "kvscope's tensor list differs from the GGUF's"
        differ = {name: (ours[name], real[name]) for name in real if ours[name] != real[name]}
        assert not differ, f"(kvscope, llama.cpp) per tensor: {differ}"
    # what the rest of kvscope reads: tensor_bytes, per kvscope tensor
    count = count_params(model_from_config(CHECKPOINTS[model], model))
    assert sum(size for _, size in tensor_bytes(count, ftype, 2)) == sum(size for _, size in real.values())


def by_type(tensors: dict[str, tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, size in tensors.values():
        out[kind] = out.get(kind, 0) + size
    return out


def test_every_ftype_and_every_ggml_type_is_refereed(referee):
    assert set(LLAMA_FTYPE) == set(FTYPES)
    # every block size kvscope knows was written by llama.cpp somewhere above, and no other type was
    seen = {kind for files in referee.values() for f in files.values() if f for kind, _ in f.values()}
    assert seen == set(GGML)


def test_a_gguf_of_gpt_oss_keeps_the_checkpoints_mxfp4_experts(referee):
    """gpt-oss ships its routed experts as MXFP4. llama.cpp's converter writes them as they are at --outtype f16, the
    rest F16 (kvscope's gguf_f16, to the tensor); llama-quantize copies them into mxfp4_moe and refuses any ftype
    that would retype them ("requantizing from type mxfp4 is disabled": no --allow-requantize), F16 included. So
    kvscope keeps them MXFP4 in every GGUF type, as the published gpt-oss GGUFs do."""
    source = llamacpp_tensors(referee, MXFP4_CHECKPOINT, "source")
    assert source is not None and kvscope_tensors(MXFP4_CHECKPOINT, "gguf_f16") == source
    experts = {kind for name, (kind, _) in source.items() if "_exps.weight" in name}
    assert experts == {"MXFP4"}
    assert kvscope_tensors(MXFP4_CHECKPOINT, "mxfp4_moe") == llamacpp_tensors(referee, MXFP4_CHECKPOINT, "mxfp4_moe")
    refused = [f for f in MXFP4_FTYPES if llamacpp_tensors(referee, MXFP4_CHECKPOINT, f) is None]
    assert refused == ["q4_k_m", "q8_0", "gguf_f16"]
    ours = kvscope_tensors(MXFP4_CHECKPOINT, "q4_k_m")
    assert {kind for name, (kind, _) in ours.items() if "_exps.weight" in name} == {"MXFP4"}
