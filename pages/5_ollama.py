"""Ollama on your card: which runner Ollama gives the model and why, the layers and context it chooses per card,
kvscope's account of that split, and the speed that follows. The page only reads inputs and draws;
core.ollama_report does the work."""

import pandas as pd
import streamlit as st

from core.engines.ollama_engine import LAST_GO_ENGINE
from core.engines.runtimes import ESTIMATOR_VERSION, OLLAMA_KV_TYPES, OLLAMA_VERSION, OllamaSettings
from core.errors import InputError
from core.memory.gpus import card_named, cards
from core.model.loading import load_model, presets
from core.ollama_report import (
    FITS_TEXT,
    GPU_OVERHEAD_NOTE,
    MEASURED,
    SPEED_AT,
    TYPICAL_SOURCE,
    error_short,
    explain,
    host,
    ollama_grid,
    parse_free,
)
from core.speed.cli import error_record
from core.speed.predict import PREFILL_SPANS, prefill_spans
from core.units import GIB, MIB, format_tokens, layer_span, parse_tokens, plural
from ui.inputs import list_to_link, list_widget_value, sidebar, toggle_to_link
from ui.layout import linkless, mobile_css, opened, page_config, painted
from ui.state import BOUNDS, MAX_OLLAMA_CARDS, OLLAMA_FLASH, OLLAMA_RAM, OLLAMA_WEIGHTS

page_config("Ollama")
mobile_css()
st.title("Ollama on your card")
inputs, model, setup = sidebar(model_only=True)  # card, engine and context are Ollama's own here
RAM_CHOICES = {"typical": f"Typical desktop ({TYPICAL_SOURCE.split(': ', 1)[1]})", "given": "Enter a figure"}
OLLAMA_SETTINGS = "Ollama settings and host"
RAM_CHOICES[MEASURED] = "Measured on the server running kvscope (its calibration, once calibrated on Measure live)"


# Lists travel in the link as comma-separated fields; their widgets hold lists (as on the hybrid page).
for widget, value in (("ol_cards", inputs.ocards), ("ol_models", inputs.omodels)):
    list_widget_value(widget, [n for n in value.split(",") if n])

st.caption(
    f"For each card: the runner Ollama {OLLAMA_VERSION} gives the model (llama-server, for every model since "
    f"v0.30.0) and the layers it puts on the GPU: llama-server's --fit, since Ollama passes no -ngl; beside it, "
    f"for attention-only models, Ollama's own {ESTIMATOR_VERSION} estimate (llm/memory.go estimateGPULayers), and "
    f"the runner {LAST_GO_ENGINE} chose (its Go engine for many families) with that engine's layout. kvscope's "
    "llama.cpp account of the split and the speed it predicts follow. Read from source; none of it was checked "
    "against a running Ollama (none runs here)."
)
# Folded, with what is set beside it: on a phone the settings would otherwise fill the first screen. Not in its label:
# a new label is a new expander, which folds shut after every change made in it.
st.caption(
    f"Set: num_ctx {inputs.octx or 'default'}, KV {inputs.okv}, flash attention {inputs.ofa}, {inputs.ow}, "
    f"{len(st.session_state['ol_cards'])} card(s), free {inputs.ofree or 'all'}"
)
with st.expander(OLLAMA_SETTINGS):  # every control is bound to a link field (in_o…)
    c1, c2, c3 = st.columns(3)
    listed = [name for name, card in cards().items() if card.bandwidth_gb_s and card.dense_tflops]
    chosen = c1.multiselect(
        "Cards", listed, key="ol_cards", max_selections=MAX_OLLAMA_CARDS, on_change=list_to_link,
        args=("ol_cards", "in_ocards"), disabled=not painted(),  # as the hybrid page's comparators
    )  # fmt: skip
    others = c1.multiselect(
        "Also compare", sorted(presets()), key="ol_models", max_selections=4, on_change=list_to_link,
        args=("ol_models", "in_omodels"), help="more models, one row per card", disabled=not painted(),
    )  # fmt: skip
    ctx_text = c2.text_input(
        "num_ctx", key="in_octx", max_chars=40, placeholder="Ollama's default for the card", help="e.g. 8k"
    )
    parallel = int(c2.number_input("OLLAMA_NUM_PARALLEL", *BOUNDS["onp"], key="in_onp"))
    kv_type = c2.selectbox("OLLAMA_KV_CACHE_TYPE", OLLAMA_KV_TYPES, key="in_okv", help="q8_0/q4_0 need flash attention")
    flash = c2.radio("OLLAMA_FLASH_ATTENTION", list(OLLAMA_FLASH), horizontal=True, key="in_ofa")
    overhead_mib = c2.number_input(
        "OLLAMA_GPU_OVERHEAD (MiB)", *BOUNDS["oover"], step=256, key="in_oover", help=GPU_OVERHEAD_NOTE
    )
    free_text = c1.text_input(
        "Free GPU memory", key="in_ofree", max_chars=20, placeholder="the whole card",
        help="as Ollama logs it ('available'), e.g. 7.1GiB: what another program or the desktop leaves free",
    )  # fmt: skip
    weights = c3.selectbox("Weights (GGUF)", OLLAMA_WEIGHTS, key="in_ow")
    ram_choice = c3.radio("Host RAM bandwidth", OLLAMA_RAM, format_func=RAM_CHOICES.get, key="in_oram")
    ram_given = c3.number_input("RAM GB/s", *BOUNDS["ogbs"], key="in_ogbs", disabled=ram_choice != "given")
    threads = int(c3.number_input("CPU threads", *BOUNDS["othr"], key="in_othr"))


