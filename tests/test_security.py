"""Nothing a user hands kvscope runs as code, no server file is readable through the app, uploads are never written
where a name inside them points, and the probe runs only the chosen model, under its limits, naming its own worker
as the lock holder."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import core.probe
from core.errors import InputError
from core.model.config import resolve
from core.probe import ProbeBusy, ProbeJob, ProbeRequest, active_job
from tests.conftest import ROOT
from tests.test_app import app
from tests.tiny_configs import tiny_raw
from ui.state import pack_config

LOADERS = {"from_pretrained", "from_config", "LLM"}  # calls that could import a repo's code
SOURCES = [p for d in ("core", "ui", "pages") for p in sorted((ROOT / d).rglob("*.py"))] + [ROOT / "app.py"]


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            yield name, node


def test_trust_remote_code_is_off_at_every_load():
    """Every call that loads a model or config from a repo says trust_remote_code=False, in so many words."""
    seen = 0
    for path in SOURCES:
        for name, node in _calls(path):
            if name in LOADERS:
                seen += 1
                flags = {k.arg: k.value for k in node.keywords}
                flag = flags.get("trust_remote_code")
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert isinstance(flag, ast.Constant) and flag.value is False, f"{where}: {name} without it"
    assert seen >= 4  # the probe's from_config (×2), from_pretrained and vLLM's LLM
    for path in SOURCES:
        assert "trust_remote_code=True" not in path.read_text(), path


def _repo_with_code(tmp_path: Path, model_type: str) -> tuple[Path, Path]:
    """A checkpoint folder whose config points at its own Python (auto_map); that code would leave a file."""
    sentinel = tmp_path / "code-ran"
    folder = tmp_path / "repo"
    folder.mkdir()
    code = f"open({str(sentinel)!r}, 'w').write('ran')\n"
    for module in ("configuration_evil", "modeling_evil"):
        (folder / f"{module}.py").write_text(code)
    raw = tiny_raw("llama") | {
        "model_type": model_type,
        "auto_map": {
            "AutoConfig": "configuration_evil.EvilConfig",
            "AutoModelForCausalLM": "modeling_evil.EvilModel",
        },
        "trust_remote_code": True,
    }
    (folder / "config.json").write_text(json.dumps(raw))
    return folder, sentinel


def test_a_config_that_asks_for_its_own_code_is_refused(tmp_path):
    folder, sentinel = _repo_with_code(tmp_path, "evil_arch")
    with pytest.raises(InputError, match="unknown model_type 'evil_arch'"):
        resolve(json.loads((folder / "config.json").read_text()))
    assert not sentinel.exists()


def test_a_known_architecture_with_an_auto_map_uses_transformers_own_code(tmp_path):
    folder, sentinel = _repo_with_code(tmp_path, "llama")
    out = resolve(json.loads((folder / "config.json").read_text()))
    assert out["layer_types"] == ["full_attention"] * 2
    assert not sentinel.exists()


@pytest.fixture
def probe_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path / "probes"))
    yield tmp_path / "probes"
    job = active_job()
    if job is not None:
        job.cancel()
        job.wait(30)


def test_the_probe_loads_a_local_checkpoint_without_running_its_code(tmp_path, probe_dir):
    """Real weights with an auto_map beside them: the probe loads them with transformers' own llama code."""
    pytest.importorskip("torch")
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder, sentinel = _repo_with_code(tmp_path, "llama")
    raw = tiny_raw("llama")
    config = AutoConfig.for_model("llama", **{k: v for k, v in raw.items() if k != "model_type"})
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    request = ProbeRequest(model=str(folder / "config.json"), contexts=(8,), decode_steps=2, device="cpu")
    job = ProbeJob(request, timeout=180)
    result = job.wait(200)
    assert result is not None and result.ok, (result and result.error, result and result.log_tail)
    assert not sentinel.exists()
    # Loading real weights on CPU needs `accelerate` (device_map); without it the probe says so and measures with
    # random weights. Either way the refusal is never about the repo's code, and none of that code ran.
    loaded = result.weights.startswith("real weights from")
    assert loaded or any("did not load" in note for note in result.notes), result.notes
    assert not any("remote" in note for note in result.notes)


