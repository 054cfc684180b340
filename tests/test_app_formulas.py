"""Every formula in "How is this computed?" evaluates to the number printed beside it (issue 9, item 11).

The formulas are parsed back out of the text and evaluated here; the only tolerance is the rounding of the
printed figures (2 decimals of their unit), so a missing factor (vLLM's blocks, its padded layer groups) fails."""

from __future__ import annotations

import math
import re

import pytest

from core.engines import configured
from core.explain import row_lines, usable_line
from core.fit import Setup, default_split, fit
from core.memory.gpus import card_named
from core.model.loading import load_model
from tests.test_app import app, opened

UNITS = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}
NUMBER = r"\d+(?:\.\d+)?"
QUANTITY = re.compile(rf"({NUMBER})\s*(GiB|MiB|KiB|B)?\b")


def _half_unit(text: str) -> float:
    """Half the last printed digit of a figure: how far rounding may have moved it."""
    number, unit = QUANTITY.match(text).groups()
    decimals = len(number.split(".")[1]) if "." in number else 0
    return 0.5 * 10**-decimals * UNITS[unit or "B"] if decimals else 0.0


def evaluate(expr: str) -> tuple[float, float]:
    """(value, rounding slack) of a printed formula such as `24 layer slots × 2,359,296 B page × 3 blocks`."""
    expr = re.sub(r"(?<=\d),(?=\d{3})", "", expr)
    slack = sum(_half_unit(m.group()) for m in QUANTITY.finditer(expr))
    expr = expr.replace("B/token", "B")
    expr = QUANTITY.sub(lambda m: f"({m.group(1)}*{UNITS[m.group(2) or 'B']})", expr)
    expr = expr.replace("max(", "⊔(")  # a roofline's max(a, b), kept through the words' removal
    expr = re.sub(r"/?[A-Za-z_][\w-]*", " ", expr)  # words: "layer slots", "tokens held", "/token"
    expr = expr.replace("×", "*").replace("·", "*").replace("÷", "/").replace("−", "-").replace("⊔", "max")
    expr = expr.replace("⌊", "math.floor(").replace("⌋", ")")
    assert re.fullmatch(r"[\d\s.*/+\-(),mathflorx]*", expr), expr
    return eval(expr, {"math": math, "max": max}), slack  # digits, operators and max only (asserted above)


def formulas(text: str) -> list[tuple[str, str]]:
    """(left side, printed value) of each `… = value` in a line, with headings and labels before a colon dropped."""
    text = re.sub(r"\*\*[^*]*\*\*", "", text)
    out = []
    for segment in text.split(";"):
        if " = " not in segment:
            continue
        left, right = segment.rsplit(" = ", 1)
        left = left.rsplit(": ", 1)[-1]
        left = re.sub(r"^\s*\([^)]*\)", "", left)  # "(vllm, KV bf16)" after a heading
        if not re.search(r"[×÷+−·]", left):
            continue  # "CUDA context: 512 MiB = 512.00 MiB" restates a constant
        value = re.match(rf"\s*({NUMBER}(?:,\d{{3}})*(?:\.\d+)?\s*(?:GiB|MiB|KiB|B)?)", right.replace(",", ""))
        out.append((left, value.group(1)))
    return out


def check_line(line: str) -> int:
    checked = 0
    for left, printed in formulas(line):
        got, slack = evaluate(left)
        want = evaluate(printed)[0]
        assert abs(got - want) <= slack + _half_unit(printed) + 1e-9 * abs(want) + 0.5, (line, got, want)
        checked += 1
    return checked


