"""A table of records as markdown, with the number formats st.dataframe's column_config gives the same columns."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

_NUMBER = (int, float)
_FIXED = re.compile(r"%\.(\d+)f")


def _printf(fmt: str, value: float) -> str:
    """`fmt % value` as the data grid prints it (sprintf-js): its `%.Nf` is JavaScript's toFixed, which rounds the
    exact binary value half up where Python's `%` rounds half to even (0.0625 to 3 places: 0.063, not 0.062)."""
    fixed = _FIXED.search(fmt)
    if fixed is None:
        return fmt % value
    text = str(Decimal(value).quantize(Decimal(1).scaleb(-int(fixed[1])), rounding=ROUND_HALF_UP))
    return (fmt[: fixed.start()] + text + fmt[fixed.end() :]).replace("%%", "%")


def _is_number(value: object) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


def cell(value: object, fmt: str | None, missing: str) -> str:
    """One value as the data grid shows it: `fmt` is the column's printf format (NumberColumn's `format`)."""
    if value is None:
        return missing
    if isinstance(value, bool):  # the grid's check box
        return "yes" if value else "no"
    if fmt and _is_number(value):
        return _printf(fmt, value)
    return str(value).replace("|", "\\|")


def markdown_table(records: list[dict], formats: dict[str, str], missing: str) -> str:
    """`records` (same keys, in order) as a markdown table; number columns right-aligned."""
    columns = list(records[0])
    numeric = [all(_is_number(r[c]) or r[c] is None for r in records) for c in columns]
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if n else ":---" for n in numeric) + "|",
    ]
    lines += ["| " + " | ".join(cell(r[c], formats.get(c), missing) for c in columns) + " |" for r in records]
    return "\n".join(lines)