@st.cache_data(show_spinner="Placing every model on every card…", max_entries=32)
def grid(_specs, cards: tuple[str, ...], _settings, weights: str, _hw, free: int | None, key: str):
    """ollama_grid, once per inputs (`key` stands for the unhashable ones): a rerun (a paint, a fold) redoes none."""
    return ollama_grid(_specs, [card_named(name) for name in cards], _settings, weights, _hw, free)


try:
    num_ctx = parse_tokens(ctx_text) if ctx_text.strip() else None
    settings = OllamaSettings(
        num_ctx=num_ctx,
        num_parallel=parallel,
        kv_cache_type=kv_type,
        flash_attention=OLLAMA_FLASH[flash],
        gpu_overhead=int(overhead_mib) * MIB,
    )
    ram = {"typical": None, "given": ram_given, MEASURED: MEASURED}[ram_choice]
    hw, ram_source = host(ram, threads)
    specs = [model, *(load_model(name, isolated=True) for name in others if name != model.name)]
    free = parse_free(free_text)
    rows = grid(specs, tuple(chosen), settings, weights, hw, free, repr((specs, chosen, settings, weights, hw, free)))
except InputError as err:
    st.error(linkless(f"{err}."))
    st.stop()

if not rows:
    st.info("Pick at least one card.")
    st.stop()