# --- no server path readable from the app --------------------------------------------------------------------
def test_no_server_file_is_read_through_the_app(tmp_path):
    """A JSON file on the server that would size as a model: neither a link nor the Hub box reaches it."""
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(tiny_raw("mamba2") | {"_marker": "PLANTED-CONTENT"}))
    for params in ({"model": str(planted), "source": "Hub"}, {"model": str(planted)}):
        at = app(params)
        assert not at.exception
        assert at.sidebar.caption and not any("mamba2" in c.value for c in at.sidebar.caption)
        assert "PLANTED" not in json.dumps([e.value for e in [*at.main.error, *at.main.warning]])
    at = app()
    at.radio(key="in_source").set_value("Hub").run()
    at.text_input(key="in_model").input(str(planted)).run()
    assert not at.exception and not at.metric
    assert "is not a Hugging Face repo id" in at.main.error[0].value


def test_the_sidebars_model_reader_refuses_paths_itself():
    """Not only the link parser: the function that reads the model refuses a path given to it directly."""
    from ui.inputs import _spec

    for source in ("/etc/passwd", "../core/model/presets/Qwen__Qwen3-8B.json", "x/y.json", "~/.cache/x"):
        with pytest.raises(InputError, match="not a bundled preset or a Hub repo id"):
            _spec.__wrapped__(source, "", True)


# --- uploads: parsed in memory, never written where a name in them points -------------------------------------
def test_an_upload_is_written_only_under_its_digest(monkeypatch, probe_dir, tmp_path):
    """Measure live hands an uploaded config to the probe process as a file: named by its digest in kvscope's own
    temporary folder, whatever `_name_or_path` or any other field inside says."""
    target = tmp_path / "elsewhere" / "pwned.json"
    raw = tiny_raw("llama") | {"_name_or_path": str(target), "name_or_path": "../../../pwned"}
    captured: list[ProbeRequest] = []

    class Capture:
        def __init__(self, request, timeout=None, **_):
            captured.append(request)
            raise ProbeBusy("captured")

    monkeypatch.setattr(core.probe, "ProbeJob", Capture)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["config"] = pack_config(raw)
    at.run()
    at.switch_page("pages/2_measure_live.py").run()
    next(t for t in at.text_input if t.label == "Contexts").input("12, 40")  # within the tiny model's 512
    next(b for b in at.button if b.label == "Run probe").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (request,) = captured
    path = Path(request.model)
    digest = hashlib.sha256(pack_config(raw).encode()).hexdigest()[:16]
    assert path == Path(tempfile.gettempdir()) / "kvscope-uploads" / f"{digest}.json"
    assert json.loads(path.read_text()) == raw
    assert not target.exists() and not target.parent.exists()
    assert "pwned" not in request.name  # an absolute _name_or_path is not even used as the label


# --- the probe: only the chosen model, under its limits, its own worker named as the holder ------------------
def test_the_probe_runs_the_chosen_model_under_its_time_limit_and_names_its_worker(probe_dir, tmp_path):
    path = tmp_path / "chosen.json"
    path.write_text(json.dumps(tiny_raw("llama")))
    job = ProbeJob(ProbeRequest(model=str(path), contexts=(8,), debug="sleep:60"), timeout=4)
    deadline = time.monotonic() + 30
    while job.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.pid is not None and job.pid != os.getpid()
    cmdline = Path(f"/proc/{job.pid}/cmdline").read_bytes().split(b"\0")
    assert b"core.probe.worker" in cmdline  # the worker module, nothing a request could name
    with pytest.raises(ProbeBusy) as busy:
        ProbeJob(ProbeRequest(model=str(path), contexts=(8,)))
    assert f"probe process pid {job.pid}" in str(busy.value)
    assert f"probe process pid {os.getpid()}," not in str(busy.value)
    start = time.monotonic()
    result = job.wait(30)
    assert result is not None and result.status == "timeout"
    assert time.monotonic() - start < 4 + 10  # the limit, plus the SIGTERM grace
    assert not Path(f"/proc/{job.pid}").exists()
    assert result.request.model == str(path)


def test_a_probe_request_names_no_other_program():
    """The worker runs `python -m core.probe.worker` with this Python or the engines' virtualenv's (a vLLM probe where
    this one has no vLLM); a request is data on its stdin, never a command line: no field of it reaches the command."""
    import sys

    from core.files import engines_venv_python
    from core.probe import runner
    from core.probe.request import ProbeRequest

    hostile = "x; rm -rf / $(id) `id` ../../bin/sh"
    for backend in ("transformers", "vllm"):
        req = ProbeRequest(model=hostile, name=hostile, backend=backend, contexts=(512,))
        python, *rest = runner.worker_command(req)
        assert python in (sys.executable, str(engines_venv_python())) and rest == ["-m", "core.probe.worker"]
    assert "shell=True" not in Path(runner.__file__).read_text()
