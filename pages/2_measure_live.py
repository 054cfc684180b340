"""Measure live: run a short probe on this machine (in a child process) and set what it measures beside kvscope's
prediction."""

import hashlib
import json
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from core.errors import InputError
from core.probe import RANDOM_LABEL, ProbeBusy, ProbeRequest, load_results, run_probe
from core.probe.results import RESULTS_NAME, results_dir
from core.units import GIB, format_bytes, format_tokens, parse_tokens
from ui.charts import curves
from ui.inputs import sidebar
from ui.state import unpack_config

st.set_page_config(page_title="kvscope — measure live", page_icon=":material/memory:", layout="wide")
inputs, model, setup = sidebar()
st.title("Measure live")
st.caption(
    "Builds the model with transformers in a separate process — its real weights if they are already on this "
    f"machine, else random ones ({RANDOM_LABEL}) — prefills it at each context, sums the tensors in the cache it "
    "returns and times decoding. One probe runs at a time on this machine."
)


def probe_target() -> str:
    """What the child process loads: the preset/repo id, or the uploaded config written to a file."""
    if not inputs.config:
        return inputs.model
    folder = Path(tempfile.gettempdir()) / "kvscope-uploads"
    folder.mkdir(exist_ok=True)
    path = folder / f"{hashlib.sha256(inputs.config.encode()).hexdigest()[:16]}.json"
    path.write_text(json.dumps(unpack_config(inputs.config)))
    return str(path)


with st.form("probe"):
    c1, c2, c3 = st.columns(3)
    contexts_text = c1.text_input("Contexts", "512, 2k", help="comma separated, e.g. 1k, 4k, 16k")
    device = c2.selectbox("Device", ["auto", "cpu", "cuda"])
    backend = c3.selectbox("Backend", ["transformers", "vllm"], help="vLLM needs a CUDA GPU and requirements-gpu.txt")
    c4, c5, c6 = st.columns(3)
    scale = c4.number_input(
        "Layers (0 = automatic)",
        0,
        1000,
        0,
        help="A scaled-down copy keeps the layer kinds, widths and mix; 0 picks full size on a "
        "GPU when it fits and a small copy on CPU.",
    )
    steps = c5.number_input("Decode steps", 2, 512, 8)
    timeout = c6.number_input("Timeout (s)", 10, 3600, 300)
    start = st.form_submit_button("Run probe", type="primary")

if start:
    try:
        contexts = tuple(sorted({parse_tokens(t) for t in contexts_text.split(",") if t.strip()}))
        request = ProbeRequest(
            model=probe_target(),
            contexts=contexts,
            backend=backend,
            device=device,
            decode_steps=int(steps),
            scale_layers=int(scale) or None,
        )
    except InputError as err:
        st.error(str(err))
        st.stop()
    st.button("Cancel", help="Stops the probe; its process is killed and the GPU memory released.")
    with st.status(f"Probing {model.name}…", expanded=True) as status:

        def progress(msg: dict) -> None:
            if msg.get("event") == "context":
                row = msg["row"]
                status.write(
                    f"{format_tokens(row['context'])}: measured {format_bytes(row['measured_cache_bytes'] or 0)}"
                    f" vs predicted {format_bytes(row['predicted_cache_bytes'] or 0)}"
                )
            elif msg.get("message"):
                status.write(msg["message"])

        try:
            result = run_probe(request, progress, timeout=float(timeout))
        except ProbeBusy as err:
            status.update(label="Busy", state="error")
            st.warning(str(err))
            st.stop()
        except InputError as err:
            status.update(label="Could not start", state="error")
            st.error(str(err))
            st.stop()
        state = "complete" if result.ok else "error"
        status.update(label=f"Probe {result.status} in {result.elapsed_s:.1f} s", state=state, expanded=not result.ok)
    st.session_state["probe_result"] = result

result = st.session_state.get("probe_result")
if result is not None:
    if not result.ok:
        st.error(f"Probe {result.status}: {result.error}")
        if result.log_tail:
            st.code(result.log_tail, language=None)
    if result.contexts:
        st.subheader("Predicted vs measured")
        st.write(
            f"**{result.model}** on **{result.device}**, decode mode **{result.decode_mode}**. {result.weights}"
            + (f"; {result.scale}" if result.scale else "")
        )
        frame = pd.DataFrame(
            [
                {
                    "context": format_tokens(r.context),
                    "predicted (MiB)": (r.predicted_cache_bytes or 0) / 2**20,
                    "measured (MiB)": (r.measured_cache_bytes or 0) / 2**20,
                    "measured ÷ predicted": r.ratio,
                    "peak (GiB)": r.peak_bytes / GIB if r.peak_bytes else None,
                    "prefill tok/s": r.prefill_tok_s,
                    "decode tok/s": r.decode_tok_s,
                    "mode": r.decode_mode,
                }
                for r in result.contexts
            ]
        )
        st.dataframe(
            frame,
            hide_index=True,
            width="stretch",
            column_config={"measured ÷ predicted": st.column_config.NumberColumn(format="%.4f")},
        )
        xs = [r.context for r in result.contexts]
        st.plotly_chart(
            curves(
                {
                    "predicted": (xs, [(r.predicted_cache_bytes or 0) / 2**20 for r in result.contexts]),
                    "measured": (xs, [(r.measured_cache_bytes or 0) / 2**20 for r in result.contexts]),
                },
                "cache (MiB)",
            ),
            width="stretch",
        )
        for note in result.notes:
            st.caption(note)

st.subheader("Past runs")
rows, warnings = load_results(results_dir() / RESULTS_NAME)
for warning in warnings:
    st.warning(warning)
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
                    "worst ratio": max((abs((m.get("ratio") or 1) - 1) for m in r.get("measured", [])), default=None),
                }
                for r in reversed(rows[-50:])
            ]
        ),
        hide_index=True,
        width="stretch",
    )
else:
    st.caption("No probe has run on this machine yet.")
