"""Purity of the core and the direction of imports (docs/architecture.md "Layers"); determinism
across processes is checked in tests/e2e/test_determinism.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nostr_buzz"

# ---------------------------------------------------------------------------------------------
# Purity: the core and the codecs import no sockets, event loops, subprocesses, clocks or
# non-cryptographic randomness, and never read the environment.

FORBIDDEN_MODULES = {"socket", "asyncio", "subprocess", "time", "datetime", "random"}
FORBIDDEN_OS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _pure_modules() -> list[Path]:
    files = [
        f for d in ("text", "core", "reports", "nips") for f in sorted((PACKAGE / d).glob("*.py"))
    ]
    names = ("event.py", "keys.py", "bech32.py", "errors.py", "profile.py", "manifest.py")
    files += [PACKAGE / name for name in names]
    return [f for f in files if f.is_file()]


def impurities(source: str) -> list[str]:
    """What in ``source`` breaks the purity rule, as readable strings."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if node.level == 0 and module in FORBIDDEN_MODULES:
                found.append(f"from {node.module} import …")
            if module == "os" and any(a.name in FORBIDDEN_OS for a in node.names):
                found.append("from os import environ/getenv")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_OS:
            found.append(f"…{node.attr}")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            target = node.args[0]
            if (
                name in ("__import__", "import_module")
                and isinstance(target, ast.Constant)
                and isinstance(target.value, str)
                and target.value.split(".")[0] in FORBIDDEN_MODULES
            ):
                found.append(f"{name}({target.value!r})")
    return found


