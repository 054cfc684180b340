"""llama.cpp's automatic fit (core.llamacpp_autofit, common/fit.cpp): each case is checked against kvscope's own fit
of the same llama.cpp setup (core.fit, a separate path through the solver) and the interpolation written out by
hand from fit.cpp, not against the module's own numbers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.cli import main
from core.engines import configured
from core.engines.base import sized_tensors
from core.engines.llamacpp import LlamaCppBuild, LlamaCppEngine, LlamaCppOptions
from core.errors import InputError
from core.fit import Setup, fit
from core.llamacpp_autofit import FIT_MARGIN, fit_context, fit_contexts, fit_params, partial_bytes
from core.memory.gpus import Card, card_named
from core.model.loading import load_model
from core.model.params import count_params
from core.units import GIB
from tests.engines.engine_env import LLAMACPP_TREE, ROOT, run_in_engines
from tests.engines.llamacpp_models import MODELS

CARD_8GB = card_named("RTX 4060 8GB")
LLAMA_CLI = configured("llama.cpp", frontend="llama-cli")
ENGINES = ROOT / "tests" / "engines"


def setup(name: str, card=CARD_8GB) -> Setup:
    return Setup(load_model(name), configured("llama.cpp", frontend="llama-cli"), card, weights="q4_k_m")


def used(s: Setup, context: int, gpu_layers: int | None = None) -> int:
    """Device memory of one sequence of `context` tokens, as core.fit accounts it (CUDA context included)."""
    return fit(replace(s, gpu_layers=gpu_layers), [context]).rows[0].total_bytes


def test_what_fits_as_asked_is_left_alone():
    s = setup("Qwen/Qwen3-8B", card_named("RTX 4090"))
    choice = fit_params(s)
    assert (choice.n_ctx, choice.gpu_layers) == (40960, None)  # the training context, every layer
    assert choice.projected_bytes == used(s, 40960) <= s.card.memory_bytes - FIT_MARGIN
    assert choice.steps == ("fits as asked: no change",)


def test_context_is_interpolated_between_the_floor_and_the_training_context():
    s = setup("meta-llama/Llama-3.1-8B-Instruct")  # 128K of f16 cache does not fit 8 GB; 4K does
    limit = CARD_8GB.memory_bytes - 1024 * 1024 * 1024
    hi, lo = used(s, 131072), used(s, 4096)
    assert lo < limit < hi
    expected = 4096 + (131072 - 4096) * (limit - lo) // (hi - lo)  # fit.cpp step 2, then down to a multiple of 256
    expected -= expected % 256
    choice = fit_params(s)
    assert (choice.n_ctx, choice.gpu_layers) == (expected, None)
    assert used(s, choice.n_ctx) <= limit  # the cache grows linearly, so the interpolation lands inside
    assert "context reduced from 131,072" in choice.steps[0]
    # the step shows its arithmetic with these figures (the app's sentence and autofit print it)
    shown = f"{hi:,} B projected at 131,072 cells, {lo:,} B at 4,096; 4,096 + 126,976 × ({limit:,} − {lo:,}) ÷ "
    assert shown + f"({hi:,} − {lo:,})" in choice.steps[0] and "multiple of 256" in choice.steps[0]


def test_layers_are_the_most_that_leave_the_margin_at_the_floor():
    s = setup("microsoft/phi-4")  # 14B: even at 4K not every layer fits 8 GB
    limit = CARD_8GB.memory_bytes - FIT_MARGIN
    choice = fit_params(s)
    assert choice.n_ctx == 4096 and choice.gpu_layers is not None
    assert used(s, 4096, choice.gpu_layers) <= limit < used(s, 4096, choice.gpu_layers + 1)
    assert choice.projected_bytes == used(s, 4096, choice.gpu_layers)
    at, more = used(s, 4096, choice.gpu_layers), used(s, 4096, choice.gpu_layers + 1)
    assert (
        f"{at:,} B projected, {more:,} B with one more, against the card less 1,024 MiB, {limit:,} B"
        in (choice.steps[-1])
    )


def test_what_the_user_sets_is_kept():
    s = setup("microsoft/phi-4")
    given = fit_params(s, n_ctx=8192)
    assert given.n_ctx == 8192 and "set by the user" in given.steps[0]
    limit = CARD_8GB.memory_bytes - FIT_MARGIN
    assert used(s, 8192, given.gpu_layers) <= limit < used(s, 8192, given.gpu_layers + 1)
    pinned = fit_params(s, n_ctx=8192, gpu_layers=41)
    assert pinned.gpu_layers == 41 and not pinned.fits  # -ngl given: llama.cpp keeps it, even when it will not fit
    assert fit_params(s, margin=0).gpu_layers >= fit_params(s, margin=2 * GIB).gpu_layers


def test_streams_multiply_the_context_it_starts_from():
    s = replace(setup("Qwen/Qwen3.5-9B"), engine=configured("llama.cpp", frontend="llama-cli"))
    two = fit_params(s, sequences=2)
    assert two.n_ctx % (2 * 256) == 0 and "from 524,288" in two.steps[0]  # 262,144 × 2 streams


def moe_used(s: Setup, slots: int, experts_in_ram: range, context: int = 4096) -> int:
    return fit(replace(s, gpu_layers=slots, cpu_experts=experts_in_ram), [context]).rows[0].total_bytes


# Qwen3-30B-A3B's config.json: hidden_size 2048, moe_intermediate_size 768, 128 experts; one fp16 projection of all
# experts of a layer, and the router (ffn_gate_inp, 128 × 2048), in bytes. llama.cpp runs an F16 GGUF, whose router
# stays F32 (the converter writes ffn_gate_inp F32, llama-quant.cpp never converts it)
QWEN3_EXPERTS_PROJ = 128 * 768 * 2048 * 2
QWEN3_ROUTER = 128 * 2048 * 4
# DeepSeek-V3's: hidden_size 7168, moe_intermediate_size 2048, 256 routed experts and 1 shared expert of 2048
DSV3_EXPERTS_PROJ = 256 * 2048 * 7168 * 2
DSV3_ROUTER = 256 * 7168 * 4
DSV3_SHEXP_PROJ = 2048 * 7168 * 2


@pytest.mark.parametrize(
    ("name", "layer", "fraction", "expected"),
    [
        # fit.cpp get_overflow_pattern: UP sends ffn_(gate|gate_up|down).* to RAM (the router ffn_gate_inp too) and
        # keeps ffn_up_exps; GATE sends only ffn_down.*; ATTN the whole FFN; relative to MOE (routed experts only)
        ("Qwen/Qwen3-30B-A3B", 20, "up", QWEN3_EXPERTS_PROJ - QWEN3_ROUTER),
        ("Qwen/Qwen3-30B-A3B", 20, "gate", 2 * QWEN3_EXPERTS_PROJ),
        ("Qwen/Qwen3-30B-A3B", 20, "attn", -QWEN3_ROUTER),
        ("deepseek-ai/DeepSeek-V3", 3, "up", DSV3_EXPERTS_PROJ - DSV3_ROUTER - 2 * DSV3_SHEXP_PROJ),
        ("deepseek-ai/DeepSeek-V3", 3, "gate", 2 * DSV3_EXPERTS_PROJ - DSV3_SHEXP_PROJ),
        ("deepseek-ai/DeepSeek-V3", 3, "attn", -DSV3_ROUTER - 3 * DSV3_SHEXP_PROJ),
        ("deepseek-ai/DeepSeek-V3", 0, "up", -2 * 18432 * 7168 * 2),  # a dense lead layer: its FFN gate and down go
    ],
)
def test_the_first_partial_layer_keeps_what_its_overflow_pattern_leaves(name, layer, fraction, expected):
    s = replace(setup(name), weights="fp16")
    assert partial_bytes(s, layer, fraction) == expected


def test_moe_keeps_the_last_layers_experts_in_ram():
    """Qwen3-30B-A3B on 8 GB: every layer fits with its experts in RAM, so fit.cpp step 4 gives experts back from
    the lowest layer up, as many as leave the margin, then tries part of the next layer: its up projections (and
    then its gate projections) if that stays under the target, else only its attention."""
    s = setup("Qwen/Qwen3-30B-A3B")  # 48 layers
    limit = CARD_8GB.memory_bytes - FIT_MARGIN
    choice = fit_params(s)
    assert choice.n_ctx == 4096 and choice.gpu_layers is None  # every layer and the output on the GPU
    full = choice.cpu_experts.start
    assert choice.cpu_experts == range(full, 48) and full >= 1
    whole = moe_used(s, 49, range(full, 48))
    assert whole <= limit < moe_used(s, 49, range(full + 1, 48))
    assert (choice.partial, choice.projected_bytes) == part_of_next_layer(s, whole, full, limit)


def part_of_next_layer(s: Setup, whole: int, layer: int, limit: int) -> tuple[str | None, int]:
    """fit.cpp's last try, worked by hand for Qwen3-30B-A3B (no shared experts): `layer` keeps its up experts and
    sends its router (ffn_gate_inp) to RAM, or keeps up and gate experts, or sends only its router; each strictly
    under the target. Gate and up experts are separate GGUF tensors of one type (convert_hf_to_gguf, llama-quant),
    each half of kvscope's fused gate_up bytes."""
    sizes = {t.role: size for t, size in sized_tensors(count_params(s.model), "q4_k_m", 2) if t.layer == layer}
    up, router = sizes["ffn_gate_up_exps"] // 2, sizes["ffn_gate_inp"]
    if whole + up - router < limit:
        return ("gate", whole + 2 * up) if whole + 2 * up < limit else ("up", whole + up - router)
    return ("attn", whole - router) if whole - router < limit else (None, whole)


