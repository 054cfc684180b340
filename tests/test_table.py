"""The first paint's markdown table (ui/table.py) shows each value as the data grid's column format does."""

from __future__ import annotations

from ui.table import cell, markdown_table


def test_cells_follow_the_columns_printf_formats():
    assert cell(3.0, "%d", "—") == "3"  # whole sequences: the grid's "%d" drops the fraction
    assert cell(2.756, "%.2f", "—") == "2.76"
    assert cell(61.34, "%.1f%%", "—") == "61.3%"
    # JavaScript's toFixed (the grid's sprintf-js) rounds an exact half up; Python's "%.3f" would print 0.062
    assert cell(0.0625, "%.3f", "—") == "0.063" and cell(61.25, "%.1f%%", "—") == "61.3%"
    assert cell(2.675, "%.2f", "—") == "2.67"  # binary 2.67499…: below the half, in both
    assert cell(None, "%.1f", "— (does not fit)") == "— (does not fit)"
    assert cell(True, None, "—") == "yes" and cell(False, "%d", "—") == "no"  # a check box, not 1/0
    assert cell("4K", None, "—") == "4K"
    assert cell("a|b", None, "—") == "a\\|b"  # a pipe would split the cell


def test_the_table_has_one_row_per_record_and_right_aligns_number_columns():
    records = [
        {"context": "4K", "fits": True, "requests": 3.0, "decode tok/s": 41.27},
        {"context": "8K", "fits": False, "requests": 0.0, "decode tok/s": None},
    ]
    lines = markdown_table(records, {"requests": "%d", "decode tok/s": "%.1f"}, "—").splitlines()
    assert lines == [
        "| context | fits | requests | decode tok/s |",
        "|:---|:---|---:|---:|",
        "| 4K | yes | 3 | 41.3 |",
        "| 8K | no | 0 | — |",
    ]