table = pd.DataFrame(
    {
        "model": r.model,
        "card": r.card,
        "runner": r.runner,
        "num_ctx": format_tokens(r.num_ctx),
        "KV": r.kv_type,
        "Ollama layers": r.offloaded,
        "decode tok/s": r.decode_tok_s,
        "decode ±": error_short(error_record(r.speed.decode_error)),
        "prefill tok/s": r.prefill_tok_s,
        "prefill ±": error_short(error_record(r.speed.prefill_error)),
        "fit: experts in RAM": layer_span(*r.fit_cpu_experts) if r.fit_cpu_experts else "",
        f"{ESTIMATOR_VERSION} layers": "" if r.estimate_layers is None else f"{r.estimate_layers}/{r.blocks + 1}",
        "Ollama VRAM (GiB)": None if r.ollama_vram_bytes is None else r.ollama_vram_bytes / GIB,
        "Ollama total (GiB)": None if r.ollama_total_bytes is None else r.ollama_total_bytes / GIB,
        "kvscope GPU (GiB)": r.kvscope_gpu_bytes / GIB,
        "kvscope fits": FITS_TEXT[r.kvscope_fits],
        "TTFT (s)": r.ttft_s,
        f"{LAST_GO_ENGINE} runner": r.go_runner,
        "Go engine layers": f"{r.go_layers}/{r.blocks + 1}" if r.go_layers is not None else "",
        "Go engine KV (GiB)": None if r.go_kv_bytes is None else r.go_kv_bytes / GIB,
    }
    for r in rows
)
ERROR_HELP = (
    "median error of kvscope's speed on published llama.cpp runs of this card group held out of the fit "
    "(measurements/speed/corpus); the group is named below the table. * its held-out runs do not cover all of this "
    "figure (layers or experts on the CPU, MoE or DeltaNet layers where they had none): the line below says what"
)
gib = {c: st.column_config.NumberColumn(c, format="%.2f") for c in table.columns if "GiB" in c}
MAIN_COLUMNS = [
    "card", "Ollama layers", "decode tok/s", "decode ±", "num_ctx", "runner", "model", "KV", "TTFT (s)", "kvscope fits"
]  # fmt: skip
every = st.toggle(
    "Every column", value=inputs.oall == "on", key="ol_every", on_change=toggle_to_link, args=("ol_every", "in_oall"),
    help="Ollama's memory figures, kvscope's account, llama-server's fit",
)  # fmt: skip
st.dataframe(
    table,
    hide_index=True,
    key="ollama_table",
    column_order=None if every else MAIN_COLUMNS,  # the answer first, narrow enough for a phone
    column_config={
        "card": st.column_config.TextColumn("card", pinned=True),
        "Ollama layers": st.column_config.TextColumn(
            "Ollama layers",
            help="as Ollama logs 'offloaded N/M layers to GPU': blocks, plus the output layer; current Ollama "
            "passes no -ngl, so llama-server's --fit chooses",
        ),
        **gib,
        "kvscope fits": st.column_config.TextColumn(
            "kvscope fits",
            help="kvscope's llama.cpp account of the GPU's part of this split (layers left in system RAM, and their "
            "cache, are not sized); RAM: every layer and its cache in system RAM",
        ),
        "decode tok/s": st.column_config.NumberColumn("decode tok/s", format="%.1f", help="one request"),
        "prefill tok/s": st.column_config.NumberColumn("prefill tok/s", format="%.0f"),
        "decode ±": st.column_config.TextColumn("decode ±", help=ERROR_HELP),
        "prefill ±": st.column_config.TextColumn("prefill ±", help=ERROR_HELP),
        "TTFT (s)": st.column_config.NumberColumn("TTFT (s)", format="%.2f", help="prefill of a num_ctx prompt"),
        f"{ESTIMATOR_VERSION} layers": st.column_config.TextColumn(
            f"{ESTIMATOR_VERSION} layers",
            help=f"what Ollama {ESTIMATOR_VERSION}'s estimateGPULayers chose, where it sized the load (the llama.cpp "
            "runner's attention-only models); its VRAM and total estimates beside",
        ),
    },
)
for spec in specs:
    if num_ctx and spec.max_context and num_ctx > spec.max_context:  # request_ctx: Ollama caps it, as the table does
        st.info(
            f"{spec.name}: num_ctx {format_tokens(num_ctx)} is past its training context "
            f"{format_tokens(spec.max_context)}; Ollama caps it there (llm/server.go), as the table does."
        )
    if prefill_spans(len(spec.layers)) < PREFILL_SPANS:
        st.info(
            f"{spec.name} has {len(spec.layers):,} layers: its prefill is timed over {prefill_spans(len(spec.layers))} "
            f"span(s) of chunks instead of {PREFILL_SPANS}, bounded to keep a request under 2 s of server CPU."
        )
st.caption(
    f"Speed: {SPEED_AT}. Layers left in RAM run at {hw.ram_gb_s:.1f} GB/s ({ram_source}), "
    f"{plural(hw.threads, 'thread')}. "
    "Binary units: 1 GiB = 2³⁰ bytes. "
    + (f"Each card has {free_text.strip()} free." if free is not None else "Each card is taken as empty.")
)
if overhead_mib:
    st.caption(GPU_OVERHEAD_NOTE + ".")
for decode_bar, prefill_bar in sorted({(r.speed.decode_error.label, r.speed.prefill_error.label) for r in rows}):
    st.caption(f"Error bar: decode {decode_bar}; prefill {prefill_bar}.")
for spec in specs:
    row = next(r for r in rows if r.model == spec.name)
    st.caption(f"**{spec.name}**: {row.runner}, because {row.runner_why}. At {LAST_GO_ENGINE}: {row.go_runner_why}.")

# Drawn only while open (ui.layout.opened); the row picked stays while it is closed, in a plain key: a widget not
# drawn loses its state.
if how := opened("How is each figure computed?", "ol_how"):
    with how:
        labels = [f"{r.model} on {r.card}" for r in rows]
        if st.session_state.get("_ol_row") in labels and "ol_row" not in st.session_state:
            st.session_state["ol_row"] = st.session_state["_ol_row"]
        st.session_state["_ol_row"] = st.selectbox("Row", labels, key="ol_row")
        row = rows[labels.index(st.session_state["_ol_row"])]
        spec = next(m for m in specs if m.name == row.model)
        st.markdown("\n\n".join(explain(row, spec)))
