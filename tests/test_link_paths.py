"""Issue 17, items 1 and 3: a link names a bundled preset, a Hub id or an upload and nothing else, whatever its
shape; `org/name` shaped paths are asked of the Hub (offline here), never opened on the server. A what-if depth
below the model's own sizes the edited model instead of failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import InputError
from core.model.loading import load_model, load_raw
from core.model.params import count_params
from core.model.whatif import edited
from core.probe.worker import local_weights
from tests.conftest import ROOT
from tests.test_app import PAGES, app
from tests.tiny_configs import tiny_raw

MARKER = "PLANTED-7f3a"


def _page(params: dict[str, str], page: str):
    at = app(params)
    if page != "app.py":
        at.switch_page(page).run()
    return at


def _shown(at) -> str:
    """Everything the page says in boxes and captions, main area and sidebar."""
    items = [*at.error, *at.warning, *at.info, *at.caption, *at.sidebar.caption, *at.markdown]
    return "\n".join(str(e.value) for e in items)


@pytest.fixture
def planted(tmp_path, monkeypatch) -> str:
    """A valid config.json planted on the server at an org/name-shaped path relative to the working directory."""
    folder = tmp_path / "srv"
    folder.mkdir()
    (folder / "secret.txt").write_text(json.dumps(tiny_raw("llama") | {"_marker": MARKER}))
    monkeypatch.chdir(tmp_path)
    return "srv/secret.txt"


@pytest.mark.parametrize("page", PAGES)
def test_a_link_never_sizes_a_server_file(planted, page):
    """The file would size as a model if it were read: every page shows an error and no figures instead."""
    at = _page({"model": planted}, page)
    assert not at.exception, [e.value for e in at.exception]
    text = _shown(at)
    assert MARKER not in text and "Config: file" not in text
    if page == "pages/3_fact_check.py":  # reads no model: its figures are the claims'
        return
    assert not at.metric and not at.dataframe, "figures shown for a model that was not read"
    assert any("cannot be used" in e.value and "Hub" in e.value for e in at.error), text
    assert not any(b.label == "Run probe" for b in at.button), "Measure live would probe a server path"


@pytest.mark.parametrize("source", ["core/cli.py", "measurements/claims.jsonl"])
def test_repo_files_are_not_read_or_described(source, monkeypatch):
    """Files of kvscope's own tree: their content, size or JSON errors never reach the page."""
    monkeypatch.chdir(ROOT)
    assert (ROOT / source).is_file()
    at = app({"model": source})
    assert not at.exception
    text = _shown(at)
    for leak in ("not valid JSON", "Extra data", "line 1 column", "UTF-8", "MiB, too large"):
        assert leak not in text, text
    assert "the Hub cannot be reached" in text


def test_load_raw_without_local_files_asks_the_hub_only(planted, monkeypatch):
    """The function itself: the same string opens the file for the command line, and only asks the Hub for the
    app (which gets the offline message here, not the file's model)."""
    assert load_raw(planted)[1]["_marker"] == MARKER  # the command line runs as its user and may read files
    asked: list[str] = []

    def hub(repo_id: str):
        asked.append(repo_id)
        raise InputError(f"{repo_id}: the Hub cannot be reached")

    monkeypatch.setattr("core.model.loading.fetch_hub_config", hub)
    with pytest.raises(InputError, match="Hub cannot be reached"):
        load_raw(planted, local_files=False)
    assert asked == [planted]
    with pytest.raises(InputError, match="not a bundled preset or a Hub repo id"):
        load_model(str(Path(planted).resolve()), local_files=False)


def test_the_probe_never_treats_a_link_model_as_a_folder(tmp_path, monkeypatch):
    """Measure live hands the probe `local_files=False` for presets and Hub ids: a folder of safetensors at that
    path is not loaded."""
    folder = tmp_path / "org" / "name"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\0" * 8)
    monkeypatch.chdir(tmp_path)
    assert local_weights("org/name") == Path("org/name")
    assert local_weights("org/name", local_files=False) is None


