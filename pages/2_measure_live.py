"""Measure live: run a short probe on this machine (in a child process) and set what it measures beside kvscope's
prediction.

The probe runs on a background thread of the server (core.probe.ProbeJob), never in the page's script: a script
blocked on a probe cannot be cancelled until the probe's next message, and draws nothing else meanwhile. A fragment
redraws the progress every second; the rest of the page (the form, past runs) stays as it is.
"""

import hashlib
import tempfile
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from core.engines.vllm_engine import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, VllmEngine
from core.errors import InputError
from core.files import write_json_atomic
from core.model.loading import config_label
from core.probe import RANDOM_LABEL, ProbeBusy, ProbeJob, ProbeRequest, active_job, load_results
from core.probe.request import BACKENDS, CPU_KV_REQUESTS, DEVICES, parse_contexts, vllm_args_text
from core.probe.results import RESULTS_NAME, results_dir, trim_note
from core.speed import calibration
from core.speed.calibrate_job import TIMEOUT_S, CalibrationBusy, CalibrationJob, active_calibration
from core.units import GIB, format_bytes, format_tokens, plural
from ui.charts import curves
from ui.inputs import sidebar
from ui.layout import linkless, page_config
from ui.state import BOUNDS, unpack_config

page_config("measure live")
inputs, model, setup = sidebar(model_only=True)  # the probe takes no card, engine or context
st.title("Measure live")
st.caption(
    "Builds the model with transformers in a separate process — its real weights if they are already on this "
    f"machine, else random ones ({RANDOM_LABEL}) — prefills it at each context, sums the tensors in the cache it "
    "returns and times decoding; or starts vLLM with the vLLM options below and reads its KV pool from its log. "
    "One probe runs at a time on this machine."
)


