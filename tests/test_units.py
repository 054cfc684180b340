from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.dtypes import Q4_0, Q8_0, dtype_named
from core.errors import InputError
from core.units import format_bytes, format_tokens, parse_bytes, parse_tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("32k", 32768), ("128K", 131072), ("1M", 1 << 20), ("4096", 4096), ("1.5k", 1536), (" 8k ", 8192)],
)
def test_parse_tokens(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["", "k", "-1", "0", "1.3k", "12 tokens", "3g"])
def test_parse_tokens_rejects(text):
    with pytest.raises(InputError):
        parse_tokens(text)


@given(st.integers(min_value=1, max_value=1 << 40))
def test_format_tokens_round_trips(n):
    assert parse_tokens(format_tokens(n).replace(",", "")) == n


@pytest.mark.parametrize(
    ("text", "size"), [("1073741824", 1 << 30), ("512MiB", 512 << 20), (" 1.5 GiB ", 3 << 29), ("0", 0), ("7B", 7)]
)
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "1GB", "-1", "1.5", "0.5KiB x", "2 TiB", "1e9"])
def test_parse_bytes_rejects(text):
    with pytest.raises(InputError):
        parse_bytes(text)


def test_format_bytes_is_binary_and_labelled():
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 << 30) == "3.00 GiB"
    assert format_bytes(512) == "512 B"
    # a DeepSeek-sized total reads with its thousands grouped, and reads back as the bytes it shows
    assert format_bytes(1250 << 30) == "1,250.00 GiB" and format_bytes(-(2000 << 30)) == "-2,000.00 GiB"
    assert parse_bytes("1,250.00 GiB") == 1250 << 30 and parse_bytes("1,073,741,824") == 1 << 30
    with pytest.raises(InputError, match="as a size"):
        parse_bytes("1,25 GiB")


def test_block_quantised_rows_cost_whole_blocks():
    assert Q8_0.bytes_for(128) == 4 * 34
    assert Q4_0.bytes_for(4096) == 128 * 18
    assert Q8_0.bytes_for(33) == 2 * 34
    assert dtype_named("torch.bfloat16").name == "bf16"
    with pytest.raises(InputError, match="unknown dtype"):
        dtype_named("fp7")
