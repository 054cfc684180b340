"""Token counts in (`32k`, `128K`, `1M`) and binary byte sizes out."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from core.errors import InputError

# digits with optional thousands commas ("64,000", the way the app prints counts), a fraction, a k/M suffix
_TOKENS = re.compile(r"^\s*(-?\d{1,3}(?:,\d{3})+|-?\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")
_SCALE = {"": 1, "k": 1024, "m": 1024 * 1024}
MAX_TOKENS = 1 << 40  # a trillion: far past any model's context; beyond it a count is a typo or an attack
MAX_DIGITS = 24  # past any size kvscope takes; checked before int() (which refuses 4,300+ digits with a ValueError)


def round_up(n: int, to: int) -> int:
    """`n` rounded up to a whole multiple of `to` (GGML_PAD; cache cells, blocks, aligned buffers)."""
    return -(-n // to) * to


def floor_places(x: float, places: int = 2) -> float:
    """`x` cut, not rounded, to `places` decimals: a request count shown never reaches a whole request it lacks
    (vLLM's 0.9996 of one is 0.99, not 1.00)."""
    scale = 10**places
    return math.floor(x * scale) / scale


def digits_checked(number: str, text: str | int) -> str:
    """The number as typed, refused before conversion when it has more digits than any real size."""
    if sum(ch.isdigit() for ch in number) > MAX_DIGITS:
        raise InputError(f"{str(text)[:24]}… has more than {MAX_DIGITS} digits; no real size is that long")
    return number


def parse_tokens(text: str | int) -> int:
    """`32k` → 32768 (k = 1024, as context lengths are quoted), `64,000` → 64000; plain integers pass through."""
    if isinstance(text, int):
        value = text
    else:
        match = _TOKENS.match(str(text))
        if not match:
            raise InputError(f"cannot read {text!r} as a token count; write e.g. 8192, 64,000, 32k or 128K")
        number, suffix = match.groups()
        # Fraction, not float: 999999999999999999999 must stay that number (and be refused), not round
        exact = Fraction(digits_checked(number, text).replace(",", "")) * _SCALE[suffix.lower()]
        if exact.denominator != 1:
            raise InputError(f"{text!r} is not a whole number of tokens")
        value = int(exact)
    if value <= 0:
        raise InputError(f"token count must be positive, got {text!r}")
    if value > MAX_TOKENS:
        raise InputError(f"{text!r} tokens is more than kvscope sizes ({MAX_TOKENS:,}); write fewer")
    return value


def format_tokens(n: int) -> str:
    """32768 → `32K`; counts that are not a multiple of 1024 stay exact."""
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0 and n < 100_000 * 1024 * 1024:
        return f"{n // (1024 * 1024)}M"
    if n >= 1024 and n % 1024 == 0 and n < 100_000 * 1024:  # not 9765625K: past that, the count itself
        return f"{n // 1024}K"
    return f"{n:,}"


def tokens_phrase(n: int) -> str:
    """`an 8K-token context`, `a 32K-token context`: the article as the number is read aloud."""
    text = format_tokens(n)
    lead = re.match(r"\d+", text).group()  # the group read first: "8" of 8K, "11" of 11,264
    return f"{'an' if lead.startswith('8') or lead in ('11', '18') else 'a'} {text}-token context"


def layer_span(first: int, last: int) -> str:
    """Decoder layers first..last as a reader says them: "layer 23", "layers 23–31"."""
    return f"layer {first}" if first == last else f"layers {first}–{last}"


def plural(n: float, word: str, text: str | None = None) -> str:
    """`1 request`, `3 requests`, `0.50 requests`; `text` is the number as already formatted."""
    return f"{text if text is not None else n} {word}{'' if n == 1 else 's'}"


_BYTES = re.compile(r"^\s*((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*(|B|KiB|MiB|GiB)\s*$")  # 1,250.00 GiB as shown
_BYTE_SCALE = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def byte_amount(text: str) -> Fraction:
    """`1073741824`, `512 MiB`, `1.5GiB` as an exact number of bytes, a fraction where the decimal leaves one.
    Binary units only: `GB` would be ambiguous."""
    match = _BYTES.match(text)
    if not match:
        raise InputError(f"cannot read {text!r} as a size; write bytes (1073741824) or e.g. 512MiB, 1.5GiB")
    number, unit = match.groups()
    return Fraction(digits_checked(number.replace(",", ""), text)) * _BYTE_SCALE[unit]


def parse_bytes(text: str | int) -> int:
    """`1073741824`, `512 MiB`, `1.5GiB` → bytes (0 or more), a whole number of them."""
    if isinstance(text, int):
        value = text
    else:
        exact = byte_amount(str(text))
        if exact.denominator != 1:
            raise InputError(f"{text!r} is not a whole number of bytes")
        value = int(exact)
    if value < 0:
        raise InputError(f"a size must be 0 or more bytes, got {text!r}")
    return value


_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_bytes(n: int, digits: int = 2) -> str:
    """Binary units, labelled as such: 1536 → `1.50 KiB`; thousands grouped (`1,250.00 GiB`)."""
    sign = "-" if n < 0 else ""
    size = abs(n)
    for unit, scale in _UNITS:
        if size >= scale:
            return f"{sign}{size / scale:,.{digits}f} {unit}"
    return f"{sign}{size:,} B"


GIB = 1 << 30
MIB = 1 << 20