def probe_target() -> tuple[str, str]:
    """(what the child process loads, what results call it): the preset/repo id, or the uploaded config written
    to a file and named after the model it describes, not after that file."""
    if not inputs.config:
        return inputs.model, inputs.model
    raw = unpack_config(inputs.config)
    digest = hashlib.sha256(inputs.config.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / "kvscope-uploads" / f"{digest}.json"
    if not write_json_atomic(path, raw):  # two sessions probing one upload write it at once
        raise InputError(f"cannot write the uploaded config to {path.parent}; set TMPDIR to a writable folder")
    return str(path), f"{config_label(raw) or model.model_type} (uploaded config.json {digest[:8]})"


def describe(msg: dict) -> str | None:
    """One progress line for a message from the probe process."""
    if msg.get("event") == "context":
        row = msg["row"]
        measured, predicted = row["measured_cache_bytes"], row["predicted_cache_bytes"]
        return (
            f"{format_tokens(row['context'])}: measured {'—' if measured is None else format_bytes(measured)}"
            f" vs predicted {'—' if predicted is None else format_bytes(predicted)}"
        )
    if msg.get("event") == "started":
        return f"probe process started (pid {msg['pid']})"
    return msg.get("message")


def mib(n: int | None) -> float | None:
    return None if n is None else n / 2**20


mine: ProbeJob | None = st.session_state.get("probe_job")
running = active_job()
calibrating = active_calibration()  # a probe and a calibration on the same cores would slow each other's timings
# Each full run notes whether a probe was live; the fragment, rerunning alone, redraws the page once it ends.
st.session_state["probe_live"] = running is not None

with st.form("probe"):  # its inputs are link fields (pctx … ptime), as they stand after the last submit
    c1, c2, c3 = st.columns(3)
    contexts_text = c1.text_input("Contexts", key="in_pctx", help="comma separated, e.g. 1k, 4k, 16k")
    device = c2.selectbox("Device", DEVICES, key="in_pdev")
    backend = c3.selectbox(
        "Backend",
        BACKENDS,
        key="in_pbe",
        help="vLLM: on a CUDA GPU (requirements-gpu.txt), or its CPU build (`make engines`)",
    )
    st.caption("vLLM's options (Backend vllm): vLLM runs with them and kvscope's prediction beside it uses them too.")
    v1, v2, v3, v4, v5, v6 = st.columns(6)
    vllm_options = {
        "kv_dtype": v1.selectbox("vLLM KV dtype", VllmEngine.kv_dtypes, key="in_pkv", help="--kv-cache-dtype"),
        "gpu_memory_utilization": v2.number_input(
            "GPU memory utilization",
            *BOUNDS["putil"],
            step=0.01,
            key="in_putil",
            help="--gpu-memory-utilization; on vLLM's CPU backend the probe sets the KV pool instead "
            f"(--kv-cache-memory-bytes, {CPU_KV_REQUESTS} requests at max_model_len)",
        ),
        "max_num_batched_tokens": v3.number_input(
            f"Max batched tokens (0 = {DEFAULT_MAX_NUM_BATCHED_TOKENS:,})", *BOUNDS["pmnbt"], key="in_pmnbt"
        )
        or None,
        "max_num_seqs": v4.number_input(f"Max sequences (0 = {DEFAULT_MAX_NUM_SEQS})", *BOUNDS["pmns"], key="in_pmns")
        or None,
        "prefix_caching": v5.selectbox("Prefix caching", ("on", "off"), key="in_ppc") == "on",
        "block_size": v6.number_input("Block size (0 = vLLM's)", *BOUNDS["pbs"], key="in_pbs") or None,
    }
    c4, c5, c6 = st.columns(3)
    scale = c4.number_input(
        "Layers (0 = automatic)",
        *BOUNDS["players"],
        key="in_players",
        help="A scaled-down copy keeps the layer kinds, widths and mix; 0 picks full size when it fits (on CPU: "
        "models up to 1.5B parameters, when the estimate fits in half the timeout) and a small copy otherwise.",
    )
    steps = c5.number_input("Decode steps", *BOUNDS["psteps"], key="in_psteps")
    timeout = c6.number_input("Timeout (s)", *BOUNDS["ptime"], key="in_ptime")
    start = st.form_submit_button("Run probe", type="primary", disabled=running is not None or calibrating is not None)
    if calibrating is not None:
        st.caption("Disabled while this machine is being calibrated (below).")

if start:
    try:
        target, name = probe_target()
        request = ProbeRequest(
            model=target,
            local_files=bool(inputs.config),  # only kvscope's own copy of an upload is a path
            name=name,
            contexts=parse_contexts(contexts_text),
            backend=backend,
            device=device,
            decode_steps=int(steps),
            scale_layers=int(scale) or None,
            **(vllm_options if backend == "vllm" else {}),
        )
        request.check_limit(model.max_context)
        mine = ProbeJob(request, timeout=float(timeout))
    except ProbeBusy as err:
        st.warning(linkless(str(err)))
    except InputError as err:
        st.error(linkless(str(err)))
    else:
        st.session_state["probe_job"] = mine
        st.rerun()  # redraw with the form disabled and the progress polling


def live() -> None:
    """The running probe's progress and its Cancel button; once it has ended, one full redraw."""
    job = active_job()
    if job is None:
        if st.session_state.get("probe_live"):
            st.session_state["probe_live"] = False
            st.rerun()  # the result, the form and past runs are drawn by the full run
        return
    who = "" if job is mine else " (started from another session)"
    # Not `with st.status(...)`: leaving the block would mark it complete while the probe still runs.
    status = st.status(
        f"Probing {job.request.name or job.request.model}{who}… {time.time() - job.started:.0f} s",
        state="running",
        expanded=True,
    )
    for line in filter(None, map(describe, job.messages[-12:])):
        status.write(line)
    st.button("Cancel", on_click=job.cancel, help="Stops the probe; its process is killed and the GPU memory freed.")


st.fragment(live, run_every=1.0 if running is not None else None)()

result = mine.result if mine is not None and not mine.running else None
if result is not None:
    if result.ok:
        st.success(f"Probe ok in {result.elapsed_s:.1f} s")
    elif result.status == "cancelled":  # asked for: no error text to repeat
        st.info(f"Probe cancelled after {result.elapsed_s:.0f} s: its process was killed and its memory freed.")
    else:
        st.error(linkless(f"Probe {result.status}: {result.error}"))
        if result.log_tail:  # the child's own output, for a bug report: folded, the error above says what happened
            with st.expander("The probe process's last output"):
                st.code(result.log_tail, language=None)
    if result.contexts:
        st.subheader("Predicted vs measured")
        st.write(
            f"**{result.model}** on **{result.device}** ({result.request.backend}, {result.dtype or 'dtype unknown'}"
            f", batch {result.request.batch}), decode mode **{result.decode_mode}**. {result.weights}"
            + (f"; {result.scale}" if result.scale else "")
        )
        if result.vllm_args:  # one set of options: what vLLM was started with is what the prediction used
            st.caption(f"vLLM ran, and kvscope predicted, with: {vllm_args_text(result.vllm_args)}")
        peaks = any(r.peak_bytes is not None for r in result.contexts)
        vllm = result.request.backend == "vllm"  # vLLM's measured figures: its log's, no cache bytes
        timed = any(r.predicted_decode_tok_s is not None for r in result.contexts)  # kvscope's speed for the run
        frame = pd.DataFrame(
            [
                {
                    "context": format_tokens(r.context),
                    "predicted (MiB)": mib(r.predicted_cache_bytes),
                    "measured (MiB)": mib(r.measured_cache_bytes),
                    "measured ÷ predicted": r.ratio,
                    **({"peak (GiB)": None if r.peak_bytes is None else r.peak_bytes / GIB} if peaks else {}),
                    **(
                        {
                            "vLLM KV cache tokens": r.kv_capacity_tokens,
                            "predicted KV cache tokens": r.predicted_kv_capacity_tokens,
                            "vLLM max concurrency": r.max_concurrency,
                            "predicted max concurrency": r.predicted_max_concurrency,
                            "concurrency measured ÷ predicted": r.concurrency_ratio,
                        }
                        if vllm
                        else {}
                    ),
                    "prefill tok/s": r.prefill_tok_s,
                    "decode tok/s": r.decode_tok_s,
                    **(
                        {
                            "predicted prefill tok/s": r.predicted_prefill_tok_s,
                            "predicted decode tok/s": r.predicted_decode_tok_s,
                            "prefill measured ÷ predicted": r.prefill_speed_ratio,
                            "decode measured ÷ predicted": r.decode_speed_ratio,
                        }
                        if timed
                        else {}
                    ),
                    "mode": r.decode_mode,
                }
                for r in result.contexts
            ]
        )
        st.dataframe(
            frame,
            hide_index=True,
            width="stretch",
            column_config={
                name: st.column_config.NumberColumn(format="%.4f")
                for name in ("measured ÷ predicted", "concurrency measured ÷ predicted")
            }
            | {
                name: st.column_config.NumberColumn(format="%.2f")
                for name in ("prefill measured ÷ predicted", "decode measured ÷ predicted")
            },
        )
        if timed:
            st.caption(
                "Predicted speed: `python -m core speed` for the same (scaled) model, engine and context, on "
                f"{result.contexts[0].speed_basis}. Its error bar is the speed figures' on Fit a card."
            )
        elif basis := result.contexts[0].speed_basis:
            st.caption(linkless(f"Speed {basis}."))
        if not peaks:
            st.caption(f"Peak memory: {result.contexts[0].peak_source}.")
        xs = [r.context for r in result.contexts]
        st.plotly_chart(
            curves(
                {  # a figure not known (vLLM measures no cache bytes) is a gap, not a line along zero
                    "predicted": (xs, [mib(r.predicted_cache_bytes) for r in result.contexts]),
                    "measured": (xs, [mib(r.measured_cache_bytes) for r in result.contexts]),
                },
                "cache (MiB)",
            ),
            width="stretch",
        )
        for note in result.notes:
            st.caption(note)


st.subheader("Calibrate this machine")
st.caption(
    "Times this host's RAM bandwidth and llama.cpp's matmul rate per weight format (`python -m core calibrate`: "
    "through llama.cpp when its venv is installed, else numpy) and stores them for this host; every later CPU speed "
    f"figure here (layers in RAM, CPU-only runs) uses them. It takes minutes (stopped after {TIMEOUT_S / 60:.0f}); "
    "the rest of the app keeps working meanwhile."
)
cal_job: CalibrationJob | None = st.session_state.get("calibration_job")
st.session_state["calibration_live"] = calibrating is not None
why_not = "a calibration is running" if calibrating is not None else "a probe is running" if running is not None else ""
if st.button("Calibrate this machine", disabled=bool(why_not), help=f"Disabled: {why_not}." if why_not else None):
    try:
        cal_job = CalibrationJob()
    except CalibrationBusy as err:
        st.warning(linkless(str(err)))
    else:
        st.session_state["calibration_job"] = cal_job
        st.rerun()
if why_not:
    st.caption(f"Disabled while {why_not}.")


def calibrating_live() -> None:
    """The running calibration's elapsed time; once it has ended, one full redraw."""
    job = active_calibration()
    if job is None:
        if st.session_state.get("calibration_live"):
            st.session_state["calibration_live"] = False
            st.rerun()
        return
    who = "" if job is cal_job else " (started from another session)"
    st.status(f"Calibrating{who}… {time.time() - job.started:.0f} s", state="running")


st.fragment(calibrating_live, run_every=1.0 if calibrating is not None else None)()

outcome = cal_job.result if cal_job is not None and not cal_job.running else None
if outcome is not None and outcome.status == "busy":
    st.warning(linkless(f"Not calibrated: {outcome.error}."))
elif outcome is not None and outcome.status != "ok":
    st.error(linkless(f"Calibration {outcome.status} after {outcome.elapsed_s:.0f} s: {outcome.error}"))
elif outcome is not None and outcome.record and outcome.record.get("warning"):
    st.warning(f"{outcome.record['warning']}; calibrate again when the machine is idle.")
stored, unreadable = calibration.load_checked()
if unreadable:
    st.warning(f"{unreadable}. Until then CPU speed figures use the fitted constants (their error shown).")
elif stored is None:
    st.caption("This host has not been calibrated: CPU speed figures use the fitted constants (their error shown).")
else:
    st.success(
        f"{stored.host}: RAM {stored.ram_gb_s:.1f} GB/s"
        + (f" ({stored.ram_thread_gb_s:.1f} with one thread)" if stored.ram_thread_gb_s else "")
        + f", {plural(stored.threads, 'thread')} — {stored.label}, "
        + (f"by kvscope {stored.kvscope}" if stored.kvscope else "by a kvscope whose commit was not recorded")
        + ". Later speed figures on this host use it."
    )
    st.dataframe(
        pd.DataFrame(
            [{"format": f, "decode GFLOP/s per thread": d, "prefill GFLOP/s per thread": p} for f, d, p in stored.rates]
            + [
                {"format": f"{f}, 1 thread", "decode GFLOP/s per thread": d, "prefill GFLOP/s per thread": p}
                for f, d, p in stored.single
            ]
            + [
                {
                    "format": f"attention, {d}-wide heads (f16 cache)",
                    "decode GFLOP/s per thread": dec,
                    "prefill GFLOP/s per thread": pre,
                    "decode cache GB/s per thread": gb_s,
                }
                for d, dec, pre, gb_s in stored.attention
            ]
        ),
        hide_index=True,
    )


def worst_ratio(measured: list[dict]) -> float | None:
    """The measured ÷ predicted farthest from 1 (1.0 = every context exact); None when nothing was comparable."""
    ratios = [m["ratio"] for m in measured if isinstance(m.get("ratio"), int | float)]
    return max(ratios, key=lambda r: abs(r - 1)) if ratios else None


st.subheader("Past runs")
results_path = results_dir() / RESULTS_NAME
rows, warnings = load_results(results_path)
for warning in warnings:
    st.warning(warning)
if trimmed := trim_note(results_path):
    st.caption(trimmed)
if rows:
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "time": r.get("time"),
                    "model": r.get("model"),
                    "device": r.get("gpu") or "cpu",
                    "status": r.get("status"),
                    "contexts": ", ".join(format_tokens(m["context"]) for m in r.get("measured", [])),
                    "worst measured ÷ predicted": worst_ratio(r.get("measured", [])),
                }
                for r in reversed(rows[-50:])
            ]
        ),
        hide_index=True,
        width="stretch",
        column_config={"worst measured ÷ predicted": st.column_config.NumberColumn(format="%.4f")},
    )
else:
    st.caption("No probe has run on this machine yet.")
