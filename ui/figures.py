"""A page's headline figures in a row: Streamlit metrics, or their markdown stand-in on a session's first run."""

from __future__ import annotations

import streamlit as st

from ui.layout import painted

FIGURES_KEY = "kv_figures"  # the row's container: its class is st-key-kv_figures (the browser tests look for it)


def figure_row(figures: dict[str, str], helps: dict[str, str] | None = None) -> None:
    """One column per figure (label → value). Until the browser has drawn the session's first run
    (ui.layout.painted) each is markdown, the label small and the value a heading; st.metric, with its help, from
    the rerun on. A fresh tab fetches st.metric's code (nine script files: its number formatting, its tooltip) only
    once a metric arrives, and with 20 tabs on one server those fetches held the first render back by seconds."""
    helps = helps or {}
    drawn = painted()
    with st.container(key=FIGURES_KEY):
        for column, (label, value) in zip(st.columns(len(figures)), figures.items(), strict=True):
            if drawn:
                column.metric(label, value, help=helps.get(label))
            else:
                column.markdown(f":small[{label}]\n\n## {value}")
