"""Issue 17: a link (or one command) costs the server a bounded amount of CPU, however deep the model it names.

The costliest links reported took 23-150 CPU seconds on 2 cores: the cluster, Ollama and finders pages with a
10,000-layer config or a what-if depth of 10,000 (MAX_LAYERS, since cut to 1,000). Each test opens such a link under
AppTest and asserts
(a) the CPU its page run took, with room for a loaded CI machine (the target is 2 s; these bound at 20 s, where the
old code took minutes), and (b) what makes it bounded: the model's tensors are built once per request, not once per
card, plan or layer count. tests/bench/bench_links.py reports the seconds themselves.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest
from streamlit.testing.v1 import AppTest

import core.model.params as params
from core.model.config import MAX_LAYERS
from tests.conftest import ROOT
from tests.rendered import shown
from ui.state import pack_config

DEEP = MAX_LAYERS  # the deepest config kvscope accepts
CLUSTER_ARGS = ["--gpu", "H100", "--nodes", "512", "--gpus-per-node", "8"]  # 4,096 GPUs, the most kvscope plans
CPU_BOUND_S = 20.0  # generous: the target is 2 s, the old code took 23-150 s


def deep_dense() -> dict:
    raw = json.loads((ROOT / "core/model/presets/Qwen__Qwen3-8B.json").read_text())
    raw.pop("max_window_layers", None)
    raw.update(
        num_hidden_layers=DEEP, hidden_size=256, intermediate_size=512, num_attention_heads=8,
        num_key_value_heads=8, head_dim=32, vocab_size=1024, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    return raw


def deep_moe() -> dict:
    raw = json.loads((ROOT / "core/model/presets/deepseek-ai__DeepSeek-V3.json").read_text())
    raw.pop("auto_map")  # a config asking for its own code is refused
    raw["num_hidden_layers"] = DEEP
    return raw


@pytest.fixture
def builds(monkeypatch):
    """How many times a model's tensor list is built from a config (once per distinct config is the bound)."""
    calls = []
    build = params._build_tensors

    def counted(config):
        calls.append(config.get("num_hidden_layers"))
        return build(config)

    monkeypatch.setattr(params, "_build_tensors", counted)
    params._TENSORS.clear()
    params._COUNTS.clear()
    return calls


def open_link(page: str, query: dict[str, str]) -> tuple[AppTest, float]:
    """The page a link names, as a browser opens it; the CPU seconds of the page's own run."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(query)
    at.run()
    at.switch_page(page)
    start = time.process_time()
    at.run()
    spent = time.process_time() - start
    assert not at.exception, [e.value for e in at.exception]
    return at, spent


def test_cluster_page_with_the_deepest_config_on_4096_gpus_is_bounded(builds):
    at, spent = open_link("pages/6_cluster.py", {"config": pack_config(deep_moe()), "nodes": "512", "gpn": "8"})
    assert spent < CPU_BOUND_S, f"{spent:.1f} CPU s"
    assert builds.count(DEEP) <= 1  # the tensors of the deepest config's layers, built once for every plan
    plans = at.dataframe[0].value
    assert len(plans) > 40 and all("PP" in p or "DP" in p for p in plans["plan"])  # every cut was still evaluated


def test_cluster_page_with_the_deepest_what_if_depth_is_bounded(builds):
    query = {"model": "deepseek-ai/DeepSeek-V3", "layers": str(DEEP), "nodes": "512", "gpn": "8"}
    at, spent = open_link("pages/6_cluster.py", query)
    assert spent < CPU_BOUND_S, f"{spent:.1f} CPU s"
    assert len(builds) <= 1
    assert at.metric[0].label == "Best plan"


def test_cluster_command_on_the_deepest_config_is_bounded(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(deep_moe()))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [
        sys.executable,
        "-m",
        "core",
        "cluster",
        str(path),
        "--gpu",
        "H100",
        "--nodes",
        "512",
        "--gpus-per-node",
        "8",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    spent = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert spent < CPU_BOUND_S, f"{spent:.1f} CPU s"  # the old code: 129 s
    assert "best:" in done.stdout or "no plan fits" in done.stdout


def test_ollama_page_with_the_deepest_config_is_bounded(builds):
    from core.speed.predict import PREFILL_SPANS, prefill_spans

    at, spent = open_link("pages/5_ollama.py", {"config": pack_config(deep_dense())})
    assert spent < CPU_BOUND_S, f"{spent:.1f} CPU s"
    assert builds.count(DEEP) <= 1
    # the prefill's span bound applies only past 1,024 layers, deeper than kvscope takes since MAX_LAYERS became
    # 1,000 (a 9,990-layer what-if cost this page 5.7 s); the deepest config is timed over every span
    assert prefill_spans(DEEP) == PREFILL_SPANS > prefill_spans(10_000)
    assert not any("bounded to keep a request under 2 s" in i.value for i in at.info)
    assert len(at.dataframe[0].value) == 4  # every default card has its row


def test_finders_page_with_the_deepest_config_is_bounded(builds):
    at, spent = open_link("pages/4_finders.py", {"config": pack_config(deep_dense())})
    assert spent < CPU_BOUND_S * 2, f"{spent:.1f} CPU s"  # two tables: every card, and every bundled model
    assert builds.count(DEEP) <= 1
    assert len(at.dataframe[0].value) > 20  # every card ranked


def test_cluster_page_shows_the_card_it_plans_for_and_the_kv_dtype_it_uses():
    """Issue 17 item 9: a unified-memory machine in the link is refused by name and the box shows the card used;
    a KV dtype vLLM has not (q8_0) is named, and the caption says what the plans use. (The page's KV dtype is its
    own link field, ckv; the sidebar's kv=q8_0 belongs to llama.cpp and leaves the plans alone.)"""
    query = {"model": "Qwen/Qwen3-8B", "ccard": "Apple M3 Max 128GB (16C CPU / 40C GPU)", "ckv": "q8_0", "kv": "q8_0"}
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params.update(query)
    at.run()
    at.switch_page("pages/6_cluster.py").run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(shown(w.value) for w in at.warning)
    assert "Apple M3 Max 128GB" in warnings and "q8_0" in warnings
    box = at.selectbox(key="in_ccard").value
    assert box == "H100 80GB SXM5"
    assert any("KV dtype auto" in c.value for c in at.caption)
    assert not any("KV dtype q8_0" in c.value for c in at.caption)
