"""The README's Python blocks, found by a marker line inside them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

README = (ROOT / "README.md").read_text(encoding="utf-8")

BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def readme_block(marker: str) -> str:
    found = [b for b in BLOCKS if marker in b]
    assert len(found) == 1, f"expected one README block containing {marker!r}"
    return found[0]
