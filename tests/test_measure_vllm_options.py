"""Measure live's vLLM probe starts vLLM with the options kvscope predicts with: one engine object
(ProbeRequest.vllm_engine) gives both vLLM's engine arguments (core.probe.worker.vllm_args) and the prediction.

The page test runs the real worker in a child process against a stand-in `vllm` package that records the arguments
it is started with and logs a capacity line, so no engine starts."""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import core.probe.runner as runner
from core.engines import configured
from core.errors import InputError
from core.model.loading import model_from_config
from core.probe import ProbeRequest
from core.probe.request import CPU_KV_REQUESTS
from core.probe.worker import vllm_args, vllm_failures
from tests.test_measure_page import button, no_probe_left_running, open_page  # noqa: F401  (an autouse fixture)
from tests.tiny_configs import tiny_raw

LLAMA = tiny_raw("llama")  # 2 layers, 2 KV heads of 16, bf16
LLAMA_BYTES_PER_TOKEN = 2 * 2 * (16 + 16) * 2  # layers x KV heads x (K + V widths) x 2 bytes


def args_for(platform: str = "cpu", max_len: int = 332, raw: dict = LLAMA, **options):
    request = ProbeRequest("tiny", backend="vllm", **options)
    engine = request.vllm_engine(platform)
    spec = model_from_config(raw, "tiny")
    return request, engine, spec, *vllm_args(request, engine, spec, max_len)


def test_defaults_are_passed_to_vllm_explicitly_as_kvscope_predicts_with_them():
    """vLLM's LLM class defaults to more batched tokens and sequences than `vllm serve` (8,192+ and 1,024 on large
    cards); kvscope predicts with serve's 2,048 and 256, so the probe passes them, and prefix caching, itself."""
    _, engine, _, args, _ = args_for("cuda")
    assert args["max_num_batched_tokens"] == 2048 and args["max_num_seqs"] == 256
    assert args["enable_prefix_caching"] is True
    assert args["gpu_memory_utilization"] == 0.92 and "kv_cache_memory_bytes" not in args
    assert "block_size" not in args  # vLLM's own (16 on CUDA), which kvscope's block_size() resolves to
    assert engine.block_size(model_from_config(LLAMA, "tiny")) == 16


def test_every_option_reaches_vllm_and_the_prediction_from_one_engine():
    request, engine, spec, args, _ = args_for(
        "cpu", max_num_batched_tokens=4096, max_num_seqs=64, prefix_caching=False, block_size=64, kv_dtype="fp8"
    )
    assert args["max_num_batched_tokens"] == 4096 == engine.batched_tokens()
    assert args["max_num_seqs"] == 64 == engine.max_seqs()
    assert args["enable_prefix_caching"] is False is engine.options.prefix_caching
    assert args["block_size"] == 64 == engine.block_size(spec)
    assert args["kv_cache_dtype"] == "fp8"
    # the prediction beside the run: 300 tokens in whole 64-token blocks of fp8 (1 byte)
    assert engine.account(spec, 300, 1, request.kv_dtype).total == 5 * 64 * LLAMA_BYTES_PER_TOKEN // 2


def test_a_cpu_probe_sets_its_kv_pool_instead_of_a_share_of_the_hosts_ram():
    """vLLM's CPU backend reads gpu_memory_utilization as a share of the host's RAM: the probe gives
    kv_cache_memory_bytes, CPU_KV_REQUESTS requests at max_model_len, and says so."""
    _, _, _, args, notes = args_for("cpu", block_size=64)
    assert "gpu_memory_utilization" not in args
    assert args["kv_cache_memory_bytes"] == CPU_KV_REQUESTS * 6 * 64 * LLAMA_BYTES_PER_TOKEN  # ⌈332 / 64⌉ blocks
    assert any("not GPU memory utilization" in n for n in notes)
    _, _, _, given, notes = args_for("cuda", kv_cache_memory_bytes=1 << 30)
    assert given["kv_cache_memory_bytes"] == 1 << 30 and "gpu_memory_utilization" not in given
    assert any("GPU memory utilization is not used" in n for n in notes)


def test_kv_dtypes_take_vllms_names_and_the_cpu_backends_refusals_are_said():
    assert args_for("cuda", kv_dtype="bf16")[3]["kv_cache_dtype"] == "bfloat16"  # vLLM refuses "bf16"
    with pytest.raises(InputError, match="CPU backend keeps the KV cache in the model's dtype"):
        args_for("cpu", kv_dtype="bf16")
    with pytest.raises(InputError, match="no KV cache dtype 'fp32'"):
        args_for("cuda", kv_dtype="fp32")


def test_what_vllms_cpu_backend_overrides_for_mla_is_said_and_predicted():
    """The reference CPU MLA kernel forces block size 16 and turns prefix caching off: not silently."""
    raw = tiny_raw("deepseek_v2")
    _, engine, spec, args, notes = args_for("cpu", raw=raw, block_size=64)
    assert args["block_size"] == 64  # as asked: vLLM resolves it, as kvscope does
    assert engine.block_size(spec) == 16 and engine.prefix_caching(spec) is False
    assert any("block size 16 only, not 64" in n for n in notes)
    assert any("prefix caching off" in n for n in notes)


@pytest.mark.parametrize("bad", [{"max_num_batched_tokens": 0}, {"block_size": -16}, {"gpu_memory_utilization": 1.5}])
def test_impossible_options_are_refused_when_the_request_is_made(bad):
    with pytest.raises(InputError):
        ProbeRequest("tiny", backend="vllm", **bad)


