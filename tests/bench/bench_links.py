"""Server CPU per request for the costliest links kvscope has been sent (issue 17), beside a plain page's.

    .venv/bin/python tests/bench/bench_links.py            # or: make bench
    .venv/bin/python tests/bench/bench_links.py --strict   # exit 1 when a link costs more than the target
    .venv/bin/python tests/bench/bench_links.py --only cluster-config   # one link

Each link is opened the way a browser opens it: Streamlit's AppTest runs app.py with the link's query parameters
(the sidebar reads them there), then switches to the page the link names. The CPU seconds of the page's own run are
timed (`time.process_time`, every thread of this process: Streamlit runs the script in a thread of its own), with
`st.cache_data` cleared first, so nothing a previous run computed is reused: what a first visitor of that link
costs the server. A report, not a test (tests/test_budget.py holds the assertions); see tests/bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["HF_HUB_OFFLINE"] = "1"
BENCH_TMP = Path(tempfile.mkdtemp(prefix="kvscope-bench-links-"))
os.environ["KVSCOPE_CACHE"] = str(BENCH_TMP / "cache")

TARGET_S = 2.0  # CPU seconds per request on a 2-core machine


def links() -> dict[str, tuple[str, dict[str, str]]]:
    """name: (page, query parameters)."""
    from tests.test_budget import DEEP, deep_dense, deep_moe
    from ui.state import pack_config

    packed = {"dense": pack_config(deep_dense()), "moe": pack_config(deep_moe())}
    return {
        "fit, defaults (/)": ("app.py", {}),
        "cluster, defaults (/cluster)": ("pages/6_cluster.py", {}),
        "fit-config": ("app.py", {"config": packed["dense"]}),
        "cluster-config": ("pages/6_cluster.py", {"config": packed["moe"], "nodes": "512", "gpn": "8"}),
        "cluster-config-dense": ("pages/6_cluster.py", {"config": packed["dense"], "nodes": "512", "gpn": "8"}),
        "cluster-layers": (
            "pages/6_cluster.py",
            {"model": "deepseek-ai/DeepSeek-V3", "layers": str(DEEP), "nodes": "512", "gpn": "8"},
        ),
        "ollama-config": ("pages/5_ollama.py", {"config": packed["dense"]}),
        "finders-config": ("pages/4_finders.py", {"config": packed["dense"]}),
        "finders-config-moe": ("pages/4_finders.py", {"config": packed["moe"]}),
        # a browser audit's: the widest and deepest each page's own inputs allow
        "ollama-wide-deep": (
            "pages/5_ollama.py",
            {"layers": str(DEEP - 10), "ocards": ",".join(WIDE_CARDS), "omodels": BIG},
        ),
        "hybrid-deep-cmp": (
            "pages/1_hybrid_vs_dense.py",
            {"layers": str(DEEP - 10), "card": "H200 141GB SXM", "cmp": BIG},
        ),
        "finders-deep-transformers": ("pages/4_finders.py", {"layers": str(DEEP - 10), "engine": "transformers"}),
    }


# twelve listed cards with speed figures (the Ollama page's most) and four large presets beside the model
WIDE_CARDS = (
    "GeForce RTX 4060 8GB", "GeForce RTX 4090 24GB", "GeForce RTX 3060 12GB", "GeForce RTX 5090 32GB",
    "H100 80GB SXM", "A100 80GB SXM", "GeForce RTX 3090 24GB", "GeForce RTX 4070 12GB", "GeForce RTX 4080 16GB",
    "L40S 48GB", "RTX 6000 Ada 48GB", "H200 141GB SXM",
)  # fmt: skip
BIG = "deepseek-ai/DeepSeek-V3,openai/gpt-oss-120b,Qwen/Qwen3-Next-80B-A3B-Instruct,nvidia/Nemotron-H-56B-Base-8K"


def page_cpu(page: str, params: dict[str, str]) -> tuple[float, list[str]]:
    """CPU seconds of one page's run for a link, and any exception it showed."""
    from streamlit.testing.v1 import AppTest

    from ui.layout import PAINTED

    forget()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
    # as after the browser's first-paint report (ui.layout.wait_for_paint): the run that computes the page draws the
    # inputs too, the heavier of a link's two runs
    at.session_state[PAINTED] = True
    at.query_params.update(params)
    if page != "app.py":
        at.run()  # the sidebar reads the link here; the page's own run is what is timed
        forget()
        at.switch_page(page)
    start = cpu_now()
    at.run()
    return cpu_now() - start, [str(e.value)[:200] for e in at.exception]


