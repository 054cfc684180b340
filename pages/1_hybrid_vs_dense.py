"""Hybrid vs full attention: cache, ratio, concurrency and reach over context length, against chosen comparators.

(The file keeps its old name so that shared /hybrid_vs_dense links still open this page.)"""

from contextlib import suppress

import pandas as pd
import streamlit as st

from core.compare import (
    CARD_SIZES_GIB,
    asymptote,
    context_grid,
    max_context_by_card,
    ratio,
    series,
    shown_limit,
    with_model,
)
from core.errors import InputError
from core.explain import point_lines, worked_point
from core.fit import Setup, context_limit, setup_format, validate
from core.model.loading import load_model, presets
from core.model.whatif import all_full_attention
from core.report import layers_in_ram
from core.speed import Hardware, untimed
from core.speed.groups import chosen_backend
from core.speed.published import points
from core.speed.report import curve
from core.units import GIB, MIB, format_tokens
from ui.charts import bars, curves, palette
from ui.inputs import list_to_link, list_widget_value, sidebar
from ui.layout import linkless, mobile_css, opened, page_config, painted
from ui.state import point_query, read_point

page_config("hybrid vs full attention")
mobile_css()
st.title("Hybrid vs full attention")
inputs, model, setup = sidebar()


def _setups(setup: Setup, comparators: tuple[str, ...]) -> tuple[list[Setup], tuple[str, ...]]:
    """The model, its all-full-attention skeleton (models without attention have none) and the comparators that
    this setup can run; and why each other comparator is left out (fewer layers than the GPUs, say)."""
    setups, left_out = [setup], []
    with suppress(InputError):
        setups.append(with_model(setup, all_full_attention(setup.model)))
    for name in comparators:
        if name == setup.model.name:
            continue
        other = with_model(setup, load_model(name, isolated=True))
        try:
            validate(other)
        except InputError as err:
            left_out.append(f"{name}: {err}")
            continue
        setups.append(other)
    return setups, tuple(left_out)


@st.cache_data(show_spinner="Comparing…", max_entries=64)
def compute(_setup: Setup, comparators: tuple[str, ...], key: str):
    """`key` (the setup's repr) stands in for the setup, which Streamlit cannot hash."""
    setups, left_out = _setups(_setup, comparators)
    grid = context_grid(shown_limit(setups))
    return [series(s, grid) for s in setups], [max_context_by_card(s) for s in setups], grid[-1], left_out


RAM_GB_S, THREADS = 60.0, 8  # the host of layers llama.cpp's -ngl leaves in RAM; the caption says so


@st.cache_data(show_spinner="Timing…", max_entries=64)
def speed_curves(_setup: Setup, comparators: tuple[str, ...], backend: str | None, key: str):
    """Decode tok/s and time to first token over context for the same models, each to its own limit; None when
    the card cannot be timed (core.speed.untimed says why)."""
    if untimed(_setup):
        return None
    setups, _ = _setups(_setup, comparators)
    grid = context_grid(shown_limit(setups))
    hw = Hardware(ram_gb_s=RAM_GB_S, threads=THREADS, backend=backend)  # only layers left in RAM (-ngl) use them
    return {s.model.name: curve(s, hw, [c for c in grid if c <= context_limit(s)]) for s in setups}


# bound to a key (not `default=`): a changing default resets the widget
list_widget_value("cmp_sel", [n for n in inputs.cmp.split(",") if n in presets()])
chosen = st.multiselect(
    "Compare with",
    sorted(presets()),
    key="cmp_sel",
    max_selections=4,
    on_change=list_to_link,
    args=("cmp_sel", "in_cmp"),
    help="Bundled models; the chosen model's own skeleton with every layer full attention is always shown.",
    disabled=not painted(),  # a click during the paint's rerun chose other models (ui.layout.wait_for_paint)
)

try:
    all_series, reach, shown, left_out = compute(setup, tuple(chosen), repr(setup))
except InputError as err:
    st.error(linkless(str(err)))
    st.stop()
for why in left_out:
    st.warning(linkless(f"Comparator left out, {why}"))
base = all_series[0]
colors = palette([s.name for s in all_series])
if base.layout == "all full attention":
    st.info(
        f"{model.name} keeps full K/V in every layer, so its all-full-attention skeleton is itself. "
        "Pick a hybrid (e.g. Qwen/Qwen3.5-9B) or a sliding-window model to see a difference, or add comparators."
    )
elif base.layout == "state only, no attention":
    st.info(
        f"{model.name} has no attention layers (state only): its cache is a fixed state per sequence, and there "
        "is no full-attention skeleton of it to draw. Add comparators above to see what attention would cost."
    )