@pytest.mark.parametrize("path", _pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_and_codecs_are_pure(path: Path) -> None:
    assert impurities(path.read_text(encoding="utf-8")) == []


def test_purity_scan_catches_each_kind_of_impurity() -> None:
    for snippet in (
        "import socket",
        "import asyncio.events",
        "from subprocess import run",
        "import time",
        "from datetime import datetime",
        "import random as r",
        "import os\nx = os.environ['HOME']",
        "import os\nx = os.getenv('HOME')",
        "from os import environ",
        "m = __import__('time')",
        "import importlib\nm = importlib.import_module('socket')",
    ):
        assert impurities(snippet), snippet
    assert impurities("import os\nx = os.urandom(32)\nimport hashlib, json") == []
    assert impurities("import importlib\nm = importlib.import_module('coincurve')") == []


def test_the_compiler_modules_are_in_the_scan() -> None:
    names = {p.name for p in _pure_modules()}
    assert {"compiler.py", "turn_input.py", "escape.py", "ledger.py", "manifest.py"} <= names
    assert {"nip10.py", "nip19.py"} <= names
    assert {"unicode.py", "confusables.py", "metrics_report.py", "audit.py", "watch.py"} <= names


# ---------------------------------------------------------------------------------------------
# Import direction: every module sits in a layer and imports only from its own layer or below,
# and no two modules import each other, directly or round a loop.  Lazy imports inside
# functions and imports under TYPE_CHECKING count: a circle hidden in a function is still one.
# The longest matching prefix decides a module's layer.

LAYERS: dict[str, int] = {
    "nostr_buzz.errors": 0,
    "nostr_buzz._lazy": 0,  # the lazy loading of the packages' public names
    "nostr_buzz._deprecated": 0,  # renamed public names, kept working for a minor version
    # Text, escaping and the manifest: primitives the codecs and the compiler both build on.
    "nostr_buzz.text": 1,
    "nostr_buzz.manifest": 2,
    "nostr_buzz.bech32": 3,  # the encoding under NIP-19 and the key forms npub/nsec
    "nostr_buzz.nips.nip19": 3,
    "nostr_buzz.keys": 4,
    "nostr_buzz.event": 5,
    "nostr_buzz.nips": 6,
    "nostr_buzz.signer": 6,  # who signs: the NIP modules that sign or encrypt take a Signer
    "nostr_buzz.local_signer": 6,  # a key held here as a Signer: encrypts with nips.nip44
    "nostr_buzz.core": 7,
    # What the records say to a person: above the core whose records it reads, below the I/O
    # that fetches them.
    "nostr_buzz.reports": 8,
    "nostr_buzz.acp": 8,  # the agent edge's decisions, without I/O: below the driver in io
    "nostr_buzz.agent": 8,  # an in-process agent's values, without I/O: below its driver in io
    "nostr_buzz.timestamps": 8,
    "nostr_buzz.profile": 8,
    "nostr_buzz.interop": 8,  # events and keys to and from nostr-sdk and pynostr
    "nostr_buzz.io": 8,
    "nostr_buzz.config": 9,
    "nostr_buzz.bot": 10,
    "nostr_buzz.demo": 11,  # the standalone demo agent
    "nostr_buzz": 12,  # the package's public re-exports
    "nostr_buzz.cli": 13,  # the `buzz` command: nothing in the library imports it
    "nostr_buzz.__main__": 14,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} has no layer in LAYERS")


def imported_modules(module: str, source: str, known: set[str]) -> set[str]:
    """The package's own modules that ``source`` (the text of ``module``) imports."""
    is_package = module in known and (PACKAGE.parent / module.replace(".", "/")).is_dir()
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join(here + ([node.module] if node.module else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            # ``from package import module`` imports the module; the package's own
            # ``__init__`` runs for any submodule import and is not an edge of its own.
            names = [n for n in submodules if n in known] or [base]
        found.update(n for n in names if n in known and n != module)
    return found


def _import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {m: imported_modules(m, p.read_text(encoding="utf-8"), known) for m, p in paths.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
        for m, targets in graph.items()
        for t in targets
        if layer_of(t) > layer_of(m)
    )


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_imports_point_down_the_layers() -> None:
    assert upward_imports(_import_graph()) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert import_cycles(_import_graph()) == []


def folder_of(module: str) -> str:
    """A module's folder: the package's subpackage it sits in, else the top-level module itself
    (``nostr_buzz.keys``), else the package's own face (``nostr_buzz``)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = folder_of(module)
        folders.setdefault(here, set()).update(t for t in map(folder_of, targets) if t != here)
    return folders


def test_no_folders_import_each_other_in_a_circle() -> None:
    # docs/architecture.md, "Layers": each row imports only rows before it.
    assert import_cycles(folder_graph(_import_graph())) == []


def test_the_folder_check_sees_a_circle_through_a_top_level_module() -> None:
    graph = {
        "nostr_buzz.keys": {"nostr_buzz.nips.nip19"},
        "nostr_buzz.nips.nip44": {"nostr_buzz.keys"},
        "nostr_buzz.nips.nip19": set(),
    }
    assert import_cycles(folder_graph(graph)) == [["nostr_buzz.keys", "nostr_buzz.nips"]]
    del graph["nostr_buzz.keys"]
    assert import_cycles(folder_graph(graph)) == []


def test_the_library_never_imports_the_cli() -> None:
    graph = _import_graph()
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if not m.startswith("nostr_buzz.cli") and m != "nostr_buzz.__main__"
        for t in targets
        if t.startswith("nostr_buzz.cli")
    )
    assert offenders == []


def test_the_import_direction_checks_catch_each_kind_of_knot() -> None:
    known = {"nostr_buzz.core", "nostr_buzz.core.queue", "nostr_buzz.nips.nip10", "nostr_buzz.cli"}
    lazy = "def f():\n    from nostr_buzz.core import queue\n"
    assert imported_modules("nostr_buzz.nips.nip10", lazy, known) == {"nostr_buzz.core.queue"}
    assert imported_modules("nostr_buzz.nips.nip10", "import nostr_buzz.cli\n", known) == {
        "nostr_buzz.cli"
    }
    relative = "from ..core import queue\n"
    assert "nostr_buzz.core.queue" in imported_modules("nostr_buzz.nips.nip10", relative, known)
    upward = {"nostr_buzz.nips.nip10": {"nostr_buzz.core.queue"}, "nostr_buzz.core.queue": set()}
    assert upward_imports(upward) == [
        "nostr_buzz.nips.nip10 (layer 6) imports nostr_buzz.core.queue (layer 7)"
    ]
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(circle) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    with pytest.raises(AssertionError):
        layer_of("elsewhere.module")
