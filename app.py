"""kvscope — Fit a card (the default page): the verdict, the context table, the memory breakdown and the
arithmetic behind them. Other pages live in pages/."""

import streamlit as st

from core.errors import InputError
from core.explain import max_context_line, row_lines, usable_line
from core.fit import Setup, cache_in_ram, context_limit, fit, table_contexts
from core.llamacpp_autofit import autofit_sentence
from core.report import (
    IN_RAM,
    breakdown_records,
    cache_help,
    constant_table,
    display_records,
    layers_in_ram,
    max_context_text,
    requests_text,
    table_records,
    verdict,
)
from core.speed import Hardware, predict
from core.speed.calibration import load as host_calibration
from core.speed.groups import chosen_backend
from core.speed.ram import ISA_NAMES, ram_gb_s
from core.speed.report import error_note, speed_lines, speed_or_none
from core.units import format_bytes, format_tokens
from ui.arrow import arrow_table
from ui.figures import figure_row
from ui.inputs import downloads, sidebar
from ui.layout import linkless, mobile_css, opened, page_config, painted
from ui.state import BOUNDS
from ui.table import markdown_table

page_config("fit a card")
st.title("Fit a card")
inputs, model, setup = sidebar()


@st.cache_data(show_spinner=False, max_entries=128)
def compute(_setup: Setup, context: int, key: str):
    """`key` (the setup's repr) stands in for the setup, which Streamlit cannot hash."""
    limit = context_limit(_setup)
    return fit(_setup, sorted(set(table_contexts(limit)) | {min(context, limit)}))


try:
    result = compute(setup, inputs.ctx, repr(setup))
except InputError as err:
    st.error(linkless(str(err)))
    st.stop()

context = min(inputs.ctx, result.context_limit)
if context < inputs.ctx:
    st.warning(f"{model.name} takes at most {format_tokens(result.context_limit)} tokens; showing that instead.")
row = next(r for r in result.rows if r.context == context)
v = verdict(result, row)
(st.success if v.fits else st.error)(f"**{v.headline}.** {v.sentence}")
figure_row(
    {
        "Fits?": "yes" if row.fits else "no",
        "Max context, one sequence": max_context_text(result),
        f"Requests at {format_tokens(context)}": requests_text(result, row),
        "Cache at this context": format_bytes(row.cache_bytes),
    },
    helps={
        "Cache at this context": cache_help(result),
        "Max context, one sequence": "the longest context one request fits at: 'How is this computed?' shows the "
        "rows on either side of it",
    },
)
for note in result.notes:
    st.info(note)


@st.cache_data(show_spinner=False, max_entries=64)
def autofit_line(_setup: Setup, frontend: str, key: str) -> str | None:
    """What llama-server / llama-cli pick on their own (--fit, on by default) when -c and -ngl are left unset."""
    return autofit_sentence(_setup, frontend)


if setup.engine.name == "llama.cpp":
    line = autofit_line(setup, inputs.fe, repr(setup) + inputs.fe)
    if line:
        st.info(line)


@st.cache_data(show_spinner=False, max_entries=64)
def ollama_line(_setup: Setup, context: int, key: str) -> tuple[str, bool]:
    """What Ollama itself does with these inputs (its own split, on the Ollama page's default host), and whether
    that is every layer on the GPU and fitting. The verdict above is llama.cpp with -ngl as set here."""
    from core.ollama_report import ollama_sentence  # ~20 ms of imports only the ollama front end needs

    return ollama_sentence(_setup, context)


if setup.engine.name == "llama.cpp" and inputs.fe == "ollama":
    text, whole = ollama_line(setup, context, repr(setup))
    (st.info if whole else st.warning)(text)
    if painted():  # as the sidebar's links: none before the first paint's rerun (ui.inputs.sidebar)
        st.page_link("pages/5_ollama.py", label="Ollama on your card: its split in detail", icon=":material/memory:")


