"""Plotly figures. Values are computed in core; these functions only lay them out."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative  # not plotly.express: ~0.1 s of imports (docstrings built at import)

from core.units import GIB, format_tokens

# Below the plot: above it, the chart's toolbar (full screen, download) covered the legend on a phone.
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0}


def palette(names: list[str]) -> dict[str, str]:
    """One colour per model, fixed for the page: the same model keeps its colour in every chart."""
    colors = qualitative.Plotly
    return {name: colors[i % len(colors)] for i, name in enumerate(names)}


COLORS = {"weights": "#64748b", "attention cache": "#2563eb", "fixed state": "#f59e0b", "overhead": "#a855f7"}


def breakdown(rows: list[dict]) -> go.Figure:
    """Stacked bars per context: weights, growing cache, fixed state, overhead (GiB); over a llama.cpp split, each
    context's bars are its row's GPU's, which the hover names (the deciding GPU can change with the context)."""
    fig = go.Figure()
    labels = [r["label"] for r in rows]
    split = any(r.get("gpu") for r in rows)
    for part, color in COLORS.items():
        if not any(r[part] for r in rows):
            continue  # e.g. no fixed state in a dense model
        fig.add_bar(
            name=part,
            x=labels,
            y=[r[part] / GIB for r in rows],
            marker_color=color,
            customdata=[r.get("gpu", "") for r in rows],
            hovertemplate="%{x}: %{y:.3f} GiB" + (" on %{customdata}" if split else "") + "<extra>" + part + "</extra>",
        )
    if rows:
        fig.add_hline(
            y=rows[0]["usable"] / GIB, line_dash="dash", annotation_text="usable memory", annotation_position="top left"
        )
    fig.update_layout(
        barmode="stack",
        yaxis_title="GiB on the deciding GPU" if split else "GiB per GPU",
        xaxis_title="context",
        height=380,
        margin={"t": 30, "b": 10},
        legend=LEGEND_BELOW,
    )
    return fig


def curves(
    series: dict[str, tuple[list[int], list[float]]],
    y_title: str,
    *,
    colors: dict[str, str] | None = None,
    log_y: bool = False,
    hline: tuple[float, str] | None = None,
    fmt: str = ".3f",
) -> go.Figure:
    colors = colors or palette(list(series))  # pages comparing models pass one palette for all their charts
    fig = go.Figure()
    for name, (xs, ys) in series.items():
        if log_y:  # zero (nothing fits) has no place on a log axis: leave a gap instead
            ys = [y if y and y > 0 else None for y in ys]
        fig.add_scatter(
            x=xs,
            y=ys,
            name=name,
            mode="lines+markers",
            line_color=colors[name],
            customdata=[format_tokens(x) for x in xs],  # the axis's own token format in the hover
            hovertemplate="%{customdata} tokens: %{y:" + fmt + "}<extra>" + name + "</extra>",
        )
    if hline:
        fig.add_hline(y=hline[0], line_dash="dot", annotation_text=hline[1])
    ticks = sorted({x for xs, _ in series.values() for x in xs})
    fig.update_xaxes(type="log", title="context (tokens)", tickvals=ticks, ticktext=[format_tokens(t) for t in ticks])
    fig.update_yaxes(title=y_title, type="log" if log_y else "linear", dtick=1 if log_y else None)
    fig.update_layout(height=380, margin={"t": 30, "b": 10}, legend=LEGEND_BELOW)
    return fig


def bars(
    x: list[str],
    series: dict[str, list[int]],
    y_title: str,
    *,
    caps: dict[str, int],
    colors: dict[str, str],
) -> go.Figure:
    """Grouped bars; a zero is labelled "doesn't fit" and a bar at that model's own cap "max" so neither reads as
    missing data. Labels stand upright inside the bar's column so neighbours do not overlap."""
    fig = go.Figure()
    for name, ys in series.items():
        labels = ["doesn't fit" if not y else "max" if y >= caps[name] else "" for y in ys]
        fig.add_bar(
            x=x,
            y=ys,
            name=name,
            marker_color=colors[name],
            text=labels,
            textposition="outside",
            textangle=-90,
            textfont={"size": 10},
            cliponaxis=False,
            customdata=[format_tokens(y) if y else "0" for y in ys],
            hovertemplate="%{x}: %{customdata} tokens<extra>" + name + "</extra>",
        )
    fig.update_layout(
        barmode="group",
        yaxis_title=y_title,
        height=380,
        margin={"t": 50, "b": 10},
        legend=LEGEND_BELOW,
        uniformtext={"minsize": 8, "mode": "show"},
    )
    return fig
