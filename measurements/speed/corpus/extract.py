"""Rebuild the speed corpus from snapshots of its public sources (see README.md here).

Run from the repository root with the source snapshots as git directories:
    python measurements/speed/corpus/extract.py --mirror /work/.mirror
Each source becomes one `<source-slug>.jsonl` here; rows follow the schema in README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIB = 1024**3

# llama.cpp's printed model names → the HF config kvscope loads, where the architecture is unambiguous.
MODEL_IDS = {
    "llama 7B": "meta-llama/Llama-2-7b-hf",
    "llama 8B": "meta-llama/Llama-3.1-8B-Instruct",
    "llama 70B": "meta-llama/Llama-3.1-70B-Instruct",
    "gpt-oss 20B": "openai/gpt-oss-20b",
    "gpt-oss 120B": "openai/gpt-oss-120b",
    "qwen3moe 30B.A3B": "Qwen/Qwen3-30B-A3B",
    "qwen3 32B": "Qwen/Qwen3-32B",
}


def git_show(repo: Path, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def model_id(model: str) -> str | None:
    return next((mid for prefix, mid in MODEL_IDS.items() if model.startswith(prefix + " ")), None)


def weights_of(model: str) -> str:
    """The llama.cpp type as printed after the size ('llama 7B Q4_K - Medium' → 'Q4_K - Medium')."""
    parts = model.split(" ", 2)
    return parts[2] if len(parts) == 3 else model


def test_name(n_prompt: int, n_gen: int, depth: int) -> str:
    base = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
    return f"{base} @ d{depth}" if depth else base


def row(**kw) -> dict:
    base = {
        "source": None,
        "source_id": None,
        "engine": "llama.cpp",
        "build": None,
        "backend": None,
        "card": None,
        "n_devices": 1,
        "model": None,
        "model_id": None,
        "weights": None,
        "size_bytes": None,
        "params": None,
        "kind": None,
        "test": None,
        "n_prompt": 0,
        "n_gen": 0,
        "depth": 0,
        "n_batch": None,
        "n_ubatch": None,
        "flash_attn": None,
        "threads": None,
        "ngl": None,
        "concurrency": 1,
        "tok_s": None,
        "tok_s_std": None,
        "notes": "",
    }
    # the optional fields a row carries only when given: a CPU row's published RAM copy (None: none published for that
    # machine, and the row stays out of the CPU check); a card in a single-board computer (the README's sbc_host)
    optional = {k: v for k in ("ram_copy_gb_s", "ram_source", "sbc_host") if (v := kw.pop(k, None)) is not None}
    unknown = set(kw) - set(base)
    assert not unknown, unknown
    base.update(kw)
    base["kind"] = "prefill" if base["n_prompt"] else "decode"
    base["test"] = base["test"] or test_name(base["n_prompt"], base["n_gen"], base["depth"])
    return base | optional


def from_bench_json(b: dict, **kw) -> dict:
    """One llama-bench `-o json/jsonl` record (fields as llama-bench writes them)."""
    model = b["model_type"]
    return row(
        build=f"b{b['build_number']} ({b['build_commit']})",
        model=model,
        model_id=model_id(model),
        weights=weights_of(model),
        size_bytes=b["model_size"],
        params=b["model_n_params"],
        n_prompt=b["n_prompt"],
        n_gen=b["n_gen"],
        depth=b.get("n_depth", 0),
        n_batch=b["n_batch"],
        n_ubatch=b["n_ubatch"],
        flash_attn=bool(b["flash_attn"]),
        threads=b["n_threads"],
        ngl=b["n_gpu_layers"],
        tok_s=round(b["avg_ts"], 2),
        tok_s_std=round(b["stddev_ts"], 2) if b.get("stddev_ts") else None,
        **kw,
    )


# ---- lhl/strix-halo-testing: llama-bench JSON on a Framework Desktop (Ryzen AI Max+ 395, Radeon 8060S) ----
STRIX = "AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB"
STRIX_BACKEND = {"ROCm": "rocm", "Vulkan": "vulkan"}


def lhl_fix_wmma(repo: Path) -> list[dict]:
    rev = head(repo)
    out = []
    for label in ("default-hip", "default-rocwmma", "lhl-tune-tile"):
        for model in ("gpt-oss-20b", "llama32-1b", "shisa-v2-unphi4-14b"):
            path = f"llama-cpp-fix-wmma/{model}.{label}.jsonl"
            try:
                text = git_show(repo, rev, path)
            except subprocess.CalledProcessError:
                continue
            note = {
                "default-hip": "upstream HIP build",
                "default-rocwmma": "upstream HIP build with GGML_HIP_ROCWMMA_FATTN=ON",
                "lhl-tune-tile": "lhl's rocm-wmma-tune branch (PR #16827 precursor), not upstream",
            }[label]
            for line in text.splitlines():
                b = json.loads(line)
                r = from_bench_json(
                    b,
                    source=f"https://github.com/lhl/strix-halo-testing/blob/{rev}/{path}",
                    source_id=f"lhl-strix-fixwmma-{model}",
                    backend=STRIX_BACKEND[b["backends"].split(",")[0]],
                    card=STRIX,
                    notes=f"{note}; gfx1151; llama-bench -fa 1 -mmp 0 -d 0,1024,4096,16384,65536; one repetition",
                )
                if model == "llama32-1b":
                    r["notes"] += "; Llama-3.2-1B-Instruct (no bundled config)"
                if model == "shisa-v2-unphi4-14b":
                    r["notes"] += "; shisa-v2-unphi4-14b (a phi-4 finetune, printed as llama 13B); model_id left null"
                out.append(r)
    return out


LLMBENCH_PP = {128, 512, 2048, 4096}
# Older builds print gpt-oss as '?B': the folder names the model.
LLMBENCH_MODEL_IDS = {"gpt-oss-20b-F16": "openai/gpt-oss-20b", "gpt-oss-120b-F16": "openai/gpt-oss-120b"}
LLMBENCH_TG = {128, 1024, 4096}


def lhl_llm_bench(repo: Path) -> dict[str, list[dict]]:
    rev = head(repo)
    names = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "--name-only", rev, "llm-bench/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    out: dict[str, list[dict]] = {}
    for d in names:
        path = f"{d}/results.jsonl"
        try:
            text = git_show(repo, rev, path)
        except subprocess.CalledProcessError:
            continue
        rows = []
        newest: dict[str, int] = {}
        recs = [json.loads(x) for x in text.splitlines()]
        recs = [r for r in recs if r.get("bench_raw")]
        for r in recs:
            newest[r["build"]] = max(newest.get(r["build"], 0), r["bench_raw"]["build_number"])
        # a setting run twice (again with --mmap 0): the later line in the file is the one its README reports
        last = {(r["build"], r["fa"], r["b"], r["hipblaslt"], r["mode"], r["value"]): r for r in recs}
        recs = list(last.values())
        for r in recs:
            b = r["bench_raw"]
            keep = LLMBENCH_PP if r["mode"] == "pp" else LLMBENCH_TG
            # default batch and rocBLAS (not hipBLASLt), newest build of each variant: one row per setting
            if r["value"] not in keep or r["b"] or r["hipblaslt"] or b["build_number"] != newest[r["build"]]:
                continue
            variant = r["build"].removeprefix("llama.cpp-")
            folder = d.split("/")[1]
            rows.append(
                from_bench_json(
                    b,
                    source=f"https://github.com/lhl/strix-halo-testing/blob/{rev}/{path}",
                    source_id=f"lhl-strix-llmbench-{d.split('/')[1].lower()}",
                    backend=STRIX_BACKEND[b["backends"].split(",")[0]],
                    card=STRIX,
                    notes=f"build variant {variant}{' (rocWMMA FA)' if variant == 'rocwmma' else ''}; "
                    f"gfx1151 Framework Desktop 128GB; llm-bench sweep (5 repetitions)",
                )
            )
            if rows[-1]["model_id"] is None and folder in LLMBENCH_MODEL_IDS:
                rows[-1]["model_id"] = LLMBENCH_MODEL_IDS[folder]
                rows[-1]["notes"] += f"; model named by the folder ({folder})"
        slug = "lhl-strix-llmbench-" + d.split("/")[1].lower()
        out[slug] = rows
    return out


# ---- kyuz0/amd-strix-halo-toolboxes benchmark/results: llama-bench tables on a Framework Desktop (128 GB) ----
# run_benchmarks.sh: -ngl 99 -mmp 0 -fa 1 (default pp512/tg128, 5 repetitions), and the long-context runs -p 2048
# -n 32 -d 32768 or 65536 (-ub 2048 on ROCm, 512 on Vulkan; 3 repetitions). One log per model × toolbox × flags.
KYUZ0 = "kyuz0/amd-strix-halo-toolboxes"
# the log's model name (before '__') → the config kvscope loads; models without one stay out
KYUZ0_MODELS = {
    "llama-2-7b.Q4_0": "meta-llama/Llama-2-7b-hf",
    "llama3.3-70.6B-Q4_K_M": "meta-llama/Llama-3.1-70B-Instruct",
    "Llama-3.3-70B-Instruct-UD-Q8_K_XL-00001-of-00002": "meta-llama/Llama-3.1-70B-Instruct",
    "gemma-3-4b-it-Q3_K_S": "google/gemma-3-4b-it",
    "gemma-3-12b-it-UD-Q8_K_XL": "google/gemma-3-12b-it",
    "Qwen3-30B-A3B-BF16-00001-of-00002": "Qwen/Qwen3-30B-A3B",
    "Qwen3-30B-A3B-Instruct-2507-UD-Q6_K_XL": "Qwen/Qwen3-30B-A3B",
    "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M": "Qwen/Qwen3-30B-A3B",
    "Qwen3-Coder-30B-A3B-Instruct-UD-Q8_K_XL": "Qwen/Qwen3-30B-A3B",
    "Qwen3-Coder-30B-A3B-Instruct-BF16-00001-of-00002": "Qwen/Qwen3-30B-A3B",
    "Qwen3.5-35B-A3B-UD-Q4_K_XL": "Qwen/Qwen3.5-35B-A3B",
    "Qwen3.5-35B-A3B-UD-Q8_K_XL": "Qwen/Qwen3.5-35B-A3B",
    "Qwen3.5-35B-A3B-BF16-00001-of-00002": "Qwen/Qwen3.5-35B-A3B",
    "gpt-oss-120b-F16": "openai/gpt-oss-120b",
    "Qwen3-Next-80B-A3B-Instruct-UD-Q8_K_XL-00001-of-00002": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "gpt-oss-20b-mxfp4": "openai/gpt-oss-20b",
    "gpt-oss-120b-mxfp4-00001-of-00003": "openai/gpt-oss-120b",
}
KYUZ0_SAME_SHAPES = {  # a model mapped to another's config: the note says so
    "Llama-3.3": "; Llama 3.3 70B has the Llama 3.1 70B config's shapes",
    "llama3.3": "; Llama 3.3 70B has the Llama 3.1 70B config's shapes",
    "Qwen3-Coder": "; Qwen3-Coder-30B-A3B-Instruct has Qwen3-30B-A3B's shapes",
}
# KYUZ0_AMDVLK: AMD's own Vulkan driver (AMDVLK) is left out: on the same builds it prefills 3.9-5.5x slower than
# RADV here (llama 7B Q4_0 pp512 at b9187: 347 against 1,338 t/s; gemma3 12B Q8_0 at b7938: 126 against 687),
# a driver difference kvscope does not model, where lhl's b6111 runs had it 1.3x faster.
# The toolboxes with a released ROCm (not nightlies, alphas, betas, release candidates, rocWMMA or PR builds)
KYUZ0_ROCM = re.compile(r"^rocm-?(\d)[._](\d)(?:[._](\d))?$")
# ROCm 7 toolboxes up to this build carry a compiler regression (llvm/llvm-project#147700, loop unrolling) that the
# repo's README of 2026-02-04 reports and works around in the toolboxes built after it (its issue #45). Same machine
# and build, b7938: ROCm 7.2 prefilled Llama 2 7B Q4_0 at 550 t/s, ROCm 6.4.4 at 1,597; at b7423, ROCm 7.1 ran
# gpt-oss-20b's pp2048 at depth 16,384 at 658, 6.4.4 at 808. Those runs stay out; the 6.4.4 run of a build stands.
KYUZ0_ROCM7_REGRESSED_UNTIL = 7938


def kyuz0_tables(text: str) -> list[tuple[dict, str]]:
    """(cells by column, build) for every row of the llama-bench tables in a log."""
    out, cols, rows = [], None, []
    for line in text.splitlines():
        if line.startswith("| model"):
            cols = [c.strip() for c in line.strip("|").split("|")]
        elif line.startswith("| ") and cols and not line.startswith("| -"):
            rows.append(dict(zip(cols, (c.strip() for c in line.strip("|").split("|")), strict=True)))
        elif m := re.match(r"build: (\w+) \((\d+)\)", line):
            out += [(r, f"b{m.group(2)} ({m.group(1)})") for r in rows]
            cols, rows = None, []
    return out


def kyuz0(repo: Path) -> dict[str, list[dict]]:
    """The newest build of each model × backend (Mesa's RADV, a released ROCm) × context setting, with -fa 1.
    Every version of every log is read: the repo archives a log into a dated folder under the same name when it
    reruns it (a7ace8d: the 2026-02-04 run, b7938, moved aside as the b8577 rerun replaced it), so the newest commit
    to touch a name need not hold its newest build."""
    log = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "log",
            "--format=C %H",
            "--name-only",
            "--diff-filter=AMR",
            "--",
            "benchmark/results/",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    versions: set[tuple[str, str]] = set()  # (commit, path) of every version of a log
    rev = ""
    for line in log.splitlines():
        if line.startswith("C "):
            rev = line[2:]
        elif line.endswith(".log") and "__" in line:
            versions.add((rev, line))
    best: dict[tuple, tuple] = {}
    for rev, path in sorted(versions):
        model, env, *flags = path.rsplit("/", 1)[-1].removesuffix(".log").split("__")
        rocm = KYUZ0_ROCM.match(env)
        if model not in KYUZ0_MODELS or "fa1" not in flags or "hblt0" in flags:
            continue
        if not (rocm or env == "vulkan_radv"):  # KYUZ0_AMDVLK
            continue
        rows = kyuz0_tables(git_show(repo, rev, path))
        if not rows:  # a run that failed (out of memory) leaves a log without a table
            continue
        build = max(int(b.split()[0][1:]) for _, b in rows)
        version = tuple(int(v or 0) for v in rocm.groups()) if rocm else ()
        if version and version[0] >= 7 and build <= KYUZ0_ROCM7_REGRESSED_UNTIL:
            continue
        key = (model, "rocm" if rocm else "vulkan", tuple(f for f in flags if f != "fa1"))
        if key not in best or (build, version) > best[key][0]:
            best[key] = ((build, version), env, rev, path, rows)
    out: dict[str, list[dict]] = {}
    for (model, _, _), (_, env, rev, path, rows) in sorted(best.items()):
        slug = "kyuz0-strix-" + re.sub(r"-0000\d-of-0000\d$", "", model).lower()
        for cells, build in rows:
            m = re.match(r"(pp|tg)(\d+)(?: @ d(\d+))?$", cells["test"])
            size = float(cells["size"].split()[0]) * (GIB if "GiB" in cells["size"] else 1024**2)
            mean, _, std = cells["t/s"].partition("±")
            n = int(m.group(2))
            out.setdefault(slug, []).append(
                row(
                    source=f"https://github.com/{KYUZ0}/blob/{rev}/{path}",
                    source_id=slug,
                    build=build,
                    backend="rocm" if env.startswith("rocm") else "vulkan",
                    card=STRIX,
                    model=cells["model"],
                    model_id=KYUZ0_MODELS[model],
                    weights=weights_of(cells["model"]),
                    size_bytes=round(size),
                    params=round(float(cells["params"].split()[0]) * 1e9),
                    n_prompt=n if m.group(1) == "pp" else 0,
                    n_gen=n if m.group(1) == "tg" else 0,
                    depth=int(m.group(3) or 0),
                    n_batch=2048,
                    n_ubatch=int(cells.get("n_ubatch") or 512),
                    flash_attn=cells["fa"] == "1",
                    ngl=int(cells["ngl"]),
                    tok_s=float(mean),
                    tok_s_std=float(std) if std.strip() else None,
                    notes=f"toolbox {env}; gfx1151 Framework Desktop 128GB (512 MB BIOS carve-out, GTT); "
                    "size and params from the table (two decimals)"
                    + next((note for name, note in KYUZ0_SAME_SHAPES.items() if model.startswith(name)), ""),
                )
            )
    return out


# ---- XiongjieDai/GPU-Benchmarks-on-LLM-Inference README (Llama 3, llama.cpp main, build 2824) ----
XD_CARDS = {
    "3070 8GB": "GeForce RTX 3070 8GB",
    "3080 10GB": "GeForce RTX 3080 10GB",
    "3080 Ti 12GB": "GeForce RTX 3080 Ti 12GB",
    "4070 Ti 12GB": "GeForce RTX 4070 Ti 12GB",
    "4080 16GB": "GeForce RTX 4080 16GB",
    "RTX 4000 Ada 20GB": "RTX 4000 Ada Generation 20GB",
    "3090 24GB": "GeForce RTX 3090 24GB",
    "4090 24GB": "GeForce RTX 4090 24GB",
    "RTX 5000 Ada 32GB": "RTX 5000 Ada Generation 32GB",
    "RTX A6000 48GB": "RTX A6000 48GB",
    "RTX 6000 Ada 48GB": "RTX 6000 Ada Generation 48GB",
    "A40 48GB": "A40 48GB",
    "L40S 48GB": "L40S 48GB",
    "A100 PCIe 80GB": "A100 80GB PCIe",
    "A100 SXM 80GB": "A100 80GB SXM4",
    "H100 PCIe 80GB": "H100 80GB PCIe",
    "M1 7‑Core GPU 8GB": "Apple M1 8GB (8C CPU / 7C GPU)",
    "M1 Max 32‑Core GPU 64GB": "Apple M1 Max 64GB (10C CPU / 32C GPU)",
    "M2 Ultra 76-Core GPU 192GB": "Apple M2 Ultra 192GB (24C CPU / 76C GPU)",
    "M3 Max 40‑Core GPU 64GB": "Apple M3 Max 64GB (16C CPU / 40C GPU)",
}
XD_MODELS = {  # column → (model as llama.cpp prints it, bytes, params) from the notebooks' load logs
    "8B Q4_K_M": ("llama 8B Q4_K - Medium", round(4.58 * GIB), 8.03e9),
    "8B F16": ("llama 8B F16", round(14.96 * GIB), 8.03e9),
    "70B Q4_K_M": ("llama 70B Q4_K - Medium", round(39.59 * GIB), 70.55e9),
    "70B F16": ("llama 70B F16", round(131.42 * GIB), 70.55e9),
}


def xiongjiedai(repo: Path) -> list[dict]:
    rev = head(repo)
    text = git_show(repo, rev, "README.md")
    tables = re.findall(r"\n(\| GPU .*?)\n\n", text, flags=re.S)
    out = []
    for kind, table in zip(("decode", "prefill"), tables[:2], strict=True):
        lines = [ln for ln in table.splitlines() if ln.startswith("|")]
        cols = [c.strip() for c in lines[0].strip("|").split("|")]
        for ln in lines[2:]:
            cells = [c.strip().strip("*") for c in ln.strip("|").split("|")]
            gpu, n = cells[0], 1
            if m := re.match(r"(.*?) \* (\d+)$", gpu):
                gpu, n = m.group(1), int(m.group(2))
            card = XD_CARDS[gpu]
            for col, val in zip(cols[1:], cells[1:], strict=True):
                if val == "OOM":
                    continue
                model, size, params = XD_MODELS[col]
                backend = "metal" if card.startswith("Apple") else "cuda"
                out.append(
                    row(
                        source=f"https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference/blob/{rev}/README.md",
                        source_id="xiongjiedai-llama3",
                        build="b2824 (4426e298)",
                        backend=backend,
                        card=card,
                        n_devices=n,
                        model=model,
                        model_id=model_id(model),
                        weights=weights_of(model),
                        size_bytes=size,
                        params=int(params),
                        test="pp1024 (README)" if kind == "prefill" else "tg1024 (README)",
                        n_prompt=1024 if kind == "prefill" else 0,
                        n_gen=0 if kind == "prefill" else 1024,
                        n_batch=2048,
                        n_ubatch=512,
                        flash_attn=False,
                        ngl=10000,
                        tok_s=float(val),
                        notes=(
                            "README average of llama.cpp `main -ngl 10000 -c 0 -n 1024 -e` runs (build from the "
                            "notebooks' logs); Llama 3 8B/70B (model_id is the Llama 3.1 config: same shapes); "
                            + (
                                "decode averaged over up to 1024 generated tokens after the prompt, so depth grows "
                                "from the prompt length (258 tokens in the notebooks) — depth 0 is the start"
                                if kind == "decode"
                                else "README calls it a 1024-token prompt eval; the notebooks' logged prompt is "
                                "258 tokens"
                            )
                            + (f"; {n} GPUs, layer split" if n > 1 else "")
                        ),
                    )
                )
    # F16 prefill far below Q4_K_M prefill on the same setup contradicts every other row of the table
    q4 = {(r["card"], r["n_devices"], r["model"].split()[1]): r["tok_s"] for r in out if r["weights"] != "F16"}
    for r in out:
        if r["kind"] == "prefill" and r["weights"] == "F16":
            ref = q4.get((r["card"], r["n_devices"], r["model"].split()[1]))
            if ref and r["tok_s"] < ref / 2:
                r["notes"] += f"; SUSPECT: F16 prefill under half the Q4_K_M prefill ({ref}) of the same setup"
    return out


# ---- llama.cpp scoreboards (#15013 CUDA, #15021 ROCm, #10879 Vulkan, #4167 Apple) ----
# Read from smoothyy3/willitrun data/normalized/llama_cpp_cuda.jsonl, a parse of the discussions' summary
# tables (HTML fetched 2026-04-05). Chips whose row names no single card are left out (see README).
SCOREBOARD_CARDS = {
    "CUDA": {
        "A100 80 GB": "A100 80GB PCIe",
        "A30": "A30 24GB",
        "A40": "A40 48GB",
        "GTX 1070 Ti": "GeForce GTX 1070 Ti 8GB",
        "GTX 1080 Ti": "GeForce GTX 1080 Ti 11GB",
        "GTX 1660": "GeForce GTX 1660 6GB",
        "L40": "L40 48GB",
        "Quadro RTX 4000": "Quadro RTX 4000 8GB",
        "Quadro RTX 6000": "Quadro RTX 6000 24GB",
        "Quadro RTX 8000": "Quadro RTX 8000 48GB",
        "RTX 2060 SUPER": "GeForce RTX 2060 SUPER 8GB",
        "RTX 2070 SUPER": "GeForce RTX 2070 SUPER 8GB",
        "RTX 2080 Ti": "GeForce RTX 2080 Ti 11GB",
        "RTX 3060": "GeForce RTX 3060 12GB",
        "RTX 3080": "GeForce RTX 3080 10GB",
        "RTX 3090 Ti": "GeForce RTX 3090 Ti 24GB",
        "RTX 4060 Ti": "GeForce RTX 4060 Ti 16GB",
        "RTX 4070 Ti SUPER": "GeForce RTX 4070 Ti SUPER 16GB",
        "RTX 4080": "GeForce RTX 4080 16GB",
        "RTX 4080 SUPER": "GeForce RTX 4080 SUPER 16GB",
        "RTX 4090 D": "GeForce RTX 4090 D 24GB",
        "RTX 5070": "GeForce RTX 5070 12GB",
        "RTX 5070 Ti": "GeForce RTX 5070 Ti 16GB",
        "RTX 5080": "GeForce RTX 5080 16GB",
        "RTX 5090": "GeForce RTX 5090 32GB",
        "RTX 6000 Ada": "RTX 6000 Ada Generation 48GB",
        "RTX A4000": "RTX A4000 16GB",
        "RTX A4500": "RTX A4500 20GB",
        "RTX A5000": "RTX A5000 24GB",
        "RTX A6000": "RTX A6000 48GB",
        "Tesla P40": "Tesla P40 24GB",
        "Tesla T4": "T4 16GB",
        "Titan V": "TITAN V 12GB",
        "Titan Xp": "TITAN Xp 12GB",
    },
    "ROCm": {
        "RX 6800 XT": "Radeon RX 6800 XT 16GB",
        "RX 6900 XT": "Radeon RX 6900 XT 16GB",
        "RX 7800 XT": "Radeon RX 7800 XT 16GB",
        "RX 7900 GRE": "Radeon RX 7900 GRE 16GB",
        "RX 7900 XT": "Radeon RX 7900 XT 20GB",
        "RX 7900 XTX": "Radeon RX 7900 XTX 24GB",
    },
    "Vulkan": {
        "AMD Radeon RX 6700 XT": "Radeon RX 6700 XT 12GB",
        "AMD Ryzen Al Max+ 395": STRIX,
        "Intel Arc A750": "Intel Arc A750 8GB",
        "Intel Arc A770M": "Intel Arc A770M 16GB",
        "Intel Arc B570": "Intel Arc B570 10GB",
        "Intel Arc B580": "Intel Arc B580 12GB",
        "Intel Arc Pro B50": "Intel Arc Pro B50 16GB",
        "Intel Arc Pro B60": "Intel Arc Pro B60 24GB",
        "Nvidia GTX 1070": "GeForce GTX 1070 8GB",
        "Nvidia GTX 1660 Ti Mobile": "GeForce GTX 1660 Ti Laptop GPU 6GB",
        "Nvidia RTX 3070": "GeForce RTX 3070 8GB",
        "Nvidia RTX 4060 Mobile": "GeForce RTX 4060 Laptop GPU 8GB",
        "Nvidia RTX 4070": "GeForce RTX 4070 12GB",
        "Nvidia RTX 4070 Super": "GeForce RTX 4070 SUPER 12GB",
        "Nvidia RTX 4070 Ti": "GeForce RTX 4070 Ti 12GB",
    },
}
SCOREBOARD_NOTES = {
    "A100 80 GB": "scoreboard says 'A100 80 GB' (PCIe or SXM4 not stated): taken as the PCIe card; the SXM4 has the "
    "same 312 TFLOPS dense peak and 5 % more bandwidth (2,039 against 1,935 GB/s)",
    "RTX 3060": "scoreboard says 'RTX 3060': taken as the 12 GB card (the 8 GB one has 240 GB/s)",
    "RTX 3080": "scoreboard says 'RTX 3080': taken as the 10 GB card (the 12 GB one has 912 GB/s)",
    "RTX 4060 Ti": "memory variant not stated; the 8 and 16 GB cards share 288 GB/s and clocks",
}
# Apple #4167: willitrun keeps, per chip, the highest value of each column over the thread's GPU-core
# variants; the values are those of the largest-GPU row (M3 Ultra's row was filed under its 'apple-m3-8gb').
APPLE_CARDS = {
    "apple-m1-16gb": "Apple M1 16GB (8C CPU / 8C GPU)",
    "apple-m1-pro-16gb": "Apple M1 Pro 16GB (10C CPU / 16C GPU)",
    "apple-m1-max-32gb": "Apple M1 Max 64GB (10C CPU / 32C GPU)",
    "apple-m1-ultra-64gb": "Apple M1 Ultra 64GB (20C CPU / 64C GPU)",
    "apple-m2-16gb": "Apple M2 16GB (8C CPU / 10C GPU)",
    "apple-m2-pro-16gb": "Apple M2 Pro 16GB (12C CPU / 19C GPU)",
    "apple-m2-max-32gb": "Apple M2 Max 32GB (12C CPU / 38C GPU)",
    "apple-m2-ultra-64gb": "Apple M2 Ultra 192GB (24C CPU / 76C GPU)",
    "apple-m3-8gb": "Apple M3 Ultra 96GB (32C CPU / 80C GPU)",
    "apple-m3-pro-18gb": "Apple M3 Pro 18GB (12C CPU / 18C GPU)",
    "apple-m3-max-36gb": "Apple M3 Max 48GB (16C CPU / 40C GPU)",
    "apple-m4-pro-24gb": "Apple M4 Pro 24GB",
    "apple-m4-max-36gb": "Apple M4 Max 48GB (16C CPU / 40C GPU)",
}
APPLE_MODELS = {
    "F16": ("llama 7B F16", 13_477_634_048),  # 12.55 GiB as llama-bench prints it
    "Q8_0": ("llama 7B Q8_0", 7_161_110_528),  # 6.67 GiB
    "Q4_0": ("llama 7B Q4_0", 3_822_520_320),  # 3.56 GiB
}
L2_7B_PARAMS = 6_738_415_616
WILLITRUN = "smoothyy3/willitrun data/normalized/llama_cpp_cuda.jsonl"


def scoreboards(repo: Path) -> dict[str, list[dict]]:
    rev = head(repo)
    out: dict[str, list[dict]] = {}
    for line in git_show(repo, rev, "data/normalized/llama_cpp_cuda.jsonl").splitlines():
        r = json.loads(line)
        url = r["source"]["url"]
        setup = r["llm_setup"]
        n_prompt = setup["prompt_tokens"]
        if url.endswith("/4167"):
            card = APPLE_CARDS.get(r["device"])
            if card is None:
                continue
            quant = setup["quantization_format"]
            model, size = APPLE_MODELS[quant]
            out.setdefault("llamacpp-disc-4167-apple", []).append(
                row(
                    source=url,
                    source_id="llamacpp-disc-4167-apple",
                    backend="metal",
                    card=card,
                    model=model,
                    model_id="meta-llama/Llama-2-7b-hf",
                    weights=quant,
                    size_bytes=size,
                    params=L2_7B_PARAMS,
                    n_prompt=n_prompt,
                    n_gen=128 if not n_prompt else 0,
                    ngl=99,
                    tok_s=r["value"],
                    notes=f"summary table of #4167 (llama-bench -p 512 -n 128 -ngl 99, no FA, build varies by row: "
                    f"not carried) as parsed by {WILLITRUN} @ {rev[:8]}, which keeps the largest-GPU variant's "
                    f"value per chip; GPU core count from that variant",
                )
            )
            continue
        notes = dict(p.split("=", 1) for p in r["notes"].split("; ") if "=" in p)
        backend = notes["backend"]
        chip = notes["chip"]
        card = SCOREBOARD_CARDS[backend].get(chip)
        if card is None:
            continue
        fa = r["benchmark_id"].endswith("__fa")
        slug = {
            "CUDA": "llamacpp-disc-15013-cuda",
            "ROCm": "llamacpp-disc-15021-rocm",
            "Vulkan": "llamacpp-disc-10879-vulkan",
        }[backend]
        std = notes.get("stddev")
        extra = SCOREBOARD_NOTES.get(chip)
        out.setdefault(slug, []).append(
            row(
                source=url,
                source_id=slug,
                build=notes.get("commit"),
                backend=backend.lower(),
                card=card,
                model="llama 7B Q4_0",
                model_id="meta-llama/Llama-2-7b-hf",
                weights="Q4_0",
                size_bytes=APPLE_MODELS["Q4_0"][1],
                params=L2_7B_PARAMS,
                n_prompt=n_prompt,
                n_gen=128 if not n_prompt else 0,
                ngl=99,
                flash_attn=fa,
                tok_s=r["value"],
                tok_s_std=float(std.lstrip("±")) if std else None,
                notes=f"scoreboard row '{chip}' ({'with' if fa else 'without'} FA table; "
                f"llama-bench -ngl 99 -fa {int(fa)}, "
                f"pp512/tg128 defaults), as parsed by {WILLITRUN} @ {rev[:8]}; build = the row's commit"
                + (f"; {extra}" if extra else ""),
            )
        )
    return out


# ---- Tables read from GitHub issue and PR threads (transcribed by hand from the thread text) ----
# One entry per table: the settings every row of it shares, then (test, t/s, ±std) per row. "llama 7B" is LLaMA 1/2
# 7B (same shapes, 6.74 B parameters); "llama 8B" in mid-2024 PRs is Llama 3 8B (the Llama 3.1 config's shapes).
GIB_ = GIB
MIB = 1024**2
# TinyLlama 1.1B and Llama 3.2 3B in Q4_K_M as llama-bench prints them, the models of geerlingguy's tables
TINYLLAMA_Q4_K_M = {"model": "llama 1B Q4_K - Medium", "size_bytes": round(636.18 * MIB), "params": 1_100_000_000}
LLAMA32_3B_Q4_K_M = {"model": "llama 3B Q4_K - Medium", "size_bytes": round(1.87 * GIB_), "params": 3_210_000_000}

# the Cix CP8180's RAM copy, from the same reviewer's tinymembench run of that board
CIX_RAM = (
    "tinymembench C copy backwards (the C copy line is cut in the stored excerpt; the two agree within 2 % on every "
    "other machine in those reviews) 13887.3 MB/s × 2 (read + written, as kvscope's copy counts it), "
    "https://github.com/geerlingguy/sbc-reviews/issues/103"
)


def ubatch_sweep(test: str, rates: list[tuple[int, float]], **extra) -> list[tuple]:
    """A PR compare table's micro-batch sweep of one llama-bench test: (n_ubatch, t/s) pairs as HAND rows (`extra`:
    fields of the rows, e.g. another model of the table)."""
    return [(test, v, None, {"n_ubatch": u, **extra}) for u, v in rates]


HAND = [
    dict(
        slug="llamacpp-pr-7676-mmq-tensor-cores",
        url="https://github.com/ggml-org/llama.cpp/pull/7676",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="llama 8B Q4_0",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        ngl=99,
        notes="PR column (cuda-ptx-mma-7, merged) of the compare table; master build not given; "
        "n_ubatch = the table's microbatch size",
        rows=ubatch_sweep(
            "pp512", [(16, 1937.21), (32, 3427.61), (64, 5420.06), (128, 7443.66), (256, 9601.53), (512, 10358.75)]
        ),
    ),
    dict(
        slug="llamacpp-pr-7860-mmq-k-quants",
        url="https://github.com/ggml-org/llama.cpp/pull/7860",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="llama 8B Q4_K_S",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        ngl=99,
        notes="PR column (cuda-ptx-mma-12, merged) of the compare table; n_ubatch = the table's microbatch size",
        rows=ubatch_sweep(
            "pp2048",
            [
                (16, 1946.01),
                (32, 3358.03),
                (64, 5349.26),
                (128, 6901.00),
                (256, 8555.10),
                (512, 9278.55),
                (1024, 9265.84),
                (2048, 8655.44),
            ],
        ),
    ),
    dict(
        slug="llamacpp-pr-7921-mmq-q2k-q3k",
        url="https://github.com/ggml-org/llama.cpp/pull/7921",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="llama 8B Q2_K_M",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        ngl=99,
        notes="PR column (cuda-ptx-mma-17, merged) of the compare table; n_ubatch = the table's microbatch size",
        rows=ubatch_sweep(
            "pp2048",
            [
                (16, 1702.40),
                (32, 2689.24),
                (64, 4120.64),
                (128, 5635.31),
                (256, 7022.20),
                (512, 7639.35),
                (1024, 7755.40),
                (2048, 7083.78),
            ],
        ),
    ),
    dict(
        slug="llamacpp-pr-17505-mma-fa",
        url="https://github.com/ggml-org/llama.cpp/pull/17505",
        backend="cuda",
        card="GeForce RTX 3090 24GB",
        model="llama 8B Q4_0",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        ngl=99,
        flash_attn=True,
        notes="PR column (277014f50) of the compare table; prefill of 512 tokens on a 32768-token cache; "
        "n_ubatch = the table's microbatch size",
        rows=[
            *ubatch_sweep(
                "pp512 @ d32768",
                [
                    (2, 170.31),
                    (4, 303.46),
                    (8, 439.54),
                    (16, 874.15),
                    (32, 1194.99),
                    (64, 1495.43),
                    (128, 1617.77),
                    (256, 1697.92),
                    (512, 1448.12),
                ],
            ),
            ("pp512 @ d32768", 102.76, None, {"n_ubatch": 1, "card": "GeForce RTX 4090 24GB"}),
        ],
    ),
    # the same PR's V100 table (its own header in the excerpt: GPU | Model | Microbatch size | Test | t/s master |
    # t/s 277014f50 | Speedup), read from the search index's excerpt of turn 0; the ub 512 row is cut there
    dict(
        slug="llamacpp-pr-17505-mma-fa",
        url="https://github.com/ggml-org/llama.cpp/pull/17505",
        backend="cuda",
        card="V100 32GB PCIe",
        model="deepseek2 16B Q4_0",
        model_id="deepseek-ai/DeepSeek-V2-Lite",
        ngl=99,
        flash_attn=True,
        notes="PR column (277014f50) of the V100-PCIE-32GB compare table (GPU | Model | Microbatch size | Test | "
        "t/s master | t/s 277014f50 | Speedup); prefill of 512 tokens on a 32768-token cache; n_ubatch = the table's "
        "microbatch size; 'deepseek2 16B' read as DeepSeek-V2-Lite as elsewhere in the corpus; size and params not "
        "printed; read from the search index's excerpt of the thread (turn 0), which ends inside the ub 512 row "
        "(not taken)",
        rows=ubatch_sweep(
            "pp512 @ d32768",
            [
                (1, 89.23),
                (2, 86.50),
                (4, 134.50),
                (8, 204.43),
                (16, 274.82),
                (32, 340.50),
                (64, 312.07),
                (128, 371.18),
                (256, 408.51),
            ],
        ),
    ),
    # PR #24127's V100 rows (its P40 and RX 6800 rows are files kept as written, not rebuilt here): the excerpts
    # start below the table's header; their column layout is that of the same turn's P40 and RTX 5090 rows
    dict(
        slug="llamacpp-pr-24127-mmq-kernel-config-v100",
        url="https://github.com/ggml-org/llama.cpp/pull/24127",
        backend="cuda",
        card="V100 32GB PCIe",
        model="llama 8B Q5_0",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        build="6838c6437",
        ngl=99,
        notes="PR #24127 (merged): PR column (t/s 6838c6437) of JohannesGaessler's compare table (GPU | Model | "
        "Microbatch size | Test | t/s dc71236b6 | t/s 6838c6437 | Speedup; a refactor, speedup 1.00 but IQ4_XS at "
        "ub 512, 0.94) at turn 1, its 'V100-PCIE-32GB' rows (the excerpts start below the header: columns as the same "
        "table's P40 rows, llamacpp-pr-24127-mmq-kernel-config, whose layout they share); n_ubatch = the table's "
        "microbatch size; FA and n_batch not printed; 'llama 8B' read as Llama 3/3.1 8B (same shapes); size and "
        "params not printed; read from three of the search index's excerpts of the thread (IQ2_S to IQ2_XXS, IQ4_NL "
        "to IQ4_XS, Q5_0 to Q5_1), which show only part of the table: rows cut by an excerpt's end not taken",
        rows=[
            *ubatch_sweep("pp512", [(256, 1580.72), (512, 2463.23)], model="llama 8B IQ2_S - 2.5 bpw"),
            *ubatch_sweep(
                "pp512",
                [(16, 647.40), (32, 992.33), (64, 484.88), (128, 906.31), (256, 1647.17), (512, 2555.80)],
                model="llama 8B IQ2_XS - 2.3125 bpw",
            ),
            *ubatch_sweep("pp512", [(16, 703.24)], model="llama 8B IQ2_XXS - 2.0625 bpw"),
            *ubatch_sweep("pp512", [(128, 1182.79), (256, 2087.94), (512, 2944.20)], model="llama 8B IQ4_NL - 4.5 bpw"),
            *ubatch_sweep(
                "pp512",
                [(16, 747.71), (32, 1111.41), (64, 643.94), (128, 1176.64), (256, 2030.15), (512, 2787.97)],
                model="llama 8B IQ4_XS - 4.25 bpw",
            ),
            *ubatch_sweep("pp512", [(64, 824.35), (128, 1472.49), (256, 2421.77), (512, 3326.19)]),
            *ubatch_sweep(
                "pp512",
                [(16, 719.50), (32, 1063.43), (64, 822.75), (128, 1464.05), (256, 2412.41)],
                model="llama 8B Q5_1",
            ),
        ],
    ),
    dict(
        slug="llamacpp-pr-4766-backend-sched",
        url="https://github.com/ggml-org/llama.cpp/pull/4766",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="llama 7B F16",
        model_id="meta-llama/Llama-2-7b-hf",
        ngl=99,
        params=6_740_000_000,
        notes="ggerganov's llama-bench table (models/codellama-7b: CodeLlama 7B, Llama 2 7B shapes, "
        "32016-token vocabulary)",
        rows=[
            ("pp512", 11048.22, 269.74, {}),
            ("tg128", 61.03, 0.07, {}),
            ("pp512", 7664.00, 108.83, {"model": "llama 7B Q8_0"}),
            ("tg128", 98.13, 0.07, {"model": "llama 7B Q8_0"}),
            ("pp512", 7979.85, 114.18, {"model": "llama 7B Q4_0"}),
        ],
    ),
    dict(
        slug="llamacpp-pr-4766-backend-sched-jg",
        url="https://github.com/ggml-org/llama.cpp/pull/4766",
        backend="cuda",
        card="GeForce RTX 3090 24GB",
        model="llama 7B F16",
        model_id="meta-llama/Llama-2-7b-hf",
        ngl=99,
        notes="JohannesGaessler's compare table, sl/backend-sched column (merged), main GPU 0 "
        "(the GPU column names the card; other visible GPUs not stated)",
        rows=[
            ("pp512", 4407.44, None, {}),
            ("tg128", 48.09, None, {}),
            ("pp512", 3462.77, None, {"model": "llama 7B Q2_K"}),
            ("tg128", 91.62, None, {"model": "llama 7B Q2_K"}),
            ("pp512", 3409.98, None, {"model": "llama 7B Q3_K_S"}),
            ("tg128", 85.45, None, {"model": "llama 7B Q3_K_S"}),
            ("pp512", 3510.53, None, {"model": "llama 7B Q4_0"}),
            ("tg128", 119.90, None, {"model": "llama 7B Q4_0"}),
        ]
        + [
            (t, v, None, {"model": m, "card": "Tesla P40 24GB"})
            for m, t, v in [
                ("llama 7B Q2_K", "tg128", 33.36),
                ("llama 7B Q3_K_S", "pp512", 592.36),
                ("llama 7B Q3_K_S", "tg128", 30.74),
                ("llama 7B Q4_0", "pp512", 934.74),
                ("llama 7B Q4_0", "tg128", 56.29),
                ("llama 7B Q4_1", "pp512", 934.87),
                ("llama 7B Q4_1", "tg128", 55.41),
                ("llama 7B Q4_K_S", "pp512", 870.33),
                ("llama 7B Q4_K_S", "tg128", 53.71),
                ("llama 7B Q5_0", "pp512", 880.04),
                ("llama 7B Q5_0", "tg128", 48.14),
            ]
        ],
    ),
    dict(
        slug="llamacpp-pr-15451-mxfp4-byte-perm",
        url="https://github.com/ggml-org/llama.cpp/pull/15451",
        backend="cuda",
        card="RTX A5000 24GB",
        n_devices=2,
        model="gpt-oss 20B MXFP4 MoE",
        model_id="openai/gpt-oss-20b",
        build="b6263 (b730706a)",
        size_bytes=round(11.27 * GIB_),
        params=20_910_000_000,
        n_batch=4096,
        n_ubatch=4096,
        flash_attn=True,
        threads=1,
        ngl=99,
        notes="master run of llama-bench -t 1 -fa 1 -b 4096 -ub 4096 -p 2048; two A5000s found, default layer split",
        rows=[("pp2048", 3830.22, 6.69, {}), ("tg128", 138.25, 0.17, {})],
    ),
    dict(
        slug="llamacpp-pr-3084-metal-pp",
        url="https://github.com/ggml-org/llama.cpp/pull/3084",
        backend="metal",
        card="Apple M2 Ultra 192GB (24C CPU / 76C GPU)",
        model="llama 7B F16",
        model_id="meta-llama/Llama-2-7b-hf",
        threads=4,
        ngl=99,
        notes="ggerganov's M2 Ultra (76-core GPU, his machine in #4167), PR column; "
        "printed as 'LLaMA 7B mostly <type>'",
        rows=[
            ("pp512", v, sd, {"model": f"llama 7B {q}", "size_bytes": round(g * GIB_)})
            for q, g, v, sd in [
                ("F16", 12.55, 1265.30, 1.54),
                ("Q8_0", 6.67, 1142.84, 0.84),
                ("Q4_0", 3.56, 1164.00, 1.86),
                ("Q4_1", 3.95, 1161.63, 1.08),
                ("Q6_K", 5.15, 977.56, 0.74),
                ("Q5_K - Medium", 4.45, 976.31, 1.51),
                ("Q5_K - Small", 4.33, 977.60, 0.25),
                ("Q4_K - Medium", 3.80, 1028.20, 0.39),
            ]
        ],
    ),
    dict(
        slug="llamacpp-pr-2959-metal-opt",
        url="https://github.com/ggml-org/llama.cpp/pull/2959",
        backend="metal",
        card="Apple M2 Max 32GB (12C CPU / 30C GPU)",
        model="llama 7B Q4_0",
        model_id="meta-llama/Llama-2-7b-hf",
        ngl=99,
        notes="ikawrakow's 30-core M2 Max, PR column; memory size not stated",
        rows=[
            (t, v, sd, {})
            for t, v, sd in [
                ("tg32", 62.57, 0.08),
                ("tg64", 62.09, 0.08),
                ("tg128", 61.71, 0.05),
                ("tg256", 59.46, 0.15),
                ("pp32", 388.64, 1.47),
                ("pp64", 468.87, 1.91),
                ("pp128", 484.74, 0.49),
                ("pp256", 479.20, 0.55),
                ("pp512", 433.35, 0.17),
                ("pp1024", 352.67, 0.04),
            ]
        ],
    ),
    dict(
        slug="geerlingguy-ai-benchmarks-48-m1-ultra",
        url="https://github.com/geerlingguy/ai-benchmarks/issues/48",
        backend="metal",
        card="Apple M1 Ultra 128GB (20C CPU / 64C GPU)",
        **TINYLLAMA_Q4_K_M,
        model_id="TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        build="b7825 (e9fd8dc)",
        threads=16,
        notes="TinyLlama 1.1B (model_id: config in corpus/configs/); macOS 14.8.3; Metal,BLAS",
        rows=[
            ("pp512", 5587.84, 12.06, {}),
            ("pp4096", 4381.75, 0.41, {}),
            ("tg128", 242.56, 3.63, {}),
            (
                "pp512",
                2142.59,
                15.24,
                {
                    **LLAMA32_3B_Q4_K_M,
                    "model_id": "meta-llama/Llama-3.2-3B-Instruct",
                    "notes": "Llama-3.2-3B-Instruct (model_id: config in corpus/configs/); Metal,BLAS",
                },
            ),
        ],
    ),
    dict(
        slug="geerlingguy-ai-benchmarks-46-rtx-2080-ti",
        sbc_host=True,
        url="https://github.com/geerlingguy/ai-benchmarks/issues/46",
        backend="cuda",
        card="GeForce RTX 2080 Ti 11GB",
        model="llama 13B Q4_K - Medium",
        model_id="meta-llama/Llama-2-13b-hf",
        build="b7474 (f9ec8858e)",
        size_bytes=round(7.33 * GIB_),
        params=13_020_000_000,
        flash_attn=True,
        ngl=99,
        notes="Llama 2 13B (model_id: config in corpus/configs/); host Raspberry Pi CM5 16GB; llama-bench -fa 1 -mmp 0 "
        "-r 2",
        rows=[("pp512", 1493.64, 0.53, {})],
    ),
    dict(
        slug="geerlingguy-ai-benchmarks-52-xps13",
        url="https://github.com/geerlingguy/ai-benchmarks/issues/52",
        backend="cpu",
        card="Dell XPS 13 (DX13260) CPU",
        **TINYLLAMA_Q4_K_M,
        model_id="TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        build="b10252 (fe2adf0e7)",
        threads=1,
        ram_copy_gb_s=23.76,
        ram_source="tinymembench C copy 11881.8 MB/s × 2 (read + written, as kvscope's copy counts it), "
        "https://github.com/geerlingguy/sbc-reviews/issues/111",
        notes="llama-bench defaults (micro-batch and flash attention not printed); the table prints 1 thread; the CPU "
        "model is not in the stored excerpt",
        rows=[
            ("pp512", 53.04, 0.68, {}),
            ("pp4096", 40.22, 0.01, {}),
            ("tg128", 24.80, 0.03, {}),
        ]
        + [
            (
                t,
                v,
                sd,
                {
                    **LLAMA32_3B_Q4_K_M,
                    "model_id": "meta-llama/Llama-3.2-3B-Instruct",
                },
            )
            for t, v, sd in [("pp512", 18.20, 0.07), ("pp4096", 15.00, 0.02)]
        ],
    ),
    dict(
        slug="geerlingguy-ai-benchmarks-cpu",
        url="https://github.com/geerlingguy/ai-benchmarks/issues/51",
        backend="cpu",
        card="Cix CP8180",
        **TINYLLAMA_Q4_K_M,
        build="b8664 (9c699074c)",
        model_id="TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        threads=12,
        ram_copy_gb_s=27.77,
        ram_source=CIX_RAM,
        notes="TinyLlama 1.1B (model_id: config in corpus/configs/); MetaComputing Framework 13 mainboard",
        rows=[
            ("pp512", 194.05, 0.65, {}),
            ("pp4096", 115.50, 0.0, {}),
            ("tg128", 40.39, 0.15, {}),
            (
                "pp512",
                81.27,
                0.06,
                {
                    **LLAMA32_3B_Q4_K_M,
                    "model_id": "meta-llama/Llama-3.2-3B-Instruct",
                    "notes": "Llama-3.2-3B-Instruct (model_id: config in corpus/configs/)",
                },
            ),
        ]
        + [
            (
                t,
                v,
                sd,
                {
                    "url": "https://github.com/geerlingguy/ai-benchmarks/issues/53",
                    "card": "Intel Core i5-4278U",
                    "model_id": "meta-llama/Llama-3.2-3B-Instruct",
                    "ram_copy_gb_s": None,  # no RAM copy published for this machine: out of the CPU check
                    "ram_source": None,
                    "threads": 2,
                    "build": "b10334 (936918514)",
                    **LLAMA32_3B_Q4_K_M,
                    "notes": "Llama-3.2-3B-Instruct (model_id: config in corpus/configs/); 2014 MacBook Pro, "
                    "DDR3L-1600",
                },
            )
            for t, v, sd in [("pp512", 17.70, 0.08), ("pp4096", 14.06, 0.04), ("tg128", 7.68, 0.03)]
        ]
        + [
            (
                t,
                v,
                sd,
                {
                    "url": "https://github.com/geerlingguy/sbc-reviews/issues/107",
                    "card": "Intel Core i3-1315U",
                    "model_id": "meta-llama/Llama-3.2-3B-Instruct",
                    "ram_copy_gb_s": 18.39,
                    "ram_source": "tinymembench C copy 9196.8 MB/s × 2 (read + written, as kvscope's copy counts it), "
                    "https://github.com/geerlingguy/sbc-reviews/issues/107",
                    "threads": 2,
                    **LLAMA32_3B_Q4_K_M,
                    "notes": "Llama-3.2-3B-Instruct (model_id: config in corpus/configs/); Framework 12; build not "
                    "in the thread excerpt",
                },
            )
            for t, v, sd in [("pp512", 28.67, 0.18), ("pp4096", 23.91, 0.04), ("tg128", 11.05, 0.08)]
        ],
    ),
]

# CUDA MoE runs from llama.cpp PR compare tables (the merged/PR column; JohannesGaessler's and am17an's tables, read
# from the threads' text as the search index holds them). Prompt rows only from micro-batches of 16 or more tokens:
# ggml-cuda multiplies routed experts of up to 8 tokens with its mat-vec kernels (MMVQ_MAX_BATCH_SIZE), a path
# kvscope times as a decode step. Builds are the PR's commit; llama-bench's default -fa auto puts FA on for CUDA.
MOE_NOTES = "PR column of the compare table; n_ubatch = the table's microbatch size; FA at llama-bench's default"
HAND += [
    dict(
        slug="llamacpp-pr-20586-fa-stream-k",
        url="https://github.com/ggml-org/llama.cpp/pull/20586",
        backend="cuda",
        card="GeForce RTX 3090 24GB",
        model="gpt-oss 20B MXFP4 MoE",
        model_id="openai/gpt-oss-20b",
        build="cc1232a41",
        ngl=99,
        flash_attn=True,
        notes=MOE_NOTES + " (auto: on)",
        rows=ubatch_sweep(
            "pp512", [(16, 815.90), (32, 1227.84), (64, 1663.09), (128, 2018.82), (256, 3047.10), (512, 4702.81)]
        ),
    ),
    dict(
        slug="llamacpp-pr-22298-mmq-stream-k",
        url="https://github.com/ggml-org/llama.cpp/pull/22298",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="qwen35moe 35B.A3B Q4_0",
        model_id="Qwen/Qwen3.5-35B-A3B",
        build="3d1bbd581",
        ngl=99,
        flash_attn=True,
        notes=MOE_NOTES + " (auto: on); the single-GPU table's header is not in the stored excerpt, its columns "
        "read as the same comment's tensor-parallel table (master, then 3d1bbd581)",
        rows=ubatch_sweep(
            "pp2048",
            [
                (64, 2930.05),
                (128, 3694.61),
                (256, 5782.42),
                (512, 7999.83),
                (1024, 9559.98),
                (2048, 10026.03),
            ],
        ),
    ),
    dict(
        slug="llamacpp-pr-15631-fuse-add-rms",
        url="https://github.com/ggml-org/llama.cpp/pull/15631",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="gpt-oss 20B MXFP4 MoE",
        model_id="openai/gpt-oss-20b",
        build="b64ba1cc8",
        ngl=99,
        flash_attn=None,
        notes="PR column (b64ba1cc8, merged 2025-08) of the compare table; n_ubatch = the table's microbatch size; "
        "FA not shown (llama-bench's -fa 0 default then); rows past the excerpt not taken",
        rows=ubatch_sweep("pp4096", [(1024, 11094.10), (2048, 10565.77), (4096, 8984.82)])
        + [
            ("pp4096", v, None, {"n_ubatch": u, "model": "qwen3moe 30B.A3B Q4_0", "model_id": "Qwen/Qwen3-30B-A3B"})
            for u, v in [(16, 959.90), (32, 1556.32), (64, 2508.44)]
        ],
    ),
    dict(
        slug="llamacpp-pr-15525-mmq-moe-device",
        url="https://github.com/ggml-org/llama.cpp/pull/15525",
        backend="cuda",
        card="GeForce RTX 3090 24GB",
        model="deepseek2 16B Q4_0",
        model_id="deepseek-ai/DeepSeek-V2-Lite",
        # the compare table has no size column: 8.29 GiB and 15.71 B are how llama-bench prints this GGUF elsewhere
        size_bytes=round(8.29 * GIB_),
        params=15_710_000_000,
        build="cuda-mmq-moe-device-4",
        ngl=99,
        flash_attn=None,
        notes="PR column (cuda-mmq-moe-device-4, merged) of the compare table; n_ubatch = the table's microbatch "
        "size; the ub 512 row's PR figure is past the excerpt; FA not shown (llama-bench's -fa 0 default then)",
        rows=ubatch_sweep("pp512", [(16, 784.29), (32, 1209.58), (64, 1802.95), (128, 2253.15), (256, 3628.64)]),
    ),
    dict(
        slug="llamacpp-pr-16834-set-rows-fastdiv",
        url="https://github.com/ggml-org/llama.cpp/pull/16834",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="gpt-oss 20B MXFP4 MoE",
        model_id="openai/gpt-oss-20b",
        build="set-row",
        ngl=99,
        flash_attn=True,
        notes="PR column (set-row, merged 2025-10) of the compare table; FA at llama-bench's default (auto: on)",
        rows=[("tg128", 187.25, None, {}), ("tg256", 187.19, None, {}), ("tg512", 184.45, None, {})]
        + [
            (t, v, None, {"model": "qwen3moe 30B.A3B Q4_0", "model_id": "Qwen/Qwen3-30B-A3B"})
            for t, v in [("tg128", 163.48), ("tg256", 163.33), ("tg512", 160.86)]
        ],
    ),
    dict(
        slug="llamacpp-pr-16649-topk-moe-gpt-oss",
        url="https://github.com/ggml-org/llama.cpp/pull/16649",
        backend="cuda",
        card="GeForce RTX 4090 24GB",
        model="gpt-oss 20B MXFP4 MoE",
        model_id="openai/gpt-oss-20b",
        build="cuda_gpt_oss_opt",
        ngl=99,
        flash_attn=True,
        notes="PR column (cuda_gpt_oss_opt, merged 2025-10) of the compare table ('Performance on a 4090'); FA at "
        "llama-bench's default (auto: on)",
        rows=[("tg32", 177.68, None, {}), ("tg64", 175.36, None, {}), ("tg128", 173.33, None, {})],
    ),
]

# geerlingguy/ai-benchmarks GPU threads (Vulkan, one card, -ngl 99), as far as the search index's excerpts of them
# reach (each is cut after about 2,000 characters; nothing past a cut is taken). Tables on cards gpus.csv lacks
# (Radeon RX 9070 XT, AI PRO R9700, RX 580, RX 470, Arc A310: no vendor figures at hand) and an RX 7900 XT table whose
# device list also holds the host's V3D GPU (#23) are left out. Combined pp+tg tests are never taken.
GEERLING_CMD = "llama-bench -n 128 -p 512,4096 -pg 4096,128 -ngl 99 -r 2"
TINYLLAMA_ID = {"model_id": "TinyLlama/TinyLlama-1.1B-Chat-v1.0"}
LLAMA32_3B_ID = {"model_id": "meta-llama/Llama-3.2-3B-Instruct"}
# The same PR's first table (turn 1, JohannesGaessler): llama 8B in ~20 weight types, pp2048 at micro-batches of 16 to
# 2,048 tokens on five cards, build 1b2cf9551 (the PR column). The search index holds the thread in passages and
# shows only each passage's first rows, so these are the llama 8B rows of the passages it showed (none picked by
# how they check); the rest of the table is not here. The granitemoe 3B rows have no config here.
PR_22298_CARDS = {  # card: {llama-bench type: [(micro-batch, t/s), ...]}
    "Tesla P40 24GB": {
        "IQ3_S - 3.4375 bpw": [(2048, 811.23)],
        "IQ3_S mix - 3.66 bpw": [(16, 346.77), (32, 505.82), (64, 619.16), (128, 711.20), (256, 774.08),
            (512, 793.16), (1024, 807.82), (2048, 815.64)],
        "Q2_K_M": [(16, 334.54), (32, 466.49), (64, 602.04), (128, 674.66), (256, 726.21), (512, 746.11),
            (1024, 763.38), (2048, 768.56)],
        "Q3_K_S": [(16, 352.71)],
    },
    "GeForce RTX 3090 24GB": {
        "IQ1_S - 1.5625 bpw": [(64, 2835.08), (128, 3266.44), (256, 3765.01), (512, 3958.04), (1024, 4074.99),
            (2048, 4042.52)],
        "IQ2_S - 2.5 bpw": [(16, 1178.22), (32, 1811.11), (64, 2593.26)],
        "Q5_0": [(512, 4128.28), (1024, 4180.06), (2048, 4112.45)],
        "Q5_1": [(16, 1209.10), (32, 1968.98), (64, 2722.52), (128, 3208.91), (256, 3676.80), (512, 3866.58)],
    },
    "GeForce RTX 4090 24GB": {
        "IQ3_S mix - 3.66 bpw": [(2048, 9770.41)],
        "IQ3_XS - 3.3 bpw": [(16, 1886.35), (32, 3297.22), (64, 5936.03), (128, 7886.36), (256, 10431.51),
            (512, 11638.58), (1024, 11140.86), (2048, 9848.80)],
        "Q3_K_S": [(16, 2165.35), (32, 3656.20), (64, 5901.24), (128, 7840.05), (256, 9716.96), (512, 10603.18),
            (1024, 10698.36), (2048, 10260.99)],
        "Q4_0": [(16, 2149.02)],
        "Q5_1": [(32, 3385.18), (64, 5730.07), (128, 7891.63), (256, 10224.32), (512, 11330.23), (1024, 11498.30),
            (2048, 10806.31)],
        "Q5_K_S": [(16, 1881.09), (32, 3488.51)],
    },
    "GeForce RTX 5090 32GB": {
        "IQ2_S - 2.5 bpw": [(64, 5535.29), (128, 6843.69), (256, 8878.40), (512, 10589.79), (1024, 10810.38),
            (2048, 9874.24)],
        "IQ2_XS - 2.3125 bpw": [(16, 2481.68), (32, 3800.38), (64, 5490.09)],
        "IQ3_XS - 3.3 bpw": [(128, 7679.79), (256, 10185.14), (512, 12526.99), (1024, 12824.45), (2048, 11560.94)],
        "IQ3_XXS - 3.0625 bpw": [(16, 2426.41), (32, 3865.49), (64, 5857.38), (128, 7518.44)],
    },
    "V100 32GB PCIe": {
        "IQ3_XS - 3.3 bpw": [(2048, 3486.46)],
        "IQ3_XXS - 3.0625 bpw": [(16, 617.23), (32, 945.98), (64, 470.41), (128, 854.71), (256, 1529.67),
            (512, 2303.91), (1024, 3029.16), (2048, 3446.84)],
        "Q4_0": [(16, 785.83), (32, 1164.31), (64, 640.84), (128, 1173.07), (256, 2002.62), (512, 3001.87),
            (1024, 3633.81), (2048, 4012.23)],
        "Q4_1": [(16, 797.66)],
        "Q5_K_S": [(32, 997.36), (64, 619.31), (128, 1183.14), (256, 2075.26), (512, 2939.96), (1024, 3634.38),
            (2048, 3997.54)],
        "Q6_K": [(16, 646.12), (32, 947.05)],
    },
}  # fmt: skip
HAND += [
    dict(
        slug="llamacpp-pr-22298-mmq-stream-k",
        url="https://github.com/ggml-org/llama.cpp/pull/22298",
        backend="cuda",
        card=card,
        model="llama 8B Q4_0",
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        build="1b2cf9551",
        ngl=99,
        flash_attn=True,
        notes="PR column (1b2cf9551) of the first compare table; n_ubatch = the table's microbatch size; FA at "
        "llama-bench's default (auto: on); rows of the passages the search index showed",
        rows=[row for t, rates in sweeps.items() for row in ubatch_sweep("pp2048", rates, model=f"llama 8B {t}")],
    )
    for card, sweeps in PR_22298_CARDS.items()
]

HAND += [
    dict(
        slug="geerlingguy-ai-benchmarks-43-rtx-4090",
        url="https://github.com/geerlingguy/ai-benchmarks/issues/43",
        backend="vulkan",
        card="GeForce RTX 4090 24GB",
        **TINYLLAMA_Q4_K_M,
        **TINYLLAMA_ID,
        build="b7340 (086a63e3a)",
        ngl=99,
        notes="host Intel Core Ultra 265K PC, Ubuntu 25.10 (comment of 2025-12-09); the device and command lines are "
        "past the excerpt (the tests are those of the thread's usual '" + GEERLING_CMD + "')",
        rows=[
            (
                "pp512",
                10802.35,
                9881.63,
                {
                    "notes": "SUSPECT: its ± is 91 % of the mean (the two repetitions disagree), and it reads "
                    "below the same setup's pp4096 (18,709.17)"
                },
            ),
            ("pp4096", 18709.17, 59.99, {}),
            ("tg128", 762.37, 4.41, {}),
            ("pp512", 20323.29, 8.21, {**LLAMA32_3B_Q4_K_M, **LLAMA32_3B_ID}),
        ],
    ),
    dict(
        slug="geerlingguy-ai-benchmarks-40-rtx-3060",
        sbc_host=True,
        url="https://github.com/geerlingguy/ai-benchmarks/issues/40",
        backend="vulkan",
        card="GeForce RTX 3060 12GB",
        **TINYLLAMA_Q4_K_M,
        **TINYLLAMA_ID,
        build="b7293 (933414c0b)",
        ngl=99,
        notes="host Raspberry Pi CM5 16GB, Pi OS Trixie, NVIDIA's open kernel module (comment of 2025-12-06); the "
        "device and command lines are past the excerpt",
        rows=[("pp512", 6744.18, 179.28, {}), ("pp4096", 3981.80, 0.91, {}), ("tg128", 279.05, 0.37, {})],
    ),
    dict(
        slug="geerlingguy-ai-benchmarks-27-arc-pro-b50",
        sbc_host=True,
        url="https://github.com/geerlingguy/ai-benchmarks/issues/27",
        backend="vulkan",
        card="Intel Arc Pro B50 16GB",
        **LLAMA32_3B_Q4_K_M,
        **LLAMA32_3B_ID,
        build="b6715 (12bbc3fa)",
        ngl=99,
        notes="host Raspberry Pi 500+ (2025-10-10); ggml_vulkan: Intel(R) Graphics (BMG G21) | fp16: 1 | int dot: 1 | "
        "matrix cores: KHR_coopmat (the card is the issue title's; BMG G21 is also the B580's die); "
        + GEERLING_CMD
        + "; the excerpt ends after pp512",
        rows=[("pp512", 489.15, 0.33, {})],
    ),
]

# Metal runs of MoE models from ggerganov's llama.cpp PR tables on an M2 Ultra (the machine the thread heads its
# table with), as far as the search index's excerpts reach: Qwen3-Next-80B-A3B by prompt length (1 to 2,048 tokens),
# Qwen3-Coder-30B-A3B and Qwen2.5-Coder-7B to 16K-token prompts, DeepSeek-V2-Lite. Tables whose Mac is not named,
# and models without a config here (Mixtral, DeepSeek-V4), are left out.
M2_ULTRA = "Apple M2 Ultra 192GB (24C CPU / 76C GPU)"
QWEN25_CODER_7B = "Qwen/Qwen2.5-Coder-7B-Instruct"
QWEN25_CODER_NOTE = "dense model (Qwen2.5-Coder-7B; the Instruct config's shapes) in the same table"
HAND += [
    dict(
        slug="llamacpp-pr-19375-optimizing-qwen3next-graph",
        url="https://github.com/ggml-org/llama.cpp/pull/19375",
        backend="metal",
        card=M2_ULTRA,
        model="qwen3next 80B.A3B Q4_0",
        model_id="Qwen/Qwen3-Next-80B-A3B-Instruct",
        build="gg/qwen3-next-opt",
        size_bytes=None,
        params=None,
        flash_attn=None,
        ngl=99,
        notes=(
            "PR column (t/s gg/qwen3-next-opt) of ggerganov's compare table in the PR description "
            "(2026-02-05), headed 'M2 Ultra:'; baseline column was b7946. Command line / fa / ubatch "
            "not shown. Q4_0 rows and Q4_K_M pp1 from the issues-corpus excerpt; remaining rows from a "
            "stored copy of the PR page (pages corpus, hdoplus.com proxy), which was cut right after "
            "Q8_0 tg32 (further rows, if any, and the DGX Spark table not seen). Third-party write-ups "
            "call the model Qwen3-Coder-Next (same qwen3next 80B.A3B architecture)."
        ),
        rows=[
            ("pp1", 51.99, None, {}),
            ("pp2", 57.55, None, {}),
            ("pp3", 78.88, None, {}),
            ("pp4", 100.71, None, {}),
            ("pp5", 119.23, None, {}),
            ("pp6", 140.88, None, {}),
            ("pp7", 156.66, None, {}),
            ("pp8", 176.36, None, {}),
            ("pp512", 1125.73, None, {}),
            ("pp2048", 1352.31, None, {}),
            ("tg32", 50.39, None, {}),
            ("pp1", 46.47, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp2", 52.84, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp3", 72.38, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp4", 87.54, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp5", 104.15, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp6", 121.09, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp7", 131.26, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp8", 145.61, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp512", 1001.46, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp2048", 1232.47, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("tg32", 46.43, None, {"model": "qwen3next 80B.A3B Q4_K_M"}),
            ("pp1", 43.98, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp2", 50.97, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp3", 67.62, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp4", 83.92, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp5", 95.88, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp6", 109.19, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp7", 118.99, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp8", 130.04, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp512", 1113.64, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("pp2048", 1338.82, None, {"model": "qwen3next 80B.A3B Q8_0"}),
            ("tg32", 43.78, None, {"model": "qwen3next 80B.A3B Q8_0"}),
        ],
    ),
    dict(
        slug="llamacpp-pr-15616-presets-qwen3-fim",
        url="https://github.com/ggml-org/llama.cpp/pull/15616",
        backend="metal",
        card=M2_ULTRA,
        model="qwen3moe 30B.A3B Q8_0",
        model_id="Qwen/Qwen3-30B-A3B",
        build=None,
        size_bytes=round(30.25 * GIB_),
        params=None,
        flash_attn=True,
        ngl=99,
        notes=(
            "Plain llama-bench table in the PR description (ggerganov, 2025-08-27), headed 'Perf M2 Ultra:'; "
            "backend column 'Metal'; no params column. Model is Qwen3-Coder-30B-A3B (same arch). "
            "Table cut by the excerpt after the third qwen2 7B row (qwen2 7B tg128 and the build line not seen)."
        ),
        rows=[
            ("pp512", 2045.19, 10.70, {"n_ubatch": 2048}),
            ("pp2048", 2272.56, 3.49, {"n_ubatch": 2048}),
            ("pp16384", 1022.81, 0.18, {"n_ubatch": 2048}),
            ("tg128", 76.31, 0.06, {"n_ubatch": 2048}),
            (
                "pp512",
                1419.54,
                1.00,
                {
                    "n_ubatch": 2048,
                    "model": "qwen2 7B Q8_0",
                    "model_id": QWEN25_CODER_7B,
                    "size_bytes": round(7.54 * GIB_),
                    "notes": QWEN25_CODER_NOTE,
                },
            ),
            (
                "pp2048",
                1470.14,
                0.30,
                {
                    "n_ubatch": 2048,
                    "model": "qwen2 7B Q8_0",
                    "model_id": QWEN25_CODER_7B,
                    "size_bytes": round(7.54 * GIB_),
                    "notes": QWEN25_CODER_NOTE,
                },
            ),
            (
                "pp16384",
                1037.44,
                0.24,
                {
                    "n_ubatch": 2048,
                    "model": "qwen2 7B Q8_0",
                    "model_id": QWEN25_CODER_7B,
                    "size_bytes": round(7.54 * GIB_),
                    "notes": QWEN25_CODER_NOTE,
                },
            ),
        ],
    ),
    dict(
        slug="llamacpp-pr-15541-metal-improve-mul-mat-id",
        url="https://github.com/ggml-org/llama.cpp/pull/15541",
        backend="metal",
        card=M2_ULTRA,
        model="deepseek2 16B Q4_K_M",
        model_id="deepseek-ai/DeepSeek-V2-Lite",
        build="gg/metal-mmid-opt",
        size_bytes=None,
        params=None,
        flash_attn=True,
        ngl=99,
        notes=(
            "PR column (t/s gg/metal-mmid-opt) of ggerganov's compare-commits table, headed 'M2 Ultra:' "
            "(PR description 2025-08-24). Command: -fa 1 -t 1 -ub 2048 -p 512,1024,2048 -n 0 "
            "(deepseek-v2-lite-chat). Table CUT by the excerpt after 'deepseek2 16B Q8_0 pp2048 ... 3' - "
            "the gpt-oss 20B/120B, qwen3moe 30B.A3B Q4_0/Q8_0 and nomic-bert-moe rows listed in the command "
            "were not visible."
        ),
        rows=[
            ("pp512", 2619.13, None, {"threads": 1, "n_ubatch": 2048}),
            ("pp1024", 2957.49, None, {"threads": 1, "n_ubatch": 2048}),
            ("pp2048", 3055.70, None, {"threads": 1, "n_ubatch": 2048}),
            ("pp512", 2921.00, None, {"threads": 1, "n_ubatch": 2048, "model": "deepseek2 16B Q8_0"}),
            ("pp1024", 3284.46, None, {"threads": 1, "n_ubatch": 2048, "model": "deepseek2 16B Q8_0"}),
        ],
    ),
]

# llama.cpp's own benches/dgx-spark.md (@ 4c7e9893, system info of 2025-11-02): llama-bench on a DGX Spark (GB10),
# -ngl 99 -ub 2048 -fa 1 -mmp 0, pp2048 and tg32 at depths 0, 4,096, 8,192, 16,384 and 32,768; build 2f68ce7cf
# (6918). Per model: (as llama-bench prints it, config, GiB and parameters as printed, (t/s, ±) in the table's order)
DGX_SPARK_URL = (
    "https://github.com/ggml-org/llama.cpp/blob/4c7e9893c4ca8eec35d032726d14b74fae76cff8/benches/dgx-spark.md"
)
DGX_SPARK_DEPTHS = ("", " @ d4096", " @ d8192", " @ d16384", " @ d32768")
DGX_SPARK_TESTS = [f"{t}{d}" for d in DGX_SPARK_DEPTHS for t in ("pp2048", "tg32")]
DGX_SPARK = [
    ("gpt-oss 20B MXFP4 MoE", "openai/gpt-oss-20b", 11.27, 20.91, [
        (3782.76, 11.95), (84.10, 0.52), (3030.29, 8.25), (77.36, 0.13), (2852.09, 11.44), (74.00, 0.64),
        (2470.31, 13.96), (68.85, 0.11), (1899.37, 11.28), (59.85, 0.12)]),
    ("gpt-oss 120B MXFP4 MoE", "openai/gpt-oss-120b", 59.02, 116.83, [
        (1937.54, 7.91), (59.02, 0.17), (1653.89, 4.68), (53.95, 0.52), (1580.60, 3.10), (51.85, 0.12),
        (1411.42, 3.75), (48.03, 0.11), (1155.40, 2.98), (41.35, 0.09)]),
    ("qwen3moe 30B.A3B Q8_0", "Qwen/Qwen3-30B-A3B", 30.25, 30.53, [
        (3175.62, 15.26), (60.92, 0.17), (2704.06, 6.21), (53.52, 0.35), (2381.88, 8.79), (48.58, 0.11),
        (1900.91, 8.51), (40.81, 0.06), (1292.19, 7.09), (30.80, 0.02)]),
    ("qwen2 7B Q8_0", "Qwen/Qwen2.5-Coder-7B-Instruct", 7.54, 7.62, [
        (2276.28, 4.92), (29.30, 0.03), (2090.96, 6.11), (28.27, 0.03), (1913.47, 5.86), (27.42, 0.03),
        (1643.88, 8.45), (25.93, 0.01), (1283.36, 1.00), (22.70, 0.02)]),
    ("gemma3 4B Q4_0", "google/gemma-3-4b-it", 2.35, 3.88, [
        (5713.05, 19.74), (78.97, 0.15), (5165.17, 27.83), (68.94, 0.99), (4885.85, 46.27), (67.81, 0.84),
        (4417.88, 52.14), (64.35, 0.66), (3667.74, 50.02), (58.38, 0.05)]),
]  # fmt: skip
DGX_SPARK_NOTES = {  # the repo names the GGUF; the config kvscope counts it with
    "openai/gpt-oss-20b": "ggml-org/gpt-oss-20b-GGUF",
    "openai/gpt-oss-120b": "ggml-org/gpt-oss-120b-GGUF",
    "Qwen/Qwen3-30B-A3B": "ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF; Qwen3-Coder-30B-A3B-Instruct has "
    "Qwen3-30B-A3B's shapes",
    "Qwen/Qwen2.5-Coder-7B-Instruct": "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF; the base model has the Instruct "
    "config's shapes (config in corpus/configs/, copied from measurements/gpu_logs/configs/)",
    "google/gemma-3-4b-it": "ggml-org/gemma-3-4b-it-qat-GGUF (QAT weights in Q4_0)",
    None: "ggml-org/GLM-4.7-Flash-GGUF (GLM-4.7-Flash: no config of it here)",
}


def dgx_spark_tables(url: str, build: str, where: str, tables: list) -> list[dict]:
    """HAND tables of one version of llama.cpp's DGX Spark file: `where` names the file (and the version)."""
    return [
        dict(
            slug="llamacpp-benches-dgx-spark",
            url=url,
            backend="cuda",
            card="DGX Spark (GB10) 128GB",
            model=model,
            model_id=config,
            size_bytes=round(gib * GIB),
            params=round(billions * 1e9),
            build=build,
            ngl=99,
            n_batch=2048,
            n_ubatch=2048,
            flash_attn=True,
            notes=f"{where}, {DGX_SPARK_NOTES[config]}; size and parameters as llama-bench prints them (GiB, B)",
            rows=[(test, v, sd, {}) for test, (v, sd) in zip(DGX_SPARK_TESTS, runs, strict=True)],
        )
        for model, config, gib, billions, runs in tables
    ]


