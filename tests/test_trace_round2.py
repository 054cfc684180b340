"""Three figures that pointed elsewhere now work themselves out: llama.cpp's --fit for a MoE model (the steps that put
experts in RAM), a point of the hybrid page's concurrency curve, and a cluster rank's weights. Each explanation's
numbers are checked against core's figures reached by another path (core.fit's rows, the tensor list), not against
the explaining code's own."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from core.compare import series
from core.engines import configured
from core.engines.base import sized_tensors
from core.fit import Setup, Solver, fit
from core.llamacpp_autofit import FIT_MARGIN, autofit_sentence, fit_params
from core.memory.gpus import Card, card_named
from core.model.loading import load_model
from core.model.params import count_params
from core.units import format_bytes
from tests.test_app import app, open_page, opened

CARD_8GB = card_named("RTX 4060 8GB")
LIMIT_8GB = CARD_8GB.memory_bytes - FIT_MARGIN


def numbers(text: str) -> list[int]:
    """The integers a line shows, thousands separators and all ("7,516,192,768 B" → 7516192768)."""
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)]


def cli_setup(name: str, card: Card = CARD_8GB) -> Setup:
    return Setup(load_model(name), configured("llama.cpp", frontend="llama-cli"), card, weights="q4_k_m")


def server_setup(name: str) -> Setup:
    """llama-server given -np 1, as `python -m core autofit -np 1` runs it: one slot, no unified cache."""
    server = configured("llama.cpp", frontend="llama-server", kv_unified=False, n_outputs_max=1)
    return replace(cli_setup(name), engine=server)


def total(s: Setup, slots: int, experts_in_ram: range) -> int:
    """Device memory of one 4,096-token sequence with -ngl `slots` and these layers' experts in RAM, as core.fit's
    row counts it: the projection fit.cpp compares, reached through the solver rather than the fit's own code."""
    return fit(replace(s, gpu_layers=slots, cpu_experts=experts_in_ram), [4096]).rows[0].total_bytes


def step(steps: tuple[str, ...], start: str) -> str:
    return next(s for s in steps if s.startswith(start))


def layer_parts(s: Setup, layer: int) -> tuple[int, int]:
    """One GGUF up-experts tensor (weights and bias: half of kvscope's fused gate_up) and the router (with its bias)
    of a layer, in bytes, read off the tensor list."""
    sizes = {t.role: size for t, size in sized_tensors(count_params(s.model), "q4_k_m", 2) if t.layer == layer}
    up = (sizes["ffn_gate_up_exps"] + sizes.get("ffn_gate_up_exps_bias", 0)) // 2
    return up, sizes["ffn_gate_inp"] + sizes.get("ffn_gate_inp_bias", 0)


# --- 1. llama.cpp's --fit: the MoE steps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "make", "layers", "tried"),
    [
        # the next layer's up experts fit, then its gate experts too
        ("Qwen/Qwen3-30B-A3B", cli_setup, 48, ("up", "gate")),
        ("openai/gpt-oss-20b", cli_setup, 24, ("up", "gate")),
        # llama-server's larger buffers: gpt-oss-20b's up experts do not fit; it keeps only the next layer's
        # attention (its router to RAM)
        ("openai/gpt-oss-20b", server_setup, 24, ("up", "attn")),
    ],
)
def test_moe_fit_steps_show_the_projections_that_decide_them(name, make, layers, tried):
    s = make(name)
    choice = fit_params(s, None, 1)
    assert choice.gpu_layers is None and choice.cpu_experts.stop == layers  # every slot on the GPU
    first = choice.cpu_experts.start

    # step 3: every slot on the GPU, the lowest layer whole, the others' experts in RAM
    placed = step(choice.steps, "layers with their experts in system RAM")
    assert f"{layers + 1} of {layers + 1} on the GPU" in placed
    assert f"{total(s, layers + 1, range(1, layers)):,} B projected" in placed
    assert f"against the card less 1,024 MiB, {LIMIT_8GB:,} B" in placed

    # step 4's condition: every dense weight with all experts in RAM, under the limit
    dense = step(choice.steps, "every layer on the GPU with all experts in system RAM")
    assert numbers(dense)[:2] == [total(s, layers + 1, range(layers)), LIMIT_8GB] and "under" in dense

    # step 4: the lowest `first` layers hold their experts; one more layer's would pass the limit
    back = step(choice.steps, "experts back on the GPU")
    at, more = total(s, layers + 1, range(first, layers)), total(s, layers + 1, range(first + 1, layers))
    assert at <= LIMIT_8GB < more
    assert f"the lowest {first} GPU layer(s) hold theirs: {at:,} B projected, {more:,} B with one more layer's" in back

    # the part of the next layer: worked from its tensors (a GGUF's separate gate and up experts, the router)
    part = step(choice.steps, f"part of layer {first} on the GPU")
    up, router = layer_parts(s, first)
    extra = {"up": up - router, "gate": 2 * up, "attn": -router}
    shown = re.findall(r"(\d[\d,]*) B ([+−]) (\d[\d,]*) B = (\d[\d,]*) B, (under|not under) ([\d,]+) B", part)
    assert len(shown) == len(tried)
    for fraction, (base, sign, change, result, verdict, limit) in zip(tried, shown, strict=True):
        base, change, result = (int(x.replace(",", "")) for x in (base, change, result))
        assert (base, (1 if sign == "+" else -1) * change) == (at, extra[fraction])
        assert result == at + extra[fraction] and int(limit.replace(",", "")) == LIMIT_8GB
        assert verdict == ("under" if result < LIMIT_8GB else "not under")
    assert choice.projected_bytes == at + extra[choice.partial]  # the choice is the last try that stayed under


