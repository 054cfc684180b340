"""kvscope explorer (minimal page; the full pages come with the explorer issue)."""

import streamlit as st

from core.engines import engine_named
from core.loading import DEFAULT_MODEL, load_model
from core.units import format_bytes

st.set_page_config(page_title="kvscope", layout="wide")
st.title("kvscope")
model = load_model(DEFAULT_MODEL, isolated=True)
engine = engine_named("transformers")
st.metric("KV cache per token", format_bytes(engine.kv_bytes_per_token(model)))
st.metric("Fixed state per sequence", format_bytes(engine.fixed_bytes_per_sequence(model)))
