"""llama-server's unified cache: 4 slots (its automatic -np) share one stream of cells, whatever the requests.

libllama referees the caches of a unified cache made for more slots than sequences in flight
(tests/engines/test_llamacpp_engine.py, the n_seq_max cases) and its compute buffer (test_llamacpp_compute.py,
slots=4). Here: that `fit` sizes a request the way llama-server allocates it, and the requests it reports are the
most whose cells, windows, states and masks fit, at most the slots."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.cli import main
from core.engines import configured
from core.fit import Setup, Solver, fit
from core.llamacpp_autofit import projected
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.report import verdict

SERVER = configured("llama.cpp", frontend="llama-server")


def server_setup(model: str, card: str = "RTX 4090", **changes) -> Setup:
    return Setup(load_model(model), changes.pop("engine", SERVER), card_named(card), weights="q4_k_m", **changes)


@pytest.mark.parametrize("model", ["google/gemma-3-12b-it", "Qwen/Qwen3.5-9B", "openai/gpt-oss-20b"])
def test_one_request_is_sized_as_llama_server_allocates_it(model):
    """A request of C tokens is `llama-server -c C`: four slots' windows and states beside C cells. The total is
    what llama.cpp's own --fit projects for that -c over the four slots (a second path through the engine)."""
    setup = server_setup(model)
    row = fit(setup, [131072]).rows[0]
    assert row.total_bytes == projected(setup, 131072, 4, None)
    one_slot = fit(replace(setup, engine=SERVER.with_options(n_seq_max=0)), [131072])
    assert row.cache_bytes > one_slot.rows[0].cache_bytes  # a window (Gemma, gpt-oss) or a state (Qwen) per slot


def test_gemma_holds_four_windows_and_a_micro_batch():
    # Gemma 3 12B: 40 sliding layers × 8 KV heads × 256 × 2 (K, V) × 2 B = 8,192 B a token each; llama-server's
    # 4 slots keep 4 × 1,024 + 512 = 4,608 cells of each (llama-kv-cache-iswa.cpp), one request 1,024 + 512 → 1,536
    row = fit(server_setup("google/gemma-3-12b-it"), [131072]).rows[0]
    swa = next(line for line in row.account.lines if line.label.startswith("sliding_window"))
    assert (swa.count, swa.bytes_per_token, swa.tokens_held) == (40, 8192, 4608)
    assert "4 slots × 1,024 window + 512 micro-batch tokens" in swa.held_note


def test_requests_are_the_most_that_fit_and_at_most_the_slots():
    setup = server_setup("meta-llama/Llama-3.1-8B-Instruct")
    solver = Solver(setup)
    result = fit(setup, [4096, 65536, 131072])
    small, mid, large = result.rows
    assert (small.max_concurrency, small.slots) == (4, 4)  # memory has room for more: the slots bound it
    share = solver.fullest(65536)
    for row in (mid, large):
        n = int(row.max_concurrency)
        assert row.slots == 0 and 1 <= n < 4
        # n sequences of the context fit on the card, n + 1 do not: weights, overhead and cache, summed here
        assert share.weights + sum(solver.need(share, row.context, n)) <= solver.usable
        assert share.weights + sum(solver.need(share, row.context, n + 1)) > solver.usable
    assert "every slot llama.cpp makes" in verdict(result, small).sentence
    assert any("4 slots share one unified cache" in note for note in result.notes)


def test_without_a_unified_cache_each_request_is_its_own_stream():
    """-np N (or --no-kv-unified): one stream per request, no slot bound, the llama-cli figures."""
    split = SERVER.with_options(kv_unified=False)
    rows = fit(server_setup("meta-llama/Llama-3.1-8B-Instruct", engine=split), [4096]).rows
    assert rows[0].max_concurrency > 4 and rows[0].slots == 0
    assert not any("slots share" in note for note in fit(server_setup("Qwen/Qwen3-8B", engine=split)).notes)


