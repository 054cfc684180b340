"""Issue 20 on the "vLLM across nodes" page: its own context and KV dtype controls travel in the link, the table and
the arithmetic show one stage's figures, long text wraps, the best plan comes with the commands that start it on
its nodes (page and `python -m core cluster` alike), and vLLM's max_num_seqs rule has one source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.engines import vllm_cluster
from core.engines.vllm_cluster import Cluster, Layout, engine_for, evaluate, launch, launch_script, plans
from core.engines.vllm_engine import DEFAULT_MAX_NUM_SEQS, VllmEngine, serve_defaults
from core.fit import Setup, Solver
from core.memory.gpus import card_named
from core.memory.overhead import vllm_overhead
from core.model.loading import load_model
from core.units import format_bytes
from tests.test_app import opened
from tests.test_cluster_page import _page
from ui.state import from_query

ROOT = Path(__file__).resolve().parents[1]
DSV3 = "deepseek-ai/DeepSeek-V3"
LINK = {"model": DSV3, "ctx": "32k", "ccard": "H200", "nodes": "2", "gpn": "8"}
H200 = card_named("H200")


def _plans_shown(at: AppTest) -> list[tuple[str, int]]:
    frame = at.dataframe[0].value
    return list(zip(frame["plan"], frame["requests"], strict=True))


def test_context_and_kv_dtype_are_the_pages_own_and_travel_in_the_link():
    at = _page(LINK)
    at.text_input(key="in_ctx_text").set_value("16k")
    at.selectbox(key="in_ckv").set_value("fp8")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="in_ckv").options == list(VllmEngine.kv_dtypes)
    sent, ignored = from_query(dict(at.query_params))
    assert (sent.ctx, sent.ckv, ignored) == (16384, "fp8", [])
    expected = plans(load_model(DSV3), Cluster(H200, 2, 8), 16384, kv_dtype="fp8")
    shown = _plans_shown(at)
    assert shown == [(r.label, r.requests) for r in expected]

    receiver = _page(dict(at.query_params))
    assert receiver.text_input(key="in_ctx_text").value == "16K"
    assert receiver.selectbox(key="in_ckv").value == "fp8"
    assert _plans_shown(receiver) == shown


def test_an_unreadable_context_stops_the_page_with_its_error():
    at = _page(LINK)
    at.text_input(key="in_ctx_text").set_value("lots").run()
    assert any("Context" in e.value for e in at.error), [e.value for e in at.error]
    assert not at.dataframe


def test_table_row_and_arithmetic_show_the_same_stage():
    """DeepSeek-V3, 2 × 8 H200, 32K: the best plan is TP 1 × PP 2 × DP 8, whose stage 1 (31 layers) sets the block
    count; the table showed stage 2's weights and budget (47.67 / 77.70 GiB) beside stage 1's arithmetic."""
    at = _page(LINK)
    assert not next(e for e in at.expander if e.label.startswith("How is it computed?")).code  # closed: not drawn
    at = opened(at, "kv_how_cluster")
    row = at.dataframe[0].value.iloc[0]
    arithmetic = next(e for e in at.expander if e.label.startswith("How is it computed?")).code[0].value
    assert (row["weights / GPU"], row["KV budget / GPU"]) == ("46.24 GiB", "79.13 GiB")
    assert f"= {row['weights / GPU']}\n" in arithmetic
    assert arithmetic.split("\n")[4].endswith(f"overhead = {row['KV budget / GPU']}")
    assert row["stage"] == 1 and "(stage 1 of 2)" in arithmetic
    best = plans(load_model(DSV3), Cluster(H200, 2, 8), 32768)[0]
    assert row["weights / GPU"] == format_bytes(best.weights.total[best.stage])


def test_long_text_wraps_and_metrics_stay_short():
    at = _page(LINK)
    assert all(len(m.value) <= 12 for m in at.metric), [m.value for m in at.metric]  # a metric cuts long values
    best = plans(load_model(DSV3), Cluster(H200, 2, 8), 32768)[0]
    assert f"**Best plan:** {best.label}" in [m.value for m in at.markdown]
    assert at.code and all(c.proto.wrap_lines for c in at.code)


def test_page_gives_the_multi_node_commands_of_the_best_plan():
    at = _page(LINK)
    best = plans(load_model(DSV3), Cluster(H200, 2, 8), 32768)[0]
    script = "\n".join(launch_script(best))
    assert script in [c.value for c in at.code]
    assert "--data-parallel-size-local 4" in script and "--headless" in script
    assert "--data-parallel-start-rank $((NODE_RANK * 4))" in script and "--data-parallel-address $HEAD_IP" in script


def test_launch_covers_each_way_vllm_starts_on_nodes():
    model = load_model(DSV3)
    two = Cluster(H200, 2, 8)

    def commands(cluster: Cluster, layout: Layout, **kw) -> list[str]:
        return [s.command for s in launch(evaluate(model, cluster, layout, 32768, **kw))]

    one_node = commands(Cluster(H200, 1, 8), Layout(tp=8), kv_dtype="fp8", gpu_memory_utilization=0.9)
    assert one_node == [
        f"vllm serve {DSV3} --tensor-parallel-size 8 --max-model-len 32768 --kv-cache-dtype fp8 "
        "--gpu-memory-utilization 0.9"
    ]
    dp = commands(two, Layout(1, 1, 16, True))  # whole engine cores on each node: vLLM's data-parallel flags
    assert "--data-parallel-size-local 8" in dp[1] and "--headless" not in dp[1]
    assert dp[2].endswith("--data-parallel-start-rank $((NODE_RANK * 8)) --headless")
    ray = commands(two, Layout(8, 2, 1))  # one engine core over both nodes: Ray
    assert ray[1:] == [
        "ray start --head --port=6379",
        "ray start --address=$HEAD_IP:6379",
        f"vllm serve {DSV3} --tensor-parallel-size 8 --pipeline-parallel-size 2 --max-model-len 32768 "
        "--distributed-executor-backend ray",
    ]
    spanning = commands(Cluster(H200, 4, 8), Layout(8, 2, 2, True))  # several cores, each over two nodes
    assert spanning[1].endswith("--nnodes 4 --master-addr $HEAD_IP --node-rank 0")
    assert spanning[2].endswith("--nnodes 4 --master-addr $HEAD_IP --node-rank $NODE_RANK --headless")


def test_cli_prints_the_same_commands():
    out = subprocess.run(
        [sys.executable, "-m", "core", "cluster", DSV3, "--gpu", "H200", "--nodes", "2", "--context", "32k"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    ).stdout
    best = plans(load_model(DSV3), Cluster(H200, 2, 8), 32768)[0]
    printed = [line.strip() for line in out.splitlines()]
    script = launch_script(best)
    start = printed.index(script[0])
    assert printed[start : start + len(script)] == script


def test_max_num_seqs_and_the_sampler_buffer_have_one_rule():
    assert vllm_cluster.serve_defaults is serve_defaults  # the cluster uses vllm_engine's rule, not a twin
    assert VllmEngine().sampler_rows() == DEFAULT_MAX_NUM_SEQS == serve_defaults(card_named("RTX 4090")).max_num_seqs
    model = load_model(DSV3)
    engine = engine_for(Cluster(H200, 2, 8), Layout(1, 1, 16, True))
    assert engine.sampler_rows() == serve_defaults(H200).max_num_seqs == 1024
    plan = evaluate(model, Cluster(H200, 2, 8), Layout(1, 1, 16, True), 32768)
    sampler = next(i for i in plan.overhead if i.label == "sampler logits")
    assert sampler == next(
        i for i in vllm_overhead(model, 8192, 16, max_num_seqs=engine.sampler_rows()) if i.label == "sampler logits"
    )
    small = engine.with_options(max_num_batched_tokens=512)  # the profile run's dummy batch: min(tokens, seqs)
    assert small.sampler_rows() == 512


def test_fit_a_card_uses_the_cards_max_num_seqs_too():
    model = load_model(DSV3)
    solver = Solver(Setup(model, VllmEngine(), H200, gpus=8, tp=8))
    sampler = next(i for i in solver.overhead(32768) if i.label == "sampler logits")
    one_node = evaluate(model, Cluster(H200, 1, 8), Layout(tp=8), 32768)
    assert sampler == next(i for i in one_node.overhead if i.label == "sampler logits")


ENGINES_PYTHON = ROOT / ".venv-engines" / "bin" / "python"
PARSE = """
import json, shlex, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
ServeSubcommand().subparser_init(parser.add_subparsers())
for line in sys.stdin.read().splitlines():
    args = parser.parse_args(shlex.split(line)[1:])
    print(json.dumps([args.data_parallel_size_local, args.data_parallel_start_rank, args.headless, args.nnodes,
                      args.node_rank, args.distributed_executor_backend]))
