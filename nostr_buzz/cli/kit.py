"""How every ``buzz`` command group is built: one look, cheap to import.

Help is plain text (no colour, no box drawing) whatever the terminal, so ``NO_COLOR``, pipes and
screen readers all get the same readable output, and no terminal library is loaded to print it.
Every option names a real placeholder (``URL``, ``SECONDS``, ``KEY``…) and, where it has a fixed
set of values, lists them.
"""

from __future__ import annotations

from typing import Any, Final

import typer

#: ``-h`` works everywhere, as ``--help`` does.
CONTEXT: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"]}


def sub_app(name: str, help_text: str | None = None) -> typer.Typer:
    """A command group (or the wrapper of a single command) with the shared settings."""
    return typer.Typer(
        name=name,
        help=help_text,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings=CONTEXT,
    )
