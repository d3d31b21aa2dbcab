"""How many lines the package's classes and functions span, for the tests that keep them small:
no class over 450 lines and no function over 80, so that each reads as one part."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MAX_CLASS_LINES: Final = 450
MAX_FUNCTION_LINES: Final = 80


@dataclass(frozen=True)
class Span:
    """One class or function (``kind``) of a module, and the lines it spans."""

    module: str
    kind: str
    name: str
    lines: int

    def __str__(self) -> str:
        return f"{self.module}: {self.kind} {self.name} has {self.lines} lines"


def spans(module: Path) -> list[Span]:
    """Every class and function in ``module``, methods and nested ones included."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    found: list[Span] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            found.append(Span(module.name, kind, node.name, size))
    return found


def oversized(
    module: Path, *, class_lines: int = MAX_CLASS_LINES, function_lines: int = MAX_FUNCTION_LINES
) -> list[str]:
    """What in ``module`` passes the bounds, as readable lines (none when it is within them)."""
    bound = {"class": class_lines, "function": function_lines}
    return [str(span) for span in spans(module) if span.lines > bound[span.kind]]
