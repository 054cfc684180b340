"""Every bundled preset at full size: transformers builds it on the meta device (shapes, no memory), prefills it,
and the cache it returns holds exactly the bytes kvscope predicts, at real widths and full depth."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from core.engines import engine_named  # noqa: E402
from core.model.cachewalk import cache_bytes  # noqa: E402
from core.model.config import from_mamba_ssm  # noqa: E402
from core.model.loading import load_model, presets  # noqa: E402

BUILT_AS = {"kimi_k2": "deepseek_v3"}  # transformers has no kimi_k2 class; the checkpoint runs as DeepSeek-V3
LENGTHS = (300, 5000)  # past gpt-oss' 128 and Gemma 3's 1,024-token windows


@pytest.mark.parametrize("repo_id", sorted(presets()))
def test_full_size_cache_equals_prediction(repo_id):
    raw = json.loads(presets()[repo_id].read_text())
    spec = load_model(repo_id)
    raw = from_mamba_ssm(raw)  # mamba_ssm's own format → the transformers fields kvscope reads it as
    fields = {k: v for k, v in raw.items() if k != "model_type" and not k.startswith("_")}
    model_type = raw["model_type"]
    config = AutoConfig.for_model(BUILT_AS.get(model_type, model_type), **fields).get_text_config(decoder=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    engine = engine_named("transformers")
    for n in LENGTHS:
        ids = torch.zeros((1, n), dtype=torch.long, device="meta")
        with torch.no_grad():
            cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).cache
        assert cache_bytes(cache) == engine.account(spec, n, kv_dtype="bf16").total, f"{repo_id} at {n} tokens"
