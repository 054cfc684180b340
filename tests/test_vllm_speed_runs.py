"""The speed corpus' published vLLM runs (measurements/speed/corpus/vllm-*.jsonl, issue 19): each is timed as
`vllm serve`'s default would run it, none is fitted (vLLM's efficiencies are assumed), and they check those
efficiencies beside the seeds' figures in every vLLM error bar of their group."""

from __future__ import annotations

import pytest

from core.speed import Hardware, predict
from tests.bench import fit_corpus

ROWS, SKIPPED = fit_corpus.load_rows()
VLLM = [r for r in ROWS if r.setup.engine.name == "vllm"]
LINES = [r for r in fit_corpus.corpus_lines() if r["engine"] == "vllm"]


def test_every_vllm_run_is_taken_and_held_out_but_the_eager_decode():
    """vllm#20469 ran with --enforce-eager: its decode launched each kernel from Python (20.6 ms a step), which
    kvscope, timing the default's CUDA graphs, does not model; its 16,000-token prompt runs past every captured
    graph size and is kept."""
    eager = [r for r in LINES if "--enforce-eager" in r["notes"]]
    assert len(LINES) == len(VLLM) + 1 and len(eager) == 2
    assert SKIPPED["vLLM decode with --enforce-eager (no CUDA graphs, unlike the default)"] == 1
    assert all(r.held_out for r in VLLM)
    assert [r.kind for r in VLLM if "--enforce-eager" in r.raw["notes"]] == ["prefill"]


@pytest.mark.parametrize("row", VLLM, ids=lambda r: f"{r.raw['source_id']}-{r.kind}-{r.raw['model_id']}")
def test_a_run_is_timed_as_vllm_serve_would_run_it(row):
    """The row's setup is vLLM's on the run's card with its tensor parallel, and its prediction is
    core.speed.predict's own at the run's context: the corpus check and the app time one formula."""
    r = row.raw
    s = row.setup
    assert (s.engine.name, s.card.name, s.tp, s.gpus) == ("vllm", r["card"], r["n_devices"], r["n_devices"])
    depth = r["depth"] + (r["n_gen"] // 2 if r["kind"] == "decode" else r["n_prompt"])
    speed = predict(s, Hardware(50.0, 8), depth)
    expected = speed.decode_tok_s if r["kind"] == "decode" else r["n_prompt"] / speed.prefill.seconds
    assert fit_corpus.predicted_tok_s(row) == pytest.approx(expected, rel=1e-9)
    ratio = fit_corpus.predicted_tok_s(row) / r["tok_s"]
    if s.tp == 1:
        assert 0.5 < ratio < 2  # a roofline in the runs' own range
    else:  # the all-reduces between the shares are not timed, and the figure says so
        assert ratio > 1.5 and "all-reduces" in speed.decode_error.caveat


def test_a_tensor_parallel_figure_says_its_all_reduces_are_not_timed():
    """The one published vLLM run over several GPUs (8 MI300X, TP 8) decoded at about half kvscope's roofline, which
    times each GPU's share as if alone; every tensor-parallel figure says so, and a one-GPU figure does not."""
    (tp8,) = [r for r in VLLM if r.setup.tp > 1]
    assert (tp8.setup.tp, tp8.setup.card.name) == (8, "Instinct MI300X 192GB")
    bars = predict(tp8.setup, Hardware(50.0, 8), 4096)
    layers = len(tp8.setup.model.layers)
    for bar in (bars.decode_error, bars.prefill_error):
        assert f"tensor parallel over 8 GPUs is timed without its {2 * layers} all-reduces a pass" in bar.caveat
    one = next(r for r in VLLM if r.setup.tp == 1)
    assert "all-reduce" not in predict(one.setup, Hardware(50.0, 8), 4096).decode_error.caveat
