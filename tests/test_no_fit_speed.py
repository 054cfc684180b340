"""Issue 20 item 8: a context table row that does not fit shows "—" with the reason for its speed, and the speed
explanation works out no figure for a context that does not fit."""

from __future__ import annotations

from tests.test_app import app, opened


def test_rows_that_do_not_fit_say_so_instead_of_none():
    at = app({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4060 8GB", "ctx": "1M"})
    assert not at.exception
    table = at.dataframe[0]
    frame = table.value
    assert (~frame["fits"]).any() and frame["fits"].any()
    # the values stay numbers, missing exactly where nothing fits; the table shows its placeholder for them
    speeds = frame["decode tok/s"]
    assert speeds[frame["fits"]].notna().all() and speeds[~frame["fits"]].isna().all()
    assert table.proto.placeholder == "— (does not fit)", "the displayed cells say why there is no speed"


def test_the_speed_explanation_has_no_figure_for_a_context_that_does_not_fit():
    at = app({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4060 8GB", "ctx": "1M"})
    assert at.metric[0].value != "yes"
    expander = next(e for e in opened(at, "kv_how_speed").expander if e.label == "How is the speed computed?")
    text = "\n".join(m.value for m in expander.markdown)
    assert "do not fit" in text and "tok/s" not in text


def test_the_cli_gives_no_speed_for_a_row_that_does_not_fit(capsys):
    """`speed` as the app: a batch past what fits (64 requests of 40K on a 24 GB card) has no tok/s, no TTFT and no
    error bar, only the reason; a row that fits keeps every field."""
    import json

    from core.cli import main
    from core.speed.cli import record_keys

    args = ["speed", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine", "llama.cpp", "--weights", "Q4_K_M"]
    args += ["--context", "40k", "--batch", "1", "--batch", "64"]
    assert main([*args, "--json"]) == 0
    one, many = json.loads(capsys.readouterr().out)["rows"]
    assert one["fits"] and one["decode_tok_s"] > 0
    assert set(one) == set(many) == {*record_keys(), "context", "batch", "max_concurrency", "fits", "why"}
    assert one["why"] is None and many["why"].startswith("does not fit")
    assert not many["fits"] and 1 <= many["max_concurrency"] < 64
    assert all(many[key] is None for key in record_keys())
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"— (does not fit: {many['max_concurrency']:,.0f} fit at this context)" in text
