"""llama.cpp's automatic fit: what llama-server and llama-cli choose for the context and -ngl when the user sets
neither, and what current Ollama gets (it gives -c but no -ngl, llm/llama_server.go, so llama-server picks the
layers). Read line by line in common/fit.cpp `common_params_fit_impl` at llama.cpp 0c1e57098 (the commit
llama-cpp-python 0.3.36 vendors); on by default (common.h:478 fit_params = true) with a 1 GiB margin per device
(common.h:483 fit_params_target) and a 4,096-token floor (common.h:480 fit_params_min_ctx). llama-cpp-python itself
does not run it (it lives in libllama-common, which the library does not call). Its libllama-common does, and the
referee in tests/test_llamacpp_autofit.py calls it; but that build has no GPU backend, so the fit finds no device
(nd == 0) and runs steps 1-2 on host memory only: the context step is refereed there, steps 3-4 are read from source.

For one GPU, `margin` the free memory to leave, the target is free − margin:
1. Project device memory with the context given (unset: the training context × streams) and every layer on the
   GPU. If it leaves the margin (≤ the target), nothing changes.
2. Only when the context was not given and the training context × streams exceeds the floor × streams: project at
   the floor; if that is under the target (strictly), interpolate linearly between floor and maximum, round down to
   a multiple of 256 × streams (not below the floor) and stop. Otherwise keep the floor and go on. One step: fit.cpp
   does not re-measure or reduce the context again later.
3. Only when -ngl was not given (else it gives up, keeping the user's -ngl): the most layer slots (the output layer
   counts as one, core.engines.llamacpp.Offload) whose projection stays within the target, by false position
   between 0 and all n_layers + 1; memory grows with every slot, so that is the largest such count, which a
   bisection finds too. A MoE model takes this step with the routed experts of every GPU layer but one in system
   RAM (n_part = n_layer − 1): set_ngl_tensor_split_tbo lists a device's full layers before its partial ones, by
   layer index, so the one kept whole is the lowest GPU layer; the partial range ends at index n_layers, the output
   slot, whose pattern matches no tensor.
4. MoE only, and only if every dense weight leaves the margin with all experts in RAM (strictly): layers get their
   experts back from the lowest GPU layer up, as many as stay within the target. The experts of the remaining
   (last) layers stay in RAM. Then, if more than one slot is on the GPU, part of one more layer: the first partial
   layer keeps its up projections on the GPU (LAYER_FRACTION_UP: its ffn_gate*, ffn_down* and router go to RAM) if
   that stays under the target (strictly), then also its gate projections (LAYER_FRACTION_GATE: only ffn_down* in
   RAM); if the up part does not fit, its whole FFN goes to RAM, router and shared experts included
   (LAYER_FRACTION_ATTN), if that stays under the target.

Builds (core.engines.llamacpp.LlamaCppBuild, --llamacpp-build): --fit came with PR #16653 (Dec 2025, in libllama as
llama_params_fit; moved to common/fit.cpp by PR #22171, 2026-04-20: a fork's copy of the libllama version has
steps 3-4 as above); kvscope models it
from PR #18148 on (2025-12-18: -ngl counts the output layer first, which the fit's layer indices assume). Before PR
#27496 (2026-08-21) steps 1-2 took the training context and the floor as totals, whatever the streams, and rounded
to 256. Per-device margins (PR #18679, 2026-01) change nothing on one GPU.

"Projected memory" is llama.cpp's own dry run: weights on the device, the cache and the compute buffers, against the
device's free memory. kvscope counts the same parts plus the CUDA context, against the card's total: the CUDA
context is what makes free smaller than total, so the two tests agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from core.dtypes import dtype_named
from core.engines.base import sized_tensors
from core.engines.llamacpp import FRONTENDS, OUTPUT_FIRST, LlamaCppEngine
from core.errors import InputError
from core.fit import Setup, Solver
from core.model.params import count_params
from core.units import MIB

FIT_MARGIN = 1024 * MIB  # common.h:483 fit_params_target, per device
FIT_MIN_CTX = 4096  # common.h:480 fit_params_min_ctx
CTX_ALIGN = 256  # fit.cpp: "round down context for CUDA backend", × streams (PR #27496)
AUTOFIT_FRONTENDS = ("llama-server", "llama-cli")  # the front ends that run it (common_init_result); the library not
# fit.cpp get_overflow_pattern: what of the first partial layer goes to system RAM, by layer fraction (matched with
# std::regex_search after "blk\\.<il>\\.", so from the start of the tensor's own name); later partial layers use "moe".
OVERFLOW = {
    "moe": r"ffn_(up|down|gate_up|gate)_(ch|)exps",  # LAYER_FRACTION_MOE: the routed experts
    "up": r"ffn_(gate|gate_up|down)",  # LAYER_FRACTION_UP: attention and the up projections stay
    "gate": r"ffn_down",  # LAYER_FRACTION_GATE: attention, up and gate projections stay
    "attn": r"ffn_(gate|up|gate_up|down)",  # LAYER_FRACTION_ATTN: only attention stays
}
ON_GPU = {"up": "attention and up projections", "gate": "attention, up and gate projections", "attn": "attention"}


@dataclass(frozen=True)
class FitChoice:
    """What llama.cpp settles on, and the projections behind it."""

    n_ctx: int  # -c: total cells asked for, all sequences together
    gpu_layers: int | None  # -ngl it sets; None = every layer and the output (what it starts from)
    n_layers: int  # decoder layers of the model (-ngl counts n_layers + 1 with the output layer)
    projected_bytes: int  # device memory at the choice, CUDA context included
    limit_bytes: int  # the card less the margin
    steps: tuple[str, ...]  # what it did, in order
    cpu_experts: range = range(0)  # MoE: layers whose routed experts it keeps (at least partly) in system RAM
    partial: str | None = None  # MoE: what of layer cpu_experts.start stays on the GPU (an OVERFLOW fraction)

    @property
    def fits(self) -> bool:
        return self.projected_bytes <= self.limit_bytes


def gguf_tensors(setup: Setup, layer: int) -> list[tuple[str, int]]:
    """Layer `layer`'s tensors as a GGUF names them, with their bytes in the setup's format. kvscope counts gate and
    up experts fused (transformers 5's layout); convert_hf_to_gguf writes them as ffn_gate_exps and ffn_up_exps
    unless --fuse-gate-up-exps (conversion/base.py modify_tensors), so they are split in halves here."""
    fmt, dtype_bytes = Solver(setup).format, dtype_named(setup.model.dtype).block_bytes
    out = []
    for tensor, size in sized_tensors(count_params(setup.model), fmt, dtype_bytes):
        if tensor.layer != layer:
            continue
        role, bias = (tensor.role[: -len("_bias")], ".bias") if tensor.role.endswith("_bias") else (tensor.role, "")
        names = ("ffn_gate_exps", "ffn_up_exps") if role == "ffn_gate_up_exps" else (role,)
        out += [(name + bias, size // len(names)) for name in names]
    return out


def partial_bytes(setup: Setup, layer: int, fraction: str) -> int:
    """Device bytes layer `layer` holds as the first partial layer with `fraction`, beyond what it holds with its
    routed experts in RAM ("moe"): the up (and gate) experts kept, or the router and shared experts let go."""

    def on_gpu(name: str, pattern: str) -> bool:
        return re.match(pattern, name) is None

    return sum(
        size * (on_gpu(name, OVERFLOW[fraction]) - on_gpu(name, OVERFLOW["moe"]))
        for name, size in gguf_tensors(setup, layer)
    )


def projected(
    setup: Setup,
    n_ctx: int,
    sequences: int,
    gpu_layers: int | None,
    cpu_experts: range | None = None,
    partial: str | None = None,
) -> int:
    """Device memory llama.cpp's dry run finds for `n_ctx` cells over `sequences`, with -ngl `gpu_layers` (and the
    routed experts of `cpu_experts` in system RAM, else as the setup says; `partial` of the first of them kept)."""
    changes = {"gpu_layers": gpu_layers} | ({} if cpu_experts is None else {"cpu_experts": cpu_experts})
    solver = Solver(replace(setup, **changes))
    per_sequence = -(-n_ctx // sequences)
    cache = 0
    if solver.model.layers:
        cache = solver.engine.account(solver.model, per_sequence, sequences, setup.kv_dtype).total
    extra = partial_bytes(setup, cpu_experts.start, partial) if partial and cpu_experts else 0
    return solver.weights + sum(i.bytes for i in solver.overhead(per_sequence, sequences)) + cache + extra


def fit_params(
    setup: Setup,
    n_ctx: int | None = None,
    sequences: int = 1,
    gpu_layers: int | None = None,
    margin: int = FIT_MARGIN,
    min_ctx: int = FIT_MIN_CTX,
) -> FitChoice:
    """common_params_fit_impl for one GPU. `n_ctx` None is llama.cpp's -c 0 (the training context); `gpu_layers`
    None is -ngl unset (auto); `sequences` is -np (its streams, unless the engine unifies the cache)."""
    engine = setup.engine
    if not isinstance(engine, LlamaCppEngine):
        raise InputError("the automatic fit is llama.cpp's (--fit); choose --engine llama.cpp")
    if sequences < 1 or (n_ctx is not None and n_ctx < 1) or margin < 0 or min_ctx < 1:
        raise InputError("context, sequences and the minimum context must be positive, the margin 0 or more")
    build = engine.options.build
    # -np is the slots: a unified cache is made for them (LlamaCppEngine.slots), one stream each otherwise
    setup = replace(setup, engine=engine.with_options(n_seq_max=sequences))
    if not build.output_first:
        raise InputError(
            f"llama.cpp {build.spec}: kvscope models --fit from PR #{OUTPUT_FIRST.pr} ({OUTPUT_FIRST.merged}, "
            f"b{OUTPUT_FIRST.first_with} has it) on; --fit came with PR #16653 a few days before (b7414 has it), and "
            "earlier builds have none: give -ngl yourself (python -m core fit --n-gpu-layers)"
        )
    n_layers = len(setup.model.layers)
    limit = setup.card.memory_bytes - margin
    n_max, n_min, align = fit_contexts(setup.model.max_context or n_ctx or min_ctx, min_ctx, sequences, engine)
    n_max = n_ctx if n_ctx is not None else n_max
    used = projected(setup, n_max, sequences, gpu_layers)
    if used <= limit:
        return FitChoice(n_max, gpu_layers, n_layers, used, limit, ("fits as asked: no change",))

    steps: list[str] = []
    chosen = n_max
    if n_ctx is None and n_max > n_min:
        used_min = projected(setup, n_min, sequences, gpu_layers)
        reduced = fit_context(n_max, n_min, align, used, used_min, limit)
        if reduced is not None:
            steps.append(
                f"context reduced from {n_max:,} to {reduced:,}: the whole model fits ({used:,} B projected at "
                f"{n_max:,} cells, {used_min:,} B at {n_min:,}; {n_min:,} + {n_max - n_min:,} × ({limit:,} − "
                f"{used_min:,}) ÷ ({used:,} − {used_min:,}), the limit being the card less {margin >> 20:,} MiB, "
                f"down to a multiple of {align:,})"
            )
            return FitChoice(
                reduced, gpu_layers, n_layers, projected(setup, reduced, sequences, gpu_layers), limit, tuple(steps)
            )
        chosen = n_min
        steps.append(
            f"context reduced from {n_max:,} to the floor of {n_min:,}: still too large ({used_min:,} B projected "
            f"at {n_min:,} cells, not under the card less {margin >> 20:,} MiB, {limit:,} B)"
        )
    elif n_ctx is None:
        steps.append(f"the model's context {n_max:,} is at or below the floor of {n_min:,}: no change")
    else:
        steps.append(f"context set by the user ({n_ctx:,}): no change")

    if gpu_layers is not None:
        steps.append(f"-ngl set by the user ({gpu_layers}): no change")
        return FitChoice(
            chosen, gpu_layers, n_layers, projected(setup, chosen, sequences, gpu_layers), limit, tuple(steps)
        )
    if count_params(setup.model).experts:
        return _fit_moe(setup, chosen, sequences, margin, steps)
    lo = _most(lambda k: projected(setup, chosen, sequences, k) <= limit, 0, n_layers + 1)
    at = projected(setup, chosen, sequences, lo)
    more = projected(setup, chosen, sequences, lo + 1) if lo <= n_layers else None
    steps.append(
        f"layers on the GPU: {lo} of {n_layers + 1} (the output layer counts as one): "
        + _against(at, more, "one more", setup.card.memory_bytes, margin)
    )
    return FitChoice(chosen, lo, n_layers, at, limit, tuple(steps))


def _against(at: int, more: int | None, one_more: str, memory: int, margin: int) -> str:
    """A count's projection, and the next count's where there is one, against the card less the margin: the figures
    that make the count the largest that stays within it."""
    shown = "" if more is None else f", {more:,} B with {one_more}"
    return f"{at:,} B projected{shown}, against the card less {margin >> 20:,} MiB, {memory - margin:,} B"


def _tried(what: str, base: int, extra: int, limit: int) -> str:
    """One of step 4's tries at part of a layer: the projection with its experts in RAM, what the part adds (or
    takes away), and whether that is strictly under the limit, as fit.cpp asks."""
    total = base + extra
    sign = "+" if extra >= 0 else "−"
    verdict = "under" if total < limit else "not under"
    return f"{what}: {base:,} B {sign} {abs(extra):,} B = {total:,} B, {verdict} {limit:,} B"


def fit_contexts(train: int, min_ctx: int, sequences: int, engine: LlamaCppEngine) -> tuple[int, int, int]:
    """fit.cpp's maximum context (-c 0: the training context), its floor (--fit-ctx) and the alignment of step 2:
    each × the streams (n_seq_max unless the cache is unified) from PR #27496, totals before it."""
    streams = engine.streams(sequences) if engine.options.build.fit_streams else 1
    return train * streams, min_ctx * streams, CTX_ALIGN * streams


