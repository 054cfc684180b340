"""A table of records as markdown, with the number formats st.dataframe's column_config gives the same columns."""

from __future__ import annotations

_NUMBER = (int, float)


def cell(value: object, fmt: str | None, missing: str) -> str:
    """One value as the data grid shows it: `fmt` is the column's printf format (NumberColumn's `format`)."""
    if value is None:
        return missing
    if isinstance(value, bool):  # the grid's check box
        return "yes" if value else "no"
    if fmt and isinstance(value, _NUMBER) and not isinstance(value, bool):
        return fmt % value
    return str(value).replace("|", "\\|")


def markdown_table(records: list[dict], formats: dict[str, str], missing: str) -> str:
    """`records` (same keys, in order) as a markdown table; number columns right-aligned."""
    columns = list(records[0])
    numeric = [all(isinstance(r[c], _NUMBER) or r[c] is None for r in records) for c in columns]
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if n else ":---" for n in numeric) + "|",
    ]
    lines += ["| " + " | ".join(cell(r[c], formats.get(c), missing) for c in columns) + " |" for r in records]
    return "\n".join(lines)
