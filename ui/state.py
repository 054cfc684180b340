"""Every input of the explorer, and its round trip through the URL (pure: testable without Streamlit).

A shared link carries all inputs as query parameters. Unknown keys and invalid values are dropped with a warning
naming them, and the view opens with defaults for those inputs.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import asdict, dataclass, fields, replace
from urllib.parse import quote, urlencode

from core.engines import ENGINES
from core.engines.llamacpp import DEFAULT_FRONTEND, FRONTENDS
from core.engines.runtimes import OLLAMA_KV_TYPES
from core.engines.vllm_engine import VERSIONS, VllmEngine, VllmOptions
from core.errors import InputError
from core.memory.gguf_hub import GGUFName, gguf_name
from core.memory.gpus import MAX_GB_S, MAX_TFLOPS, card_named
from core.memory.quant import format_named
from core.model.config import MAX_LAYERS, parse_json
from core.model.loading import DEFAULT_MODEL, presets
from core.ollama_report import DEFAULT_CARDS, MEASURED
from core.probe.request import BACKENDS, DEVICES
from core.speed.groups import AUTO_BACKEND, BACKEND_CHOICES
from core.speed.ram import ISA_NAMES
from core.units import format_tokens, parse_tokens

CUSTOM_CARD = "custom"
CUSTOM_FIGURES = ("gib", "gbs", "tflops")  # what a custom card is given; a listed card has its own
MAX_SHARED_CONFIG = 16_000  # characters of compressed config in a link
MAX_UNPACKED_CONFIG = 1 << 20  # bytes it may inflate to: zlib reaches ~1000:1, so a bomb stops here
# The sidebar's widget bounds: a link value outside them would be clamped or dropped by the widget unannounced.
RAM_GB_S, THREADS = (1.0, 2000.0), (1, 1024)  # a host's RAM bandwidth and CPU threads (Ollama's, Fit a card's)
BOUNDS = {
    "gib": (0.5, 100_000.0),
    "gbs": (0.01, float(MAX_GB_S)),  # a custom card's speed figures: any positive one core.memory.gpus takes
    "tflops": (0.01, float(MAX_TFLOPS)),
    "util": (0.05, 1.0),
    "mns": (0, 1 << 16),  # vLLM --max-num-seqs; 0 = `vllm serve`'s for the card
    "ngl": (-1, 100_000),
    "ncmoe": (0, 100_000),
    "ub": (0, 1 << 16),  # llama.cpp -ub; 0 = the front end's (512)
    "gpus": (1, 1024),
    "layers": (0, MAX_LAYERS),
    "kvh": (0, 4096),
    "hd": (0, 4096),
    "win": (0, 1 << 24),
    "nodes": (1, 512),
    "gpn": (1, 64),
    "onp": (1, 64),
    "oover": (0, 1 << 20),
    "ogbs": RAM_GB_S,
    "othr": THREADS,
    "ram": RAM_GB_S,
    "thr": THREADS,
    "players": (0, 1000),
    "psteps": (2, 512),
    "ptime": (10, 3600),
    "putil": (0.05, 1.0),  # Measure live's vLLM options; 0 = kvscope's default, which the probe passes to vLLM
    "pmnbt": (0, 1 << 20),
    "pmns": (0, 1 << 16),
    "pbs": (0, 4096),
}
SWITCH = {"auto": None, "on": True, "off": False}  # an engine option: its default, or forced on/off
PLATFORMS = ("cuda", "cpu")
FINDER_VIEWS = ("cards", "models")
OLLAMA_WEIGHTS = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k", "iq4_xs", "fp16", "bf16")  # GGUFs it pulls
OLLAMA_FLASH = {"unset": None, "on": True, "off": False}  # OLLAMA_FLASH_ATTENTION
OLLAMA_RAM = ("typical", "given", MEASURED)  # the host's RAM bandwidth: a typical desktop, a figure, or measured
MAX_OLLAMA_CARDS = 12
CHOICES = {
    "swa": SWITCH,
    "kvu": SWITCH,
    "fa": SWITCH,
    "vver": VERSIONS,
    "fe": FRONTENDS,
    "backend": BACKEND_CHOICES,
    "plat": PLATFORMS,
    "ep": SWITCH,
    "ftab": FINDER_VIEWS,
    "ckv": VllmEngine.kv_dtypes,
    "okv": OLLAMA_KV_TYPES,
    "ofa": OLLAMA_FLASH,
    "ow": OLLAMA_WEIGHTS,
    "oram": OLLAMA_RAM,
    "isa": ("", *ISA_NAMES),
    "oall": ("off", "on"),
    "pdev": DEVICES,
    "pbe": BACKENDS,
    "pkv": VllmEngine.kv_dtypes,
    "ppc": ("on", "off"),
}
SOURCES = ("Preset", "Hub", "Upload")
MAX_TYPED = 8192  # a text box carried in a link as typed (Measure live's contexts), errors included
# org/name; never a path on the server (no "..", no "x.json" that core.model.loading would read as a file)
REPO_ID = re.compile(r"^(?!.*\.\.)(?!.*\.json$)[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}\Z", re.ASCII)  # \Z: no final \n
PATTERN = re.compile(r"^[A-Za-z]{0,64}$")  # what the sidebar's pattern box keeps; core.model.whatif judges the letters
# A model name as the hybrid page draws it ("org/name", "org/name (all 32 full)", "uploaded config.json"): no markup,
# so that a link's name quoted in the page's note cannot draw a link or an image
POINT_MODEL = re.compile(r"^[\w .:/()+,-]{1,256}\Z", re.ASCII)


@dataclass(frozen=True)
class Inputs:
    model: str = DEFAULT_MODEL  # a preset or Hub repo id; ignored when `config` is set
    source: str = "Preset"  # where the config comes from: a bundled preset may differ from the Hub's current one
    config: str = ""  # an uploaded config.json, compressed into the link
    card: str = CUSTOM_CARD
    gib: float = 8.0  # memory of a custom card
    gbs: float | None = None  # a custom card's bandwidth (GB/s) and dense 16-bit TFLOPS; None: not given, no speed
    tflops: float | None = None
    gpus: int = 1
    weights: str = "q4_k_m"
    kv: str = "auto"
    engine: str = "llama.cpp"
    ctx: int = 32768
    ngl: int = -1  # llama.cpp -ngl: layers on the GPU; -1 = all
    ncmoe: int = 0  # llama.cpp --n-cpu-moe: the first N layers keep their routed experts in system RAM
    swa: str = "auto"  # llama.cpp --swa-full: auto (the front end's default), on, off
    kvu: str = "auto"  # llama.cpp --kv-unified: auto, on, off
    fa: str = "auto"  # llama.cpp -fa: auto (on where the backend has the kernels, as llama.cpp's auto), on, off
    ub: int = 0  # llama.cpp -ub (n_ubatch); 0 = the front end's default
    plat: str = "cuda"  # vLLM platform: cuda or cpu
    vver: str = VllmOptions.version  # vLLM release whose start-up log line is reproduced
    fe: str = DEFAULT_FRONTEND  # llama.cpp front end whose defaults apply
    backend: str = AUTO_BACKEND  # llama.cpp's ggml backend (speed only); auto: the card's vendor's
    # Fit a card's host for layers left in RAM: its RAM bandwidth (GB/s; None = measured on this server), CPU threads
    # and vector ISA ("" = not known)
    ram: float | None = None
    thr: int = 8
    isa: str = ""
    util: float = 0.92  # vLLM gpu_memory_utilization (vLLM 0.33's default)
    mns: int = 0  # vLLM --max-num-seqs; 0 = `vllm serve`'s default for the card (256, or 1,024 from 70 GiB but A100)
    layers: int = 0  # what-if edits; 0 = as the config says
    kvh: int = 0
    hd: int = 0
    win: int = 0
    pat: str = ""  # what-if layer pattern, e.g. LLLF
    cmp: str = "Qwen/Qwen3-8B"  # comparators on the hybrid-vs-dense page, comma separated
    hpt: str = ""  # the hybrid page's worked point, model@context (point_query); "" = its first model at 1K
    ccard: str = "H100 80GB SXM5"  # the cluster page's card, its nodes and GPUs per node, and EP (auto = both)
    nodes: int = 2
    gpn: int = 8
    ep: str = "auto"
    ckv: str = "auto"  # the cluster page's KV dtype (vLLM's --kv-cache-dtype), apart from the sidebar engine's
    ftab: str = "cards"  # the finders page's view: cards for the model, or models for the card
    # The Ollama page's settings (its model is the sidebar's): cards and extra models (comma separated), num_ctx as
    # typed ("" = Ollama's default for the card), OLLAMA_* variables, weights, and the host's RAM and threads.
    ocards: str = ",".join(DEFAULT_CARDS)
    omodels: str = ""
    octx: str = ""
    onp: int = 1
    okv: str = "f16"
    ofa: str = "unset"
    oover: int = 0  # OLLAMA_GPU_OVERHEAD in MiB
    ow: str = "q4_k_m"
    oram: str = "typical"
    ogbs: float = 60.0
    othr: int = 8
    ofree: str = ""  # free GPU memory as Ollama logs it, e.g. "7.1GiB"; empty = each card's whole memory
    oall: str = "off"  # the Ollama page's "Every column"
    # Measure live's probe form: contexts (as typed), device, backend, layers (0 = automatic), decode steps, timeout
    pctx: str = "512, 2k"
    pdev: str = "auto"
    pbe: str = "transformers"
    players: int = 0
    psteps: int = 8
    ptime: int = 300
    # and its vLLM options, which the probe starts vLLM with and predicts with: KV dtype, GPU memory utilization,
    # max batched tokens, max sequences (0 = kvscope's defaults, 2048 and 256), prefix caching, block size (0 = vLLM's)
    pkv: str = "auto"
    putil: float = 0.92
    pmnbt: int = 0
    pmns: int = 0
    ppc: str = "on"
    pbs: int = 0


DEFAULTS = Inputs()
# Fields only one page reads (its own controls); the sidebar's figures do not depend on them.
PAGE_FIELDS = (
    "cmp",
    "hpt",
    "ccard",
    "nodes",
    "gpn",
    "ep",
    "ckv",
    "ftab",
    *(f.name for f in fields(Inputs) if f.name[0] == "o"),
)


def _compact(raw: dict) -> bytes:
    return json.dumps(raw, separators=(",", ":")).encode()


def _packed(data: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(data, 9)).decode().rstrip("=")


def pack_config(raw: dict) -> str:
    return _packed(_compact(raw))


def pack_upload(raw: dict) -> str:
    """An uploaded config as the link carries it, or an InputError where no link could: one that inflates past
    MAX_UNPACKED_CONFIG or packs past MAX_SHARED_CONFIG is refused when the link is opened, so the sender's page
    refuses it too, rather than size it from an upload its own link (and a reload) would not bring back."""
    data = _compact(raw)
    fix = (
        "a checkpoint's config.json is a few KB: remove the fields kvscope does not read (label maps, tokenizer "
        "data), or size it with the command line (python -m core fit config.json)"
    )
    if len(data) > MAX_UNPACKED_CONFIG:
        raise InputError(
            f"the uploaded config.json is {len(data) / (1 << 20):.1f} MiB, more than the app takes "
            f"({MAX_UNPACKED_CONFIG >> 20} MiB); {fix}"
        )
    packed = _packed(data)
    if len(packed) > MAX_SHARED_CONFIG:
        raise InputError(
            f"the uploaded config.json packs to {len(packed):,} characters, more than a link carries "
            f"({MAX_SHARED_CONFIG:,}); {fix}"
        )
    return packed


def unpack_config(text: str) -> dict:
    try:
        blob = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(blob, MAX_UNPACKED_CONFIG)
        if inflater.unconsumed_tail:
            raise InputError(
                f"the shared config in the link unpacks to more than {MAX_UNPACKED_CONFIG >> 20} MiB, which no "
                "config.json does; upload the config.json instead"
            )
    except (ValueError, zlib.error) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"the shared config in the link is damaged ({err})") from None
    try:
        return parse_json(raw, "the shared config in the link")
    except InputError as err:
        raise InputError(f"{err}; ask for a fresh link") from None


def hub_gguf(text: str) -> GGUFName | None:
    """The GGUF a model box or link names as llama.cpp's -hf and Ollama write it (org/repo:QUANT, hf.co/org/repo:QUANT,
    org/repo-GGUF), asked of the Hub only; None for anything else, web addresses and malformed names included."""
    if "://" in text:
        return None  # the box takes names, not web addresses
    try:
        return gguf_name(text)
    except InputError:
        return None


def model_problem(text: str) -> str | None:
    """Why `text` is neither a bundled preset, a Hub repo id (org/name) nor a Hub GGUF name; None when it is one.
    Never a path: whatever its shape, the name is asked of the Hub (the app runs on a shared server)."""
    if text in presets() or REPO_ID.match(text) or hub_gguf(text) is not None:
        return None
    try:
        if "://" not in text:
            gguf_name(text)  # a malformed GGUF name: its own message says how to write one
    except InputError as err:
        return str(err)
    return (
        f"{text[:80]!r} is not a Hugging Face repo id: write org/name with letters, digits, '-', '_' or '.' (e.g. "
        "Qwen/Qwen3-8B), or a GGUF as org/repo:QUANT (e.g. unsloth/Qwen3-8B-GGUF:Q4_K_M); paths and web addresses "
        "are not accepted."
    )


def _check(key: str, value: str):
    """Parse one query value; raises InputError/ValueError when it is not acceptable."""
    if key == "model":
        if model_problem(value):
            raise InputError(f"unknown model {value!r}")
        return value
    if key == "source":
        if value not in SOURCES:
            raise InputError(f"use one of {', '.join(SOURCES)}")
        return value
    if key == "config":
        if len(value) > MAX_SHARED_CONFIG:
            raise InputError("shared config too large")
        unpack_config(value)
        return value
    if key == "card":
        return value if value == CUSTOM_CARD else card_named(value).name
    if key == "ccard":
        return card_named(value).name
    if key in BOUNDS:
        lo, hi = BOUNDS[key]
        kind = float if isinstance(lo, float) else int
        try:
            number = kind(value)
        except ValueError:
            raise InputError(f"{key} must be {'a number' if kind is float else 'a whole number'}") from None
        if not lo <= number <= hi:  # NaN fails this too
            raise InputError(f"{key} must be {lo:g} … {hi:g}")
        return number
    if key == "weights":
        return format_named(value).name  # any spelling the CLI takes (Q4_K, F16, iq2-xxs), as its canonical name
    if key == "engine":
        if value not in ENGINES:
            raise InputError(f"unknown engine {value!r}")
        return value
    if key == "kv":
        if not any(value in engine.kv_dtypes for engine in ENGINES.values()):
            raise InputError(f"unknown KV dtype {value!r}")
        return value
    if key == "ctx":
        return parse_tokens(value)
    if key in CHOICES:
        if value not in CHOICES[key]:
            named = ", ".join(c for c in CHOICES[key] if c)
            raise InputError(f"use one of {named}" + (", or leave it empty" if "" in CHOICES[key] else ""))
        return value
    if key == "pat":
        # Letters core.model.whatif rejects still travel, so the receiver sees the sender's "edit not applied" too.
        if not PATTERN.match(value):
            raise InputError("a layer pattern is up to 64 letters")
        return value.upper()
    if key == "hpt":
        return point_query(*read_point(value))  # canonical: 32768 and 32k travel on as 32K
    if key in ("cmp", "omodels"):
        names = [n for n in value.split(",") if n]
        if len(names) > 4 or any(n not in presets() for n in names):
            raise InputError("comparators must be bundled presets (at most 4)")
        return ",".join(names)
    if key == "ocards":
        names = [card_named(n).name for n in value.split(",") if n]
        if len(names) > MAX_OLLAMA_CARDS or not all(card_named(n).bandwidth_gb_s for n in names):
            raise InputError(f"cards with speed figures, at most {MAX_OLLAMA_CARDS}")
        return ",".join(names)
    # typed text the page itself reads (the probe's contexts, Ollama's num_ctx and free memory): a value it cannot
    # read travels as typed, bounded, so whoever opens the link meets the sender's message, not defaults
    if key in ("pctx", "octx", "ofree"):
        if len(value) > MAX_TYPED:
            raise InputError(f"at most {MAX_TYPED:,} characters")
        return value.strip()
    raise InputError(f"unknown parameter {key!r}")


def point_query(model: str, context: int) -> str:
    """The hybrid page's worked point as its link carries it: the model as the page names it, `@`, the context
    (`Qwen/Qwen3-8B@32K`). The page decides whether it draws that point (core.explain.worked_point)."""
    return f"{model}@{format_tokens(context).replace(',', '')}"


def read_point(text: str) -> tuple[str, int]:
    """A link's worked point: the model's name and the context, or an InputError saying how to write one."""
    model, at, context = text.rpartition("@")
    if not at or not POINT_MODEL.match(model):
        raise InputError(
            "write the worked point as model@context, e.g. Qwen/Qwen3-8B@32K, the model as the page names it (in "
            "letters, digits, spaces and ._-:/()+,)"
        )
    return model, parse_tokens(context)


def clipped(text: str, most: int = 40) -> str:
    """A link's text as a message quotes it: at most `most` characters, an ellipsis for the rest."""
    return text if len(text) <= most else text[: most - 1] + "…"


