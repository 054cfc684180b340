"""Hostile and random input to the explorer: links, pasted configs and Hub ids. Each gets a clear message naming
what is wrong; never an exception, never a value changed without a word, never a server path read or its content
shown. The link parser is fuzzed directly (pure); the app itself runs under AppTest."""

from __future__ import annotations

import base64
import json
import re
import time
import zlib
from dataclasses import asdict, fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from core.errors import InputError
from tests.rendered import shown as rendered
from tests.test_app import app, opened
from tests.test_app_issue9 import share_link
from tests.tiny_configs import tiny_raw
from ui.state import DEFAULTS, MAX_SHARED_CONFIG, Inputs, from_query, pack_config, unpack_config

CASE_S = 60.0  # per AppTest case, on a loaded two-core machine
KEYS = [f.name for f in fields(Inputs)]
SECRET_FILE = Path("/etc/passwd")  # a server file whose content must never reach the page


def _pack_bytes(data: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(data, 9)).decode().rstrip("=")


# --- the link parser, fuzzed ----------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    st.dictionaries(
        st.sampled_from([*KEYS, "evil", ""]),
        st.text(max_size=30) | st.from_regex(r"-?\d{1,25}(\.\d{1,5})?[kKmM]?", fullmatch=True),
        max_size=6,
    )
)
def test_random_query_strings_apply_or_are_named(params):
    inputs, ignored = from_query(params)
    named = {item.split("=", 1)[0].split(" ", 1)[0] for item in ignored}
    for key in params:
        assert key in named or key in KEYS, key  # an unknown key is always named
    again, ignored_again = from_query({k: v for k, v in params.items() if k not in named})
    assert again == inputs  # what was kept reproduces the view without a warning
    assert all(item.startswith("kv=") for item in ignored_again)  # (an engine-specific KV dtype is re-checked)


# the values of issue 11 that used to be dropped or rewritten silently
SILENT = {
    "layers": "16000000",
    "hd": "16000000",
    "kvh": "5000",
    "gib": "0.001",
    "ctx": "999999999999999999999",
    "gpus": "0",
    "util": "nan",
    "win": "99999999999",
}


@pytest.mark.parametrize("key", sorted(SILENT))
def test_out_of_range_link_values_are_named_not_clamped(key):
    inputs, ignored = from_query({key: SILENT[key]})
    assert getattr(inputs, key) == getattr(DEFAULTS, key)
    assert len(ignored) == 1 and ignored[0].startswith(f"{key}=")


def test_huge_context_is_refused_not_rounded():
    inputs, ignored = from_query({"ctx": "999999999999999999999"})
    assert inputs.ctx == DEFAULTS.ctx and "953674316406250M" not in " ".join(ignored)
    assert from_query({"ctx": "1M"})[0].ctx == 1 << 20


