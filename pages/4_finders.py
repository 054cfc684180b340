"""Finders: every card ranked for the chosen model, and every bundled model ranked for the chosen card.

The page only draws: core.finders runs `fit` on each candidate and orders the answers."""

import pandas as pd
import streamlit as st

from core.errors import InputError
from core.finders import COST_BASIS, rank_cards, rank_models
from core.fit import Setup, context_limit
from core.model.loading import load_model, presets
from core.units import format_bytes, format_tokens
from ui.inputs import sidebar
from ui.layout import FAVICON, mobile_css

st.set_page_config(page_title="kvscope — finders", page_icon=FAVICON, layout="wide")
mobile_css()
st.title("Which card, which model")
inputs, model, setup = sidebar()


def _requests(value: float) -> str:
    return "∞" if value == float("inf") else f"{value:,.2f}"


@st.cache_data(show_spinner="Fitting every card…", max_entries=32)
def cards_frame(_setup: Setup, context: int, key: str) -> pd.DataFrame:
    """`key` (the setup's repr) stands in for the setup, which Streamlit cannot hash."""
    answers = rank_cards(_setup.model, _setup.engine, context, _setup.weights, _setup.kv_dtype)
    return pd.DataFrame(
        {
            "card": a.card.name,
            "memory": format_bytes(a.card.memory_bytes),
            "fits": "yes" if a.fits else "no",
            "max context": format_tokens(a.max_context),
            f"requests at {format_tokens(a.context)}": _requests(a.requests),
            "weights": a.weights_format,
            "why not": a.why_not or "",
        }
        for a in answers
    )


@st.cache_data(show_spinner="Fitting every bundled model…", max_entries=32)
def models_frame(_setup: Setup, context: int, key: str) -> pd.DataFrame:
    answers = rank_models([load_model(name) for name in presets()], _setup.engine, _setup.card, context)
    return pd.DataFrame(
        {
            "model": a.model.name,
            "parameters": f"{a.params / 1e9:,.1f}B",
            "fits": "yes" if a.fits else "no",
            "best weights": a.weights_format,
            "KV dtype": a.result.rows[0].account.kv_dtype if a.result else a.kv_dtype,
            "max context": format_tokens(a.max_context),
            f"requests at {format_tokens(a.context)}": _requests(a.requests),
            "why not": a.why_not or "",
        }
        for a in answers
    )


context = min(inputs.ctx, context_limit(setup))
for_model, for_card = st.tabs([f"Cards for {model.name}", f"Models for {setup.card.name}"])
with for_model:
    st.caption(
        f"One GPU of each card, {setup.engine.name}, weights {setup.weights or 'as the checkpoint'}, "
        f"{format_tokens(context)} tokens per request. Cards that fit come first, ranked by {COST_BASIS}; the rest "
        "follow, closest first, with the reason each falls short."
    )
    try:
        st.dataframe(cards_frame(setup, context, repr(setup) + str(context)), hide_index=True, key="cards_table")
    except InputError as err:
        st.error(str(err))
with for_card:
    st.caption(
        f"Every bundled model on one {setup.card.name} with {setup.engine.name} at up to {format_tokens(inputs.ctx)} "
        "tokens (a model's own limit when lower). Each is shown in the largest weight format and KV dtype that fit; "
        "models that fit come first, the largest first."
    )
    try:
        st.dataframe(
            models_frame(setup, inputs.ctx, repr(setup) + str(inputs.ctx)), hide_index=True, key="models_table"
        )
    except InputError as err:
        st.error(str(err))