def from_query(params: dict[str, str]) -> tuple[Inputs, list[str]]:
    """Inputs from a link's query parameters, and the parameters that were ignored (with why)."""
    values: dict[str, object] = {}
    ignored: list[str] = []
    known = {f.name for f in fields(Inputs)}
    for key, value in params.items():
        if key not in known:
            ignored.append(f"{clipped(key)} (unknown parameter)")
            continue
        try:
            values[key] = _check(key, str(value))
        except (InputError, ValueError) as err:
            # the reason may quote the value whole: a hand-edited link's 20,000 characters flooded the page
            ignored.append(f"{key}={str(value)[:40]!r} ({clipped(str(err), 200)})")
    inputs = replace(DEFAULTS, **values)
    if inputs.engine in ENGINES and inputs.kv not in ENGINES[inputs.engine].kv_dtypes:
        ignored.append(f"kv={inputs.kv!r} (not available on {inputs.engine})")
        inputs = replace(inputs, kv="auto")
    if inputs.config and "source" not in values:  # a config alone: the upload it was
        inputs = replace(inputs, source="Upload")
    elif inputs.config and inputs.source != "Upload":  # the source named wins; say so rather than drop it silently
        ignored.append(f"config (a shared config.json is read with source=Upload; the link says {inputs.source})")
        inputs = replace(inputs, config="")
    if inputs.card != CUSTOM_CARD:  # a listed card is sized and timed by its own figures
        given = [key for key in CUSTOM_FIGURES if key in values]
        ignored += [
            f"{key}={clipped(params[key])} (card={inputs.card} has its own figures; they apply to card=custom)"
            for key in given
        ]
        inputs = replace(inputs, **{key: getattr(DEFAULTS, key) for key in given})
    if params.get("source") == "Preset" and inputs.model not in presets():  # a Hub id is read only with source=Hub
        ignored.append(f"model={inputs.model[:40]!r} (not a bundled preset; a link to a Hub model says source=Hub)")
        inputs = replace(inputs, model=DEFAULT_MODEL)
    return inputs, ignored


