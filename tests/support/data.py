"""Where the test data lives: fixtures/ at the top of the repository (official vectors under
fixtures/vectors, the compiler's golden turns under fixtures/turns)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
VECTORS = FIXTURES / "vectors"


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
