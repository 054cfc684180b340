"""Hybrid vs dense: cache, ratio, concurrency and reach over context length, against chosen comparators."""

from contextlib import suppress

import streamlit as st

from core.compare import CARD_SIZES_GIB, asymptote, context_grid, max_context_by_card, ratio, series, with_model
from core.errors import InputError
from core.fit import Setup, context_limit
from core.loading import load_model, presets
from core.units import GIB, format_tokens
from core.whatif import all_full_attention
from ui.charts import bars, curves
from ui.inputs import sidebar

st.set_page_config(page_title="kvscope — hybrid vs dense", page_icon=":material/memory:", layout="wide")
inputs, model, setup = sidebar()
st.title("Hybrid vs dense")


@st.cache_data(show_spinner="Comparing…", max_entries=64)
def compute(_setup: Setup, comparators: tuple[str, ...], key: str):
    """`key` (the setup's repr) stands in for the setup, which Streamlit cannot hash."""
    setup = _setup
    grid = context_grid(context_limit(setup))
    setups = [setup]
    with suppress(InputError):  # models without attention have no dense skeleton to compare with
        setups.append(with_model(setup, all_full_attention(setup.model)))
    for name in comparators:
        if name != setup.model.name:
            setups.append(with_model(setup, load_model(name, isolated=True)))
    return [series(s, grid) for s in setups], [max_context_by_card(s) for s in setups]


chosen = st.multiselect(
    "Compare with",
    sorted(presets()),
    default=[n for n in inputs.cmp.split(",") if n in presets()],
    max_selections=4,
    help="Bundled models; the chosen model's own skeleton with every layer full attention is always shown.",
)
st.session_state["in_cmp"] = ",".join(chosen)

try:
    all_series, reach = compute(setup, tuple(chosen), repr(setup))
except InputError as err:
    st.error(str(err))
    st.stop()
base = all_series[0]
if base.fixed_bytes == 0 and all(layer.grows for layer in model.layers):
    st.info(
        f"{model.name} is dense: every layer keeps full K/V, so its all-full-attention skeleton is itself. "
        "Pick a hybrid (e.g. Qwen/Qwen3.5-9B) to see the difference, or add comparators above."
    )

st.subheader("Cache per sequence")
st.plotly_chart(
    curves(
        {s.name: (list(s.contexts), [b / GIB for b in s.cache_bytes]) for s in all_series}, "GiB per GPU", log_y=True
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
            hline=(limit, f"asymptote {limit:.2f}× ({first.name})") if limit else None,
            fmt=".2f",
        ),
        width="stretch",
    )
    if base.fixed_bytes:
        st.caption(
            f"Why the dip at short contexts: {base.name} keeps {base.fixed_bytes / 2**20:,.1f} MiB of fixed state per "
            "sequence (conv + recurrent) whatever the length, so at short contexts that constant is a large share "
            "of its cache and the ratio sits below its asymptote; as the context grows the per-token rates dominate "
            f"and the ratio climbs toward {limit:.2f}× ({first.kv_bytes_per_token:,} vs {base.kv_bytes_per_token:,} "
            "B/token)."
        )

st.subheader(f"Concurrent requests on {setup.card.name}")
st.plotly_chart(
    curves(
        {s.name: (list(s.contexts), [min(c, 1e6) for c in s.concurrency]) for s in all_series},
        "requests at once",
        log_y=True,
        fmt=",.2f",
    ),
    width="stretch",
)

st.subheader("Longest context per card size")
st.plotly_chart(
    bars(
        [f"{g:g} GiB" for g in CARD_SIZES_GIB],
        {s.name: r for s, r in zip(all_series, reach, strict=True)},
        "max tokens, one sequence",
        cap=context_limit(setup),
    ),
    width="stretch",
)
with st.expander("How is this computed?"):
    st.markdown(
        "\n".join(
            f"- **{s.name}**: cache(n) = {s.kv_bytes_per_token:,} B/token × tokens held + {s.fixed_bytes:,} B of "
            "fixed state per sequence (tokens held: n, or the window on sliding layers, rounded to the engine's "
            "blocks or cells)"
            for s in all_series
        )
    )
    st.markdown(
        "Ratio = the comparator's cache ÷ this model's cache at the same n; its asymptote is the ratio of the "
        "per-token rates. Concurrency and longest context come from the same solver as *Fit a card* (weights, "
        "overhead and the engine's rules on this card); a card-size bar is the longest single sequence that fits, "
        "capped at the model's maximum context."
    )
st.caption(
    f"Same engine ({setup.engine.name}), weights ({inputs.weights}) and KV dtype for every model. "
    f"Contexts run from 1K to {format_tokens(context_limit(setup))}."
)
