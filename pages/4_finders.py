"""Finders: every card ranked for the chosen model, and every bundled model ranked for the chosen card.

The page only draws: core.finders runs `fit` on each candidate, orders the answers, times them and writes the rows."""

from dataclasses import replace

import pandas as pd
import streamlit as st

from core.errors import InputError
from core.finders import COST_BASIS, RunOptions, answer_speeds, card_rows, model_rows, rank_cards, rank_models
from core.fit import Setup, context_limit
from core.model.loading import load_model, presets
from core.units import format_tokens
from ui.inputs import EDITS, sidebar
from ui.layout import linkless, mobile_css, page_config
from ui.state import DEFAULTS, FINDER_VIEWS, Inputs, share_query

page_config("finders")
mobile_css()
st.title("Which card, which model")
inputs, model, setup = sidebar()
# the sidebar's GPU count: every row is on that many
ON_GPUS, EACH = ("one", "One GPU") if setup.gpus == 1 else (f"{setup.gpus}×", f"{setup.gpus} GPUs")
SPEED_NOTE = (
    " Decode tok/s and time to first token: one request at that context (core.speed's roofline, as on Fit a card); "
    "“—” says why a row has none. The error column: how far off such figures were on published runs held out of "
    "the fit, for the row's backend and card class (* : part of the figure is not covered, e.g. a MoE or DeltaNet "
    "model's own kernels; *Fit a card* and `python -m core speed` say which)."
)

# -ngl and --n-cpu-moe count one model's layers: the cards view applies them, the models view cannot
UNPLACED = (
    " The sidebar's layers on the GPU (-ngl) and experts in RAM (--n-cpu-moe) are its model's and are not applied "
    "here: each model is placed whole on the card."
)


WORKING = "worked out"  # the column of links to Fit a card, where each row's figures are worked out
WORKING_COLUMN = {
    WORKING: st.column_config.LinkColumn(
        WORKING, display_text="Fit a card", help="this row's inputs on Fit a card, with 'How is this computed?'"
    )
}


def fit_link(sidebar_inputs: Inputs, **changes: object) -> str:
    """A link to Fit a card (the root page, beside this one) with the sidebar's inputs and this row's changes."""
    return "./?" + share_query(replace(sidebar_inputs, **changes))


@st.cache_data(show_spinner="Fitting every card…", max_entries=32)
def cards_frame(_setup: Setup, _inputs: Inputs, context: int, key: str) -> pd.DataFrame:
    """`key` (the setup's repr and the link's query) stands in for the setup and inputs, which Streamlit cannot
    hash."""
    run = RunOptions.of(_setup)
    answers = rank_cards(
        _setup.model, _setup.engine, context, _setup.weights, _setup.kv_dtype, gpus=_setup.gpus, run=run
    )
    rows = card_rows(answers, answer_speeds(answers))
    return pd.DataFrame(
        [row | {WORKING: fit_link(_inputs, card=a.card.name)} for row, a in zip(rows, answers, strict=True)]
    )


@st.cache_data(show_spinner="Fitting every bundled model…", max_entries=32)
def models_frame(_setup: Setup, _inputs: Inputs, context: int, key: str) -> pd.DataFrame:
    models = [load_model(name) for name in presets()]
    answers = rank_models(models, _setup.engine, _setup.card, context, _setup.gpus, _setup.gpu_memory_utilization)
    rows = model_rows(answers, answer_speeds(answers))
    # each model as bundled and placed whole, in the format and KV dtype the row found: no upload, what-if or -ngl
    whole = {key: getattr(DEFAULTS, key) for key in ("source", "config", "ngl", "ncmoe", *EDITS)}
    return pd.DataFrame(
        [
            row | {WORKING: fit_link(_inputs, model=a.model.name, weights=a.weights_format, kv=a.kv_dtype, **whole)}
            for row, a in zip(rows, answers, strict=True)
        ]
    )


# A control rather than st.tabs: its value is the link's `ftab` (the sidebar writes every in_* key into the link),
# and only the chosen table is worked out.
labels = {"cards": f"Cards for {model.name}", "models": f"Models for {setup.card.name}"}
view = st.segmented_control(
    "View", FINDER_VIEWS, key="in_ftab", required=True, format_func=labels.get, label_visibility="collapsed"
)
if view == "models":
    st.caption(
        f"Every bundled model on {ON_GPUS} {setup.card.name} with {setup.engine.name} at {format_tokens(inputs.ctx)} "
        "tokens per request (a model whose own limit is lower does not fit, and says so). Each is shown in the "
        "largest weight format and KV dtype that fit; models that fit come first, the largest first."
        + SPEED_NOTE
        + (UNPLACED if setup.gpu_layers is not None or setup.cpu_experts else "")
    )
    try:
        st.dataframe(
            models_frame(setup, inputs, inputs.ctx, repr(setup) + str(inputs.ctx) + share_query(inputs)),
            hide_index=True,
            key="models_table",
            column_config=WORKING_COLUMN,
        )
    except InputError as err:
        st.error(linkless(str(err)))
else:
    context = min(inputs.ctx, context_limit(setup))
    capped = f" ({model.name}'s limit: {format_tokens(inputs.ctx)} was asked)" if context < inputs.ctx else ""
    st.caption(
        f"{EACH} of each card (the sidebar's GPUs; figures per GPU), {setup.engine.name}, "
        f"weights {setup.weights or 'as the checkpoint'}, "
        f"{format_tokens(context)} tokens per request{capped}. Cards that fit come first, ranked by {COST_BASIS}; "
        "the rest follow, closest first, with the reason each falls short." + SPEED_NOTE
    )
    try:
        st.dataframe(
            cards_frame(setup, inputs, context, repr(setup) + str(context) + share_query(inputs)),
            hide_index=True,
            key="cards_table",
            column_config=WORKING_COLUMN,
        )
    except InputError as err:
        st.error(linkless(str(err)))
