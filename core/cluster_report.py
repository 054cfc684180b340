"""`python -m core cluster`: every vLLM TP × PP × DP plan of a cluster for one model, the best first, with the
arithmetic of the best plan and of plain TP beside it (the field names below are a contract for --json)."""

from __future__ import annotations

from core.engines.vllm_cluster import (
    Cluster,
    Layout,
    PlanResult,
    arithmetic,
    dp_attention,
    evaluate,
    launch_script,
    plain_tp,
    plans,
    record,
    weight_lines,
)
from core.errors import InputError
from core.model.spec import ModelSpec
from core.units import format_bytes, format_tokens


def parse_layout(text: str) -> Layout:
    """`TP,PP,DP` or `TP,PP,DP,ep`: one layout to show instead of the search."""
    parts = [p.strip().lower() for p in text.split(",")]
    ep = parts[-1] == "ep"
    numbers = parts[:-1] if ep else parts
    try:
        tp, pp, dp = (int(p) for p in numbers)
    except ValueError:
        raise InputError(f"--layout {text!r}: give TP,PP,DP (e.g. 8,2,1) and optionally ',ep'") from None
    if min(tp, pp, dp) < 1:
        raise InputError(f"--layout {text!r}: TP, PP and DP must each be at least 1")
    return Layout(tp, pp, dp, ep)


def cluster_report(
    model: ModelSpec,
    cluster: Cluster,
    context: int,
    weights: str | None = None,
    kv_dtype: str = "auto",
    expert_parallel: bool | None = None,
    gpu_memory_utilization: float = 0.92,
    pp_inside_nodes: bool = False,
    layout: Layout | None = None,
    max_num_seqs: int | None = None,
) -> dict:
    run = (weights, kv_dtype, gpu_memory_utilization, max_num_seqs)  # how each plan's engine runs
    if layout is not None:
        ranked = [evaluate(model, cluster, layout, context, *run)]
    else:
        ranked = plans(
            model, cluster, context, weights, kv_dtype, expert_parallel, gpu_memory_utilization, pp_inside_nodes,
            max_num_seqs,
        )  # fmt: skip
    best = ranked[0]
    recipes = {
        name: evaluate(model, cluster, make(model, cluster), context, *run)
        for name, make in (("plain_tp", plain_tp), ("dp_attention", dp_attention))
    }
    return {
        "model": model.name,
        "cluster": cluster.label,
        "nodes": cluster.nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "card_memory_bytes": cluster.card.memory_bytes,
        "context": context,
        "weights": best.weights_format,
        "kv_dtype": kv_dtype,
        "max_num_seqs": best.max_num_seqs,
        "plans": [record(r) for r in ranked],
        "best": record(best),
        "best_arithmetic": arithmetic(best),
        "best_weights": weight_lines(best),  # the weights per GPU above, tensor by tensor
        "best_launch": launch_script(best),  # shell lines, each step headed by a comment saying where it runs
        "recipes": {
            name: {
                **record(r),
                "arithmetic": arithmetic(r),
                "weights_arithmetic": weight_lines(r),
                "requests_vs_plain_tp": _gain(r, recipes["plain_tp"]),
            }
            for name, r in recipes.items()
        },
        "best_vs_plain_tp": _gain(best, recipes["plain_tp"]),
    }


def gain_text(out: dict) -> str:
    """The best plan's requests over plain TP's, as its arithmetic ("" where there is no ratio)."""
    if not out["best_vs_plain_tp"]:
        return ""
    plain = out["recipes"]["plain_tp"]["requests"]
    return f"{out['best']['requests']:,} ÷ {plain:,} requests = {out['best_vs_plain_tp']:.2f}×"


def _gain(plan: PlanResult, baseline: PlanResult) -> float | None:
    if plan.why_not or not baseline.requests:
        return None
    return round(plan.requests / baseline.requests, 3)


def print_cluster(out: dict) -> None:
    print(
        f"{out['model']} on {out['cluster']} ({format_bytes(out['card_memory_bytes'])} each), vLLM, "
        f"weights {out['weights']}, KV {out['kv_dtype']}, {format_tokens(out['context'])}-token requests"
    )
    # weights and KV budget of the stage that sets the block count, the stage the arithmetic below shows
    print(f"{'plan':<36} {'requests':>8} {'per DP rank':>11} {'cache tokens':>13} {'weights/GPU':>11} {'KV/GPU':>10}")
    for p in out["plans"]:
        weights = format_bytes(p["weights_bytes_per_gpu"]) if p["weights_bytes_per_gpu"] is not None else "-"
        budget = format_bytes(max(0, p["kv_budget_bytes_per_gpu"])) if p["kv_budget_bytes_per_gpu"] else "-"
        line = (
            f"{p['layout']:<36} {p['requests']:>8,} {p['requests_per_dp_rank']:>11,} {p['cache_tokens']:>13,} "
            f"{weights:>11} {budget:>10}"
        )
        print(line + (f"  ({p['why_not']})" if p["why_not"] else ""))
    if out["best"]["fits"]:
        print(f"\nbest: {out['best']['layout']}; to run it:")
        for line in out["best_launch"]:
            print(f"  {line}")
        print()
    else:
        print(f"\nno plan fits; the closest: {out['best']['layout']}")
    for line in out["best_arithmetic"] + out["best_weights"]:
        print(f"  {line}")
    names = {"plain_tp": "plain TP (TP inside a node, PP across)", "dp_attention": "DP-attention (one engine per GPU)"}
    for name, r in out["recipes"].items():
        gain = f": {r['requests_vs_plain_tp']:.2f}× plain TP's requests" if r["requests_vs_plain_tp"] else ""
        print(f"\n{names[name]}: {r['layout']}{gain}")
        for line in r["arithmetic"] + r["weights_arithmetic"]:
            print(f"  {line}")
    if out["best_vs_plain_tp"]:
        print(f"\nbest ÷ plain TP: {gain_text(out)}")
