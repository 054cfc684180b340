"""The sidebar every page shares. Widgets are bound to session state, and session state to the URL."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any

import streamlit as st

from core.engines import ENGINES, configured
from core.engines.llamacpp import FRONTENDS, LlamaCppEngine
from core.engines.vllm_engine import VERSIONS
from core.errors import InputError
from core.fit import Setup, default_split
from core.memory.gguf_hub import read_hub_gguf
from core.memory.gpus import Card, card_named, cards
from core.memory.quant import FORMATS
from core.memory.weightfiles import WeightFile
from core.model.config import parse_json
from core.model.loading import DEFAULT_MODEL, load_raw, model_from_config, presets
from core.model.resolver import RESOLVER
from core.model.spec import ModelSpec
from core.model.whatif import edited
from core.report import check, checkpoint_note, csv_text, format_note, format_offer, gpu_counts
from core.speed.groups import AUTO_BACKEND, BACKEND_CHOICES, BACKEND_NAMES
from core.units import format_bytes, format_tokens, parse_tokens
from ui.layout import fold_sidebar_on_phones, linkless, literal, nav, opened, share_box, wait_for_paint
from ui.state import (
    BOUNDS,
    CUSTOM_CARD,
    DEFAULTS,
    MAX_UNPACKED_CONFIG,
    PAGE_FIELDS,
    PLATFORMS,
    SOURCES,
    SWITCH,
    Inputs,
    from_query,
    hub_gguf,
    model_problem,
    pack_upload,
    repeated_params,
    share_query,
    to_query,
    unpack_config,
)

EIGHT_BIT_KV = {"vllm": "fp8", "llama.cpp": "q8_0"}
EIGHT_BIT = ("fp8", "fp8_e4m3", "fp8_e5m2", "q8_0", "int8")
EDITS = ("layers", "kvh", "hd", "win", "pat")


@st.cache_data(show_spinner="Reading the model config…", max_entries=64, ttl=3600)  # Hub configs can change
def _spec(source: str, packed: str, hub: bool) -> tuple[ModelSpec, str]:
    """The model and where its config came from. With `hub`, the Hub is asked first and a bundled copy is the
    fallback when it cannot be reached."""
    if packed:
        return model_from_config(unpack_config(packed), "uploaded config.json", isolated=True), "uploaded config.json"
    if model_problem(source):  # never a path: this runs on the server
        raise InputError(f"{source[:80]!r} is not a bundled preset or a Hub repo id (org/name)")
    name, raw, origin = load_raw(source, prefer_hub=hub, local_files=False)  # an org/name is asked of the Hub only
    return model_from_config(raw, name, isolated=True), origin


@st.cache_data(show_spinner=False, max_entries=64, ttl=60)
def _spec_failure(source: str, packed: str, hub: bool) -> str | None:
    """Why `_spec` cannot read this model, remembered for a minute (st.cache_data keeps no exception), else None.
    Without it, a Hub id that cannot be reached cost its timeout twice in a session's first second (the first run,
    then the paint's rerun) and once more for every visitor of the same link."""
    try:
        _spec(source, packed, hub)
    except InputError as err:
        return str(err)
    return None


@st.cache_data(show_spinner="Reading the GGUF's header…", max_entries=64, ttl=3600)  # a new upload moves main
def _gguf_weights(name: str) -> tuple[WeightFile, str]:
    """The exact weights of the GGUF a Hub name selects, from its header only (core.memory.gguf_hub: a ranged read,
    then its disk cache), and the caption that names the file, its commit and its bytes per ggml type."""
    found = read_hub_gguf(hub_gguf(name))
    weights = found.weights()
    caption = (
        f"Weights from the GGUF's header: `{found.file}` of {found.name.repo_id} at commit {found.sha[:8]}, "
        f"{len(found.tensors):,} tensors, {format_bytes(weights.total_bytes)}: {found.mix()}."
    )
    return weights, caption