st.dataframe(
    pd.DataFrame(
        {
            "model": [s.name for s in all_series],
            "cache layout": [s.layout for s in all_series],
            "B/token, long contexts": [s.far_bytes_per_token for s in all_series],
            "fixed state (MiB)": [s.fixed_bytes / MIB for s in all_series],
            # the model's own limit, not the card's (Fit a card's max context): the bars below are the card's
            "model's context limit": [s.limit_text for s in all_series],
        }
    ),
    hide_index=True,
    width="stretch",
    column_config={
        "B/token, long contexts": st.column_config.NumberColumn(format="localized"),
        "fixed state (MiB)": st.column_config.NumberColumn(format="%.2f"),
    },
)

st.subheader("Cache per sequence")
st.plotly_chart(
    curves(
        {s.name: (list(s.contexts), [b / GIB for b in s.cache_bytes]) for s in all_series},
        "GiB per GPU",
        colors=colors,
        log_y=True,
    ),
    width="stretch",
)

st.subheader(f"Ratio to {base.name}")
ratio_series = {s.name: ratio(base, s) for s in all_series[1:]}
if ratio_series:
    first = all_series[1]
    limit = asymptote(base, first)
    st.plotly_chart(
        curves(
            ratio_series,
            "× the cache of " + base.name,
            colors=colors,
            hline=(limit, f"asymptote {limit:.2f}× ({first.name})") if limit else None,
            fmt=".2f",
        ),
        width="stretch",
    )
    if limit is None:
        st.caption(
            f"No asymptote: {base.name}'s cache stops growing with context ({base.layout}), so the ratio of any "
            "model whose cache keeps growing rises without bound."
        )
    else:
        st.caption(
            f"The ratio heads toward {limit:.2f}× ({first.far_bytes_per_token:,.0f} vs "
            f"{base.far_bytes_per_token:,.0f} B per token once every sliding window is full and fixed state has "
            "faded)."
            + (
                f" It dips at short contexts because {base.name} keeps {base.fixed_bytes / MIB:,.1f} MiB of fixed "
                "state per request whatever the length."
                if base.fixed_bytes
                else ""
            )
            + (
                " Sliding-window layers grow like full attention until their window fills, so the curve climbs "
                "toward the line only past the window (possibly beyond the model's longest context)."
                if "sliding" in base.layout
                else ""
            )
        )

st.subheader(f"Concurrent requests on {setup.card.name}")
st.plotly_chart(
    curves(
        {s.name: (list(s.contexts), [min(c, 1e6) for c in s.concurrency]) for s in all_series},
        "requests at once",
        colors=colors,
        log_y=True,
        fmt=",.2f",
    ),
    width="stretch",
)


def _point_to_link() -> None:
    """The boxes' point into the link's `hpt` (a callback runs before the script: the sidebar's link follows on this
    very run). A model whose curve draws no point has no context box: the context asked for before stays."""
    kept = st.session_state.get("in_hpt")
    # else the one asked for before, or 1K: the first point every curve draws (core.compare.context_grid)
    context = st.session_state.get("hy_point_ctx") or (read_point(kept)[1] if kept else 1024)
    st.session_state["in_hpt"] = point_query(st.session_state["hy_point_model"], context)


# Opened by a link that carries a point, so that it opens on the sender's worked point
if point := opened("How is a point of this curve worked out?", "kv_how_hybrid_point", expanded=bool(inputs.hpt)):
    names = [s.name for s in all_series]
    name, context_at, moved = worked_point(
        {s.name: s.contexts for s in all_series}, read_point(inputs.hpt) if inputs.hpt else None
    )
    if moved:  # the link's (or the boxes') point is not drawn with these inputs: say which one is worked out
        point.info(moved)
    # the boxes show the point worked out, set before they are drawn on every run (as ui.inputs.list_widget_value)
    st.session_state["hy_point_model"] = name
    point.selectbox("Model", names, key="hy_point_model", on_change=_point_to_link)
    if context_at is None:
        point.caption(f"{name} has no point drawn: its context limit is under the first one drawn (1K).")
    else:  # the series' setups in the order compute() drew them; the point is worked from its own setup
        st.session_state["hy_point_ctx"] = context_at
        contexts = all_series[names.index(name)].contexts
        point.selectbox("Context", contexts, format_func=format_tokens, key="hy_point_ctx", on_change=_point_to_link)
        try:
            point.markdown("\n\n".join(point_lines(_setups(setup, tuple(chosen))[0][names.index(name)], context_at)))
        except InputError as err:
            point.error(linkless(str(err)))

st.subheader("Longest context per card size")
limited = [(s, r) for s, r in zip(all_series, reach, strict=True) if not s.unlimited]
if limited:
    st.plotly_chart(
        bars(
            [f"{g:g} GiB" for g in CARD_SIZES_GIB],
            {s.name: r for s, r in limited},
            "max tokens, one sequence",
            caps={s.name: s.limit for s, _ in limited},
            colors=colors,
        ),
        width="stretch",
    )
