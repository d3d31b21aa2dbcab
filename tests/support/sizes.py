"""How big a package's functions and classes are (the size guards of tests/unit)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path


def definitions(modules: Iterable[Path]) -> Iterator[tuple[Path, ast.AST, str, int]]:
    """Every function and class of ``modules``: (module, node, its name, its line count)."""
    for module in sorted(modules):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield module, node, node.name, (node.end_lineno or node.lineno) - node.lineno + 1


def oversized(
    modules: Iterable[Path], *, function_lines: int, class_lines: int | None = None
) -> list[str]:
    """What is over the limits, as readable strings (none: ``[]``)."""
    found: list[str] = []
    for module, node, name, size in definitions(modules):
        is_class = isinstance(node, ast.ClassDef)
        limit = class_lines if is_class else function_lines
        if limit is not None and size > limit:
            found.append(f"{module.name}: {name} has {size} lines (at most {limit})")
    return found
