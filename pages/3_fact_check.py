"""Fact-check: every published figure kvscope knows, recomputed under the settings its source states.

`?claim=<id>` opens one figure on its own (the link each row offers); `model`, `metric` and `verdict` carry the
filters."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.check import AGREES, CANNOT, DISAGREES, VERDICTS, check_all, verdict_counts
from core.errors import InputError
from ui.layout import literal, mobile_css, nav, page_config, share_box
from ui.state import link_query

# it imports pandas and plotly at once anyway, and has no rerun after a paint to wait for
page_config("fact-check", icon_at_once=True)
mobile_css()
st.title("Fact-check")
st.caption(
    "Figures from posts, model cards and engine logs, each recomputed by kvscope under the settings its source "
    "states. They agree when the published value is within half a unit of its last printed digit of kvscope's (a "
    "whole unit for a figure printed as approximate, such as ≈ 30 GB)."
)
COLOURS = {AGREES: "#16a34a", DISAGREES: "#dc2626", CANNOT: "#6b7280"}


@st.cache_data(show_spinner="Checking the published figures…")
def records() -> list[dict]:
    return [c.record() for c in check_all()]


try:
    rows = records()
except InputError as err:  # a malformed line in the measurements files
    st.error(f"The published figures cannot be read: {err}")
    st.stop()


def _param_list(name: str, allowed: list[str]) -> list[str]:
    return [v for v in st.query_params.get_all(name) if v in allowed]


models = sorted({r["model"] for r in rows})
metrics = sorted({r["metric"] for r in rows})
with st.sidebar:
    nav()
    chosen_models = st.multiselect("Model", models, default=_param_list("model", models))
    chosen_metrics = st.multiselect("Metric", metrics, default=_param_list("metric", metrics))
    chosen_verdicts = st.multiselect("Verdict", VERDICTS, default=_param_list("verdict", list(VERDICTS)))

claim = st.query_params.get("claim")
query = {
    **({"claim": claim} if claim else {}),
    "model": chosen_models,
    "metric": chosen_metrics,
    "verdict": chosen_verdicts,
}
st.query_params.from_dict(query)
with st.sidebar:
    share_box(link_query(query))
shown = [
    r
    for r in rows
    if (not chosen_models or r["model"] in chosen_models)
    and (not chosen_metrics or r["metric"] in chosen_metrics)
    and (not chosen_verdicts or r["verdict"] in chosen_verdicts)
]
if claim is not None:
    single = [r for r in rows if r["id"] == claim]
    if single:
        shown = single
        if st.button("Show every figure", icon=":material/list:"):
            del st.query_params["claim"]
            st.rerun()
    else:
        st.error(f"No published figure has the id {literal(repr(claim))}; showing them all.")
        claim = None

cols = st.columns(len(VERDICTS))
for col, (verdict, n, cross) in zip(cols, verdict_counts(shown), strict=True):
    col.metric(verdict.capitalize(), n, help=f"{cross} of them between two sources, not kvscope's" if cross else None)

frame = pd.DataFrame(
    {
        "Verdict": [r["verdict"] for r in shown],
        "Model": [r["model"] for r in shown],
        "Metric": [r["metric"] for r in shown],
        "Published": [r["printed"] for r in shown],
        "kvscope": [r["kvscope"] for r in shown],
        "Unit": [r["unit"] for r in shown],
        "kvscope ÷ published": [r["ratio"] for r in shown],
        "Other source": [r["other_source"] for r in shown],
        "Reason": [r["reason"] for r in shown],
        "Source": [r["source"] for r in shown],
        "Link": [f"?claim={r['id']}" for r in shown],
    }
)
st.dataframe(
    frame,
    hide_index=True,
    width="stretch",
    column_config={
        "kvscope": st.column_config.NumberColumn(format="%.4g", help="kvscope's figure, in the published unit"),
        "kvscope ÷ published": st.column_config.NumberColumn(format="%.3f"),
        "Other source": st.column_config.NumberColumn(
            format="%.4g", help="where kvscope computes nothing: the same quantity from another source, in the unit"
        ),
        "Reason": st.column_config.TextColumn(width="large"),
        "Link": st.column_config.LinkColumn(display_text="this claim", help="a link to this figure alone"),
    },
)

# log-log: each figure in its own printed unit, so the distance from y = x is kvscope's ratio to it
plotted = [r for r in shown if r["kvscope"] and r["published"] and r["kvscope"] > 0 and r["published"] > 0]
if plotted:
    figure = go.Figure()
    for verdict in VERDICTS:
        group = [r for r in plotted if r["verdict"] == verdict]
        if group:
            figure.add_scatter(
                x=[r["published"] for r in group],
                y=[r["kvscope"] for r in group],
                mode="markers",
                name=verdict,
                marker={"color": COLOURS[verdict], "size": 9},
                customdata=[[r["model"], r["metric"], r["printed"], r["id"]] for r in group],
                hovertemplate="%{customdata[0]}<br>%{customdata[1]}: %{customdata[2]}<br>kvscope %{y:.4g}"
                "<br>%{customdata[3]}<extra></extra>",
            )
    values = [v for r in plotted for v in (r["published"], r["kvscope"])]
    ends = [min(values) / 2, max(values) * 2]
    figure.add_scatter(x=ends, y=ends, mode="lines", name="y = x", line={"color": "#9ca3af", "dash": "dash"})
    figure.update_xaxes(type="log", title="published (its own unit)")
    figure.update_yaxes(type="log", title="kvscope (same unit)")
    figure.update_layout(height=440, margin={"t": 30, "b": 10}, legend={"orientation": "h"})
    st.subheader("kvscope against the published figure")
    st.plotly_chart(figure, width="stretch")

st.subheader("The arithmetic, figure by figure")
for r in shown:
    with st.expander(f"{r['verdict']}: {r['model']} · {r['metric']} · {r['printed']}", expanded=claim is not None):
        left, right = st.columns(2)
        with left:
            st.markdown("**Published**")
            st.markdown(
                f"{r['printed']} — {r['basis']}, from *{r['source']}*"
                + (f" ({r['source_kind']})" if r["source_kind"] else "")
            )
            if r["published_arithmetic"]:
                st.markdown(f"How the source got it: {r['published_arithmetic']}")
            settings = {k: v for k, v in r["settings"].items() if v is not None}
            if settings:
                st.json(settings, expanded=False)
        with right:
            st.markdown("**kvscope**")
            if r["kvscope_arithmetic"]:
                st.code("\n".join(r["kvscope_arithmetic"]), language=None)
            else:
                st.markdown("no figure of its own")
        st.markdown(f"**{r['verdict'].capitalize()}**: {r['reason']}")
        st.markdown(f"[Link to this claim](?claim={r['id']})")