def host(ram: float, threads: int, isa: str, backend: str | None) -> Hardware:
    """The machine layers left in RAM run on, as the sidebar describes it (and this server's calibration, if any:
    python -m core calibrate), and the backend llama.cpp drives the card with (None: the card's vendor's)."""
    return Hardware(ram_gb_s=ram, threads=threads, backend=backend, isa=isa, calibration=host_calibration())


@st.cache_data(show_spinner=False, max_entries=64)
def speeds(_result, ram: float, threads: int, isa: str, backend: str | None, key: str):
    """`key` stands for the result: the setup and the contexts of its rows (one setup, several context sets)."""
    return speed_or_none(_result, host(ram, threads, isa, backend))


# Layers left in system RAM (llama.cpp -ngl) run at its bandwidth: measured here once, editable for your machine.
in_ram = layers_in_ram(setup)
ram_measured = ram_gb_s()[0] if in_ram else 0.0
ram, threads, isa = ram_measured, 8, ""
if in_ram:  # the three are in the link (ram, thr, isa); an empty RAM box is this server's measured figure
    r1, r2, r3 = st.columns(3)
    ram = r1.number_input(
        "System RAM bandwidth (GB/s)", *BOUNDS["ram"], value=None, key="in_ram",
        placeholder=f"measured here: {ram_measured:.1f}",
    ) or ram_measured  # fmt: skip
    threads = int(r2.number_input("CPU threads", *BOUNDS["thr"], key="in_thr"))
    # the visitor's CPU, not this server's: llama.cpp's quantised prefill on it differs 2.5x with AVX-512
    isa = r3.selectbox(
        "CPU vector ISA", ("", *ISA_NAMES), format_func=lambda i: ISA_NAMES.get(i, "not known"), key="in_isa",
        help="Sets the quantised kernels' prefill rate for layers in RAM; not known: the rate pooled over CPUs.",
    )  # fmt: skip
backend, backend_problem = chosen_backend(setup.card, inputs.backend, setup.engine.name)
if backend_problem:
    st.warning(f"Backend: {backend_problem}.")
result_key = f"{setup!r} {[r.context for r in result.rows]}"  # the setup and its table's contexts
speed_rows, no_speed = speeds(result, ram, threads, isa, backend, result_key)

st.subheader("Context table")
shown = display_records(result)
st.caption(
    f"{setup.card.name}" + (f" × {setup.gpus}" if setup.gpus > 1 else "") + ", per GPU"
    + ("; llama.cpp splits the layers, and each row is the GPU its GPU column names" if "GPU" in shown[0] else "")
)  # fmt: skip
if constant_table(result):  # a pure state-space model: one row says it all
    shown = [r for r in shown if r["context"] == format_tokens(context)]
    st.caption(
        f"Every context from {format_tokens(result.rows[0].context)} to {format_tokens(result.rows[-1].context)} "
        "gives the same numbers: this model's cache is fixed state that does not grow with context."
    )
if speed_rows:
    by_context = {format_tokens(r["context"]): r for r in speed_rows}
    shown = [
        r | {"decode tok/s": by_context[r["context"]]["decode_tok_s"],
             "aggregate tok/s": by_context[r["context"]]["aggregate_tok_s"]}
        for r in shown
    ]  # fmt: skip