def _gguf_in_box(inputs: Inputs) -> str | None:
    """The model box's text when it names a Hub GGUF (whose header then sizes the weights), else None."""
    if inputs.config or st.session_state.get("in_source") == "Upload":
        return None
    name = inputs.model.strip()
    return name if hub_gguf(name) is not None else None


def _init_from_url() -> None:
    if st.session_state.get("_kv_init"):
        # Re-commit widget values so that switching pages does not reset them (Streamlit drops widget state
        # that the previous page owned unless it is written back). After a fragment's rerun (Fit a card's chart)
        # a page switch arrives with none of them (streamlit 1.67): those come back from `sidebar`'s copy.
        kept = st.session_state.get("_kv_widgets", {})
        for key in {*kept, *(k for k in st.session_state if isinstance(k, str) and k.startswith("in_"))}:
            st.session_state[key] = st.session_state[key] if key in st.session_state else kept[key]
        return
    inputs, ignored = from_query(dict(st.query_params))
    ignored += repeated_params({key: st.query_params.get_all(key) for key in st.query_params})
    for key, value in asdict(inputs).items():
        st.session_state[f"in_{key}"] = value
    st.session_state["in_ctx_text"] = format_tokens(inputs.ctx).replace(",", "")
    typed_ctx = st.query_params.get("ctx", "")
    if any(item.startswith("ctx=") for item in ignored):  # as the sender typed it: the same error, not a default
        st.session_state["in_ctx_text"] = typed_ctx[:40]
        ignored = [item for item in ignored if not item.startswith("ctx=")]
    if "source" not in st.query_params:  # older links: infer it
        derived = "Upload" if inputs.config else "Preset" if inputs.model in presets() else "Hub"
        st.session_state["in_source"] = derived
    st.session_state["_kv_ignored"] = ignored
    st.session_state["_kv_init"] = True


def list_widget_value(key: str, names: list[str]) -> None:
    """Put a multiselect's value (`names` from the link the first time, its own value after) into session state on
    every run, before the widget is drawn. Streamlit gives the tab a value set from code only with the run that set
    it. A multiselect the tab drew from a later run (the Ollama page's, folded in its settings box while the paint's
    rerun came) started from its empty default and sent that back with the next rerun, as if the user had emptied
    it: in 4 of 8 fresh loads of an Ollama link, the link lost its cards and comparison models."""
    st.session_state[key] = st.session_state.get(key, names)


def list_to_link(key: str, field: str) -> None:
    """A multiselect's on_change: its list into the link field `field`, comma-separated. A callback runs before the
    script, so the sidebar writes the new list into the link on this very run."""
    st.session_state[field] = ",".join(st.session_state[key])


def toggle_to_link(key: str, field: str) -> None:
    """A toggle's on_change: "on"/"off" into the link field `field` (as list_to_link does for a multiselect)."""
    st.session_state[field] = "on" if st.session_state[key] else "off"


def _current() -> Inputs:
    return Inputs(**{f.name: st.session_state.get(f"in_{f.name}", getattr(DEFAULTS, f.name)) for f in fields(Inputs)})


def _forget_eight_bit() -> None:
    st.session_state["_kv_eight_bit_wanted"] = False  # an explicit choice replaces a remembered one


def _on_eight_bit() -> None:
    _forget_eight_bit()
    engine = st.session_state["in_engine"]
    st.session_state["in_kv"] = EIGHT_BIT_KV.get(engine, "auto") if st.session_state["eight_bit"] else "auto"


def _on_engine() -> None:
    """Keep the 8-bit choice across engines: llama.cpp's q8_0 becomes vLLM's fp8 and back, and an engine without an
    8-bit cache (transformers) on the way keeps the wish for the next engine that has one."""
    if st.session_state.get("in_kv") in EIGHT_BIT or st.session_state.get("_kv_eight_bit_wanted"):
        eight_bit = EIGHT_BIT_KV.get(st.session_state["in_engine"])
        st.session_state["_kv_eight_bit_wanted"] = eight_bit is None
        st.session_state["in_kv"] = eight_bit or "auto"