def test_moe_on_a_card_too_small_for_the_dense_layers_counts_layers_first():
    """On 3 GiB not every layer fits even with its experts in RAM but the lowest: step 3 keeps the lowest GPU layer
    whole and the others' experts in RAM, and takes the most layers that leave the margin. Every dense weight fits
    with all experts in RAM, so step 4 runs: no second layer's experts fit, and it tries part of the next layer."""
    s = replace(setup("Qwen/Qwen3-30B-A3B"), card=Card.custom(3))
    limit = Card.custom(3).memory_bytes - FIT_MARGIN
    choice = fit_params(s)
    slots = choice.gpu_layers
    assert slots is not None and 1 < slots < 49
    lowest = 49 - slots  # -ngl slots: the output layer and layers 49 - slots .. 47
    assert choice.cpu_experts == range(lowest + 1, 48)
    whole = moe_used(s, slots, range(lowest + 1, 48))
    assert whole <= limit < moe_used(s, slots + 1, range(lowest, 48))
    assert limit < moe_used(s, slots, range(lowest + 2, 48))  # a second layer's experts do not fit
    assert (choice.partial, choice.projected_bytes) == part_of_next_layer(s, whole, lowest + 1, limit)


def test_before_pr_27496_the_context_is_fitted_as_a_total_whatever_the_streams():
    engine = configured("llama.cpp", frontend="llama-cli")
    s = replace(setup("Qwen/Qwen3.5-9B"), engine=engine)
    bundled = fit_params(s, sequences=2)
    assert "from 524,288" in bundled.steps[0] and bundled.n_ctx % 512 == 0  # 262,144 × 2 streams, aligned 256 × 2
    older = fit_params(replace(s, engine=engine.with_options(build=LlamaCppBuild.parse("2026-08-20"))), sequences=2)
    assert "from 262,144" in older.steps[0] and older.n_ctx % 256 == 0  # the training context as the total


