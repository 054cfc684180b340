"""Every number a page shows can be traced: the explanation on demand reproduces it from its terms, and a figure
that is assumed rather than checked against an engine says so."""

from __future__ import annotations

import json
import math
import re
from urllib.parse import parse_qsl

import pytest

from tests.test_app import app, open_page, opened


def _how_speed(params: dict[str, str]) -> tuple[str, object, str]:
    """The Fit page's speed explanation, its context table and the caption below the table."""
    page = opened(app(params), "kv_how_speed")
    assert not page.exception, [e.value for e in page.exception]
    text = "\n".join(m.value for e in page.expander if e.label == "How is the speed computed?" for m in e.markdown)
    (caption,) = [c.value for c in page.caption if c.value.startswith("Per GPU. Binary units")]
    return text, page.dataframe[0].value, caption


@pytest.mark.parametrize(
    "params",
    [
        {"model": "Qwen/Qwen3.5-9B", "card": "GeForce RTX 4090 24GB"},  # llama.cpp, a hybrid: 17 at 32K
        {"model": "openai/gpt-oss-20b", "card": "H100 80GB SXM5", "engine": "vllm", "weights": "mxfp4"},  # a MoE
    ],
)
def test_the_aggregate_tok_s_at_the_chosen_context_is_worked_out_in_the_speed_explanation(params):
    """The table's aggregate tok/s runs as many sequences as fit; the explanation used to work out one sequence only
    ("all sequences: 1 × 67.32 tok/s = 67.32 tok/s" beside a table that said 498)."""
    text, table, caption = _how_speed(params)
    row = table[table["context"] == "32K"].iloc[0]
    runs = {
        int(b): float(t.replace(",", ""))
        for b, t in re.findall(r"all sequences: (\d+) × [\d,.]+ tok/s = ([\d,.]+)", text)
    }
    batch = math.floor(row["requests"])
    assert batch > 1 and batch in runs, (batch, runs)
    assert runs[batch] == pytest.approx(row["aggregate tok/s"], abs=0.005)
    assert runs[1] == pytest.approx(row["decode tok/s"], abs=0.005)  # the decode column's, still there
    assert f"### Speed at 32K tokens, {batch} sequences" in text
    # the batch's own error bar, as the table's caption gives the aggregate's (error_note)
    batch_part = text.split(f"### Speed at 32K tokens, {batch} sequences")[1]
    (bar,) = re.findall(r"How far off this can be\*\* \([^)]*\): decode (.+)\.", batch_part)
    assert bar in caption, (bar, caption)


def _how(params: dict[str, str]) -> str:
    page = opened(app(params), "kv_how")
    assert not page.exception, [e.value for e in page.exception]
    return "\n".join(m.value for e in page.expander if e.label == "How is this computed?" for m in e.markdown)


@pytest.mark.parametrize(
    ("params", "assumed"),
    [
        ({"model": "Qwen/Qwen3.5-9B", "card": "GeForce RTX 4090 24GB"}, ["CUDA context"]),
        (
            {"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4090 24GB", "engine": "transformers", "weights": "bf16"},
            ["CUDA context", "prefill activations"],
        ),
        (
            {
                "model": "openai/gpt-oss-20b",
                "card": "H100 80GB SXM5",
                "engine": "vllm",
                "weights": "mxfp4",
                "gpus": "2",
            },
            ["CUDA context", "profile-run activations", "CUDA graphs and workspaces", "NCCL buffers"],
        ),
    ],
)
def test_an_overhead_constant_no_engine_was_checked_against_says_so(params, assumed):
    """The overhead's constants (512 MiB of CUDA context, vLLM's 896 MiB of graphs, 256 MiB of NCCL) and the
    activations' estimate are not read from an engine's code nor checked against one; they printed as "CUDA context:
    512 MiB = 512.00 MiB", as exact as the compute buffer beside them."""
    text = _how(params)
    lines = {m[0]: m[1] for m in re.findall(r"^- ([^:\n]+): (.*)$", text, re.M)}
    for label in assumed:
        assert "not checked" in lines[label], (label, lines[label])
    # the buffers read from the engine's code say nothing of the kind
    assert all("not checked" not in line for label, line in lines.items() if label not in assumed and "B" in line)


