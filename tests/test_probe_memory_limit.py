"""A CPU probe runs under a hard address-space cap, so a runaway allocation fails inside the probe, not the server."""

from __future__ import annotations

import subprocess
import sys

from core.probe.worker import CPU_ADDRESS_SPACE, CPU_BUDGET_BYTES
from tests.conftest import ROOT


def test_the_cap_leaves_room_for_the_budget_and_stops_more():
    assert CPU_ADDRESS_SPACE > CPU_BUDGET_BYTES
    code = (
        "import resource\n"
        "from core.probe.worker import limit_address_space\n"
        "limit_address_space(1 << 30)\n"  # 1 GiB: the same call as the probe's, smaller
        "print(resource.getrlimit(resource.RLIMIT_AS)[0])\n"
        "try:\n"
        "    blocks = [bytearray(64 << 20) for _ in range(32)]\n"  # 2 GiB
        "    print('allocated')\n"
        "except MemoryError:\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    limit, verdict = out.stdout.split()
    assert int(limit) == 1 << 30
    assert verdict == "refused"


def test_a_cpu_probe_sets_the_cap_before_it_loads_a_model():
    source = (ROOT / "core" / "probe" / "worker.py").read_text()
    run = source[source.index("def run_transformers") :]
    assert run.index("limit_address_space(CPU_ADDRESS_SPACE)") < run.index("load_raw(req.model")
