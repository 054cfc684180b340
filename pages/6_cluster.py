"""vLLM past one machine: every TP × PP × DP (EP) plan of a cluster for the chosen model, best first, with the
arithmetic of the best plan, plain TP and DP-attention. The page only draws: core.engines.vllm_cluster computes."""

from dataclasses import replace

import pandas as pd
import streamlit as st

from core.cluster_report import cluster_report, gain_text
from core.engines.vllm_cluster import Cluster
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError
from core.memory.gpus import card_named, cards
from core.units import format_bytes, format_tokens
from ui.inputs import sidebar
from ui.layout import linkless, mobile_css, opened, page_config
from ui.state import BOUNDS, DEFAULTS, SWITCH, to_query

page_config("vLLM across nodes")
mobile_css()
st.title("vLLM across nodes")
st.caption(
    "Tensor parallel inside a node, pipeline parallel across nodes, data-parallel engine cores, expert parallel for "
    "MoE: how many requests each cut of the cluster holds at once. MLA models keep their whole latent on every TP "
    "rank, so DP-attention (one engine core per GPU) often holds several times more."
)
c1, c2, c3 = st.columns(3)
c4, c5, c6 = st.columns(3)
# the context box is this page's (c4); the sidebar draws it before reading it, so an unreadable context stops the
# page beside the box it is mended in
inputs, model, _ = sidebar(model_only=True, context_at=c4)

names = [name for name, card in cards().items() if not card.unified_memory]
fixed = inputs
if inputs.ccard not in names:  # a link's unified-memory machine: not a card of a cluster node
    fixed = replace(fixed, ccard=DEFAULTS.ccard)
    st.warning(
        f"ccard={inputs.ccard!r} is a unified-memory machine, not a GPU of a cluster node; the plans below use "
        f"{DEFAULTS.ccard}, the card shown. Pick a data-centre or desktop GPU."
    )
if fixed != inputs:
    st.session_state["in_ccard"] = fixed.ccard
    st.query_params.from_dict(to_query(fixed))
    inputs = fixed


card_name = c1.selectbox("Card", names, key="in_ccard")
c2.number_input("Nodes", *BOUNDS["nodes"], key="in_nodes")
c3.number_input("GPUs per node", *BOUNDS["gpn"], key="in_gpn")
kv = c5.selectbox(
    "KV dtype",
    VllmEngine.kv_dtypes,
    key="in_ckv",  # the page's own: the sidebar's KV dtype belongs to its engine (llama.cpp's q8_0, …)
    help="--kv-cache-dtype; auto: the model's dtype (fp8: half the cache)",
)
c6.selectbox(
    "Expert parallel",
    list(SWITCH),
    key="in_ep",
    help="--enable-expert-parallel for MoE models: auto lists plans with and without it",
)


@st.cache_data(show_spinner="Planning every cut…", max_entries=32)
def report(_model, key: str, card: str, nodes: int, gpn: int, context: int, kv: str, ep: str, seqs: int) -> dict:
    """`key` (the model's repr) stands in for the model, which Streamlit cannot hash."""
    cluster = Cluster(card_named(card), nodes, gpn)
    return cluster_report(_model, cluster, context, kv_dtype=kv, expert_parallel=SWITCH[ep], max_num_seqs=seqs or None)


try:
    context = min(inputs.ctx, model.max_context or inputs.ctx)
    out = report(model, repr(model), card_name, inputs.nodes, inputs.gpn, context, kv, inputs.ep, inputs.mns)
except InputError as err:
    st.error(linkless(str(err)))
    st.stop()

st.caption(
    f"{format_tokens(context)}-token requests, KV dtype {kv}, weights as the checkpoint, `vllm serve`'s defaults "
    "for the card (batched tokens"
    + (f"; max_num_seqs {inputs.mns:,}, as the sidebar sets it)." if inputs.mns else ", max_num_seqs).")
)
if context < inputs.ctx:
    st.info(f"{model.name} takes at most {model.max_context:,} tokens a request; the plans use that.")
best = out["best"]
m1, m2, m3 = st.columns(3)
# metrics cut long values off: the short form here, the plan in full below
short = f"TP{best['tp']} PP{best['pp']} DP{best['dp']}" if best["fits"] else "none fits"
m1.metric("Best plan", short, help="TP × PP × DP sizes; the plan in full below")
m2.metric(
    f"Requests at {format_tokens(context)}",
    f"{best['requests']:,}",
    help="DP ranks × requests one engine core holds: the best plan's arithmetic below",
)
gain = out["best_vs_plain_tp"]
plain = out["recipes"]["plain_tp"]["layout"]
m3.metric(
    "vs plain TP",
    f"{gain:.2f}×" if gain else "–",
    help=f"the best plan's requests ÷ plain TP's ({plain}): {gain_text(out)}"
    if gain
    else f"no ratio: the best plan or plain TP ({plain}) holds no request",
)
st.markdown(f"**Best plan:** {best['layout']}" if best["fits"] else f"**No plan fits**; the closest: {best['layout']}")
if best["fits"]:
    st.code("\n".join(out["best_launch"]), language="bash", wrap_lines=True)

frame = pd.DataFrame(
    {
        "plan": p["layout"],
        "requests": p["requests"],
        "per DP rank": p["requests_per_dp_rank"],
        "cache tokens": p["cache_tokens"],
        "stage": p["stage"],
        "weights / GPU": format_bytes(p["weights_bytes_per_gpu"]) if p["weights_bytes_per_gpu"] else "–",
        "KV budget / GPU": format_bytes(max(0, p["kv_budget_bytes_per_gpu"] or 0)),
        "why not": p["why_not"] or "",
    }
    for p in out["plans"]
)
st.dataframe(
    frame,
    hide_index=True,
    key="cluster_table",
    column_config={
        "requests": st.column_config.NumberColumn(help="DP ranks × requests one engine core holds", format="localized"),
        "cache tokens": st.column_config.NumberColumn(
            help="KV cache size every DP rank logs with the plan's --max-model-len (the context), added up",
            format="localized",
        ),
        "stage": st.column_config.NumberColumn(
            help="The pipeline stage the GPU figures are of: the one that sets the block count, as in the arithmetic"
        ),
    },
)

titles = {
    "plain_tp": "Plain TP: TP inside a node, PP across nodes",
    "dp_attention": "DP-attention: one engine core per GPU",
}
# Drawn only while open (ui.layout.opened): each code box loads Streamlit's syntax highlighter into a fresh tab.
if box := opened(f"How is it computed? Best plan: {best['layout']}", "kv_how_cluster"):
    box.code("\n".join(out["best_arithmetic"]), language=None, wrap_lines=True)
    box.code("\n".join(out["best_weights"]), language=None, wrap_lines=True)
for name, recipe in out["recipes"].items():
    vs = f" — {recipe['requests_vs_plain_tp']:.2f}× plain TP" if recipe["requests_vs_plain_tp"] else ""
    if box := opened(f"{titles[name]} ({recipe['layout']}){vs}", f"kv_how_{name}"):
        box.code("\n".join(recipe["arithmetic"]), language=None, wrap_lines=True)
        box.code("\n".join(recipe["weights_arithmetic"]), language=None, wrap_lines=True)
st.caption(
    "Not modelled: the all-to-all buffers of EP kernels (DeepEP reserves its own), EPLB's redundant experts, "
    "decode context parallel, MTP draft layers. Rules and their vLLM sources: core/engines/vllm_cluster.py."
)