"""


@pytest.mark.skipif(not ENGINES_PYTHON.exists(), reason="the real vLLM lives in .venv-engines (make engines)")
def test_real_vllm_serve_parses_every_launch_command():
    model = load_model(DSV3)
    cases = [(Cluster(H200, 2, 8), Layout(1, 2, 8, True)), (Cluster(H200, 2, 8), Layout(8, 2, 1))]
    cases.append((Cluster(H200, 4, 8), Layout(8, 2, 2, True)))
    shell = {"$HEAD_IP": "192.0.2.10", "$((NODE_RANK * 4))": "4", "$NODE_RANK": "1"}
    lines = []
    for cluster, layout in cases:
        for step in launch(evaluate(model, cluster, layout, 32768, kv_dtype="fp8")):
            if step.command.startswith("vllm serve"):
                lines.append(step.command)
                for name, value in shell.items():
                    lines[-1] = lines[-1].replace(name, value)
    done = subprocess.run(
        [str(ENGINES_PYTHON), "-c", PARSE], input="\n".join(lines), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = [json.loads(line) for line in done.stdout.splitlines()]
    assert parsed == [
        [4, None, False, 1, 0, None],  # node 0 of DP across nodes: 4 local ranks from 0
        [4, 4, True, 1, 0, None],  # node 1: ranks 4 … 7, headless
        [None, None, False, 1, 0, "ray"],  # one engine core over both nodes, Ray
        [None, None, False, 4, 0, None],  # several cores over nodes: vLLM's own --nnodes launcher
        [None, None, True, 4, 1, None],
    ]