def _clear_edits() -> None:
    for key in EDITS:
        st.session_state[f"in_{key}"] = getattr(DEFAULTS, key)


def _set_gpus(n: int) -> None:
    st.session_state["in_gpus"] = n


def _set_weights(fmt: str) -> None:
    st.session_state["in_weights"] = fmt


class _Unseen:
    """Stands in for `st` while the inputs wait for the first paint: no widget is drawn, and each input's value is
    its session state (the link's, or the default), as the widget would return it."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def config_text(uploaded: bytes | None, pasted: str) -> tuple[bytes | str, str]:
    """The config.json to read, the uploaded file's before pasted text; and a note where that leaves pasted text
    unread (it was ignored without a word)."""
    if uploaded is None:
        return pasted.strip(), ""
    note = "The uploaded file is used; the pasted text is not read while a file is uploaded (remove the file)."
    return uploaded, note if pasted.strip() else ""


def _model_inputs(w: Any) -> list[str]:
    """Draw the model inputs with `w` (`st`, or `_Unseen`); return what cannot be read (shown in place of the
    results)."""
    problems = []
    w.radio("Model from", SOURCES, key="in_source", horizontal=True)
    source = st.session_state["in_source"]
    if source == "Preset":
        names = sorted(presets())
        if st.session_state.get("in_model") not in names:
            st.session_state["in_model"] = DEFAULT_MODEL
        w.selectbox("Model", names, key="in_model", help="Bundled config.json files; type to search")
        st.session_state["in_config"] = ""
    elif source == "Hub":
        w.text_input(
            "Hugging Face repo id",
            key="in_model",
            placeholder="org/name",
            help="config.json is fetched with huggingface_hub (honours HF_TOKEN, HF_HUB_OFFLINE and the "
            "local cache). Repository code is never run.",
        )
        st.session_state["in_config"] = ""
        repo = st.session_state.get("in_model", "").strip()
        if not repo:
            problems.append("Enter a Hugging Face repo id, written org/name (e.g. Qwen/Qwen3-8B).")
        elif model_problem(repo):
            problems.append(model_problem(repo))
    else:
        upload = w.file_uploader("config.json", type=["json"], help="A checkpoint's config.json")
        pasted = w.text_area("…or paste it", height=80) or ""
        text, note = config_text(upload.getvalue() if upload is not None else None, pasted)
        if note:
            w.warning(note)
        if text:
            try:
                # no more than a link carries: reading 4 MiB of nested JSON, on every rerun, cost ~2 s of CPU
                raw = parse_json(text, "the uploaded config.json", limit=MAX_UNPACKED_CONFIG)
                st.session_state["in_config"] = pack_upload(raw)
            except InputError as err:
                st.session_state["in_config"] = ""  # the last readable one is not what the box holds now
                problems.append(str(err))
        elif not st.session_state.get("in_config"):
            problems.append("Upload or paste a config.json to size it.")
    # open by itself while an edit is set (a link's): the edited model shows what changed. Closed, its inputs are not
    # drawn; their values stay (_init_from_url re-commits every in_ key each run).
    edits = any(st.session_state.get(f"in_{key}") for key in EDITS)
    whatif = opened("Edit (what-if)", "kv_whatif", expanded=edits) if w is st else None
    if whatif is None:
        return problems
    with whatif:
        st.caption("0 keeps the config's value.")
        for key, label, step in (("layers", "Layers", 1), ("kvh", "KV heads", 1), ("hd", "Head dim", 1)):
            st.number_input(label, *BOUNDS[key], step=step, key=f"in_{key}")
        st.number_input("Sliding window", *BOUNDS["win"], step=256, key="in_win")
        st.text_input(
            "Layer pattern",
            key="in_pat",
            max_chars=64,
            placeholder="e.g. LLLF",
            help="Repeats over the layers: F full attention, S sliding window, L the model's linear/state "
            "layer, N no cache. Empty keeps the config's.",
        )
    return problems


def _hardware_inputs(w: Any, gguf_caption: str | None) -> list[str]:
    """Drawn with `w` (`st`, or `_Unseen`). `gguf_caption`: the model is a Hub GGUF, whose header gives the weights
    (named in place of the selectbox)."""
    problems = []
    options = [CUSTOM_CARD, *cards()]
    w.selectbox("Card", options, key="in_card", format_func=lambda n: "Custom memory (GiB)" if n == CUSTOM_CARD else n)
    if st.session_state["in_card"] == CUSTOM_CARD:
        w.number_input("GPU memory (GiB)", *BOUNDS["gib"], step=1.0, key="in_gib")
        # Blank by default: a card known by its memory alone has no speed (the page says which figure to give).
        w.number_input("Bandwidth (GB/s)", *BOUNDS["gbs"], value=None, step=10.0, key="in_gbs", placeholder="not given")
        w.number_input(
            "Dense 16-bit TFLOPS (BF16, else FP16; no sparsity)",
            *BOUNDS["tflops"],
            value=None,
            step=1.0,
            key="in_tflops",
            placeholder="not given",
            help="The card's dense tensor-core peak at 16 bits, as its datasheet gives it without sparsity",
        )
    w.number_input("GPUs", *BOUNDS["gpus"], step=1, key="in_gpus")
    if gguf_caption is None:
        w.selectbox("Weights", list(FORMATS), key="in_weights", help="Weight quantisation")
    else:
        w.caption(gguf_caption)
    w.selectbox("Engine", list(ENGINES), key="in_engine", on_change=_on_engine)
    engine = st.session_state["in_engine"]
    if gguf_caption is not None and engine != "llama.cpp":
        problems.append(
            f"Engine: a GGUF runs on llama.cpp or Ollama (llama.cpp with the ollama front end), not on {engine}; "
            "choose llama.cpp, or name the model's safetensors repo for another engine."
        )
    kv_options = list(ENGINES[engine].kv_dtypes)
    if st.session_state.get("in_kv") not in kv_options:
        st.session_state["in_kv"] = "auto"
    st.session_state["eight_bit"] = st.session_state["in_kv"] in EIGHT_BIT
    w.toggle(
        "8-bit KV cache",
        key="eight_bit",
        on_change=_on_eight_bit,
        disabled=engine not in EIGHT_BIT_KV,
        help="fp8 on vLLM, q8_0 on llama.cpp; transformers keeps K/V in the compute dtype",
    )
    w.selectbox("KV dtype", kv_options, key="in_kv", on_change=_forget_eight_bit)
    w.caption(f"Rules: {ENGINES[engine].rules_version}")
    if engine == "vllm":
        w.selectbox(
            "vLLM platform",
            PLATFORMS,
            key="in_plat",
            help="CUDA GPUs, or vLLM's CPU backend (Xeon serving): other block sizes and state dtypes",
        )
        w.selectbox(
            "vLLM version (log line)",
            VERSIONS,
            key="in_vver",
            help="Which release's 'KV cache size: N tokens' formula to reproduce; it changed in 0.21",
        )
        w.number_input(
            "GPU memory utilization",
            *BOUNDS["util"],
            step=0.01,
            key="in_util",
            help="vLLM's --gpu-memory-utilization: the share of the card vLLM may use (default 0.92)",
        )
        w.number_input(
            "Max sequences at once",
            *BOUNDS["mns"],
            step=1,
            key="in_mns",
            help="vLLM's --max-num-seqs: the requests its scheduler runs at once, which also sizes the profile run's "
            "sampler logits; 0 = `vllm serve`'s default for the card (256, or 1,024 from 70 GiB but A100)",
        )
    if engine == "llama.cpp":
        w.selectbox(
            "llama.cpp front end",
            list(FRONTENDS),
            key="in_fe",
            help="Whose defaults apply: llama-server (unified buffer), llama-cli, or the library "
            "(llama-cpp-python: full-size sliding-window cache)",
        )
        w.selectbox(
            "ggml backend",
            BACKEND_CHOICES,
            key="in_backend",
            format_func=lambda b: "auto (the card's vendor's)" if b == AUTO_BACKEND else BACKEND_NAMES[b],
            help="The backend llama.cpp is built with (speed only: its fitted efficiencies and error bar); auto: "
            "CUDA on NVIDIA, ROCm on AMD, Metal on Apple, SYCL on Intel. Vulkan runs on any card.",
        )
        w.radio(
            "Sliding-window cache (--swa-full)",
            list(SWITCH),
            key="in_swa",
            horizontal=True,
            help="on: sliding layers keep the whole context; off: only the window (+ a batch); auto: default",
        )
        w.radio(
            "Unified KV buffer (--kv-unified)",
            list(SWITCH),
            key="in_kvu",
            horizontal=True,
            help="on: all sequences share one buffer of cells; off: one stream per sequence; auto: default",
        )
        w.radio(
            "Flash attention (-fa)",
            list(SWITCH),
            key="in_fa",
            horizontal=True,
            help="off: V is stored transposed and padded, the attention scores of a whole micro-batch are buffered, "
            "and a quantised V cache is refused; auto: on, as llama.cpp's auto picks where the backend has it",
        )
        w.number_input(
            "Micro-batch (-ub; 0 = the front end's)",
            *BOUNDS["ub"],
            step=256,
            key="in_ub",
            help="Prompt tokens per pass (n_ubatch, 512 by default): larger prompt passes run faster and need larger "
            "compute buffers. llama.cpp runs min(-b, -ub), so past the front end's -b this sizes `-b N -ub N`",
        )
        w.number_input(
            "GPU layers (-ngl; -1 = all)",
            *BOUNDS["ngl"],
            step=1,
            key="in_ngl",
            help="Layers offloaded to the GPU; the others and their KV stay in system RAM",
        )
        w.number_input(
            "MoE experts in RAM (--n-cpu-moe)",
            *BOUNDS["ncmoe"],
            step=1,
            key="in_ncmoe",
            help="MoE models: the routed experts of the first N layers stay in system RAM (their attention stays "
            "on the GPU); 0 = none",
        )
    context_box(w)
    return problems


def context_box(where=st) -> None:
    """The context text box (the sidebar's, or a page's own where the sidebar shows only the model); `sidebar`
    reads it into `in_ctx` before anything else, so the link follows on the same run."""
    where.text_input("Context (tokens)", key="in_ctx_text", help="e.g. 8192, 64,000, 32k, 128K")


def _sync_context() -> str | None:
    """`in_ctx` from the context box's text; what is wrong with the text when it cannot be read."""
    try:
        st.session_state["in_ctx"] = parse_tokens(st.session_state.get("in_ctx_text", ""))
    except InputError as err:
        return f"Context: {err}"
    return None


