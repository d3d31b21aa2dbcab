"""The design lives in the repository: code, tests and docs cite ``docs/`` and ``nips/``.

A clone must be able to follow every reference it finds.  These tests scan the package, the
tests, the README and the documents for pointers to design files that are not in the repository
(numbered design parts, a style guide or notes kept elsewhere), check that every ``docs/…`` or
``nips/…`` document the code cites exists, and that the relative links between the documents
resolve.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nostr_buzz.cli.app import main

ROOT = Path(__file__).resolve().parents[2]

# Numbered design parts ("spec" followed by a two-digit number), the shared design folder, its
# style guide, and the report that used to collect the choices made where the design was silent.
# Spelled so that this file does not match itself.
OUTSIDE = re.compile(
    r"\b[Ss]pecs? 0\d|\.\./shared|shared/spe[c]|\bSTYLE\.md|project\sreport|design\snotes"
)
CITED = re.compile(r"\b((?:docs|nips)/[A-Za-z0-9_-]+\.md)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _sources() -> list[Path]:
    tops = ("nostr_buzz", "tests", "bench")
    files = [p for top in tops for p in sorted((ROOT / top).rglob("*.py"))]
    return [p for p in files if "__pycache__" not in p.parts]


def _documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "nips").rglob("*.md")),
    ]


def _lines(paths: list[Path]) -> list[tuple[str, int, str]]:
    out = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            out.append((str(path.relative_to(ROOT)), number, line))
    return out


def test_the_scan_covers_the_tree() -> None:
    files = {str(p.relative_to(ROOT)) for p in _sources() + _documents()}
    assert "nostr_buzz/core/compiler.py" in files and "tests/unit/core/test_queue.py" in files
    assert {"docs/architecture.md", "docs/turn-input.md", "nips/NIP-AM.md"} <= files


def test_no_reference_points_outside_the_repository() -> None:
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, number, line in _lines(_sources() + _documents())
        if OUTSIDE.search(line)
    ]
    assert found == [], "references to design files outside the repository:\n" + "\n".join(found)


def test_every_cited_document_exists() -> None:
    missing = sorted(
        {
            f"{name}:{number}: {cited}"
            for name, number, line in _lines(_sources())
            for cited in CITED.findall(line)
            if not (ROOT / cited).is_file()
        }
    )
    assert missing == [], "cited documents that do not exist:\n" + "\n".join(missing)


def test_links_between_documents_resolve() -> None:
    broken = []
    for path in _documents():
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == [], "broken links:\n" + "\n".join(broken)


def test_the_readme_links_every_design_document() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").glob("*.md")):
        if path.name != "README.md":
            assert f"(docs/{path.name})" in readme, f"README does not link docs/{path.name}"


def test_compile_help_names_the_turn_input_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "--help"]) == 0
    out, _ = capsys.readouterr()
    flat = " ".join(out.split())
    assert "docs/turn-input.md" in flat
    assert not OUTSIDE.search(flat)
