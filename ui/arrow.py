"""Records to an Arrow table without importing pandas."""

from __future__ import annotations

import io
import json


def arrow_table(records: list[dict]):
    """`records` as a pyarrow Table for st.dataframe, column order and types as in the records (None: null).

    Built by Arrow's own JSON reader: pyarrow's Python constructors (`pa.array`, `Table.from_pylist`) import pandas
    to check their input, ~0.3 s on a server's first page, between a visitor's first request and the table."""
    from pyarrow import json as pa_json

    lines = "\n".join(json.dumps(r) for r in records)
    return pa_json.read_json(io.BytesIO(lines.encode()))
