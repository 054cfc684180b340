"""measurements/published.jsonl names the documents its figures came from, never a file on the machine that
wrote it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from tests.conftest import ROOT

PUBLISHED = ROOT / "measurements" / "published.jsonl"


def strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings(v, f"{where}[{i}]")


def looks_local(text: str) -> bool:
    return PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or text.startswith("~")


def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PUBLISHED.read_text().splitlines() if line.strip()]


def test_no_field_is_a_local_path():
    local = [
        (n, where, text)
        for n, record in enumerate(records(), start=1)
        for where, text in strings(record, "record")
        if looks_local(text)
    ]
    assert not local, local


def test_every_source_names_a_document():
    for n, record in enumerate(records(), start=1):
        source = record["source"]
        named = source if isinstance(source, str) else source.get("document") or source.get("url")
        assert isinstance(named, str) and len(named) > 10, f"line {n}: {source!r}"


def test_the_check_catches_the_old_provenance():
    old = {"source": {"seed": "/work/shared/seeds/000_6115eed2f1766774.txt"}}
    assert [t for _, t in strings(old, "record") if looks_local(t)]
    assert not looks_local("vLLM start-up log quoted in github.com/x/y pull request #1995")
