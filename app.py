"""kvscope — Fit a card (the default page): the verdict, the context table, the memory breakdown and the
arithmetic behind them. Other pages live in pages/."""

import pandas as pd
import streamlit as st

from core.errors import InputError
from core.explain import row_lines, usable_line
from core.fit import Setup, context_limit, fit, table_contexts
from core.report import breakdown_records, table_records, verdict
from core.units import GIB, format_bytes, format_tokens
from ui.charts import breakdown
from ui.inputs import share_box, sidebar

st.set_page_config(page_title="kvscope — fit a card", page_icon=":material/memory:", layout="wide")
inputs, model, setup = sidebar()


@st.cache_data(show_spinner=False, max_entries=128)
def compute(_setup: Setup, context: int, key: str):
    """`key` (the setup's repr) stands in for the setup, which Streamlit cannot hash."""
    limit = context_limit(_setup)
    return fit(_setup, sorted(set(table_contexts(limit)) | {min(context, limit)}))


st.title("Fit a card")
try:
    result = compute(setup, inputs.ctx, repr(setup))
except InputError as err:
    st.error(str(err))
    st.stop()

context = min(inputs.ctx, result.context_limit)
if context < inputs.ctx:
    st.warning(f"{model.name} takes at most {format_tokens(result.context_limit)} tokens; showing that instead.")
row = next(r for r in result.rows if r.context == context)
v = verdict(result, row)
(st.success if v.fits else st.error)(f"**{v.headline}.** {v.sentence}")
c1, c2, c3, c4 = st.columns(4)
c1.metric("Fits?", "yes" if row.fits else "no")
c2.metric("Max context, one sequence", format_tokens(result.max_context) if result.max_context else "none")
concurrency = row.max_concurrency
c3.metric(
    f"Requests at {format_tokens(context)}",
    "∞" if concurrency == float("inf") else f"{concurrency:,.2f}" if result.vllm else f"{int(concurrency):,}",
)
c4.metric("Cache at this context", format_bytes(row.cache_bytes), help="per GPU, one sequence")
for note in result.notes:
    st.info(note)

st.subheader(f"Context table — {setup.card.name}" + (f" × {setup.gpus}" if setup.gpus > 1 else ""))
records = table_records(result)
frame = pd.DataFrame(records)
shown = pd.DataFrame(
    {
        "context": [format_tokens(c) for c in frame["context"]],
        "cache (GiB)": frame["cache_bytes"] / GIB,
        "weights (GiB)": frame["weights_bytes"] / GIB,
        "overhead (GiB)": frame["overhead_bytes"] / GIB,
        "total (GiB)": frame["total_bytes"] / GIB,
        "headroom (GiB)": frame["headroom_bytes"] / GIB,
        "memory used": frame["memory_used"] * 100,
        "fits": frame["fits"],
        "concurrency": frame["max_concurrency"],
    }
)
st.dataframe(
    shown,
    hide_index=True,
    width="stretch",
    column_config={
        "memory used": st.column_config.ProgressColumn("memory used", min_value=0.0, max_value=100.0, format="%.1f%%"),
        **{c: st.column_config.NumberColumn(c, format="%.3f") for c in shown.columns if "GiB" in c},
        # vLLM reports a fractional concurrency; the other engines run whole sequences
        "concurrency": st.column_config.NumberColumn("concurrency", format="%.2f" if result.vllm else "%d"),
    },
)
st.caption("Per GPU. Binary units: 1 GiB = 2³⁰ bytes. Concurrency = requests of that length that fit at once.")

st.subheader("Where the memory goes")
st.plotly_chart(breakdown(breakdown_records(result)), width="stretch")

with st.expander("How is this computed?"):
    st.markdown(usable_line(result))
    st.markdown("\n\n".join(row_lines(result, row)))
    st.caption(f"Engine rules: {setup.engine.name}; see core/engines/ for the source each rule was read from.")

share_box(inputs, {"inputs": inputs.__dict__, "table": records})
st.download_button("Download table (CSV)", frame.to_csv(index=False), "kvscope-table.csv", "text/csv")