def repeated_params(params: dict[str, list[str]]) -> list[str]:
    """The inputs a link gives more than once (every value of each key): Streamlit reads the last, which the message
    says, rather than drop the others without a word."""
    known = {f.name for f in fields(Inputs)}
    return [
        f"{key} (given {len(values)} times; only the last, {clipped(values[-1])!r}, is read)"
        for key, values in params.items()
        if key in known and len(values) > 1
    ]


def to_query(inputs: Inputs) -> dict[str, str]:
    """Only what differs from the defaults, so links stay short; the model is named unless an upload replaces it."""
    out: dict[str, str] = {}
    for key, value in asdict(inputs).items():
        if value == getattr(DEFAULTS, key) and key != "model":
            continue
        if key in CUSTOM_FIGURES and inputs.card != CUSTOM_CARD:
            continue  # a custom card's figures left from before a listed card was picked
        if key == "model" and (not str(value).strip() or inputs.config):
            continue  # an empty Hub box ("?model=" would be refused when opened), or a Hub entry an upload replaced
        out[key] = (
            format_tokens(value).replace(",", "")
            if key == "ctx"
            else _float(value)
            if isinstance(value, float)
            else str(value)
        )
    return out


def _float(value: float) -> str:
    """Short when that is exact (`24`, `0.9`), else every digit: the link must give back the same number."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def link_query(params: dict[str, str | list[str]]) -> str:
    """A link's query string, every value percent-encoded (a space would end a link in chat); lists repeat the key."""
    return urlencode(params, doseq=True, quote_via=quote, safe="")


def share_query(inputs: Inputs, typed: dict[str, str] | None = None) -> str:
    """The query string of a link to this view. `typed`: boxes whose text cannot be read, carried as typed so that
    the link opens on the same problem."""
    return link_query(to_query(inputs) | (typed or {}))
