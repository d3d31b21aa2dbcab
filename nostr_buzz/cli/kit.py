"""How every ``buzz`` command group is built: one look, cheap to import.

Help is plain text (no colour, no box drawing) whatever the terminal, so ``NO_COLOR``, pipes and
screen readers all get the same readable output, and no terminal library is loaded to print it.
Every option names a real placeholder (``URL``, ``SECONDS``, ``KEY``…) and, where it has a fixed
set of values, lists them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, ClassVar, Final

import typer
import typer.core
import typer.main

#: ``-h`` works everywhere, as ``--help`` does.
CONTEXT: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"]}


#: The settings every ``buzz`` command group shares: plain help, no pretty tracebacks, ``-h``.
_SHARED: Final[dict[str, Any]] = {
    "rich_markup_mode": None,
    "pretty_exceptions_enable": False,
    "context_settings": CONTEXT,
}


def sub_app(
    name: str,
    help_text: str | None = None,
    *,
    cls: type[typer.core.TyperGroup] | None = None,
    completion: bool = False,
) -> typer.Typer:
    """A command group (or the wrapper of a single command) with the shared settings;
    ``completion``: the ``--install-completion`` options (``buzz`` itself has them)."""
    return typer.Typer(name=name, help=help_text, cls=cls, add_completion=completion, **_SHARED)


#: A command loaded on demand: (module in nostr_buzz.cli, attribute, one line of help).
LazySpec = tuple[str, str, str]


def load_command(name: str, spec: LazySpec) -> Any:
    """The click command for ``name``, importing its module now."""
    module, attribute, help_text = spec
    target = getattr(import_module(f"nostr_buzz.cli.{module}"), attribute)
    if isinstance(target, typer.Typer):
        return typer.main.get_group(target)  # a group, even with one command
    wrapper = sub_app(name, help_text)
    wrapper.command(name)(target)
    return typer.main.get_command(wrapper)


class LazyGroup(typer.core.TyperGroup):
    """A group whose ``lazy`` commands are imported only when one of them runs; ``--help``
    lists them from the table without loading them."""

    lazy: ClassVar[dict[str, LazySpec]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        eager = [n for n in super().list_commands(ctx) if n not in self.lazy]
        return [*eager, *self.lazy]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name, self.lazy[cmd_name])
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][2]))
            elif not (command := self.commands[name]).hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