def _share_link(inputs: Inputs, problems: list[str], typed: dict[str, str]) -> None:
    # Named, not repeated: the message itself stands where the results would be.
    what = ", ".join(sorted({p.split(":")[0] for p in problems if ":" in p[:20]})) or "the one it names"
    notes = () if not problems else (
        f"It carries the inputs as they are now, {what} included, so whoever opens it meets the same message.",
    )  # fmt: skip
    if problems and inputs.source == "Upload" and not inputs.config:  # a config.json cannot travel unread
        notes = (
            "It carries no config.json, since none that can be read was given: whoever opens it is asked for one.",
        )
    share_box(share_query(inputs, typed), notes)


def _stop(message: str) -> None:
    """An error where the results would be, and no results: none would match the inputs. It may quote an upload's or a
    link's text, drawn as no link of its own (linkless)."""
    st.error(linkless(message))
    st.stop()


def sidebar(*, model_only: bool = False, context_at: Any = None) -> tuple[Inputs, ModelSpec, Setup]:
    """Draw the shared inputs; return them with the model and the fit setup they describe.

    `model_only` draws just the model (and what-if) inputs, for pages whose other settings are their own; the
    hidden inputs keep their values and stay in the link. The context box is the sidebar's unless `model_only`;
    `context_at` is a page's own place for it (a column of its inputs), where it is drawn before it is read, so a
    context that cannot be read stops the page with the box still there to mend it. Inputs that cannot be read
    stop the page with an error in place of its results."""
    RESOLVER.start_soon()  # once per server, after this first page: ready before a visitor's new config needs it
    _init_from_url()
    if context_at is not None:
        context_box(context_at)
    with st.sidebar:
        # A session's first run draws the results from the inputs' values alone; the page links and the inputs
        # follow once the browser has drawn it. No link before that rerun: one clicked first would lose to it.
        drawn = wait_for_paint()
        w = st if drawn else _Unseen()
        if drawn:
            nav()
        else:
            st.caption("Loading the inputs…")
        problems = _model_inputs(w)
        weights_file, gguf_caption = None, None
        gguf = None if problems else _gguf_in_box(_current())
        if gguf is not None:
            try:
                weights_file, gguf_caption = _gguf_weights(gguf)
            except InputError as err:  # no figures from the selectbox's format in place of the file's
                problems.append(f"Model: {gguf[:80]!r} cannot be used: {err}")
        if not model_only:
            problems += _hardware_inputs(w, gguf_caption)
    context = not model_only or context_at is not None
    ctx_problem = _sync_context()
    if context and ctx_problem:
        problems.append(ctx_problem)
    inputs = _current()
    st.session_state["_kv_widgets"] = {k: v for k, v in st.session_state.items() if str(k).startswith("in_")}
    # A context box that cannot be read travels as typed (bounded), not as its last valid value.
    typed = {"ctx": st.session_state.get("in_ctx_text", "").strip()[:40]} if context and ctx_problem else {}
    st.query_params.from_dict(to_query(inputs) | typed)
    if drawn:
        with st.sidebar:
            _share_link(inputs, problems, typed)
            fold_sidebar_on_phones(share_query(inputs, typed))
    ignored = st.session_state.get("_kv_ignored")
    if ignored:
        # the link's own values, quoted: shown as typed, never as markdown (a link of someone else's making)
        st.warning("Some link parameters were ignored and defaults used instead: " + literal("; ".join(ignored)))
    if problems:
        _stop("\n\n".join(problems))
    try:
        hub = st.session_state.get("in_source") == "Hub" or inputs.model not in presets()
        source = inputs.model.strip() or DEFAULT_MODEL
        failure = _spec_failure(source, inputs.config, hub)
        if failure:
            raise InputError(failure)
        model, origin = _spec(source, inputs.config, hub)
        if origin.startswith("bundled preset ("):
            st.warning(f"{inputs.model}: using the {origin}")
        if drawn:
            st.sidebar.caption(f"Config: {origin}")
    except InputError as err:  # no stand-in model: its figures would be read as the requested one's
        what = "The uploaded config.json" if inputs.config else f"{inputs.model.strip()[:80]!r}"
        _stop(f"{what} cannot be used: {err}")
    if any(getattr(inputs, key) for key in EDITS):
        try:
            model = edited(
                model,
                num_layers=inputs.layers or None,
                kv_heads=inputs.kvh or None,
                head_dim=inputs.hd or None,
                window=inputs.win or None,
                pattern=inputs.pat or None,
            )
        except InputError as err:
            st.button("Clear the what-if edits", on_click=_clear_edits)
            _stop(f"The what-if edit cannot be applied: {err}")
    setup = setup_for(inputs, model, weights_file)
    if not model_only:
        _check_setup(setup)
        warning = format_note(setup)
        if warning:
            st.warning(warning)
        _weights_notes(setup)
    return inputs, setup.model, setup


