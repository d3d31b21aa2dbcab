"""The ``buzz`` entry point: the typer application and the exit-code contract of spec 05."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from nostr_buzz.cli.output import CliFailure, ExitCode, note
from nostr_buzz.errors import BuzzError

app = typer.Typer(
    name="buzz",
    help="nostr-buzz: verified Nostr events in, auditable agent turns out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        note(f"buzz {version('nostr-buzz')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """nostr-buzz: verified Nostr events in, auditable agent turns out."""


# Command groups register here (one module per group).
from nostr_buzz.cli.compile import compile_command  # noqa: E402
from nostr_buzz.cli.keys import keys_app  # noqa: E402
from nostr_buzz.cli.manifest import manifest_app  # noqa: E402
from nostr_buzz.cli.messages import messages_app  # noqa: E402
from nostr_buzz.cli.relay import relay_command  # noqa: E402

app.command("compile")(compile_command)
app.add_typer(manifest_app, name="manifest")
app.add_typer(keys_app, name="keys")
app.add_typer(messages_app, name="messages")
app.command("relay")(relay_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``buzz`` and return its exit code.

    The argument parser reports bad usage with exit 2, which spec 05 reserves for network
    failures; commands never exit 2 through the parser (they raise :class:`CliFailure`), so a
    parser exit of 2 is mapped to 1 here.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        app(args=args, prog_name="buzz", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return ExitCode.OK
        if not isinstance(code, int):
            note(f"buzz: {code}")
            return ExitCode.BAD_INPUT
        return ExitCode.BAD_INPUT if code == 2 else code
    except CliFailure as exc:
        note(f"buzz: {exc.message}")
        return int(exc.code)
    except BuzzError as exc:
        note(f"buzz: {exc}")
        return ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        return 130
    return ExitCode.OK


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
