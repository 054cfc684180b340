"""argparse value types shared by every `python -m core` command."""

from __future__ import annotations

import argparse

from core.errors import InputError
from core.units import parse_bytes, parse_tokens


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


def byte_size(text: str) -> int:
    """A size in bytes: 1073741824, 512MiB, 1.5GiB."""
    try:
        return parse_bytes(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