def _weights_notes(setup: Setup) -> None:
    """Where the Weights box sizes another format than the checkpoint ships, say so, and offer the checkpoint's own
    as the engine loads it, one click away (core.report.checkpoint_note, format_offer)."""
    if shipped := checkpoint_note(setup):
        st.caption(shipped)
    if offer := format_offer(setup):
        st.button(f"Size the weights as {offer}, the checkpoint's own", on_click=_set_weights, args=(offer,))


def _check_setup(setup: Setup) -> None:
    """Stop with the reason when the engine cannot run this setup; for a GPU count, offer the ones it can."""
    try:
        check(setup)
    except InputError as err:
        counts = gpu_counts(setup) if setup.gpus > 1 else []
        if counts:
            st.error(
                linkless(
                    f"{setup.gpus} GPUs: {err}. {setup.engine.name} can split {setup.model.name} over "
                    + ", ".join(map(str, counts))
                    + " GPUs (counts up to 16 shown; the sidebar takes any); pick one:"
                )
            )
            cols = st.columns(min(len(counts), 8))
            for i, n in enumerate(counts):
                cols[i % len(cols)].button(
                    f"{n} GPU{'s' if n > 1 else ''}", key=f"gpus_{n}", on_click=_set_gpus, args=(n,)
                )
            st.stop()
        _stop(str(err))