for s, r in zip(all_series, reach, strict=True):
    if s.unlimited:  # "no limit" is a marker, not a bar 16M tokens tall
        fits = [f"{g:g} GiB" for g, n in zip(CARD_SIZES_GIB, r, strict=True) if n]
        where = f"from {fits[0]} up" if fits else "on none of these sizes (its weights do not fit)"
        st.caption(f"**{s.name}** has no context limit (fixed state per sequence): any length fits {where}.")
st.subheader(f"Speed on {setup.card.name}")
backend, backend_problem = chosen_backend(setup.card, inputs.backend, setup.engine.name)
if backend_problem:
    st.warning(f"Backend: {backend_problem}.")
timed = speed_curves(setup, tuple(chosen), backend, repr(setup))
if timed is None:
    no_figures = f"{setup.card.name} has no bandwidth or peak figure: pick a listed card to see speed."
    st.caption(f"No speed: {untimed(setup)}." if setup.card.fp32_only else no_figures)  # Pascal: the engine's reason
else:
    for metric, title, key, log in (
        ("decode_tok_s", "decode tok/s, one sequence", "decode_tok_s", False),
        ("prefill_tok_s", "time to first token (s)", "ttft_s", True),
    ):
        fig = curves(
            {name: ([r["context"] for r in rows], [r[key] for r in rows]) for name, rows in timed.items()},
            title,
            colors=colors,
            log_y=log,
            fmt=",.2f",
        )
        for name in timed:
            for p in points(name, setup.card.name, setup.engine.name, metric):
                y = p["value"] if metric == "decode_tok_s" else p["context"] / p["value"]  # published prefill → TTFT
                hover = f"{p['source']['id']}: %{{y:,.2f}}<extra>{p.get('flag') or 'published'}</extra>"
                marker = {"symbol": "x", "size": 11, "color": colors[name]}
                fig.add_scatter(
                    x=[p["context"]], y=[y], mode="markers", marker=marker, name=f"published: {name}",
                    hovertemplate=hover,
                )  # fmt: skip
        st.plotly_chart(fig, width="stretch")
    st.caption(
        "A roofline per pass (weights and attention, each max(bytes ÷ bandwidth, FLOPs ÷ rate)) plus the engine's "
        "overhead; the engine efficiencies are fitted to published llama.cpp and vLLM runs and this project's CPU "
        "runs, or assumed (see *Fit a card*, "
        "'How is the speed computed?'). ✕ marks published figures for this card and engine "
        "(measurements/speed/published_speed.jsonl), with their caveats in the hover; they are never fitted to."
        + (
            f" Layers left in system RAM (-ngl {setup.gpu_layers}, --n-cpu-moe) are timed at {RAM_GB_S:g} GB/s with "
            f"{THREADS} threads, not the host *Fit a card* lets you describe."
            if layers_in_ram(setup)
            else ""
        )
    )
    st.caption(  # each model's own: its groups differ (a hybrid's state layers, a MoE's experts)
        "Error bars at the longest context drawn: "
        + "; ".join(
            f"**{name}**: decode {rows[-1]['decode_error']}; time to first token {rows[-1]['prefill_error']}"
            for name, rows in timed.items()
            if rows
        )
        + "."
    )

if how := opened("How is this computed?", "kv_how_hybrid"):  # drawn only while open (ui.layout.opened)
    how.markdown(
        "\n".join(
            f"- **{s.name}** ({s.layout}): cache(n) = {s.formula()} per request (n rounded up to the engine's "
            "cells or blocks; a windowed group holds at most its window, as the engine keeps it)"
            for s in all_series
        )
    )
    how.markdown(
        "Ratio = the comparator's cache ÷ this model's cache at the same n; its asymptote is the ratio of the "
        "per-token rates once every window is full. Concurrency and the card-size bars come from the same solver as "
        "*Fit a card* (weights, overhead and the engine's rules on this card); 'How is a point of this curve worked "
        "out?' below the concurrency curve gives any of its points' arithmetic. A card-size bar is the longest "
        "single sequence that fits, capped at that model's own maximum context (**max**), which the table's "
        '"model\'s context limit" column gives.'
    )
sized = setup_format(setup)  # transformers dequantises a GGUF type to the checkpoint's format (the page's warning)
weights = inputs.weights if sized == inputs.weights else f"{inputs.weights}, loaded by {setup.engine.name} as {sized}"
st.caption(
    f"Same engine ({setup.engine.name}), weights ({weights}) and KV dtype for every model. "
    f"Contexts run from 1K to {format_tokens(shown)}, each model's curves to its own limit."
)