def test_builds_before_pr_18148_are_not_fitted():
    old = replace(setup("Qwen/Qwen3-8B"), engine=LLAMA_CLI.with_options(build=LlamaCppBuild.parse("b6500")))
    with pytest.raises(InputError, match=r"PR #18148 .*PR #16653"):
        fit_params(old)


def test_other_engines_are_refused_with_a_reason():
    with pytest.raises(InputError, match=r"llama\.cpp"):
        fit_params(replace(setup("Qwen/Qwen3-8B"), engine=configured("vllm")))


def test_cli(capsys):
    assert main(["autofit", "microsoft/phi-4", "--gpu", "RTX 4060 8GB", "-np", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the CLI's engine: llama-server given -np 1 (no unified cache, one row of logits); its steps' projections are
    # that engine's (its output buffer differs from llama-cli's)
    server = configured("llama.cpp", frontend="llama-server", kv_unified=False, n_outputs_max=1)
    direct = fit_params(replace(setup("microsoft/phi-4"), engine=server), None, 1)
    assert (out["n_ctx"], out["gpu_layers"], out["layer_slots"]) == (direct.n_ctx, direct.gpu_layers, 41)
    assert out["fits"] is True and out["steps"] == list(direct.steps)
    # llama-server's 4 slots share one unified stream, each may fill it; -np 2 gives two streams of half
    assert main(["autofit", "Qwen/Qwen3-8B", "--gpu", "RTX 4060 8GB", "--json"]) == 0
    four = json.loads(capsys.readouterr().out)
    assert four["sequences"] == 4 and four["n_ctx_per_sequence"] == four["n_ctx"]
    assert main(["autofit", "Qwen/Qwen3-8B", "--gpu", "RTX 4060 8GB", "-np", "2", "--json"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert two["n_ctx_per_sequence"] == two["n_ctx"] // 2
    assert main(["autofit", "Qwen/Qwen3-30B-A3B", "--gpu", "RTX 4060 8GB", "-np", "1", "--json"]) == 0
    moe = json.loads(capsys.readouterr().out)
    assert moe["cpu_expert_layers"] == [fit_params(setup("Qwen/Qwen3-30B-A3B"), None, 1).cpu_experts.start, 48]


def test_fit_page_says_what_llama_server_would_pick():
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    def infos(params: dict[str, str]) -> list[str]:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params.update(params)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return [i.value for i in at.info if "--fit" in i.value]

    shown = infos({"model": "microsoft/phi-4", "fe": "llama-server"})  # the default 8 GiB card, Q4_K_M
    engine = configured("llama.cpp", frontend="llama-server")
    server = Setup(load_model("microsoft/phi-4"), engine, Card.custom(8), weights="q4_k_m")
    choice = fit_params(server, None, 4)  # llama-server's 4 slots on one unified stream
    assert len(shown) == 1 and f"-c {choice.n_ctx:,} with -ngl {choice.gpu_layers} of 41" in shown[0]
    assert infos({"model": "microsoft/phi-4", "fe": "library"}) == []  # llama-cpp-python does not run the fit
    assert infos({"model": "microsoft/phi-4", "engine": "vllm", "weights": "bf16"}) == []


# --- referee: llama.cpp's own --fit (libllama-common's common_fit_params) on this CPU-only build ---------------------
# No GPU backend here, so the fit finds no device: it measures host memory against a pretended memory (the margin is
# the host's total less it) and stops after step 2, the context (tests/engines/llamacpp_fit_runner.py). kvscope's
# step 2 (fit_contexts, fit_context) on llama.cpp's own projections must set the context llama.cpp sets.

FIT_MODELS = {
    name: MODELS[name] | {"max_position_embeddings": 16384}
    for name in ("llama", "deepseek_v3")  # dense and MoE
}
FIT_MIN = 256  # --fit-ctx: the tiny models' training context is 16K


def fit_cases() -> list[dict]:
    cases = []
    for name in FIT_MODELS:
        for seqs, unified, fraction in [
            (1, False, (1, 3)),
            (1, False, (7, 10)),
            (1, False, (1, 1)),  # exactly the projection at the maximum: it fits as asked (≤ the target)
            (1, False, (0, 1)),  # exactly the floor's: not strictly under, so the floor and on to the layers
            (2, False, (1, 2)),  # two streams: maximum, floor and alignment × 2
            (2, True, (1, 2)),  # unified: one stream
            (3, False, (2, 5)),
        ]:
            engine = LlamaCppEngine(LlamaCppOptions(kv_unified=unified))
            n_max, n_min, align = fit_contexts(16384, FIT_MIN, seqs, engine)
            cases.append(
                {
                    "id": f"{name} np={seqs} kvu={unified} {fraction[0]}/{fraction[1]}",
                    "model": name,
                    "n_seq_max": seqs,
                    "kv_unified": unified,
                    "n_ctx_min": FIT_MIN,
                    "n_max": n_max,
                    "n_min": n_min,
                    "align": align,
                    "fraction": fraction,
                }
            )
    return cases


@pytest.fixture(scope="module")
def llamacpp_fit(tmp_path_factory) -> list[tuple[dict, dict]]:
    folder = tmp_path_factory.mktemp("llamacpp-fit")
    job = {"tree": str(LLAMACPP_TREE), "out_dir": str(folder), "models": FIT_MODELS}
    (folder / "build.json").write_text(json.dumps(job))
    built = run_in_engines([str(ENGINES / "llamacpp_gguf.py"), str(folder / "build.json")], timeout=300)
    ggufs = json.loads(built.stdout.strip().splitlines()[-1])
    cases = [c | {"gguf": ggufs[c["model"]]} for c in fit_cases()]
    (folder / "cases.json").write_text(json.dumps({"cases": cases}))
    ran = run_in_engines([str(ENGINES / "llamacpp_fit_runner.py"), str(folder / "cases.json")], timeout=300)
    return list(zip(cases, json.loads(ran.stdout.strip().splitlines()[-1])["cases"], strict=True))


def test_context_step_matches_llama_cpps_own_fit(llamacpp_fit):
    assert len(llamacpp_fit) == 14
    for case, got in llamacpp_fit:
        assert got["devices"] == 0, case["id"]  # the CPU build: host memory only
        assert got["used_min"] < got["used_max"], case["id"]
        if got["used_max"] <= got["target"]:
            expected, status = case["n_max"], 0
        else:
            reduced = fit_context(
                case["n_max"], case["n_min"], case["align"], got["used_max"], got["used_min"], got["target"]
            )
            # with no device, llama.cpp gives up (failure) when the context alone does not make it fit
            expected, status = (case["n_min"], 1) if reduced is None else (reduced, 0)
        assert (got["n_ctx"], got["status"]) == (expected, status), (case["id"], got)
    # the cases reach every branch: fits as asked, interpolated (above the floor), the floor
    outcomes = {(got["n_ctx"] == c["n_max"], got["n_ctx"] == c["n_min"]) for c, got in llamacpp_fit}
    assert outcomes == {(True, False), (False, False), (False, True)}