HAND += dgx_spark_tables(DGX_SPARK_URL, "b6918 (2f68ce7cf)", "llama.cpp benches/dgx-spark.md", DGX_SPARK)

# The same file's newest version: moved to benches/dgx-spark/dgx-spark.md and rerun on the same machine (spark-17ed,
# system info of 2026-02-05) at build 11fb327bf (7941), with GLM-4.7-Flash added and llama-bench's -dio 1 column.
# Upstream is too large to mirror here; the figures are read from a fork's verbatim copy (lzptouch/llama.cpp, which
# prepends a comment header; AutoCookies/cheesecrab@35e64e5c holds the same figures). An intermediate version (build
# eeee367de (6989), ppaleja/llama.cpp@1e41b119) ran within 2-8 % of b6918 and is not transcribed.
DGX_SPARK_B7941_URL = (
    "https://github.com/lzptouch/llama.cpp/blob/0b3d966f1855a273784983bae178fd22e4ead562/benches/dgx-spark/dgx-spark.md"
)
DGX_SPARK_B7941 = [
    ("gpt-oss 20B MXFP4 MoE", "openai/gpt-oss-20b", 11.27, 20.91, [
        (4505.82, 12.90), (83.43, 0.59), (4158.34, 18.84), (79.22, 0.60), (3993.81, 17.55), (75.22, 1.05),
        (3449.98, 12.13), (70.36, 0.37), (2689.42, 18.89), (61.65, 0.30)]),
    ("gpt-oss 120B MXFP4 MoE", "openai/gpt-oss-120b", 59.02, 116.83, [
        (2443.91, 7.47), (58.72, 0.20), (2309.84, 3.63), (55.67, 0.35), (2216.68, 10.16), (52.87, 0.43),
        (1956.31, 6.39), (49.45, 0.20), (1567.08, 11.79), (42.76, 0.14)]),
    ("qwen3moe 30B.A3B Q8_0", "Qwen/Qwen3-30B-A3B", 30.25, 30.53, [
        (2986.97, 18.87), (61.06, 0.23), (2633.45, 6.26), (54.77, 0.28), (2354.14, 3.84), (48.02, 0.40),
        (1908.86, 4.25), (40.23, 0.10), (1348.17, 2.00), (30.21, 0.04)]),
    ("qwen2 7B Q8_0", "Qwen/Qwen2.5-Coder-7B-Instruct", 7.54, 7.62, [
        (2250.28, 6.41), (29.43, 0.02), (2100.19, 8.96), (28.61, 0.02), (2007.56, 4.16), (27.38, 0.09),
        (1779.11, 6.42), (25.72, 0.03), (1471.23, 1.71), (22.51, 0.02)]),
    ("gemma3 4B Q4_0", "google/gemma-3-4b-it", 2.35, 3.88, [
        (5948.74, 10.61), (81.05, 0.20), (5652.69, 34.29), (76.37, 0.58), (5509.57, 40.69), (71.61, 0.80),
        (5340.86, 36.92), (70.89, 0.34), (5023.30, 13.52), (62.28, 0.30)]),
    ("deepseek2 30B.A3B Q8_0", None, 29.65, 29.94, [
        (2364.18, 11.43), (48.68, 0.12), (1684.13, 1.24), (44.62, 0.22), (1314.68, 1.41), (42.59, 0.11),
        (914.05, 3.32), (38.72, 0.13), (567.20, 0.90), (32.65, 0.09)]),
]  # fmt: skip
HAND += dgx_spark_tables(
    DGX_SPARK_B7941_URL,
    "b7941 (11fb327bf)",
    "llama.cpp benches/dgx-spark/dgx-spark.md at build b7941 (a fork's verbatim copy); -dio 1",
    DGX_SPARK_B7941,
)

