"""core.report.csv_text: the context table's CSV without pandas (the page no longer builds a DataFrame)."""

from __future__ import annotations

import csv
import io
import math

from core.report import csv_text


def test_inputs_lead_every_row_floats_are_rounded_and_missing_cells_are_empty():
    records = [
        {"context": "4K", "fits": True, "requests": 13, "total (GiB)": 5.870609283447266, "decode tok/s": 41.26},
        {"context": "1M", "fits": False, "requests": 0, "total (GiB)": 131.0000004, "decode tok/s": None},
        {"context": "2M", "fits": False, "requests": 0, "total (GiB)": math.nan, "decode tok/s": None},
    ]
    text = csv_text(records, {"model": "Qwen/Qwen3-8B", "kv": "q8_0"})
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["model", "kv", "context", "fits", "requests", "total (GiB)", "decode tok/s"]
    assert {(r["model"], r["kv"]) for r in rows} == {("Qwen/Qwen3-8B", "q8_0")}
    assert [r["total (GiB)"] for r in rows] == ["5.871", "131.0", ""]
    assert [r["decode tok/s"] for r in rows] == ["41.26", "", ""]
    assert [r["fits"] for r in rows] == ["True", "False", "False"] and rows[0]["requests"] == "13"


def test_a_leading_input_is_not_repeated_by_a_record_column_of_the_same_name():
    text = csv_text([{"kv": "table's", "x": 1}], {"kv": "input's"})
    assert text.splitlines() == ["kv,x", "table's,1"]