def cpu_now() -> float:
    """CPU seconds of this process (all threads), of the children it waited for, and of the app's long-lived
    config resolver (core.model.resolver: a config the server has not seen is resolved there)."""
    import resource

    from core.model.resolver import RESOLVER

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + RESOLVER.cpu_seconds()


def resolver_start_cpu() -> float:
    """What starting the app's resolver costs once per server (it imports transformers), measured to its first
    answer; every link below then finds it running, as on a server that has served one page."""
    from core.model.resolver import RESOLVER
    from tests.tiny_configs import tiny_raw

    RESOLVER.stop()
    RESOLVER.resolve(tiny_raw("llama"), timeout=120)
    return RESOLVER.cpu_seconds()


def forget() -> None:
    """Drop what an earlier run left: Streamlit's st.cache_data and core's per-config caches (a first visitor)."""
    import streamlit as st

    import core.engines.base
    import core.model.params

    st.cache_data.clear()
    core.model.params._TENSORS.clear()
    core.model.params._COUNTS.clear()
    core.engines.base._DERIVED.clear()


def cli_cpu() -> float:
    """CPU seconds (children's) of `python -m core cluster` on the deep DeepSeek-V3 config, 512 × 8 H100s."""
    import resource

    path = BENCH_TMP / "deep-moe.json"
    from tests.test_budget import CLUSTER_ARGS, deep_moe

    path.write_text(json.dumps(deep_moe()))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, "-m", "core", "cluster", str(path), *CLUSTER_ARGS]
    subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 when a link costs more than the target")
    parser.add_argument("--only", action="append", help="a link's name (repeatable); 'cli' for the command line")
    args = parser.parse_args()
    for name in ("streamlit", "streamlit.runtime.scriptrunner_utils.script_run_context"):  # AppTest's bare-mode noise
        logging.getLogger(name).setLevel(logging.CRITICAL)
    print(f"kvscope links bench — {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"CPU seconds per request, cache cleared (target ≤ {TARGET_S:.0f} s)")
    print(f"  {'resolver start, once/server':<30} {'(its process)':<22} {resolver_start_cpu():>7.2f}  (not a request)")
    print(f"  {'link':<30} {'page':<22} {'CPU s':>7}  target")
    worst, ok = 0.0, True
    for name, (page, params) in links().items():
        if args.only and name not in args.only:
            continue
        seconds, errors = page_cpu(page, params)
        targeted = "defaults" not in name
        if targeted:
            worst = max(worst, seconds)
            ok &= seconds <= TARGET_S
        mark = ("PASS" if seconds <= TARGET_S else "FAIL") if targeted else "(a plain page)"
        print(f"  {name:<30} {page:<22} {seconds:>7.2f}  {mark}" + (f"  exception: {errors}" if errors else ""))
    if not args.only or "cli" in args.only:
        seconds = cli_cpu()
        worst = max(worst, seconds)
        ok &= seconds <= TARGET_S
        mark = "PASS" if seconds <= TARGET_S else "FAIL"
        print(f"  {'python -m core cluster, deep':<30} {'(a process)':<22} {seconds:>7.2f}  {mark}")
    print(f"worst link: {worst:.2f} CPU s (target ≤ {TARGET_S:.0f} s)")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