@pytest.mark.parametrize("page", ["app.py", "pages/5_ollama.py", "pages/6_cluster.py"])
@pytest.mark.parametrize("layers", ["35", "1"])
def test_fewer_layers_than_the_model_draws(page, layers):
    """`layers=35` on a 36-layer model failed with IndexError (Fit a card, Ollama), `layers=1` with StopIteration
    (cluster): the weights were still counted for the config's 36 layers."""
    at = _page({"model": "Qwen/Qwen3-8B", "layers": layers}, page)
    assert not at.exception, [e.value for e in at.exception]
    assert at.metric or at.dataframe


def test_weights_follow_the_what_if_depth():
    """Layers repeat as edited() repeats them: 72 layers hold 36 more decoder layers' weights, 18 hold 18 fewer,
    and the embeddings and head are counted once either way."""
    model = load_model("Qwen/Qwen3-8B")
    base = count_params(model)
    per_layer = sum(t.numel for t in base.tensors if t.layer == 0)
    outside = sum(t.numel for t in base.tensors if t.layer is None)
    assert base.total == outside + 36 * per_layer  # Qwen3-8B's layers are all alike
    for depth in (1, 18, 35, 72):
        assert count_params(edited(model, num_layers=depth)).total == outside + depth * per_layer


HUGE = "9" * 5000  # int() refuses 4,300+ digits with a ValueError, which reached the page before


def test_a_5000_digit_context_typed_in_the_sidebar():
    at = app()
    at.text_input(key="in_ctx_text").input(HUGE).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("digits" in e.value for e in at.error)


def test_a_5000_digit_num_ctx_on_the_ollama_page():
    at = _page({}, "pages/5_ollama.py")
    at.text_input(key="in_octx").input(HUGE[:40]).run()  # the most the box takes
    assert not at.exception, [e.value for e in at.exception]
    assert any("digits" in e.value for e in at.error)


def test_5000_digit_contexts_on_measure_live_start_no_probe():
    at = _page({}, "pages/2_measure_live.py")
    at.text_input[0].input(f"512, {HUGE}")
    next(b for b in at.button if b.label == "Run probe").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("digits" in e.value for e in at.error)
    assert "probe_job" not in at.session_state


def test_a_pasted_config_with_a_5000_digit_integer():
    at = app({"source": "Upload"})
    at.text_area[0].input(json.dumps(tiny_raw("llama")).replace('"vocab_size": ', f'"vocab_size": {HUGE}, "x": '))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and "Exceeds the limit" not in at.error[0].value
    assert not at.metric


def test_an_unreachable_hub_answers_in_seconds(monkeypatch):
    """Issue 20 item 3: with the Hub unreachable (not HF_HUB_OFFLINE), huggingface_hub retried the connection five
    times with back-off (about 23 s) before saying so. One short request now, then the local cache's answer. The
    endpoint is a closed port on this machine: nothing leaves it."""
    import time

    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(
        hub, "HUGGINGFACE_CO_URL_TEMPLATE", "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}"
    )
    start = time.monotonic()
    with pytest.raises(InputError, match="the Hub cannot be reached"):
        load_raw("mistralai/Mistral-Nemo-Instruct-2407", local_files=False)
    assert time.monotonic() - start < 5


def test_a_long_value_in_a_hand_edited_link_gets_a_bounded_message():
    """A 20,000-character engine= came back whole inside its reason: a 20,130-character warning over the results."""
    from ui.state import from_query

    for params in ({"engine": "A" * 20_000}, {"model": "x" * 20_000, "source": "Preset"}, {"B" * 20_000: "1"},
                   {"ctx": "9" * 3_000}, {"ocards": "C" * 3_000}):  # fmt: skip
        _, ignored = from_query(params)
        assert ignored and all(len(item) < 320 for item in ignored), [len(i) for i in ignored]