# printf formats, as the data grid's column_config takes them; vLLM reports a fractional concurrency, the other
# engines run whole sequences
formats = {c: "%.3f" for c in shown[0] if "GiB" in c} | {
    "memory used (%)": "%.1f%%",
    "requests": "%.2f" if result.vllm else "%d",
    "decode tok/s": "%.1f",
    "aggregate tok/s": "%.0f",
}
# A row that does not fit has no speed (null): "—" with why, where a bare None would read as missing data. Only the
# speed columns can be null, and the requests where llama.cpp keeps every layer's cache in system RAM (-ngl 0),
# which is then every row's; the values stay numbers.
no_fit = IN_RAM if cache_in_ram(result, result.rows[0]) else "— (does not fit)"
column_help = {"decode tok/s": "one sequence", "aggregate tok/s": "all sequences together, with as many running as fit"}
if painted():
    mobile_css()  # it moves the data grid below its toolbar on phones: no grid, no CSS (or its chunks)
    st.dataframe(
        arrow_table(shown),  # not a pandas DataFrame: no pandas import before the first table
        hide_index=True,
        width="stretch",
        lazy=False,  # a few rows: sent whole (deciding whether to send them lazily imports pandas)
        placeholder=no_fit,
        column_config={
            c: st.column_config.NumberColumn(c, format=f, help=column_help.get(c)) for c, f in formats.items()
        }
        | {
            "context": st.column_config.TextColumn("context", pinned=True),
            "memory used (%)": st.column_config.ProgressColumn(
                "memory used (%)", min_value=0.0, max_value=100.0, format=formats["memory used (%)"]
            ),
        },
    )
else:
    # A session's first run: the same figures in plain markdown. The data grid (pyarrow and numpy on a fresh
    # server, the grid's code in the tab: ~0.1 s of a first render) comes with the inputs (ui.layout.wait_for_paint).
    st.markdown(markdown_table(shown, formats, no_fit))
st.caption(
    "Per GPU. Binary units: 1 GiB = 2³⁰ bytes. Requests = how many of that length fit at once. Decode tok/s: "
    "one sequence; aggregate: as many sequences as fit, together (a roofline with fitted or assumed engine "
    "efficiencies, see below)." + (f" No speed: {no_speed}" if no_speed else "") + error_note(speed_rows or [])
)


@st.cache_resource(show_spinner=False, max_entries=64)
def breakdown_chart(_result, key: str):
    """One figure per result, shared by every session: building a plotly figure costs more than the fit, and
    st.plotly_chart only reads it (to_dict)."""
    from ui.charts import breakdown  # plotly: imported once the verdict and the table are out

    return breakdown(breakdown_records(_result))


@st.cache_data(show_spinner=False, max_entries=64)
def speed_text(
    _setup: Setup, ram: float, threads: int, isa: str, backend: str | None, context: int, batch: int, key: str
) -> str:
    """The speed explanation at one context (`key`: the setup's repr): one sequence, the decode tok/s column, and
    the `batch` sequences the aggregate tok/s column runs at once, where they are more."""
    hw = host(ram, threads, isa, backend)
    lines = speed_lines(predict(_setup, hw, context))
    if batch > 1:
        lines += speed_lines(predict(_setup, hw, context, batch), prefill=False)
    return "\n\n".join(lines)


# Both drawn only while open: closed, their text would still be sent and drawn, hidden, before the first paint.
if how := opened("How is this computed?", "kv_how"):
    with how:
        st.markdown(usable_line(result))
        st.markdown("\n\n".join(row_lines(result, row)))
        st.markdown(max_context_line(result))
        st.caption(f"Engine rules: {setup.engine.name}; see core/engines/ for the source each rule was read from.")

if speed_rows and (how_speed := opened("How is the speed computed?", "kv_how_speed")):
    with how_speed:
        if row.fits:
            batch = next(r["aggregate_batch"] for r in speed_rows if r["context"] == context)
            st.markdown(speed_text(setup, ram, threads, isa, backend, context, batch, repr(setup)))
        else:  # the table shows "—" for this row: no figure here either
            st.markdown(
                f"{format_tokens(context)} tokens do not fit on {setup.card.name}, so there is no speed to work "
                "out; pick a shorter context or a larger card."
            )

if painted():  # the download buttons' code is one more fetch for a fresh tab: not before the first paint
    downloads(inputs, shown, {"table": table_records(result)}, kv_used=row.account.kv_dtype)

# Last on the page, and on a session's first run only once the browser has drawn the rest (ui.layout.wait_for_paint):
# plotly.js costs a fresh tab ~0.6 s of main thread.
st.subheader("Where the memory goes")
if painted():
    st.plotly_chart(breakdown_chart(result, result_key), width="stretch")
else:
    st.caption("Drawing the chart…")