def test_the_cluster_pages_gain_over_plain_tp_shows_its_division():
    """ "vs plain TP 1.86×" had no formula on the page (the command line printed it); its help now divides the best
    plan's requests by those plain TP's own arithmetic ends with."""
    page = opened(open_page("pages/6_cluster.py", {"model": "Qwen/Qwen3.5-9B"}), "kv_how_plain_tp")
    metric = {m.label: m for m in page.metric}
    best = int(metric["Requests at 32K"].value.replace(",", ""))
    (plain_code,) = [c.value for c in page.code if c.value.startswith("Weights per GPU") and "TP 8" in c.value]
    plain = int(re.findall(r"Requests at [\d,]+ tokens = .* = ([\d,]+)$", plain_code, re.M)[0].replace(",", ""))
    gain = metric["vs plain TP"]
    assert f"{best:,} ÷ {plain:,} requests = {best / plain:.2f}×" in gain.proto.help, gain.proto.help
    assert gain.value == f"{best / plain:.2f}×"
    assert "arithmetic below" in metric["Requests at 32K"].proto.help


@pytest.mark.parametrize(
    ("params", "by_bytes"),
    [
        ({}, True),  # llama.cpp, Qwen3.5-9B on a custom 8 GiB card: 73,984
        (
            {"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4090 24GB", "engine": "transformers", "weights": "bf16"},
            True,
        ),
        ({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4090 24GB", "engine": "vllm", "weights": "bf16"}, False),
    ],
)
def test_the_max_context_metric_shows_the_rows_on_either_side_of_it(params, by_bytes):
    """ "Max context, one sequence: 73,984" had no formula anywhere: the explanation now shows one request fitting at
    that length and not one token later (vLLM's blocks decide by requests, not by the total)."""
    page = opened(app(params), "kv_how")
    metric = next(m for m in page.metric if m.label == "Max context, one sequence")
    n = int(metric.value.replace(",", ""))
    assert "How is this computed?" in metric.proto.help
    (line,) = [
        m.value for e in page.expander if e.label == "How is this computed?" for m in e.markdown if "Longest" in m.value
    ]
    sides = re.findall(
        r"at ([\d,]+) tokens, total ([\d,]+) B of ([\d,]+) B usable, ([\d.,]+) requests: (fits|does not fit)", line
    )
    (k0, total0, usable, req0, fit0), (k1, total1, _, req1, fit1) = [
        (int(k.replace(",", "")), int(t.replace(",", "")), int(u.replace(",", "")), float(r), f)
        for k, t, u, r, f in sides
    ]
    assert (k0, k1, fit0, fit1) == (n, n + 1, "fits", "does not fit")
    assert req0 >= 1 > req1
    if by_bytes:
        assert total0 <= usable < total1


@pytest.mark.parametrize(
    "params",
    [
        {},  # llama.cpp: the layers on the GPU and the output layer; the embedding stays in RAM
        {"model": "openai/gpt-oss-20b", "card": "H100 80GB SXM5", "engine": "vllm", "weights": "mxfp4"},  # re-laid
        {
            "model": "Qwen/Qwen3-8B",
            "card": "GeForce RTX 4090 24GB",
            "engine": "transformers",
            "weights": "bf16",
            "gpus": "2",
        },
    ],
)
def test_the_weights_figure_is_worked_out_from_the_models_tensors(params):
    """ "**Weights** (q4_k_m): 4.70 GiB" stood alone: the weights column and line had no formula. The explanation now
    sums the whole model by category and takes the GPU's part, ending at the table's figure."""
    page = opened(app(params), "kv_how")
    text = "\n\n".join(m.value for e in page.expander if e.label == "How is this computed?" for m in e.markdown)
    block = text.split("**Weights**")[1].split("**Overhead**")[0]
    whole = re.search(r"the whole model, each tensor in \w+: (.+) = ([\d,]+) B", block)
    assert whole, block
    terms = [int(t.replace(",", "")) for t in re.findall(r"([\d,]+) B", whole[1])]
    assert len(terms) >= 3 and sum(terms) == int(whole[2].replace(",", ""))
    last = int(re.findall(r"= ([\d,]+) B", block)[-1].replace(",", ""))  # the GPU's part, the last step
    table = page.dataframe[0].value
    shown = table[table["context"] == "32K"].iloc[0]["weights (GiB)"]
    assert last / 2**30 == pytest.approx(shown, abs=1e-9)


def test_the_cluster_arithmetic_breaks_down_its_overhead_and_block_count():
    """ "− 4.33 GiB overhead" and "One engine core: 30,427 blocks" had no terms: the overhead now lists its items
    (the assumed ones say so) and the block count divides the KV budget by a block's bytes."""
    page = opened(open_page("pages/6_cluster.py", {"model": "Qwen/Qwen3.5-9B"}), "kv_how_cluster")
    (code,) = [c.value for c in page.code if c.value.startswith("Weights per GPU")]
    overhead_gib, budget_gib = re.search(r"− ([\d.]+) GiB overhead = ([\d.]+) GiB", code).groups()
    items = re.search(r"^  overhead: (.+) = ([\d.]+) GiB$", code, re.M)
    assert items and items[2] == overhead_gib, code  # the same overhead as the budget line's
    terms = [float(g) for g in re.findall(r"(?:^|\+ )[\w ,-]+? ([\d.]+) GiB", items[1])]
    assert len(terms) >= 4 and sum(terms) == pytest.approx(float(items[2]), abs=0.005 * len(terms))
    assert "CUDA context" in items[1] and "not checked" in items[1]
    a, b, n, n2, k, share = re.search(
        r"⌊([\d,]+) B ÷ ([\d,]+) B per block⌋ = ([\d,]+) blocks; .* takes [\d,]+: ([\d,]+) ÷ ([\d,]+) = ([\d.,]+) req",
        code,
    ).groups()
    num = [int(x.replace(",", "")) for x in (a, b, n, n2, k)]
    assert num[0] // num[1] == num[2] == num[3]
    assert float(share) == pytest.approx(num[2] / num[4], abs=0.005)
    assert num[0] / 2**30 == pytest.approx(float(budget_gib), abs=0.005)  # the budget the line above ends with


@pytest.mark.parametrize(
    ("params", "key", "rows"),
    [
        ({"model": "Qwen/Qwen3.5-9B"}, "card", [0, 5, -1]),  # cards for a hybrid, llama.cpp; the last does not fit
        (
            {
                "model": "openai/gpt-oss-20b",
                "engine": "vllm",
                "weights": "mxfp4",
                "card": "H100 80GB SXM5",
                "ftab": "models",
            },
            "model",
            [0, 3],
        ),
    ],
)
def test_each_finder_row_links_to_fit_a_card_with_the_same_figures(params, key, rows):
    """The finders' rows had no formula of their own, only a caption pointing at Fit a card; each row now links to
    Fit a card with its inputs, where the same figures come with 'How is this computed?'."""
    finder = open_page("pages/4_finders.py", params)
    table = finder.dataframe[0].value
    for i in rows:
        row = table.iloc[i]
        link = row["worked out"]
        assert link.startswith("./?"), link
        page = app(dict(parse_qsl(link[3:])))
        assert not page.exception and not page.warning, [w.value for w in page.warning]
        shown = {m.label: m.value for m in page.metric}
        assert shown["Max context, one sequence"] == row["max context"], (row[key], shown)
        if row["fits"] == "yes":
            assert shown[f"Requests at {row['context']}"] == row["requests"], (row[key], shown)
            fit = page.dataframe[0].value
            decode = fit[fit["context"] == row["context"]].iloc[0]["decode tok/s"]
            assert f"{decode:.1f}" == row["decode tok/s"], (row[key], decode)


def test_the_hybrid_pages_speed_names_the_host_its_layers_in_ram_were_timed_on():
    """With -ngl, the hybrid page's speed curves time the layers left in RAM on a host of its own, which no input or
    caption named; the caption now does, and those figures reproduce the chart's decode tok/s."""
    from core.engines import configured
    from core.fit import Setup
    from core.memory.gpus import card_named
    from core.model.loading import load_model
    from core.speed import Hardware
    from core.speed.report import curve

    params = {"model": "Qwen/Qwen3.5-9B", "card": "GeForce RTX 4060 8GB", "ngl": "20", "cmp": ""}
    page = open_page("pages/1_hybrid_vs_dense.py", params)
    (caption,) = [c.value for c in page.caption if c.value.startswith("A roofline per pass")]
    ram, threads = re.search(r"-ngl 20, --n-cpu-moe\) are timed at ([\d.]+) GB/s with (\d+) threads", caption).groups()
    charts = [json.loads(c.proto.spec) for c in page.get("plotly_chart")]
    (decode,) = [c for c in charts if c["layout"]["yaxis"]["title"]["text"] == "decode tok/s, one sequence"]
    trace = next(t for t in decode["data"] if t["name"] == "Qwen/Qwen3.5-9B")
    setup = Setup(load_model("Qwen/Qwen3.5-9B"), configured("llama.cpp"), card_named("GeForce RTX 4060 8GB"),
                  weights="q4_k_m", gpu_layers=20)  # fmt: skip
    (again,) = curve(setup, Hardware(ram_gb_s=float(ram), threads=int(threads)), [trace["x"][0]])
    assert again["decode_tok_s"] == pytest.approx(trace["y"][0], rel=1e-9)
    whole = open_page("pages/1_hybrid_vs_dense.py", {**params, "ngl": "-1"})
    assert not any("are timed at" in c.value for c in whole.caption)  # every layer on the card: no host enters