BOMBS = {
    "zlib_bomb": _pack_bytes(b'{"model_type": "llama", "pad": "' + b" " * (10 << 20) + b'"}'),
    "nested": _pack_bytes(b"[" * 200_000 + b"]" * 200_000),
    "not_json": _pack_bytes(b"\xff\xfe garbage"),
    "array": _pack_bytes(b"[1]"),
    "not_zlib": base64.urlsafe_b64encode(b"plain text").decode(),
    "not_base64": "%%%***",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_damaged_or_bombed_shared_config_is_refused_fast(name):
    packed = BOMBS[name]
    assert len(packed) <= MAX_SHARED_CONFIG  # small enough to travel in a link
    start = time.monotonic()
    with pytest.raises(InputError, match="shared config"):
        unpack_config(packed)
    inputs, ignored = from_query({"config": packed})
    assert time.monotonic() - start < 5
    assert inputs.config == "" and ignored and ignored[0].startswith("config=")


def test_a_real_shared_config_still_round_trips():
    raw = tiny_raw("llama")
    assert unpack_config(pack_config(raw)) == raw


# --- the app, under AppTest -----------------------------------------------------------------------------------
def _texts(at: AppTest) -> str:
    """Every message and caption the page shows (main and sidebar); each with its markdown escapes undone too, as a
    reader sees a link's values quoted (ui.layout.literal), so a leaked secret cannot hide behind backslashes."""
    parts = []
    for kind in ("error", "warning", "info", "success", "caption", "markdown", "code", "text"):
        parts += [text for e in at.get(kind) for text in (str(e.value), re.sub(r"\\(.)", r"\1", str(e.value)))]
    return "\n".join(parts)


def _assert_clean(at: AppTest, start: float) -> str:
    assert not at.exception, [e.value for e in at.exception]
    assert time.monotonic() - start < CASE_S
    shown = _texts(at)
    secret = SECRET_FILE.read_text().splitlines()[0]
    assert secret not in shown and "Traceback" not in shown
    return shown


def test_every_silent_value_warns_in_the_app():
    start = time.monotonic()
    at = app(SILENT)
    shown = _assert_clean(at, start)
    (warning,) = [rendered(w.value) for w in at.warning if "link parameters were ignored" in w.value]
    for key in set(SILENT) - {"ctx"}:
        assert f"{key}=" in warning, key
    # the widgets hold the defaults, not a clamped version of the link's values; the context box, a text box,
    # holds the text as sent and says what is wrong with it in place of the results
    assert at.text_input(key="in_ctx_text").value == SILENT["ctx"]
    assert any("more than kvscope sizes" in e.value for e in at.error) and not at.metric
    assert "ignored" in shown
    assert opened(at, "kv_whatif").number_input(key="in_layers").value == DEFAULTS.layers


SERVER_PATHS = ["/etc/hostname", "/etc/passwd", "../../etc/passwd", "/nonexistent/x.json", "core/model/presets/x.json"]


@pytest.mark.parametrize("model", SERVER_PATHS)
def test_a_link_cannot_name_a_server_file(model):
    start = time.monotonic()
    at = app({"model": model, "source": "Hub"})
    shown = _assert_clean(at, start)
    assert "unknown model" in shown and "not valid JSON" not in shown and "no file" not in shown


ODD_HUB_IDS = ["../x", "/etc/passwd", "https://huggingface.co/a/b", "Qwén/模型", "a/b; rm -rf /", "$(id)/x", "a/b/c"]


def _hub(model: str) -> AppTest:
    at = app()
    at.radio(key="in_source").set_value("Hub").run()
    at.text_input(key="in_model").input(model).run()
    return at


@pytest.mark.parametrize("model", ODD_HUB_IDS)
def test_odd_hub_ids_are_explained(model):
    start = time.monotonic()
    at = _hub(model)
    _assert_clean(at, start)
    errors = [e.value for e in at.main.error]
    assert len(errors) == 1 and "is not a Hugging Face repo id" in errors[0] and "org/name" in errors[0]
    assert not at.metric  # no results stand in for a model that was not read


def test_an_empty_hub_id_asks_for_one_and_leaves_no_empty_model_in_the_link():
    start = time.monotonic()
    at = _hub("")
    _assert_clean(at, start)
    assert [e.value for e in at.main.error] == ["Enter a Hugging Face repo id, written org/name (e.g. Qwen/Qwen3-8B)."]
    assert "model" not in at.query_params
    share = share_link(at)
    assert "model=&" not in share and not share.endswith("model=")


PASTED = {
    "nested": "[" * 100_000 + "]" * 100_000,
    "layers_10e12": json.dumps(tiny_raw("llama", num_hidden_layers=10**12)),
    "nan": '{"model_type": "llama", "num_hidden_layers": NaN}',
    "array": "[1, 2, 3]",
    "text": "hello",
    "huge": '{"model_type": "llama", "x": "' + "a" * (5 << 20) + '"}',
}


@pytest.mark.parametrize("name", sorted(PASTED))
def test_a_hostile_pasted_config_is_explained(name):
    start = time.monotonic()
    at = app()
    at.radio(key="in_source").set_value("Upload").run()
    at.text_area[0].input(PASTED[name]).run()
    _assert_clean(at, start)
    errors = [e.value for e in at.main.error]
    assert len(errors) == 1 and "config.json" in errors[0], errors
    assert not at.metric


def test_a_bombed_link_opens_with_a_warning_and_the_default_model():
    start = time.monotonic()
    at = app({"config": BOMBS["zlib_bomb"], "source": "Upload"})
    shown = _assert_clean(at, start)
    assert "config=" in shown and "unpacks to more than" in shown
    assert asdict(DEFAULTS)["config"] == ""
