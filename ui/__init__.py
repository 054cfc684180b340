"""Streamlit glue shared by the pages: inputs, URL state, drawing helpers. No arithmetic lives here."""
