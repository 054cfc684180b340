"""Quantise GGUFs to every llama-quantize ftype with libllama's own llama_model_quantize (run in the engines' venv).

Reads JSON from the file named by its argument: {"tree": LLAMACPP_TREE, "out_dir": str, "models": {name: gguf path},
"ftypes": {model: {name: llama_ftype number}}, "imatrix": [ftype names that need an importance matrix]}; prints, on
its last line, {model: {ftype: {tensor name: [ggml type name, bytes]}}} as gguf-py's GGUFReader reads the written
file, or null for an ftype llama_model_quantize refused for that model; under "source", the converter's own file.

llama-quantize refuses the IQ1/IQ2/IQ3_XXS tensors and Q2_K_S's Q2_K ones without an importance matrix
(llama-quant.cpp tensor_requires_imatrix). For those ftypes this passes one through llama_model_quantize_params'
`imatrix`: every weight's importance 1.0, one value per input column (and per expert), the layout
llama_model_quantize_impl checks (`ne[0] * ne[2]`). The values change which quants are picked inside a block,
never a tensor's type or size; what does change the types is that an imatrix is present (`has_imatrix`), as it is
in every file of those ftypes.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path


def imatrix_for(reader) -> tuple[ctypes.Array, list]:
    import llama_cpp

    entries, keep = [], []
    for t in reader.tensors:
        shape = [int(x) for x in t.shape]  # ne0 first
        if len(shape) < 2:
            continue
        size = shape[0] * (shape[2] if len(shape) > 2 else 1)
        values = (ctypes.c_float * size)(*([1.0] * size))
        name = t.name.encode()
        keep += [values, name]
        entries.append(llama_cpp.llama_model_imatrix_data(name, values, size))
    entries.append(llama_cpp.llama_model_imatrix_data(None, None, 0))
    return (llama_cpp.llama_model_imatrix_data * len(entries))(*entries), keep


def quantize(src: str, dst: Path, ftype: int, imatrix) -> bool:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    if imatrix is not None:
        params.imatrix = ctypes.cast(imatrix, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    return llama_cpp.llama_model_quantize(src.encode(), str(dst).encode(), ctypes.byref(params)) == 0


def table(reader_class, path: Path) -> dict[str, list]:
    reader = reader_class(path)
    return {t.name: [t.tensor_type.name, int(t.n_bytes)] for t in reader.tensors}


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    sys.path[:0] = [str(Path(job["tree"]) / "gguf-py")]
    from gguf import GGUFReader

    out_dir = Path(job["out_dir"])
    result: dict[str, dict[str, dict[str, list] | None]] = {}
    for model, src in job["models"].items():
        imatrix, _keep = imatrix_for(GGUFReader(src))
        result[model] = {}
        for name, ftype in job["ftypes"][model].items():
            dst = out_dir / f"{model}-{name}.gguf"
            started = time.monotonic()
            if not quantize(src, dst, ftype, imatrix if name in job["imatrix"] else None):
                result[model][name] = None  # llama-quantize refused (its reason is on stderr)
                continue
            print(f"{model} {name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
            result[model][name] = table(GGUFReader, dst)
            dst.unlink()
        result[model]["source"] = table(GGUFReader, Path(src))
    print("\n" + json.dumps(result))


if __name__ == "__main__":
    main()
