"""Write core/model/presets/resolved/: every bundled preset resolved with the installed transformers (`make presets`).

The app reads these instead of starting a child process to import transformers on its first render."""

from __future__ import annotations

import json

from core.model.config import SHIPPED_DIR, cache_key, parse_json, resolve
from core.model.loading import presets


def main() -> None:
    SHIPPED_DIR.mkdir(exist_ok=True)
    for old in SHIPPED_DIR.glob("*.json"):
        old.unlink()
    for path in presets().values():
        raw = parse_json(path.read_bytes(), path.name)
        (SHIPPED_DIR / f"{cache_key(raw)}.json").write_text(json.dumps(resolve(raw), sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
