"""argparse value types shared by every `python -m core` command."""

from __future__ import annotations

import argparse

from core.errors import InputError
from core.units import parse_tokens


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def tokens(text: str) -> int:
    """A token count: 8192, 32k, 128K."""
    try:
        return parse_tokens(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
