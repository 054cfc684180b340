"""The hybrid-vs-dense page's cache(n) formula is the curve it draws: its terms come from the engine's own account
(llama-server's 4 slots' windows and states, vLLM's state pages), so evaluated at each drawn n it gives the drawn
bytes, exactly on llama.cpp and within n's rounding to a block on vLLM."""

from __future__ import annotations

import pytest

from core.compare import series
from core.engines import configured
from core.fit import Setup
from core.memory.gpus import card_named
from core.model.loading import load_model
from tests.test_app import app, opened

CONTEXTS = [1000, 1024, 8192, 131072]


def evaluated(s, n: int) -> int:
    return s.full_bytes_per_token * n + sum(rate * min(n, held) for rate, held in s.windows) + s.fixed_bytes


@pytest.mark.parametrize("model", ["Qwen/Qwen3.5-9B", "google/gemma-3-12b-it", "openai/gpt-oss-20b"])
@pytest.mark.parametrize("engine", ["llama-server", "llama-cli", "vllm"])
def test_the_formula_gives_the_drawn_bytes(model, engine):
    built = configured("vllm") if engine == "vllm" else configured("llama.cpp", frontend=engine)
    weights = None if engine == "vllm" else "q4_k_m"
    s = series(Setup(load_model(model), built, card_named("RTX 4090"), weights=weights), CONTEXTS)
    block = 0 if engine != "vllm" else built.plan(load_model(model)).block_size
    for n, drawn in zip(s.contexts, s.cache_bytes, strict=True):
        # llama.cpp rounds n up to 256 cells: 1,000 is held as 1,024
        held = -(-n // 256) * 256 if engine != "vllm" else n
        rates = s.full_bytes_per_token + sum(rate for rate, _ in s.windows)
        assert 0 <= drawn - evaluated(s, held) <= rates * block, (n, s.formula())


def test_llama_server_slots_are_in_the_terms_and_on_the_page():
    qwen = series(Setup(load_model("Qwen/Qwen3.5-9B"), configured("llama.cpp", frontend="llama-server"),
                        card_named("RTX 4090"), weights="q4_k_m"), [4096])  # fmt: skip
    one = series(Setup(load_model("Qwen/Qwen3.5-9B"), configured("llama.cpp", frontend="llama-cli"),
                       card_named("RTX 4090"), weights="q4_k_m"), [4096])  # fmt: skip
    assert qwen.fixed_bytes == 4 * one.fixed_bytes  # a recurrent state per slot
    gemma = series(Setup(load_model("google/gemma-3-12b-it"), configured("llama.cpp", frontend="llama-server"),
                         card_named("RTX 4090"), weights="q4_k_m"), [4096])  # fmt: skip
    assert gemma.windows == ((40 * 8192, 4 * 1024 + 512),)  # 40 sliding layers, 4 windows and a micro-batch
    at = app({"model": "google/gemma-3-12b-it", "card": "GeForce RTX 4090 24GB", "fe": "llama-server"})
    at.switch_page("pages/1_hybrid_vs_dense.py").run()
    text = "\n".join(m.value for m in opened(at, "kv_how_hybrid").markdown)
    assert "327,680 B/token × min(n, 4,608)" in text and not at.exception
