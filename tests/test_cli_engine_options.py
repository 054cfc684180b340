"""The engine options on the command line (`--platform`, `--swa-full`, `--kv-unified`) reach the engine they name."""

from __future__ import annotations

import argparse
import json

from core.engines.vllm_engine import VllmEngine
from core.model.loading import load_model
from tests.test_cli import run_cli


def _size(*args: str) -> dict:
    proc = run_cli("size", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_platform_reaches_vllm_and_is_echoed():
    out = _size("Qwen/Qwen3-8B", "--engine", "vllm", "--platform", "cpu", "--context", "1000")
    assert out["engine_options"]["platform"] == "cpu"
    assert _size("Qwen/Qwen3-8B", "--engine", "vllm")["engine_options"]["platform"] == "cuda"


def test_the_vllm_log_line_names_the_device_the_backend_logs():
    """vLLM's CPU backend logs 'CPU KV cache size: N tokens' (vllm_engine's 0.21 rule, 0.32 on the engine); fit
    printed 'GPU KV cache size' for it too."""

    def log(*args: str) -> str:
        proc = run_cli("fit", "Qwen/Qwen3.5-9B", "--engine", "vllm", *args, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["vllm"]["log"]

    assert log("--platform", "cpu", "--gpu-mem-gib", "64").startswith("CPU KV cache size: ")
    assert log("--gpu", "RTX 4090").startswith("GPU KV cache size: ")


def test_swa_full_keeps_every_token_on_sliding_layers():
    # gemma-3-4b: 29 sliding (window 1,024) + 5 full layers. With --swa-full every layer holds the whole context, so
    # the cache equals the per-token rate × padded cells; without it the sliding layers stop near the window.
    ctx = 32768
    full = _size("google/gemma-3-4b-it", "--engine", "llama.cpp", "--context", "32k", "--swa-full")
    capped = _size("google/gemma-3-4b-it", "--engine", "llama.cpp", "--context", "32k", "--no-swa-full")
    assert full["engine_options"]["swa_full"] is True
    assert full["contexts"][0]["cache_bytes"] == full["kv_bytes_per_token"] * ctx
    assert capped["contexts"][0]["cache_bytes"] < full["contexts"][0]["cache_bytes"] // 4


def test_another_engines_flags_are_refused_not_ignored():
    """`--frontend llama-server` without `--engine llama.cpp` sized transformers without a word."""
    proc = run_cli("size", "Qwen/Qwen3-8B", "--engine", "transformers", "--no-swa-full", "--kv-unified")
    assert proc.returncode == 2
    assert "--[no-]swa-full, --[no-]kv-unified are llama.cpp's; add --engine llama.cpp (this is transformers)" in (
        proc.stderr
    )
    proc = run_cli("fit", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine", "llama.cpp", "--platform", "cpu")
    assert proc.returncode == 2 and "--platform is vllm's; add --engine vllm (this is llama.cpp)" in proc.stderr
    zero = run_cli("fit", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine", "vllm", "--n-cpu-moe", "0")
    assert zero.returncode == 0  # 0 is the default: nothing of llama.cpp's given


def test_unknown_platform_is_refused_with_the_choices():
    proc = run_cli("size", "Qwen/Qwen3-8B", "--engine", "vllm", "--platform", "tpu")
    assert proc.returncode == 2
    assert "cuda" in proc.stderr and "cpu" in proc.stderr


def test_frontend_picks_llamacpp_defaults_and_flags_override_them():
    library = _size("google/gemma-3-4b-it", "--engine", "llama.cpp", "--frontend", "library", "--context", "8k")
    assert library["engine_options"]["swa_full"] is True
    server = _size("google/gemma-3-4b-it", "--engine", "llama.cpp", "--frontend", "llama-server", "--context", "8k")
    assert server["engine_options"]["kv_unified"] is True
    forced = _size(
        "google/gemma-3-4b-it", "--engine", "llama.cpp", "--frontend", "library", "--no-swa-full", "--context", "8k"
    )
    assert forced["engine_options"]["swa_full"] is False
    assert forced["contexts"][0]["cache_bytes"] < library["contexts"][0]["cache_bytes"]


def test_vllm_version_changes_the_logged_pool_size_for_hybrids():
    # Qwen3.5-9B has 4 KV cache groups: before 0.21 vLLM printed num_blocks // 4 × block_size
    args = ("fit", "Qwen/Qwen3.5-9B", "--engine", "vllm", "--gpu", "H100 80GB SXM5", "--json")
    new = json.loads(run_cli(*args).stdout)["vllm"]
    old = json.loads(run_cli(*args, "--vllm-version", "0.20").stdout)["vllm"]
    assert new["num_blocks"] == old["num_blocks"]
    assert new["kv_cache_tokens"] != old["kv_cache_tokens"]
    plan = VllmEngine().with_options(gdn_flashinfer=True).plan(load_model("Qwen/Qwen3.5-9B"))  # H100: Hopper
    assert len(plan.groups) == 4
    assert old["kv_cache_tokens"] == old["num_blocks"] // 4 * plan.block_size


def _fit(*args: str) -> dict:
    proc = run_cli("fit", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_flash_attention_and_ubatch_reach_llamacpp_memory_on_every_command():
    """-fa and -ub change llama.cpp's compute buffers (one micro-batch's graph; without flash attention its KQ
    scores too), so `fit` takes them as `speed` does."""
    from core.engines import configured
    from core.fit import Setup, fit
    from core.memory.gpus import card_named

    base = ("Qwen/Qwen3-8B", "--gpu", "GeForce RTX 4090 24GB", "--engine", "llama.cpp", "--weights", "q4_k_m")
    default, big, off = _fit(*base), _fit(*base, "-ub", "2k"), _fit(*base, "-ub", "2048", "-fa", "off")
    assert (big["engine_options"]["n_ubatch"], big["engine_options"]["n_batch"]) == (2048, 2048)  # 2k: a token count
    assert default["engine_options"]["flash_attn"] is True and off["engine_options"]["flash_attn"] is False

    def at_16k(out: dict) -> int:
        return next(c["overhead_bytes"] for c in out["contexts"] if c["context"] == 16384)

    assert at_16k(default) < at_16k(big) < at_16k(off)  # off: the 2,048 × 16,384 KQ scores per head are buffered
    engine = configured("llama.cpp", flash_attn=False).with_ubatch(2048)
    setup = Setup(load_model("Qwen/Qwen3-8B"), engine, card_named("GeForce RTX 4090 24GB"), weights="q4_k_m")
    assert at_16k(off) == fit(setup, [16384]).rows[0].overhead_bytes
    # the speed command reads the same flags: its table's contexts stop where fit's limit does
    proc = run_cli("speed", *base, "-ub", "2048", "-fa", "off", "--json")
    assert proc.returncode == 0, proc.stderr
    speed = json.loads(proc.stdout)
    assert (speed["n_ubatch"], speed["flash_attn"]) == (2048, False)


def test_a_quantised_v_without_flash_attention_is_refused_with_the_fix():
    proc = run_cli("fit", "Qwen/Qwen3-8B", "--gpu", "GeForce RTX 4090 24GB", "--engine", "llama.cpp", "-fa", "off",
                   "--kv-dtype", "q8_0")  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "refuses a quantised V cache (q8_0) without flash attention" in proc.stderr and "-fa on" in proc.stderr


def test_ubatch_and_flash_attention_are_llama_cpps_alone():
    proc = run_cli("size", "Qwen/Qwen3-8B", "--engine", "vllm", "-ub", "2048", "-fa", "off")
    assert proc.returncode == 2 and "--flash-attn, --ubatch are llama.cpp's; add --engine llama.cpp" in proc.stderr


def test_autofit_takes_the_run_flags_llama_servers_fit_sizes_its_buffers_with():
    """llama-server's --fit leaves room for the compute buffers of the -ub it was given: a larger micro-batch, and
    attention without flash attention, leave a shorter context."""
    ctx = []
    for flags in ((), ("-ub", "2048"), ("-ub", "2048", "-fa", "off")):
        proc = run_cli("autofit", "Qwen/Qwen3-8B", "--gpu", "GeForce RTX 4060 8GB", *flags, "--json")
        assert proc.returncode == 0, proc.stderr
        ctx.append(json.loads(proc.stdout)["n_ctx"])
    assert ctx[0] > ctx[1] > ctx[2]


def test_every_flag_of_every_command_says_what_it_does():
    """`python -m core <command> --help` explains each option: an option without help text prints as a bare name
    (it did for --gpus, --json, --kv-dtype, --engine and a dozen more). The --kv-dtype help lists the dtypes each
    engine takes, from the engines themselves."""
    from core.cli import build_parser
    from core.engines import configured

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    bare = [
        f"{name} {action.option_strings or action.dest}"
        for name, command in sub.choices.items()
        for action in command._actions
        if not action.help
    ]
    assert not bare
    kv = next(a for a in sub.choices["size"]._actions if "--kv-dtype" in a.option_strings)
    assert all(d in kv.help for engine in ("llama.cpp", "vllm") for d in configured(engine).kv_dtypes)


def test_an_ubatch_past_the_batch_runs_as_the_batch_unless_b_is_raised_with_it():
    """llama.cpp runs min(n_batch, n_ubatch) tokens a pass (llama-context.cpp): -ub 4096 under llama-cli's -b 2048
    sizes what -ub 2048 does, and says so; -b 4096 with it sizes a 4,096-token pass."""
    base = ("Qwen/Qwen3-8B", "--gpu", "GeForce RTX 4090 24GB", "--engine", "llama.cpp", "--context", "16k")
    two, four, raised = _fit(*base, "-ub", "2k"), _fit(*base, "-ub", "4k"), _fit(*base, "-ub", "4k", "-b", "4k")
    assert four["overhead_bytes"] == two["overhead_bytes"] < raised["overhead_bytes"]
    assert any("-ub 4,096 with -b 2,048 runs 2,048; raise -b (--batch-size)" in n for n in four["notes"])
    assert not any("min(-b, -ub)" in n for n in two["notes"] + raised["notes"])
    assert (raised["engine_options"]["n_ubatch"], raised["engine_options"]["n_batch"]) == (4096, 4096)
    proc = run_cli("speed", *base, "-ub", "4k", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n_ubatch"] == 2048  # the pass it times


def test_speed_says_what_fit_says_of_the_llamacpp_flags(capsys):
    """-ub past -b runs -b tokens a pass, and --n-cpu-moe on a dense model moves nothing: fit said so, speed did
    not, though it times both (core.fit.flag_notes serves both)."""
    from core.cli import main

    args = ["Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine", "llama.cpp", "-ub", "100000", "--n-cpu-moe", "4",
            "--json"]  # fmt: skip
    assert main(["speed", *args, "--context", "4k"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert main(["fit", *args]) == 0
    fit_notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 2 and all(n in fit_notes for n in notes)
    assert "raise -b" in notes[0] and "has no routed experts" in notes[1]


def test_fits_vllm_and_speeds_llama_cpp_flags_are_their_engines_too():
    """--kv-cache-memory-bytes applied under transformers and llama.cpp, --gpu-memory-utilization was silently ignored
    there, and speed's --pcie-gbs ran under vLLM without a word."""
    for flag, value in (("--kv-cache-memory-bytes", "1000000000"), ("--gpu-memory-utilization", "0.5")):
        proc = run_cli("fit", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "llama.cpp", flag, value)
        assert proc.returncode == 2 and f"{flag} is vllm's; add --engine vllm" in proc.stderr
    proc = run_cli("speed", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "vllm", "--pcie-gbs", "10")
    assert proc.returncode == 2 and "--pcie-gbs is llama.cpp's" in proc.stderr
    half = run_cli(
        "fit", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "vllm", "--gpu-memory-utilization", "0.5", "--json"
    )
    assert json.loads(half.stdout)["usable_bytes"] == int(json.loads(half.stdout)["card_memory_bytes"] * 0.5)