def test_a_card_too_small_for_the_dense_weights_says_step_4_is_skipped():
    s = replace(cli_setup("Qwen/Qwen3-30B-A3B"), weights="fp16", card=Card.custom(3))
    choice = fit_params(s, None, 1)
    limit = Card.custom(3).memory_bytes - FIT_MARGIN
    slots = choice.gpu_layers
    assert slots is not None
    placed = step(choice.steps, "layers with their experts in system RAM")
    lowest = 49 - slots  # the GPU layers: 49 - slots … 47 and the output; the lowest keeps its experts
    at, more = total(s, slots, range(lowest + 1, 48)), total(s, slots + 1, range(lowest, 48))
    assert f"{at:,} B projected, {more:,} B with one more, against the card less 1,024 MiB, {limit:,} B" in placed
    skipped = step(choice.steps, "every layer on the GPU with all experts in system RAM")
    assert numbers(skipped)[:2] == [total(s, 49, range(48)), limit] and "not under" in skipped
    assert "step 4 skipped" in skipped and not any(x.startswith("experts back") for x in choice.steps)


def test_the_floor_step_shows_its_projection():
    s = cli_setup("Qwen/Qwen3-30B-A3B")
    floor = fit_params(s, None, 1).steps[0]
    assert f"still too large ({total(s, 49, range(0)):,} B projected at 4,096 cells" in floor
    assert f"{LIMIT_8GB:,} B" in floor


def test_fit_page_shows_the_moe_arithmetic():
    at = app({"model": "openai/gpt-oss-20b", "fe": "llama-cli", "card": "GeForce RTX 4060 8GB"})
    assert not at.exception, [e.value for e in at.exception]
    said = [i.value for i in at.info if "--fit" in i.value]
    s = cli_setup("openai/gpt-oss-20b")
    assert said == [autofit_sentence(s, "llama-cli")]
    first = fit_params(s, None, 1).cpu_experts.start
    at_first, more = total(s, 25, range(first, 24)), total(s, 25, range(first + 1, 24))
    assert f"{at_first:,} B projected, {more:,} B with one more layer's" in said[0]


# --- 2. the hybrid page: a point of the concurrency curve ----------------------------------------------------------

HYBRID = {"model": "Qwen/Qwen3.5-9B", "card": "GeForce RTX 4090 24GB", "cmp": "google/gemma-3-12b-it"}


