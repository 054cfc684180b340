"""kvscope's sizing core: pure functions over frozen dataclasses; no Streamlit, no torch at import."""
