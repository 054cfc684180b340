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
        "source": None, "source_id": None, "engine": "llama.cpp", "build": None, "backend": None, "card": None,
        "n_devices": 1, "model": None, "model_id": None, "weights": None, "size_bytes": None, "params": None,
        "kind": None, "test": None, "n_prompt": 0, "n_gen": 0, "depth": 0, "n_batch": None, "n_ubatch": None,
        "flash_attn": None, "threads": None, "ngl": None, "concurrency": 1, "tok_s": None, "tok_s_std": None,
        "notes": "",
    }
    unknown = set(kw) - set(base)
    assert not unknown, unknown
    base.update(kw)
    base["kind"] = "prefill" if base["n_prompt"] else "decode"
    base["test"] = base["test"] or test_name(base["n_prompt"], base["n_gen"], base["depth"])
    return base


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
        ["git", "-C", str(repo), "ls-tree", "--name-only", rev, "llm-bench/"], check=True, capture_output=True, text=True
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
    for kind, table in zip(("decode", "prefill"), tables[:2]):
        lines = [ln for ln in table.splitlines() if ln.startswith("|")]
        cols = [c.strip() for c in lines[0].strip("|").split("|")]
        for ln in lines[2:]:
            cells = [c.strip().strip("*") for c in ln.strip("|").split("|")]
            gpu, n = cells[0], 1
            if m := re.match(r"(.*?) \* (\d+)$", gpu):
                gpu, n = m.group(1), int(m.group(2))
            card = XD_CARDS[gpu]
            for col, val in zip(cols[1:], cells[1:]):
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
    return out


# ---- llama.cpp scoreboards (#15013 CUDA, #15021 ROCm, #10879 Vulkan, #4167 Apple) ----
# Read from smoothyy3/willitrun data/normalized/llama_cpp_cuda.jsonl, a parse of the discussions' summary
# tables (HTML fetched 2026-04-05). Chips whose row names no single card are left out (see README).
SCOREBOARD_CARDS = {
    "CUDA": {
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
        n_prompt, n_gen = setup["prompt_tokens"], setup["generation_tokens"]
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
        slug = {"CUDA": "llamacpp-disc-15013-cuda", "ROCm": "llamacpp-disc-15021-rocm", "Vulkan": "llamacpp-disc-10879-vulkan"}[backend]
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
                notes=f"scoreboard row '{chip}' ({'with' if fa else 'without'} FA table; llama-bench -ngl 99 -fa {int(fa)}, "
                f"pp512/tg128 defaults), as parsed by {WILLITRUN} @ {rev[:8]}; build = the row's commit"
                + (f"; {extra}" if extra else ""),
            )
        )
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


if __name__ == "__main__":
    main()
