"""Ask the real libllama how big its compute (graph) buffers are (run in the engines' venv).

Reads JSON from the file named by its argument (or stdin): {"models": {name: gguf path}, "wide": {name: {"arch",
"layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab", "experts", "experts_used", "expert_ffn"}},
"tree": LLAMACPP_TREE, "out_dir", "cases": [{"id", "model", "n_ctx", "n_seq_max", "n_ubatch", "n_batch",
"flash_attn": "on"|"off", "kv_unified", "swa_full", "n_outputs_max"}]}.

"wide" models have realistic widths (a 128K vocabulary, 4096 hidden) and a layer or two: they are written straight
to GGUF with the tree's gguf-py, every matrix q4_0 zeros (the compute buffer holds f32 activations whatever the
weights' type), since converting such a checkpoint from safetensors would take gigabytes. Each is written just
before its cases and deleted after (together they take 11 GB of disk). Each model is loaded once; each case creates
a context and frees it. Prints one JSON line: {"cases": [{"id", "compute": {buffer type name: bytes}, "log": [...]}]}.

The bytes are libllama's own, exact: `llama_get_memory_breakdown(ctx)` (src/llama-ext.h, exported as a C++ symbol)
sums `ggml_backend_sched_get_buffer_size` per buffer type into `.compute` (llama-context.cpp, memory_breakdown). It
returns a `std::map<ggml_backend_buffer_type_t, llama_memory_breakdown_data>` by value; under the Itanium C++ ABI a
non-trivial return value is built in memory the caller passes as a hidden first argument, and libstdc++'s map is a
48-byte red-black tree whose header sits at offset 8 (parent = root at +16) and whose nodes hold the key/value pair
after a 32-byte node base. The map is read, then left allocated (a few nodes per case). The "compute buffer size"
log lines (MiB, two decimals) come back too as a cross-check.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import llama_cpp
from llamacpp_runner import run_models  # this folder: the script's own

LIB = llama_cpp.llama_cpp._lib
GGML_BASE = ctypes.CDLL(str(Path(llama_cpp.llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
GGML_BASE.ggml_backend_buft_name.restype = ctypes.c_char_p
GGML_BASE.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]

BREAKDOWN = LIB["_Z26llama_get_memory_breakdownPK13llama_context"]
BREAKDOWN.restype = None
BREAKDOWN.argtypes = [ctypes.c_void_p, ctypes.c_void_p]  # (hidden return slot, ctx)
MAP_BYTES, NODE_BASE = 48, 32
LOG: list[str] = []


@llama_cpp.llama_log_callback
def capture(level: int, text: bytes, user_data) -> None:
    LOG.append(text.decode("utf-8", "replace"))


def breakdown(ctx) -> dict[str, dict[str, int]]:
    slot = ctypes.create_string_buffer(MAP_BYTES)
    BREAKDOWN(ctypes.addressof(slot), ctx)
    words = (ctypes.c_uint64 * (MAP_BYTES // 8)).from_buffer(slot)
    root, count = words[2], words[5]
    out: dict[str, dict[str, int]] = {}
    stack = [root] if root else []
    while stack:
        node = stack.pop()
        left, right = ctypes.c_uint64.from_address(node + 16).value, ctypes.c_uint64.from_address(node + 24).value
        buft, model, context, compute = (ctypes.c_uint64 * 4).from_address(node + NODE_BASE)
        name = GGML_BASE.ggml_backend_buft_name(buft).decode()
        out[name] = {"model": model, "context": context, "compute": compute}
        stack += [n for n in (left, right) if n]
    if len(out) != count:
        raise SystemExit(f"read {len(out)} map entries, the map says {count}")
    return out


def q4_0(rows: int, cols: int, lead: tuple[int, ...] = ()):
    import numpy as np

    return np.zeros((*lead, rows, cols // 32 * 18), dtype=np.uint8)


def write_wide(name: str, cfg: dict, out_dir: Path) -> str:
    """A GGUF of `cfg`'s shapes as llama.cpp's converter names them (conversion/llama.py, qwen.py: Qwen3MoE,
    Qwen3.5; gpt_oss.py), read back against a tiny converted model of each architecture."""
    import gguf
    import numpy as np

    path = out_dir / f"{name}.gguf"
    if path.exists():
        return str(path)
    arch, hidden, hd = cfg["arch"], cfg["hidden"], cfg["head_dim"]
    q, kv = cfg["heads"] * hd, cfg["kv_heads"] * hd
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg["layers"])
    w.add_context_length(262144)
    w.add_embedding_length(hidden)
    pattern = cfg.get("pattern")  # Nemotron-H: M (Mamba2), - (MLP), * (attention) per layer
    if pattern:  # conversion/nemotron.py: per-layer arrays, 0 where a layer has no FFN / no KV heads
        w.add_feed_forward_length([cfg["ffn"] if kind == "-" else 0 for kind in pattern])
        w.add_head_count_kv([cfg["kv_heads"] if kind == "*" else 0 for kind in pattern])
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_feed_forward_length(cfg["ffn"])
        w.add_head_count_kv(cfg["kv_heads"])
    w.add_head_count(cfg["heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(cfg.get("rope_dim") or hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("none")
    w.add_vocab_size(cfg["vocab"])
    quant = gguf.GGMLQuantizationType.Q4_0
    norm = lambda *n: np.ones(n, dtype=np.float32)  # noqa: E731

    def matrix(tensor: str, rows: int, cols: int, lead: tuple[int, ...] = ()) -> None:
        w.add_tensor(tensor, q4_0(rows, cols, lead), raw_dtype=quant)

    matrix("token_embd.weight", cfg["vocab"], hidden)
    w.add_tensor("output_norm.weight", norm(hidden))
    matrix("output.weight", cfg["vocab"], hidden)
    if cfg.get("experts"):
        w.add_expert_count(cfg["experts"])
        w.add_expert_used_count(cfg["experts_used"])
        w.add_expert_feed_forward_length(cfg["expert_ffn"])
    if arch == "gpt-oss":
        w.add_sliding_window(cfg["sliding_window"])
    if arch in ("qwen35", "nemotron_h"):  # the recurrent layers' hyperparameters (conversion/qwen.py, nemotron.py)
        w.add_ssm_conv_kernel(cfg["conv_kernel"])
        w.add_ssm_state_size(cfg["state_size"])
        w.add_ssm_group_count(cfg["group_count"])
        w.add_ssm_time_step_rank(cfg["time_step_rank"])
        w.add_ssm_inner_size(cfg["inner_size"])
    if arch == "qwen35":
        w.add_uint32(f"{arch}.full_attention_interval", cfg["full_attention_interval"])
        w.add_array(f"{arch}.rope.dimension_sections", [11, 11, 10, 0])
    for il in range(cfg["layers"]):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", norm(hidden))
        if pattern:  # models/nemotron-h.cpp, load_arch_tensors: one mixer per layer
            nemotron_block(w, b, pattern[il], cfg, matrix, norm)
            continue
        recurrent = arch == "qwen35" and (il + 1) % cfg["full_attention_interval"] != 0
        if recurrent:  # models/qwen35.cpp, load_block_trunk: the linear-attention tensors
            key, value, heads = cfg["state_size"] * cfg["group_count"], cfg["inner_size"], cfg["time_step_rank"]
            matrix(b + "attn_qkv.weight", 2 * key + value, hidden)
            matrix(b + "attn_gate.weight", value, hidden)
            w.add_tensor(b + "ssm_conv1d.weight", norm(2 * key + value, cfg["conv_kernel"]))
            w.add_tensor(b + "ssm_dt.bias", norm(heads))
            w.add_tensor(b + "ssm_a", norm(heads))
            matrix(b + "ssm_beta.weight", heads, hidden)
            matrix(b + "ssm_alpha.weight", heads, hidden)
            w.add_tensor(b + "ssm_norm.weight", norm(cfg["state_size"]))
            matrix(b + "ssm_out.weight", hidden, value)
        else:
            matrix(b + "attn_q.weight", 2 * q if arch == "qwen35" else q, hidden)  # Qwen3.5: query and gate
            matrix(b + "attn_k.weight", kv, hidden)
            matrix(b + "attn_v.weight", kv, hidden)
            matrix(b + "attn_output.weight", hidden, q)
        if arch in ("qwen3moe", "qwen35") and not recurrent:
            w.add_tensor(b + "attn_q_norm.weight", norm(hd))
            w.add_tensor(b + "attn_k_norm.weight", norm(hd))
        if arch == "gpt-oss":
            for part, width in (("q", q), ("k", kv), ("v", kv), ("output", hidden)):
                w.add_tensor(b + f"attn_{part}.bias", np.zeros(width, dtype=np.float32))
            w.add_tensor(b + "attn_sinks.weight", np.zeros(cfg["heads"], dtype=np.float32))
        post = "post_attention_norm" if arch in ("qwen35", "gpt-oss") else "ffn_norm"
        w.add_tensor(b + f"{post}.weight", norm(hidden))
        if cfg.get("experts"):
            n, f = cfg["experts"], cfg["expert_ffn"]
            w.add_tensor(b + "ffn_gate_inp.weight", np.zeros((n, hidden), dtype=np.float32))
            matrix(b + "ffn_gate_exps.weight", f, hidden, (n,))
            matrix(b + "ffn_up_exps.weight", f, hidden, (n,))
            matrix(b + "ffn_down_exps.weight", hidden, f, (n,))
            if arch == "gpt-oss":
                w.add_tensor(b + "ffn_gate_inp.bias", np.zeros(n, dtype=np.float32))
                for part, width in (("gate", f), ("up", f), ("down", hidden)):
                    w.add_tensor(b + f"ffn_{part}_exps.bias", np.zeros((n, width), dtype=np.float32))
        else:
            matrix(b + "ffn_gate.weight", cfg["ffn"], hidden)
            matrix(b + "ffn_up.weight", cfg["ffn"], hidden)
            matrix(b + "ffn_down.weight", hidden, cfg["ffn"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def nemotron_block(w, b: str, kind: str, cfg: dict, matrix, norm) -> None:
    """One Nemotron-H block: Mamba2 (M), a squared-ReLU MLP (-) or attention (*), after its norm."""
    import numpy as np

    hidden, inner, groups, state = cfg["hidden"], cfg["inner_size"], cfg["group_count"], cfg["state_size"]
    heads, conv = cfg["time_step_rank"], cfg["inner_size"] + 2 * cfg["group_count"] * cfg["state_size"]
    if kind == "M":
        matrix(b + "ssm_in.weight", 2 * inner + 2 * groups * state + heads, hidden)
        w.add_tensor(b + "ssm_conv1d.weight", norm(conv, cfg["conv_kernel"]))
        w.add_tensor(b + "ssm_conv1d.bias", np.zeros(conv, dtype=np.float32))
        w.add_tensor(b + "ssm_dt.bias", norm(heads))
        w.add_tensor(b + "ssm_a", norm(heads, 1))
        w.add_tensor(b + "ssm_d", norm(heads, 1))
        w.add_tensor(b + "ssm_norm.weight", norm(groups, inner // groups))
        matrix(b + "ssm_out.weight", hidden, inner)
    elif kind == "-":
        matrix(b + "ffn_up.weight", cfg["ffn"], hidden)
        matrix(b + "ffn_down.weight", hidden, cfg["ffn"])
    else:
        q, kv = cfg["heads"] * cfg["head_dim"], cfg["kv_heads"] * cfg["head_dim"]
        matrix(b + "attn_q.weight", q, hidden)
        matrix(b + "attn_k.weight", kv, hidden)
        matrix(b + "attn_v.weight", kv, hidden)
        matrix(b + "attn_output.weight", hidden, q)


def read_compute(ctx) -> dict:
    """The context's compute buffer per backend (exact bytes), and the log lines that print it."""
    buffers = breakdown(ctx)
    keep = ("compute buffer size", "graph:", "n_ctx ", "n_ubatch", "flash_attn")
    log = [line.rstrip() for line in "".join(LOG).splitlines() if any(k in line for k in keep)]
    return {"compute": {k: v["compute"] for k, v in buffers.items()}, "log": log}


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text() if len(sys.argv) > 1 else sys.stdin.read())
    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    results = run_models(job, read_compute, LOG)
    sys.path[:0] = [str(Path(job["tree"]) / "gguf-py")]  # the same gguf-py the converter uses
    for name, cfg in job.get("wide", {}).items():
        path = Path(write_wide(name, cfg, Path(job["out_dir"])))
        try:
            results += run_models({**job, "models": {name: str(path)}}, read_compute, LOG)
        finally:
            path.unlink()
    print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