def hybrid_point(params: dict[str, str], model: str, context: int) -> str:
    at = app(params)
    at.switch_page("pages/1_hybrid_vs_dense.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any(m.value.startswith("### ") for m in at.markdown)  # closed: nothing worked out
    at = opened(at, "kv_how_hybrid_point")
    at.selectbox(key="hy_point_model").set_value(model).run()
    at.selectbox(key="hy_point_ctx").set_value(context).run()
    assert not at.exception, [e.value for e in at.exception]
    return next(m.value for m in at.markdown if m.value.startswith(f"### {model}: requests of"))


@pytest.mark.parametrize("model", ["Qwen/Qwen3.5-9B", "google/gemma-3-12b-it"])
def test_hybrid_curve_point_is_worked_out_from_the_fit_solvers_bytes(model):
    """llama-cli: the point is the budget left beside weights and overhead, divided by one request's cache; each
    figure recomputed from Solver's own accounts and the drawn series, not from the explanation."""
    text = hybrid_point(HYBRID | {"fe": "llama-cli"}, model, 32768)
    s = cli_setup(model, card_named("RTX 4090"))
    solver = Solver(s)
    drawn = series(s, [32768])
    weights, overhead = solver.weights, sum(i.bytes for i in solver.overhead(32768))
    account = solver.account(32768)
    growing = sum(line.count * line.bytes_per_token * line.tokens_held for line in account.lines)
    fixed = sum(line.count * line.fixed_bytes for line in account.lines)
    assert growing + fixed == drawn.cache_bytes[0]  # one request's cache, as the cache curve draws it
    budget = solver.usable - weights - overhead
    assert (
        f"**One request's cache**: growing part {growing:,} B + fixed state {fixed:,} B = {drawn.cache_bytes[0]:,} B"
        in text
    )
    assert (
        f"{solver.usable:,} B usable − {weights:,} B weights − {overhead:,} B overhead = {budget:,} B for cache" in text
    )
    point = budget // drawn.cache_bytes[0]
    assert point == drawn.concurrency[0] >= 1  # the drawn point
    assert f"⌊{budget:,} B ÷ {drawn.cache_bytes[0]:,} B per sequence⌋ = {point:,}" in text
    assert f"memory holds {point:,} as llama-server -np {point}; llama-cli runs one conversation" in text


def test_hybrid_curve_point_under_vllm_shows_blocks_and_max_num_seqs():
    text = hybrid_point(HYBRID | {"engine": "vllm", "weights": "bf16"}, "Qwen/Qwen3.5-9B", 32768)
    s = Setup(load_model("Qwen/Qwen3.5-9B"), configured("vllm"), card_named("RTX 4090"))
    drawn = series(s, [32768]).concurrency[0]
    row = fit(s, [32768]).rows[0]
    budget = int(s.card.memory_bytes * 0.92) - row.weights_bytes - row.overhead_bytes
    shown = re.search(r"= ([\d,]+) B for cache; ⌊[\d,]+ B ÷ ([\d,]+) B per block⌋ = ([\d,]+) blocks; [\d,]+ blocks ÷ "
                      r"([\d,]+) blocks per request = ([\d.]+) requests", text)  # fmt: skip
    assert shown, text
    budget_shown, per_block, blocks, per_request = (int(shown[i].replace(",", "")) for i in (1, 2, 3, 4))
    assert budget_shown == budget and blocks == budget // per_block
    assert float(shown[5]) == pytest.approx(blocks / per_request) == pytest.approx(drawn)
    assert "its scheduler runs at most --max-num-seqs 256 requests at once" in text  # vllm serve's default, 24 GB


def test_hybrid_curve_point_under_llama_servers_slots_names_the_cap():
    text = hybrid_point(HYBRID | {"fe": "llama-server"}, "Qwen/Qwen3.5-9B", 8192)
    assert "at most 4 run at once, the front end's slots (-np)" in text
    assert "its unified cache is made for 4 slots (-np)" in text and "the curve stops at 4" in text


# --- 3. the cluster page: a rank's weights, tensor by tensor -------------------------------------------------------

DSV3 = "deepseek-ai/DeepSeek-V3"
CLUSTER = {"model": DSV3, "ctx": "32k", "ccard": "H200", "nodes": "2", "gpn": "8"}


def dsv3_rank(tp: int, ways: int, expert_parallel: bool, layers: range, last_stage: bool) -> int:
    """DeepSeek-V3's bytes on one GPU, from its tensor list and vLLM's rules read off its source, written out here:
    routed experts whole (⌈256 ÷ EP⌉ a rank) or split over DP × TP; the fused q_a/kv_a projections, norms and
    routers whole on each TP rank; the vocabulary (129,280 rows, already a multiple of 64) and everything else
    split over TP; the embedding on the first stage, the head and final norm on the last."""
    model = load_model(DSV3)
    out = 0
    for t, size in sized_tensors(count_params(model), "fp8_block", 2):
        if t.layer is None:
            if (t.category == "embedding") == last_stage:
                continue
            out += size if t.category == "other" else size // tp
        elif t.layer not in layers:
            continue
        elif t.routed:
            out += -(-t.count // ways) * (size // t.count) if expert_parallel else -(-size // ways)
        elif t.category in ("other", "router") or t.role in ("attn_q_a", "attn_kv_a_mqa"):
            out += size
        else:
            out += -(-size // tp)
    return out


def test_cluster_rank_weights_are_summed_tensor_by_tensor_on_the_page():
    at = opened(open_page("pages/6_cluster.py", CLUSTER), "kv_how_cluster")
    box = next(e for e in at.expander if e.label.startswith("How is it computed?"))
    worked = box.code[1].value
    row = at.dataframe[0].value.iloc[0]
    assert row["plan"] == "TP 1 × PP 2 × DP 8 (EP 8)" and row["stage"] == 1
    expected = dsv3_rank(1, 8, True, range(31), last_stage=False)  # get_pp_indices: 61 layers as 31 + 30
    assert worked.splitlines()[0].startswith("Tensor by tensor, the weights per GPU (stage 1 of 2: layers 0–30 of 61")
    assert worked.splitlines()[-1].endswith(f"= {expected:,} B ({expected / 2**30:,.2f} GiB)")
    assert format_bytes(expected) == row["weights / GPU"]  # the table's figure, worked out
    model = load_model(DSV3)
    sizes = {t.role: size for t, size in sized_tensors(count_params(model), "fp8_block", 2) if t.layer == 3}
    each = sizes["ffn_down_exps"] // 256
    assert f"ffn_down_exps: ⌈256 experts ÷ EP 8⌉ = 32 × {each:,} B = {32 * each:,} B" in worked
    assert "layers 0–2 (3 alike), each:" in worked and "layers 3–30 (28 alike), each:" in worked


def test_plain_tp_rank_weights_show_the_tp_split():
    at = opened(open_page("pages/6_cluster.py", CLUSTER), "kv_how_plain_tp")
    box = next(e for e in at.expander if e.label.startswith("Plain TP"))
    worked = box.code[1].value
    expected = dsv3_rank(8, 8, False, range(31), last_stage=False)  # TP 8 × PP 2, experts split over 8
    assert worked.splitlines()[-1].endswith(f" = {expected:,} B ({expected / 2**30:,.2f} GiB)")
    model = load_model(DSV3)
    sizes = {t.role: size for t, size in sized_tensors(count_params(model), "fp8_block", 2) if t.layer == 3}
    assert f"attn_q_b: ⌈{sizes['attn_q_b']:,} B ÷ TP 8⌉ = {-(-sizes['attn_q_b'] // 8):,} B" in worked
    assert f"attn_q_a: {sizes['attn_q_a']:,} B whole on each TP rank = {sizes['attn_q_a']:,} B" in worked
    assert f"ffn_gate_up_exps: ⌈{sizes['ffn_gate_up_exps']:,} B ÷ 8 ranks (DP 1 × TP 8)⌉" in worked


def test_cluster_cli_prints_the_worked_weights_of_the_last_stage(capsys):
    """One layout given: TP 8 × PP 2 with the plan shown by its deciding stage; the JSON carries the lines, and a
    stage's total is the record's weights per GPU."""
    from core.cli import main

    args = ["cluster", DSV3, "--gpu", "H200", "--nodes", "2", "--context", "32k", "--layout", "8,2,1", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    stage = out["best"]["stage"]
    layers = range(31) if stage == 1 else range(31, 61)
    expected = dsv3_rank(8, 8, False, layers, last_stage=stage == 2)
    assert out["best"]["weights_bytes_per_gpu"] == expected
    assert out["best_weights"][-1].endswith(f"= {expected:,} B ({expected / 2**30:,.2f} GiB)")


def test_mxfp4_rank_weights_add_their_share_of_the_relaid_experts():
    """gpt-oss-120b, TP 4 × DP 2 with EP 8 on one node of 8 H100: each rank owns ⌈128 ÷ 8⌉ = 16 experts a layer, and
    vLLM's MXFP4 kernel layout adds that rank's share of the bytes it adds to all experts."""
    from core.engines.vllm_cluster import Cluster, Layout, evaluate, weight_lines
    from core.engines.vllm_mxfp4 import kernel_for, loading_growth

    model = load_model("openai/gpt-oss-120b")
    plan = evaluate(model, Cluster(card_named("H100"), 1, 8), Layout(4, 1, 2, True), 32768)
    lines = weight_lines(plan)
    experts = sum(-(-t.count // 8) * (size // t.count) for t, size in sized_tensors(count_params(model), "mxfp4", 2)
                  if t.routed)  # fmt: skip
    whole = sum(size for t, size in sized_tensors(count_params(model), "mxfp4", 2) if t.routed)
    growth = loading_growth(model.config, kernel_for(card_named("H100"), "cuda"))
    relaid = -(-growth * experts // whole)
    assert any(f"⌈{growth:,} B × {experts:,} ÷ {whole:,}⌉ = {relaid:,} B" in line for line in lines)
    assert f"routed experts {experts + relaid:,} B" in lines[-1]
    assert lines[-1].endswith(f"= {plan.weights.total[0]:,} B ({plan.weights.total[0] / 2**30:,.2f} GiB)")