def fit_context(n_max: int, n_min: int, align: int, used_max: int, used_min: int, target: int) -> int | None:
    """fit.cpp step 2 for one device: the context linearly interpolated between the floor and the maximum where the
    projection meets the target, rounded down to `align`, not below the floor; None when even the floor is not
    strictly under the target (llama.cpp then keeps the floor and goes on to the layers)."""
    if target <= used_min:
        return None
    chosen = n_min + (n_max - n_min) * (target - used_min) // (used_max - used_min)
    return max(chosen - chosen % align, n_min)


def _most(fits, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with fits(n), given fits(lo) (or lo is the floor) and fits growing false; what the
    false-position search in fit.cpp converges to."""
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _fit_moe(setup: Setup, n_ctx: int, sequences: int, margin: int, steps: list[str]) -> FitChoice:
    """fit.cpp steps 3-4 for a MoE model on one GPU: `slots` of the n_layers + 1 on the GPU (the last ones), the
    first `full` of them with their experts, the rest with their experts in system RAM, the first of those perhaps
    with part of its FFN on the GPU. Each step says the projections that decide it."""
    n, memory = len(setup.model.layers), setup.card.memory_bytes
    limit = memory - margin

    def experts_in_ram(slots: int, full: int) -> range:
        first = n + 1 - slots + full  # the GPU layers from the lowest: `full` whole, the rest partial
        return range(first, n) if first < n else range(0)

    def used(slots: int, full: int, partial: str | None = None) -> int:
        return projected(setup, n_ctx, sequences, slots, experts_in_ram(slots, full), partial)

    slots = _most(lambda k: used(k, 1) <= limit, 0, n + 1)
    more = used(slots + 1, 1) if slots <= n else None
    steps.append(
        f"layers with their experts in system RAM, the lowest GPU layer keeping its own: {slots} of {n + 1} on the "
        "GPU (the output layer counts as one): " + _against(used(slots, 1), more, "one more", memory, margin)
    )
    full = min(1, slots)
    partial = None
    # step 4 runs only when every dense weight fits with all experts in RAM (global_surplus_cpu_moe > 0)
    dense = projected(setup, n_ctx, sequences, None, range(n))
    if slots:
        runs = "so step 4 gives experts back" if dense < limit else "so no experts go back (fit.cpp step 4 skipped)"
        steps.append(
            f"every layer on the GPU with all experts in system RAM: {dense:,} B projected, "
            f"{'under' if dense < limit else 'not under'} {limit:,} B, {runs}"
        )
    if dense < limit and slots:
        full = _most(lambda k: used(slots, k) <= limit, full, slots)
        more = used(slots, full + 1) if experts_in_ram(slots, full) else None
        steps.append(
            f"experts back on the GPU: the lowest {full} GPU layer(s) hold theirs: "
            + _against(used(slots, full), more, "one more layer's", memory, margin)
        )
        first = experts_in_ram(slots, full).start
        if slots > 1 and experts_in_ram(slots, full):  # "try to fit at least part of one more layer", strictly under
            whole = used(slots, full)

            def attempt(fraction: str) -> tuple[bool, str]:
                extra = partial_bytes(setup, first, fraction)
                return whole + extra < limit, _tried(f"its {ON_GPU[fraction]}", whole, extra, limit)

            fits_up, up = attempt("up")
            tries = [up]
            if fits_up:
                fits_gate, gate = attempt("gate")
                tries.append(gate)
                partial = "gate" if fits_gate else "up"
            else:
                fits_attn, attn = attempt("attn")
                tries.append(attn)
                partial = "attn" if fits_attn else None
            steps.append(f"part of layer {first} on the GPU, its other tensors in system RAM: " + "; ".join(tries))
    ram = experts_in_ram(slots, full)
    if partial:
        steps.append(f"layer {ram.start} keeps its {ON_GPU[partial]} on the GPU, the rest of its FFN in system RAM")
    if ram:
        steps.append(f"routed experts of layers {ram.start}-{ram.stop - 1} stay in system RAM")
    return FitChoice(
        n_ctx, None if slots == n + 1 else slots, n, used(slots, full, partial), limit, tuple(steps), ram, partial
    )


def autofit_sentence(setup: Setup, frontend: str) -> str | None:
    """What llama-server / llama-cli pick on their own (--fit, on by default) when -c (and -ngl) are left unset, in
    one sentence; None for a front end that does not run it, or several GPUs."""
    if frontend not in AUTOFIT_FRONTENDS or setup.gpus != 1:
        return None
    try:
        choice = fit_params(setup, None, FRONTENDS[frontend].n_parallel, setup.gpu_layers)
    except InputError as err:
        return f"{frontend}'s automatic fit (--fit): {err}"
    layers = "every layer" if choice.gpu_layers is None else f"-ngl {choice.gpu_layers} of {choice.n_layers + 1}"
    if choice.cpu_experts:
        layers += f" (the experts of layers {choice.cpu_experts.start}-{choice.cpu_experts.stop - 1} in system RAM)"
    return (
        f"Started with no -c{' and no -ngl' if setup.gpu_layers is None else ''}, {frontend}'s --fit (on by default, "
        f"common/fit.cpp) would run -c {choice.n_ctx:,} with {layers} on the GPU, leaving 1 GiB free: "
        + "; ".join(choice.steps)
        + "."
    )


def autofit_record(setup: Setup, choice: FitChoice, sequences: int) -> dict:
    """`python -m core autofit --json` (the field names are a contract)."""
    return {
        "model": setup.model.name,
        "card": setup.card.name,
        "card_memory_bytes": setup.card.memory_bytes,
        "weights": setup.weights,
        "kv_dtype": setup.engine.kv_dtype(setup.model, setup.kv_dtype).name,  # as llama.cpp keeps it: f16 for auto
        "sequences": sequences,
        "n_ctx": choice.n_ctx,
        # one stream holds every sequence when unified, and any one of them may fill it (llama-context.cpp n_ctx_seq)
        "n_ctx_per_sequence": choice.n_ctx if setup.engine.streams(sequences) == 1 else choice.n_ctx // sequences,
        # llama.cpp clamps -ngl to the layer slots (-ngl 200 of 33 runs 33)
        "gpu_layers": min(choice.n_layers + 1, choice.n_layers + 1 if choice.gpu_layers is None else choice.gpu_layers),
        "cpu_expert_layers": [choice.cpu_experts.start, choice.cpu_experts.stop] if choice.cpu_experts else None,
        "partial_layer": [choice.cpu_experts.start, choice.partial] if choice.partial else None,
        "llamacpp_build": setup.engine.options.build.spec,
        "layer_slots": choice.n_layers + 1,
        "projected_bytes": choice.projected_bytes,
        "limit_bytes": choice.limit_bytes,
        "fits": choice.fits,
        "steps": list(choice.steps),
    }


def print_autofit(out: dict) -> None:
    print(
        f"{out['model']} on {out['card']} ({out['card_memory_bytes'] / (1 << 30):.2f} GiB), weights {out['weights']}, "
        f"KV {out['kv_dtype']}, {out['sequences']} sequence(s): llama.cpp's --fit (common/fit.cpp)"
    )
    for step in out["steps"]:
        print(f"  {step}")
    print(
        f"-c {out['n_ctx']} ({out['n_ctx_per_sequence']:,} per sequence), -ngl {out['gpu_layers']} of "
        f"{out['layer_slots']}: {out['projected_bytes'] / (1 << 30):.2f} GiB projected, limit "
        f"{out['limit_bytes'] / (1 << 30):.2f} GiB ({'fits' if out['fits'] else 'does not fit'})"
    )