# mlx-lm on an M3 Max 64GB (the 64 GB M3 Max is the 40-core GPU part): prompt of N tokens, then M generated.
MLX_1029 = [
    (260, 75.871, 309, 9.351),
    (689, 83.567, 760, 9.366),
    (1171, 83.843, 744, 9.287),
    (1635, 83.239, 754, 9.222),
    (2173, 83.092, 776, 9.123),
    (3228, 81.068, 744, 8.970),
    (4126, 79.410, 724, 8.917),
    (6096, 76.796, 752, 8.724),
    (8015, 74.840, 786, 8.520),
    (10088, 72.363, 887, 8.328),
    (12010, 71.017, 1139, 8.152),
    (14066, 68.943, 634, 7.907),
    (16003, 67.948, 459, 7.779),
    (18211, 66.105, 568, 7.604),
    (20236, 64.452, 625, 7.423),
    (22188, 63.332, 508, 7.277),
    (24246, 61.424, 462, 7.121),
    (26034, 60.375, 1178, 7.019),
    (28002, 59.009, 27, 6.808),
    (30136, 58.080, 27, 6.784),
]


def hand_tables() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for t in HAND:
        common = {k: v for k, v in t.items() if k not in ("slug", "url", "rows", "notes")}
        for test, tok_s, std, extra in t["rows"]:
            m = re.match(r"(pp|tg)(\d+)(?: @ d(\d+))?$", test)
            n = int(m.group(2))
            fields = {**common, **{k: v for k, v in extra.items() if k not in ("url", "notes")}}
            model = fields.pop("model")
            if "model_id" not in extra and model.split()[:2] != t["model"].split()[:2]:  # another model in the table
                fields["model_id"] = model_id(model)
            fields["weights"] = weights_of(model)
            out.setdefault(t["slug"], []).append(
                row(
                    source=extra.get("url", t["url"]),
                    # another thread in the same table is its own source (the unit a fit holds out)
                    source_id=t["slug"] + ("-" + "-".join(extra["url"].split("/")[-3::2]) if "url" in extra else ""),
                    model=model,
                    n_prompt=n if m.group(1) == "pp" else 0,
                    n_gen=n if m.group(1) == "tg" else 0,
                    depth=int(m.group(3) or 0),
                    tok_s=tok_s,
                    tok_s_std=std,
                    notes=extra.get("notes", t["notes"]),
                    **fields,
                )
            )
    out["mlx-examples-1029-m3-max"] = [
        row(
            source="https://github.com/ml-explore/mlx-examples/issues/1029",
            source_id="mlx-examples-1029-m3-max",
            engine="mlx",
            build="mlx-lm 0.20.4 / mlx 0.21.1",
            backend="metal",
            card="Apple M3 Max 64GB (16C CPU / 40C GPU)",
            model="Llama-3.3-70B-Instruct-4bit",
            model_id="meta-llama/Llama-3.1-70B-Instruct",
            weights="4bit",
            **(
                {"n_prompt": p, "test": f"pp{p}"}
                if kind == "prefill"
                else {"n_gen": g, "depth": p, "test": f"tg{g} @ d{p}"}
            ),
            tok_s=pp if kind == "prefill" else tg,
            notes="chigkim's mlx_lm run (temp 0, top_p 0.9, seed 1000); Llama 3.3 70B has the Llama 3.1 70B shapes; "
            + (
                "the whole prompt in one prefill"
                if kind == "prefill"
                else "decode averaged over the generated tokens after the prompt"
            ),
        )
        for p, pp, g, tg in MLX_1029
        for kind in ("prefill", "decode")
    ]
    return out


def write(slug: str, rows: list[dict]) -> None:
    with (HERE / f"{slug}.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{slug}: {len(rows)} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mirror", type=Path, required=True, help="folder holding <owner>+<name>/repo git directories")
    m = ap.parse_args().mirror
    lhl = m / "lhl+strix-halo-testing" / "repo"
    write("lhl-strix-fixwmma", lhl_fix_wmma(lhl))
    for slug, rows in lhl_llm_bench(lhl).items():
        if rows:
            write(slug, rows)
    write("xiongjiedai-llama3", xiongjiedai(m / "XiongjieDai+GPU-Benchmarks-on-LLM-Inference" / "repo"))
    for slug, rows in scoreboards(m / "smoothyy3+willitrun" / "repo").items():
        write(slug, rows)
    for slug, rows in kyuz0(m / "kyuz0+amd-strix-halo-toolboxes" / "repo").items():
        write(slug, rows)
    for slug, rows in hand_tables().items():
        write(slug, rows)


if __name__ == "__main__":
    main()