MODELS = ["Qwen/Qwen3.5-9B", "google/gemma-3-4b-it", "openai/gpt-oss-20b", "state-spaces/mamba2-2.7b",
          "ibm-granite/granite-4.0-h-tiny", "Qwen/Qwen3-8B", "tiiuae/Falcon-H1-7B-Instruct"]  # fmt: skip


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp", "transformers"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("gpus", [1, 2])
def test_every_printed_formula_adds_up(model, engine, gpus):
    engine_ = configured(engine)
    tp, pp = default_split(engine_, gpus)
    setup = Setup(
        model=load_model(model), engine=engine_, card=card_named("H100 80GB SXM5"), gpus=gpus, tp=tp, pp=pp,
        weights="bf16",
    )  # fmt: skip
    result = fit(setup, [4096, 32768])
    checked = check_line(usable_line(result)) if engine == "vllm" else 0
    for row in result.rows:
        checked += sum(check_line(line) for line in row_lines(result, row))
    assert checked >= 5  # the cache, the total, headroom and concurrency at least


def test_vllm_pipeline_stages_formula_adds_up():
    engine = configured("vllm")
    setup = Setup(model=load_model("Qwen/Qwen3.5-9B"), engine=engine, card=card_named("H100 80GB SXM5"), gpus=2,
                  tp=1, pp=2, weights="bf16")  # fmt: skip
    result = fit(setup, [32768])
    lines = row_lines(result, result.rows[0])
    assert any("fullest of 2 pipeline stages" in line for line in lines)
    assert sum(check_line(line) for line in lines) >= 5


def test_the_evaluator_catches_the_reported_mismatch():
    # the line from the report: 24 × 2,162,688 B is 49.5 MiB, not 99 MiB
    with pytest.raises(AssertionError):
        check_line("**gated_deltanet**: 24 × 2,162,688 B state per sequence = 99.00 MiB")
    assert check_line("**gated_deltanet**: 24 × 2,162,688 B state per sequence = 49.50 MiB") == 1


def test_the_app_prints_the_checked_formulas():
    at = app({"model": "Qwen/Qwen3.5-9B", "engine": "vllm", "weights": "bf16", "card": "H100 80GB SXM5"})
    text = "\n".join(m.value for m in opened(at, "kv_how").markdown)
    assert "layer slots ×" in text and "blocks per request" in text
    assert sum(check_line(line) for line in text.splitlines()) >= 6


@pytest.mark.parametrize("model", ["google/gemma-3-12b-it", "Qwen/Qwen3.5-9B", "meta-llama/Llama-3.1-8B-Instruct"])
def test_llama_server_unified_cache_formulas_add_up(model):
    """llama-server's 4 slots share one cache: a window and a state per slot, and the count is found by trying n
    and n + 1 sequences, both shown as sums that must come out as printed."""
    setup = Setup(model=load_model(model), engine=configured("llama.cpp", frontend="llama-server"),
                  card=card_named("RTX 4090"), weights="q4_k_m")  # fmt: skip
    result = fit(setup, [4096, 65536, 131072])
    text = "\n".join(line for row in result.rows for line in row_lines(result, row))
    assert "unified cache" in text
    if model.startswith("Qwen"):
        assert "B state per sequence × 4 slots" in text
    if model.startswith("google"):
        assert "4 slots × 1,024 window + 512 micro-batch tokens" in text
    assert sum(check_line(line) for line in text.splitlines()) >= 12


def test_a_micro_batch_off_the_tensor_alignment_shows_each_padded_input():
    """-ub 100: the graph inputs are padded tensor by tensor to 128 B; the formula lists them so it still adds up
    (it showed one opaque byte count)."""
    engine = configured("llama.cpp", frontend="llama-server").with_ubatch(100)
    setup = Setup(load_model("google/gemma-3-12b-it"), engine, card_named("RTX 4090"), weights="q4_k_m")
    result = fit(setup, [5000])
    lines = row_lines(result, result.rows[0])
    (line,) = [x for x in lines if "compute buffer" in x]
    assert "512 B + 512 B + 512 B + 1,024,000 B" in line  # ids, positions, outputs: 100 × 4 B each, padded
    assert sum(check_line(x) for x in lines) >= 5
