"""The ``buzz`` entry point: the typer application and the exit-code contract of docs/cli.md.

Commands are loaded on demand: ``buzz keys show`` imports the key code and nothing else, and
``buzz --version`` or ``buzz --help`` import no command at all.  The table below is the one
list of commands, with the one-line help ``buzz --help`` prints for each.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import typer
import typer.core
import typer.main

from nostr_buzz.cli.extras import missing_extra
from nostr_buzz.cli.kit import LazyGroup, LazySpec, load_command, sub_app
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.errors import SECRET_HINT, BuzzError, looks_secret, redact

if TYPE_CHECKING:
    from nostr_buzz.keys import SecretKey  # the key code loads only when a command needs it

#: name → (module in nostr_buzz.cli, attribute, one line of help), in the order of ``--help``.
COMMANDS: Final[dict[str, LazySpec]] = {
    "messages": (
        "messages",
        "messages_app",
        "Fetch events, read channels and threads, send chat and private messages.",
    ),
    "event": (
        "event",
        "event_command",
        "Sign an event with the configured key and publish it.",
    ),
    "req": (
        "req",
        "req_command",
        "Query relays with a filter; print verified events as JSON lines.",
    ),
    "verify": (
        "verify",
        "verify_command",
        "Check the id and signature of events (arguments or stdin).",
    ),
    "decode": (
        "codec",
        "decode_command",
        "Decode a NIP-19 code (npub, nsec, note, nevent, nprofile) to JSON.",
    ),
    "encode": (
        "codec",
        "encode_app",
        "Encode a key or an event id as npub, nsec, note, nevent or nprofile.",
    ),
    "keys": (
        "keys",
        "keys_app",
        "Make a key pair; show the public key of the configured key.",
    ),
    "compile": (
        "compile",
        "compile_command",
        "Compile a turn-input file offline: prompt sections and manifest.",
    ),
    "manifest": (
        "manifest",
        "manifest_app",
        "Inspect context manifests.",
    ),
    "metrics": (
        "metrics",
        "metrics_command",
        "The owner's usage report, decrypted with the owner's key.",
    ),
    "audit": (
        "audit",
        "audit_command",
        "Check metrics' context layers against the signed events they name.",
    ),
    "canvas": (
        "standing",
        "canvas_app",
        "Read or update a channel's canvas (the shared document agents are pointed at).",
    ),
    "mem": (
        "standing",
        "mem_app",
        "Read or update your core memory (encrypted to your own key).",
    ),
    "relay": (
        "relay",
        "relay_command",
        "Run a local Nostr relay and print its ws:// URL.",
    ),
    "run": (
        "run",
        "run_command",
        "Run the agent bot: answer mentions with an ACP agent until stopped.",
    ),
    "demo": (
        "demo",
        "demo_command",
        "The whole pipeline on an embedded relay, in one command.",
    ),
    "watch": (
        "watch",
        "watch_command",
        "A live view of a running bot from its state directory (--once: JSON).",
    ),
}


def _load(name: str) -> Any:
    """The click command for ``name``, importing its module now."""
    return load_command(name, COMMANDS[name])


class _Root(LazyGroup):
    lazy = COMMANDS


app = sub_app(
    "buzz",
    "nostr-buzz: verified Nostr events in, auditable agent turns out.",
    cls=_Root,
    completion=True,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        write_stdout(f"buzz {version('nostr-buzz')}\n")  # asked-for data: stdout (docs/cli.md)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """nostr-buzz: verified Nostr events in, auditable agent turns out."""


_SECRET_OPTIONS = ("--key",)


_SECRET_VARIABLES = ("BUZZ_PRIVATE_KEY",)
#: Shorter values are not redacted: they cannot be keys, and replacing them would garble text.
_MIN_REDACTED = 8


def _redact(message: str, args: Sequence[str]) -> str:
    """Messages may quote arguments; never let one that is or may be a secret through (docs/cli.md:
    nsec1…, or the value of a secret-key option or variable, even when used elsewhere)."""
    secrets = [args[i + 1] for i, a in enumerate(args[:-1]) if a in _SECRET_OPTIONS and args[i + 1]]
    secrets += [
        a.split("=", 1)[1] for a in args if a.startswith(tuple(o + "=" for o in _SECRET_OPTIONS))
    ]
    secrets += [os.environ.get(name, "") for name in _SECRET_VARIABLES]
    # 64 hex characters given anywhere but as an id option may be a secret key: not repeated.
    secrets += [
        m.group(0)
        for option, value in _option_values(args)
        if option not in (*_ID_OPTIONS, *_SECRET_OPTIONS)
        for m in _HEX_RUN.finditer(value)
    ]
    candidates = {s for secret in secrets for s in (secret, secret.strip())}
    for secret in sorted(candidates, key=len, reverse=True):
        if len(secret) >= _MIN_REDACTED:
            message = re.sub(re.escape(secret), SECRET_HINT, message, flags=re.IGNORECASE)
    return redact(message)


_HEX_RUN = re.compile(r"[0-9a-fA-F]{64}")
_NSEC_INSIDE = re.compile(r"nsec1[02-9ac-hj-np-z]{58}", re.IGNORECASE)
#: Options whose values are event ids, public keys or channel ids, echoed back where useful.
_ID_OPTIONS = ("--event", "--reply-to", "--owner", "--agent", "--channel", "--to", "--metric")


def _option_values(args: Sequence[str]) -> list[tuple[str | None, str]]:
    """(the option it belongs to, or None, value) for every argument that is a value."""
    pairs: list[tuple[str | None, str]] = []
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" in arg:
            option, value = arg.split("=", 1)
            pairs.append((option, value))
        elif not arg.startswith("-"):
            previous = args[i - 1] if i > 0 else ""
            pairs.append((previous if previous.startswith("--") else None, arg))
    return pairs


def _configured_secret(pairs: Sequence[tuple[str | None, str]]) -> SecretKey | None:
    """The secret key this invocation would use (flag, environment, config), if any."""
    from nostr_buzz.config import ConfigSources

    key = next((v for o, v in pairs if o in _SECRET_OPTIONS), None)
    config = next((v for o, v in pairs if o == "--config"), None)
    try:
        return ConfigSources(config_path=config).secret_key(key)
    except BuzzError:
        return None


def _refuse_secret_arguments(args: Sequence[str]) -> None:
    """A secret key anywhere but ``--key`` (an nsec, or the configured key in any form) is
    refused before anything is sent anywhere, and never repeated."""
    pairs = _option_values(args)
    suspicious = [
        (o, v)
        for o, v in pairs
        if o not in _SECRET_OPTIONS
        and (looks_secret(v) or _NSEC_INSIDE.search(v) or _HEX_RUN.search(v))
    ]
    if not suspicious:
        return
    hex_given = any(_HEX_RUN.search(v) for _, v in suspicious)
    secret = _configured_secret(pairs) if hex_given else None
    forms = () if secret is None else (secret.hex, secret.bech32)
    for option, value in suspicious:
        lowered = value.strip().lower()
        if looks_secret(value) or _NSEC_INSIDE.search(value) or any(f in lowered for f in forms):
            where = f"{option}: " if option else ""
            raise CliFailure(
                ExitCode.BAD_INPUT,
                f"{where}the value looks like a secret key (not shown): secret keys go only to "
                "--key, BUZZ_PRIVATE_KEY or the config file",
            )


def _is_parser_error(exc: BaseException) -> bool:
    # click's UsageError family (typer may vendor click, so match the shape, not the class).
    return callable(getattr(exc, "format_message", None)) and isinstance(
        getattr(exc, "exit_code", None), int
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``buzz`` and return its exit code (docs/cli.md).

    The parser's own errors are formatted here, with anything that looks like a secret key
    redacted, and mapped to exit 1: the parser's default of 2 is reserved for network failures.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        _refuse_secret_arguments(args)
        result = app(args=args, prog_name="buzz", standalone_mode=False)
    except CliFailure as exc:
        note(f"buzz: {_redact(exc.message, args)}")
        return int(exc.code)
    except BuzzError as exc:
        note(f"buzz: {_redact(str(exc), args)}")
        return ExitCode.BAD_INPUT
    except (KeyboardInterrupt, typer.Abort):
        note("buzz: interrupted")
        return 130
    except ImportError as exc:
        message = missing_extra(exc)  # buzz run or buzz demo without the acp extra
        if message is None:
            raise
        note(message)
        return ExitCode.BAD_INPUT
    except Exception as exc:
        if not _is_parser_error(exc):
            raise
        note(f"buzz: {_redact(exc.format_message(), args)}")  # type: ignore[attr-defined]
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            note(f"Try '{ctx.command_path} --help' for help.")
        return ExitCode.BAD_INPUT
    if isinstance(result, int) and not isinstance(result, bool):
        return ExitCode.BAD_INPUT if result == 2 else result
    return ExitCode.OK


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
