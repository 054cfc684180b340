"""Measure live (placeholder until the probe lands)."""

import streamlit as st

from ui.inputs import sidebar

st.set_page_config(page_title="kvscope — measure live", page_icon="📐", layout="wide")
inputs, model, setup = sidebar()
st.title("Measure live")
st.info("The live probe is being wired in.")
