"""RAM bandwidth by thread count: one core of a server reads a fraction of its sockets' bandwidth, so a pass on T
threads streams RAM at no more than T times one thread's copy rate (core.speed.ram.RamBandwidth)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.engines import configured
from core.fit import Setup
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.speed import Hardware, calibration, predict
from core.speed import ram as ram_mod
from core.speed.calibration import Calibration, host_key
from core.speed.report import part_lines

MODEL = "Qwen/Qwen3-8B"


def cpu_decode(hw: Hardware):
    setup = Setup(load_model(MODEL), configured("llama.cpp"), card_named("RTX 4090"), weights="Q4_K_M")
    return predict(setup, hw, 4096).decode


def test_threads_stream_at_most_their_share_of_one_threads_copy():
    """A memory-bound CPU decode step reads its weights at min(machine, threads × one thread): 16 threads of a 200
    GB/s server whose one thread copies 20 GB/s reach 200, 4 threads 80, and without a one-thread figure the machine's
    bandwidth holds at any thread count."""
    machine = Hardware(200.0, 16, cpu_only=True, ram_thread_gb_s=20.0)
    few = Hardware(200.0, 4, cpu_only=True, ram_thread_gb_s=20.0)
    assert (machine.ram_stream_gb_s, few.ram_stream_gb_s) == (200.0, 80.0)
    assert Hardware(200.0, 4, cpu_only=True).ram_stream_gb_s == 200.0
    full, capped = cpu_decode(Hardware(200.0, 4, cpu_only=True)).parts[0], cpu_decode(few).parts[0]
    assert (full.bandwidth_gb_s, capped.bandwidth_gb_s) == (200.0, 80.0)
    assert math.isclose(capped.weights_s / full.weights_s, 200.0 / 80.0, rel_tol=1e-12)
    assert not full.bandwidth_note and "4 × 20 GB/s, one thread's copy rate, of the machine's 200 GB/s" in (
        capped.bandwidth_note
    )
    one = cpu_decode(Hardware(200.0, 1, cpu_only=True, ram_thread_gb_s=20.0)).parts[0]
    assert one.bandwidth_note.startswith("1 thread streams RAM at most 1 × 20 GB/s")  # not "1 threads stream"
    line = part_lines(cpu_decode(few), prefill=False)[0]
    assert capped.bandwidth_note in line and "80,000,000,000 B/s" in line  # the formula prints the rate it used


def test_the_measurement_copies_every_byte_on_each_thread_count(monkeypatch):
    """The threads split one copy between them: every element is copied once whatever the count (a slice left out
    would read as a faster machine)."""
    seen: list[tuple[int, int]] = []
    real = np.copyto

    def spy(dst, src):
        seen.append((src.size, id(src.base)))
        real(dst, src)

    monkeypatch.setattr(np, "copyto", spy)
    for threads in (1, 3, 7):
        seen.clear()
        assert ram_mod.measure_ram_gb_s(nbytes=8 * 1000 * 8, repeats=1, threads=threads) > 0
        # the first copy faults the pages in whole; then one slice per thread, covering all 8,000 elements
        slices = [n for n, _ in seen[1:]]
        assert seen[0][0] == 8000 and len(slices) == threads and sum(slices) == 8000


def test_the_cached_figures_are_per_host_and_an_old_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    calls: list[int] = []
    sizes: list[int] = []

    def fake(nbytes: int = ram_mod.PROBE_BYTES, repeats: int = 0, threads: int = 1) -> float:
        calls.append(threads)
        sizes.append(nbytes)
        return 10.0 * threads

    monkeypatch.setattr(ram_mod, "measure_ram_gb_s", fake)
    monkeypatch.setattr(ram_mod.os, "cpu_count", lambda: 6)
    # a cache written before the one-thread figure was kept: measured again, not read as both figures
    ram_mod.cache_path().write_text(json.dumps({"host": ram_mod._host_key(), "gb_s": 25.0, "time": "t"}))
    first = ram_mod.ram_bandwidth()
    assert (first.gb_s, first.thread_gb_s, first.cores, calls) == (60.0, 10.0, 6, [1, 6])
    again = ram_mod.ram_bandwidth()
    assert (again.gb_s, again.thread_gb_s, calls) == (60.0, 10.0, [1, 6]) and "6 threads" in again.source
    assert ram_mod.ram_gb_s() == (60.0, again.source)
    # many cores share an L3 that can hold the probe: it grows with them (256 MB per 8), to 1 GiB
    monkeypatch.setattr(ram_mod.os, "cpu_count", lambda: 96)
    assert ram_mod.ram_bandwidth(refresh=True).cores == 96
    assert sizes == [ram_mod.PROBE_BYTES] * 3 + [ram_mod.MAX_PROBE_BYTES]


def test_a_calibration_keeps_its_one_thread_figure_and_an_older_one_loads_without(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    cal = Calibration(host_key(), "t", "m", 90.0, 8, (("F16", 1.0, 2.0),), ram_thread_gb_s=15.0)
    calibration.store(cal)
    assert calibration.load() == cal
    old = {k: v for k, v in cal.record().items() if k != "ram_thread_gb_s"}
    assert Calibration.of(old).ram_thread_gb_s == 0.0  # copied with one thread then: no cap to apply


@pytest.mark.parametrize("threads", [1, 2])
def test_a_real_copy_on_this_machine_reads_a_plausible_rate(threads):
    """Not a speed claim: the threaded copy runs and reads between a slow laptop's and an HBM card's bandwidth."""
    assert 1.0 < ram_mod.measure_ram_gb_s(nbytes=64 * 1024 * 1024, repeats=2, threads=threads) < 5000.0


def test_a_device_hosts_every_core_figure_reaches_its_cpu_rows_and_their_check(tmp_path, monkeypatch):
    """A lent machine's host.json with every core's copy (tests/bench/device_llamacpp.py since 2026-12-05): its CPU
    rows carry it, and the cross-CPU check times them as the CLI times this host (threads × one thread, at most the
    machine); the recorded 2026-12-04 host has one thread's figure alone and keeps it as the machine's."""
    import shutil
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from tests.bench import device_llamacpp, fit_cpu

    raw = root / "measurements" / "speed" / "device_2026-12-04"
    for p in raw.glob("bench-*.jsonl"):
        shutil.copy(p, tmp_path / p.name)
    host = json.loads((raw / "host.json").read_text())
    (tmp_path / "host.json").write_text(json.dumps(host | {"ram_copy_all_gb_s": 150.0}))
    cpu = [r for r in device_llamacpp.rows(tmp_path) if r["backend"] == "cpu"]
    assert cpu and all(r["ram_copy_all_gb_s"] == 150.0 for r in cpu)
    monkeypatch.setattr(fit_cpu, "corpus_lines", lambda: cpu)
    (row, *_) = fit_cpu.published_rows()
    one = host["ram_copy_gb_s"]
    assert (row["hw"].ram_gb_s, row["hw"].ram_thread_gb_s) == (150.0, one)
    assert row["hw"].ram_stream_gb_s == min(150.0, row["hw"].threads * one)
    monkeypatch.setattr(
        fit_cpu, "corpus_lines", lambda: [r for r in device_llamacpp.rows(raw) if r["backend"] == "cpu"]
    )
    (old, *_) = fit_cpu.published_rows()
    assert (old["hw"].ram_gb_s, old["hw"].ram_thread_gb_s) == (one, 0.0)


@pytest.mark.parametrize(("threads", "line"), [(1, "1 thread (reaching 10.0 GB/s)"), (3, "3 threads (reaching 30.0")])
def test_the_command_line_names_the_threads_and_the_rate_they_reach(threads, line, tmp_path, monkeypatch, capsys):
    """The summary line counts threads as a reader expects ("1 thread", not "1 threads") beside the capped rate."""
    from core.cli import main
    from core.speed import cli as speed_cli

    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))  # no stored calibration: the measured host
    monkeypatch.setattr(speed_cli, "ram_bandwidth", lambda: ram_mod.RamBandwidth(60.0, 10.0, 6, "measured here"))
    args = ["speed", MODEL, "--device", "cpu", "--engine", "llama.cpp", "--weights", "Q4_K_M", "--threads"]
    assert main([*args, str(threads), "--context", "4k"]) == 0
    assert line in capsys.readouterr().out


def test_a_unified_memory_machines_layers_in_ram_are_not_timed_as_this_hosts_without_saying_so(capsys):
    """-ngl on an M2 Ultra runs the layers left in RAM on the Mac's own Arm CPU from its unified memory: this host's
    x86 vector set is not applied, an x86 one given is refused, and the figures say they are this host's RAM."""
    from core.cli import main

    args = ["speed", "Qwen/Qwen3-8B", "--engine", "llama.cpp", "--weights", "Q4_K_M", "--gpu", "M2 Ultra", "-ngl",
            "10", "--context", "4k"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cpu_isa"] is None and "unified memory: give --ram-gbs" in out["host_note"]
    assert main([*args, "--cpu-isa", "avx512"]) == 2
    assert "x86 vector set" in capsys.readouterr().err
    assert main([*args, "--ram-gbs", "200", "--json"]) == 0  # the Mac's own figure given: nothing to say
    assert json.loads(capsys.readouterr().out)["host_note"] == ""