FAKE_VLLM = '''
"""Stand-in for vLLM: records what it is started with, logs a CPU capacity line, generates nothing."""
import json, os, sys

__version__ = "0.32.0"


class SamplingParams:
    def __init__(self, **kwargs):
        pass


class LLM:
    def __init__(self, **kwargs):
        with open(os.environ["FAKE_VLLM_RECORD"], "w") as f:
            json.dump(kwargs, f)
        print("CPU KV cache size: 1,328 tokens, Maximum concurrency for %d tokens per request: 4.00x"
              % kwargs["max_model_len"], file=sys.stderr, flush=True)

    def generate(self, prompts, params, use_tqdm=False):
        return []
'''
FAKE_PLATFORMS = """
class _Cpu:
    device_name = "cpu"

    def is_cpu(self):
        return True

    def is_cuda(self):
        return False


current_platform = _Cpu()
"""


def stand_in_vllm(monkeypatch, tmp_path: Path) -> Path:
    """The real worker, in this Python, importing the stand-in `vllm`; returns where it records its arguments."""
    package = tmp_path / "fake" / "vllm"
    (package / "platforms").mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_VLLM))
    (package / "platforms" / "__init__.py").write_text(textwrap.dedent(FAKE_PLATFORMS))
    record = tmp_path / "vllm_kwargs.json"
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    monkeypatch.setattr(runner, "worker_command", lambda request: [sys.executable, "-m", "core.probe.worker"])
    return record


@pytest.mark.parametrize(
    ("model", "widget", "value", "option"),
    [
        ("gemma2", "Max batched tokens (0 = 2,048)", 64, ("max_num_batched_tokens", 64)),  # sliding-window blocks
        ("qwen3_5_text", "Prefix caching", "off", ("prefix_caching", False)),  # GDN state blocks per request
    ],
)
def test_a_non_default_vllm_option_reaches_vllm_and_the_prediction_on_the_page(
    monkeypatch, tmp_path, model, widget, value, option
):
    record = stand_in_vllm(monkeypatch, tmp_path)
    work_folders = set(Path(tempfile.gettempdir()).glob("kvscope-vllm-*"))
    at = open_page(monkeypatch, tmp_path, tiny_raw(model))
    next(t for t in at.text_input if t.label == "Contexts").input("40, 300")
    next(s for s in at.selectbox if s.label == "Backend").set_value("vllm")
    next(w for w in [*at.number_input, *at.selectbox] if w.label == widget).set_value(value)
    button(at, "Run probe").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    job = runner.active_job()
    assert job is not None and job.wait(300) is not None
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]

    started = json.loads(record.read_text())  # what vLLM was started with
    key, chosen = option
    vllm_key = {"prefix_caching": "enable_prefix_caching"}.get(key, key)
    assert started[vllm_key] == chosen
    assert started["trust_remote_code"] is False
    spec = model_from_config(tiny_raw(model), "x")
    ours = configured("vllm", platform="cpu", **{key: chosen})
    default = configured("vllm", platform="cpu")
    expected = [ours.account(spec, n).total for n in (40, 300)]
    assert expected != [default.account(spec, n).total for n in (40, 300)]  # the option changes the prediction
    table = at.dataframe[0].value
    assert [round(x * 2**20) for x in table["predicted (MiB)"]] == expected
    assert list(table["vLLM KV cache tokens"]) == [1328, 1328]  # the stand-in's log line, read back
    max_len = 300 + 8  # the longest context and the form's 8 decode steps
    assert started["max_model_len"] == max_len
    assert list(table["predicted KV cache tokens"]) == [CPU_KV_REQUESTS * max_len] * 2  # its pool: 4 such requests
    shown = next(c.value for c in at.caption if c.value.startswith("vLLM ran, and kvscope predicted, with:"))
    assert f"{vllm_key}={chosen}" in shown and f"kv_cache_memory_bytes={started['kv_cache_memory_bytes']:,}" in shown
    assert set(Path(tempfile.gettempdir()).glob("kvscope-vllm-*")) <= work_folders  # its config and log removed
    records = [json.loads(line) for line in (tmp_path / "probes.jsonl").read_text().splitlines()]
    saved = records[-1]["settings"]["vllm_args"]  # the results file keeps what vLLM ran with
    assert saved[vllm_key] == chosen and saved == {k: started[k] for k in saved}


def test_a_vllm_failure_says_vllms_own_reason_from_its_log(tmp_path):
    """vLLM 0.32's CPU backend starts a model with 16-wide heads, then its engine process dies on the first prompt;
    what reached the probe was 'EngineDeadError: ... See stack trace (above)', a trace in a log nobody sees. These
    lines are from that run (tests/engines' granite-4.0-h tiny config, through `python -m core probe`)."""
    log = tmp_path / "vllm.log"
    log.write_text(
        "(MainProcess pid=2531) WARNING 12-06 21:03:13 [base.py:380] ValueError: Tokenizer not available when "
        "`skip_tokenizer_init=True`\n"
        "(Worker pid=2775) ERROR 12-06 21:03:13 [multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention "
        "configuration: head_dim=16 isa=2 kv_cache_idx=0\n"
        "(EngineCore pid=2711) INFO 12-06 21:03:13 [multiproc_executor.py:479] [shutdown] Executor: waiting\n"
    )
    cause = r"^vLLM failed: RuntimeError: Unsupported CPU attention .*head_dim=16"
    with pytest.raises(InputError, match=cause), vllm_failures(log):
        raise RuntimeError("EngineCore encountered an issue. See stack trace (above) for the root cause.")
    # no log: the exception's own words
    with pytest.raises(InputError, match=r"^vLLM failed: KeyError: 'x'$"), vllm_failures(tmp_path / "none.log"):
        raise KeyError("x")