def test_cli_marks_rows_the_slots_bound(capsys):
    args = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4090", "--engine", "llama.cpp"]
    args += ["--frontend", "llama-server", "--weights", "q4_k_m", "--context", "4K", "--context", "128K"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [row.get("slots") for row in out["contexts"]] == [4, None]
    # the requests share one -c: four of 4K need -c 16,384, while the row's own figures are one request's -c 4,096
    assert [row.get("n_ctx") for row in out["contexts"]] == [16384, 131072]
    assert out["engine_options"]["n_seq_max"] == 4
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "4  (every slot, -c 16384)" in text and "-np N makes N streams instead" in text


def test_the_count_s_minus_c_holds_them(capsys):
    """The -c a row names for its requests is what llama.cpp's own --fit projection fits on the card (autofit's
    path), and one more request's -c is not."""
    setup = server_setup("google/gemma-3-12b-it")
    for row in fit(setup, [8192, 65536]).rows:
        n = int(row.max_concurrency)
        assert row.n_ctx == -(-n * row.context // 256) * 256
        assert projected(setup, row.n_ctx, 4, None) <= setup.card.memory_bytes
        if not row.slots:
            assert projected(setup, (n + 1) * row.context, 4, None) > setup.card.memory_bytes


def test_llama_server_without_a_unified_cache_says_what_llama_server_does(capsys):
    """Without -np llama-server turns the unified cache back on (tools/server/server.cpp): fit says its figures are
    -np N, and autofit sizes what llama-server would run."""
    split = fit(server_setup("Qwen/Qwen3.5-9B", engine=SERVER.with_options(kv_unified=False)), [8192])
    assert any("turns the unified cache on whatever --kv-unified says" in note for note in split.notes)
    args = ["autofit", "google/gemma-3-12b-it", "--gpu", "RTX 4090", "-c", "32768", "--json"]
    assert main([*args, "--no-kv-unified"]) == 0
    forced = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    assert forced["projected_bytes"] == json.loads(capsys.readouterr().out)["projected_bytes"]
    assert forced["n_ctx_per_sequence"] == 32768 and "turns the unified cache on anyway" in forced["steps"][0]


def test_speed_names_the_slots_not_memory_when_they_bound_the_batch(capsys):
    args = ["speed", "google/gemma-3-12b-it", "--engine", "llama.cpp", "--frontend", "llama-server"]
    args += ["--weights", "Q4_K_M", "--context", "8k", "--batch", "4", "--batch", "8", "--json"]
    for where in (["--gpu", "RTX 4090"], ["--device", "cpu", "--ram-gbs", "50"]):
        assert main([*args, *where]) == 0
        four, eight = json.loads(capsys.readouterr().out)["rows"]
        assert four["fits"] and four["decode_tok_s"] > 0
        assert not eight["fits"] and eight["why"] == "4 slots: llama-server -np 8 runs 8"


def test_size_says_what_the_slots_hold(capsys):
    base = ["size", "google/gemma-3-12b-it", "--engine", "llama.cpp", "--frontend", "llama-server", "--json"]
    assert main(base) == 0
    (note,) = [n for n in json.loads(capsys.readouterr().out)["notes"] if "slots share" in n]
    assert "4 windows and a micro-batch" in note and "request count" not in note  # size counts no requests
    assert main([*base, "--batch", "8"]) == 0
    assert any("sized as -np 8 --kv-unified" in n for n in json.loads(capsys.readouterr().out)["notes"])


def test_the_cache_figures_help_says_what_it_holds():
    from core.report import cache_help

    assert "4 slots' windows and states" in cache_help(fit(server_setup("google/gemma-3-12b-it"), [4096]))
    one = fit(server_setup("google/gemma-3-12b-it", engine=configured("llama.cpp")), [4096])
    assert cache_help(one) == "per GPU, one sequence"