def setup_for(inputs: Inputs, model: ModelSpec, weights_file: WeightFile | None = None) -> Setup:
    """`weights_file`: exact weights (a Hub GGUF's header) in place of the `weights` format's estimate."""
    engine = configured(
        inputs.engine,
        frontend=inputs.fe,
        platform=inputs.plat,
        version=inputs.vver,
        swa_full=SWITCH[inputs.swa],
        kv_unified=SWITCH[inputs.kvu],
        flash_attn=SWITCH[inputs.fa],
        max_num_seqs=inputs.mns or None,
    )
    if inputs.ub and isinstance(engine, LlamaCppEngine):  # one knob: -b raised with it where it must be
        engine = engine.with_ubatch(inputs.ub, max(inputs.ub, engine.options.n_batch))
    card = Card.custom(inputs.gib, inputs.gbs, inputs.tflops) if inputs.card == CUSTOM_CARD else card_named(inputs.card)
    tp, pp = default_split(engine, inputs.gpus)
    offload = inputs.ngl if inputs.engine == "llama.cpp" and inputs.ngl >= 0 else None
    return Setup(
        model=model,
        engine=engine,
        card=card,
        gpus=inputs.gpus,
        tp=tp,
        pp=pp,
        weights=inputs.weights,
        kv_dtype=inputs.kv,
        gpu_memory_utilization=inputs.util,
        gpu_layers=offload,
        cpu_experts=range(inputs.ncmoe if inputs.engine == "llama.cpp" else 0),
        weights_file=weights_file,
    )


def downloads(
    inputs: Inputs, records: list[dict], payload: dict, name: str = "kvscope", kv_used: str | None = None
) -> None:
    """The table as shown (CSV, with the inputs that produced it as leading columns, its numbers to the digits the
    page shows) and everything as JSON. `kv_used`: the KV dtype `auto` resolved to, as the page names it."""
    main = {
        "model": "uploaded config.json" if inputs.config else inputs.model,
        "card": f"{inputs.gib:g} GiB" if inputs.card == CUSTOM_CARD else inputs.card,
        "gpus": inputs.gpus,
        "engine": inputs.engine,
        "weights": "GGUF header" if _gguf_in_box(inputs) else inputs.weights,
        "kv": kv_used or inputs.kv,
    }
    skip = (*main, "gib", "config", "ctx", *PAGE_FIELDS)  # other pages' settings did not produce this table
    carried = main | {k: v for k, v in to_query(inputs).items() if k not in skip}
    c1, c2 = st.columns(2)
    c1.download_button("Download table (CSV)", csv_text(records, carried), f"{name}-table.csv", "text/csv")
    c2.download_button(
        "Download JSON",
        json.dumps({"inputs": asdict(inputs), **payload}, indent=2, default=str),
        f"{name}.json",
        "application/json",
    )
