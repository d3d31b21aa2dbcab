"""Plumbing shared by the ``buzz`` commands that read config or talk to relays: reading input,
refusing secret keys, reporting relays' answers (their options: :mod:`nostr_buzz.cli.options`)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from nostr_buzz import errors

# The shared options live in cli/options.py; these names stay importable from here.
from nostr_buzz.cli.options import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from nostr_buzz.cli.options import MAX_TIMEOUT as MAX_TIMEOUT
from nostr_buzz.cli.options import ChannelOption as ChannelOption
from nostr_buzz.cli.options import ConfigOption as ConfigOption
from nostr_buzz.cli.options import JsonOption as JsonOption
from nostr_buzz.cli.options import KeyOption as KeyOption
from nostr_buzz.cli.options import RelayOption as RelayOption
from nostr_buzz.cli.options import TimeoutOption as TimeoutOption
from nostr_buzz.cli.output import CliFailure, ExitCode, note, terminal_safe, write_stdout
from nostr_buzz.config import ConfigSources
from nostr_buzz.errors import Nip19Error, looks_secret
from nostr_buzz.nips import nip19
from nostr_buzz.nips.nip19 import EventRef as EventRef  # re-exported
from nostr_buzz.text.unicode import LINE_BREAKS

if TYPE_CHECKING:
    from nostr_buzz.event import Event
    from nostr_buzz.io.fetch import FetchResult
    from nostr_buzz.io.pool import PoolQueryResult, PublishResult
    from nostr_buzz.keys import SecretKey

T = TypeVar("T")


def sources(config: Path | None, overrides: Mapping[str, Any] | None = None) -> ConfigSources:
    """Flags › environment › file, for one command run (``overrides``: settings by flag)."""
    return ConfigSources(config_path=config, overrides=overrides)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's async body to completion on a fresh event loop."""
    # asyncio and its executor are loaded by the commands that use them, not at start-up.
    from nostr_buzz.cli.runner import run_coroutine

    return run_coroutine(coro)


def progress(message: str) -> None:
    """Progress for a person watching: on stderr, and only when stderr is a terminal."""
    stream = sys.stderr
    if stream.isatty():
        print(message, file=stream, flush=True)


def describe_input(text: str) -> str:
    """An input for an error message: cut at 40 characters, and hidden when it looks like a
    secret key (an nsec, or a long run of hex digits)."""
    return errors.describe_input(text, limit=40, hex_may_be_secret=True)


def parse_event_ref(text: str, *, option: str = "--event") -> EventRef:
    """:func:`nostr_buzz.nips.nip19.parse_event_ref` for an option: a bad value is a usage error
    naming the option."""
    try:
        return nip19.parse_event_ref(text)
    except Nip19Error as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"{option}: {exc}") from None


def parse_public_key(text: str, *, option: str) -> str:
    """A public key given on the command line (64-hex or npub), as hex."""
    from nostr_buzz.errors import InvalidKey
    from nostr_buzz.keys import PublicKey

    value = text.strip()
    if looks_secret(value):
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"{option}: expected a public key (hex or npub); the value looks like a secret key "
            "(not shown)",
        )
    try:
        return PublicKey.from_str(value).hex
    except InvalidKey as exc:
        raise CliFailure(
            ExitCode.BAD_INPUT, f"{option}: {describe_input(value)} is not a public key: {exc}"
        ) from None


def check_channel(channel: str) -> str:
    """A ``--channel`` value: a channel id, and not one of the reserved direct channels."""
    from nostr_buzz.nips import nip10

    if not nip10.is_valid_channel_id(channel):
        raise CliFailure(
            ExitCode.BAD_INPUT,
            "--channel: not a channel id (1-128 characters from A-Z a-z 0-9 _ -)",
        )
    if channel.startswith(nip10.DIRECT_CHANNEL_PREFIX):
        # Never read from an h tag (docs/events.md): such a message would belong to no channel.
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"--channel: not a channel id: ids starting with {nip10.DIRECT_CHANNEL_PREFIX!r} are "
            "reserved for direct channels",
        )
    return channel


def text_argument(value: str, *, what: str = "text", whole: bool = False) -> str:
    """A TEXT argument: the text given, or all of standard input for ``-``; blank text is bad
    input.  ``whole``: keep standard input's final line break (a document, not a message)."""
    if value == "-":
        value = read_stdin_text(whole=whole)
    if not value.strip():
        raise CliFailure(ExitCode.BAD_INPUT, f"the {what} is empty")
    return value


def command_words(text: str, *, option: str, empty: str) -> list[str]:
    """A command line given as one option value (``--agent "goose acp"``) as its words; an
    unbalanced quote, or no word at all (``empty`` says what to give), is bad input."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"{option}: {exc}") from None
    if not words:
        raise CliFailure(ExitCode.BAD_INPUT, f"{option}: {empty}")
    return words


def read_stdin_text(*, whole: bool = False) -> str:
    """All of standard input as UTF-8 text, without its final line break unless ``whole``."""
    try:
        data = sys.stdin.buffer.read()
    except (OSError, AttributeError) as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"cannot read standard input: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliFailure(ExitCode.BAD_INPUT, "standard input is not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") and not whole else text


def read_stdin_lines(what: str) -> list[str]:
    """The non-blank lines of standard input (JSON lines, one ``what`` each)."""
    lines = [line for line in read_stdin_text().splitlines() if line.strip()]
    if not lines:
        raise CliFailure(ExitCode.BAD_INPUT, f"standard input holds no {what}")
    return lines


def piped_stdin_lines() -> list[str]:
    """nak's rule for ``buzz event`` and ``buzz req`` given no JSON argument: standard input
    when it is not a terminal (a pipe, a file, /dev/null), as its non-blank lines; none for a
    terminal, an unreadable or an empty input, so that the flags alone are used."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return []
        data = sys.stdin.buffer.read()
    except (OSError, AttributeError, ValueError):  # closed, or not a real stream
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliFailure(ExitCode.BAD_INPUT, "standard input is not UTF-8 text") from None
    return [line for line in text.splitlines() if line.strip()]


def given_json(
    text: str | None, name: str, what: str, *, piped: bool = True
) -> list[tuple[str, Any]]:
    """The JSON documents given as the argument ``name`` (``text``), or on standard input, one
    per line: with ``-``, or (nak's rule) with no argument while stdin is not a terminal and
    ``piped`` (stdin holding none: no document, the flags alone); ``(where, document)`` each."""
    if text == "-":
        return json_lines(read_stdin_lines(what))
    if text is not None:
        try:
            return [(name, json.loads(text))]
        except ValueError as exc:
            raise CliFailure(ExitCode.BAD_INPUT, f"{name}: not JSON: {exc}") from None
    return json_lines(piped_stdin_lines()) if piped else []


def json_lines(lines: list[str]) -> list[tuple[str, Any]]:
    """JSON documents from standard input's ``lines``: the whole input when it is one
    document (pretty-printed, say), else one per line; ``(where, document)`` for messages.
    Not JSON is bad input naming the line (never quoting it: it may hold a secret)."""
    try:
        return [("stdin", json.loads("\n".join(lines)))]
    except ValueError:
        pass
    docs = []
    for n, line in enumerate(lines, 1):
        try:
            docs.append((f"stdin line {n}", json.loads(line)))
        except ValueError as exc:
            raise CliFailure(ExitCode.BAD_INPUT, f"stdin line {n}: not JSON: {exc}") from None
    return docs


#: A bech32 secret key anywhere in a text (58 data characters after ``nsec1``).
_NSEC_INSIDE: Final = re.compile(r"nsec1[02-9ac-hj-np-z]{58}", re.IGNORECASE)


def json_strings(doc: Any) -> Iterator[str]:
    """Every string of a decoded JSON document: member names and values, at any depth."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for name, value in doc.items():
            yield str(name)
            yield from json_strings(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from json_strings(value)


def refuse_secrets(texts: Iterable[str], secret: SecretKey | None, *, where: str) -> None:
    """What a command is about to send (text from stdin or an argument, a template's content
    and tags, a filter) must not hold a secret key: an nsec, or the configured key ``secret``
    in hex or bech32, in any case.  Called before any relay is contacted; the refusal never
    repeats the key."""
    forms = () if secret is None else (secret.hex, secret.bech32)
    for text in texts:
        lowered = text.lower()
        if _NSEC_INSIDE.search(text) or any(form in lowered for form in forms):
            raise CliFailure(
                ExitCode.BAD_INPUT,
                f"{where}: the text looks like a secret key (not shown): secret keys go only to "
                "--key, BUZZ_PRIVATE_KEY or the config file; nothing was sent",
            )


def one_line(text: str, width: int) -> str:
    """A stranger's text (a relay's message, an event's content) flattened to one line of at
    most ``width`` characters (before escapes), so that it cannot drive the terminal or forge
    lines of ours: line breaks and tabs read as spaces, every other control, bidirectional,
    zero-width or hidden character is shown as an escape
    (:func:`~nostr_buzz.cli.output.terminal_safe`)."""
    flat = "".join(" " if c == "\t" or c in LINE_BREAKS else c for c in text)
    cut = flat if len(flat) <= width else flat[: width - 1] + "…"
    return terminal_safe(cut, multiline=False)


def unreachable_relays(result: PoolQueryResult) -> list[str]:
    """``url: reason`` for every relay of a query that did not finish.  A relay's CLOSED reason
    and a hint's URL are a stranger's text: flattened, so that they cannot drive the terminal
    or forge lines of our own."""
    return [
        f"{one_line(url, 200)}: {one_line(per.error or 'no answer', 300)}"
        for url, per in result.per_relay.items()
        if not per.finished
    ]


def relay_rejections(result: PoolQueryResult) -> dict[str, str]:
    """Each misbehaving relay of a query with the checks its events failed."""
    out: dict[str, str] = {}
    for url, per in result.per_relay.items():
        if per.rejected_count:
            reasons = list(dict.fromkeys(per.rejected))
            out[one_line(url, 200)] = (
                f"{per.rejected_count} event(s) failed verification ({', '.join(reasons)})"
            )
    return out


def warn_list_problems(result: PoolQueryResult) -> None:
    """For list queries: a relay's forged events are dropped and named; dead relays named; no
    relay answering at all is a network failure."""
    for url, what in relay_rejections(result).items():
        note(f"buzz: warning: relay {url}: {what}; those were dropped")
    if not result.any_finished:
        raise CliFailure(
            ExitCode.NETWORK,
            "no relay answered:\n  "
            + "\n  ".join(unreachable_relays(result))
            + f"\n{UNREACHABLE_HINT}",
        )
    for line in unreachable_relays(result):
        note(f"buzz: warning: relay {line}")


F = TypeVar("F", bound=str)


def check_format(value: str, allowed: tuple[F, ...]) -> F:
    """``--format`` VALUE, case-insensitive, as one of ``allowed``."""
    lowered = value.lower()
    for name in allowed:
        if name == lowered:
            return name
    names = ", ".join(allowed[:-1]) + " or " + allowed[-1]
    raise CliFailure(ExitCode.BAD_INPUT, f"--format: expected {names}")


def pick_format(value: str | None, json_flag: bool, formats: tuple[F, ...]) -> F:
    """``--format`` among ``formats`` (the first is the default); ``--json`` is ``--format
    json`` (docs/cli.md), and with another ``--format`` it is bad usage."""
    fmt = check_format(value, formats) if value is not None else None
    if json_flag:
        if fmt is not None and fmt != "json":
            raise CliFailure(ExitCode.BAD_INPUT, f"--json conflicts with --format {fmt}")
        return check_format("json", formats)
    return fmt or formats[0]


def refusal_lines(published: PublishResult) -> list[str]:
    """``url: reason`` for every relay that refused a publish.  A relay's text is a stranger's:
    flattened, so that it cannot drive the terminal."""
    return [
        f"{one_line(url, 200)}: {one_line(v.reason, 200)}"
        for url, v in published.verdicts.items()
        if not v.ok
    ]


def report_publish(
    event: Event, published: PublishResult, json_output: bool, *, with_event: bool = False
) -> None:
    """What a command that published one event prints.  No relay stored it: a network failure
    naming each refusal.  Else a warning per refusal on stderr, then the event id, or with
    ``json_output`` one line ``{id, accepted, failed}`` (and the signed ``event`` itself when
    ``with_event``, spliced in as its canonical bytes)."""
    lines = refusal_lines(published)
    if not published.ok:
        raise CliFailure(
            ExitCode.NETWORK, f"no relay accepted {event.id}:\n  " + "\n  ".join(lines)
        )
    for line in lines:
        note(f"buzz: warning: not stored on {line}")
    if not json_output:
        write_stdout(event.id + "\n")
        return
    failed = {url: v.reason for url, v in published.verdicts.items() if not v.ok}
    doc = json.dumps(
        {"id": event.id, "accepted": published.accepted, "failed": failed}, ensure_ascii=False
    )
    if with_event:
        doc = doc[:-1] + f',"event":{event.to_json()}}}'
    write_stdout(doc + "\n")


def verdict_text(accepted: bool, duplicate: bool, message: str, prefix: str | None) -> str:
    """One relay's answer to a publish, for a person."""
    if duplicate:
        return "duplicate (the relay already had it)"
    if accepted:
        return "accepted"
    return "refused: " + one_line(message or prefix or "no reason given", 200)


#: What to do when no relay answered.
UNREACHABLE_HINT: Final = (
    "check that each relay URL is right and the relay is running (buzz relay starts a local "
    "one), or allow more time with --timeout"
)


def require_fetched(result: FetchResult) -> Event:
    """The event a fetch by id found, else docs/cli.md's precedence for failing: verification
    (4), not found (3), no relay answered (2).  Relays that served forgeries are named."""
    forgers = relay_rejections(result.query)
    if result.event is not None:
        for url, what in forgers.items():
            note(f"buzz: warning: relay {url} returned something else: {what}")
        return result.event
    if forgers:
        lines = [f"relay {url}: {what}" for url, what in forgers.items()]
        raise CliFailure(
            ExitCode.VERIFICATION,
            f"event {result.id}: no relay returned a valid copy; misbehaving relays:\n  "
            + "\n  ".join(lines),
        )
    if result.any_answered:
        for line in unreachable_relays(result.query):
            note(f"buzz: warning: relay {line}")
        raise CliFailure(ExitCode.NOT_FOUND, f"event {result.id} not found")
    raise CliFailure(
        ExitCode.NETWORK,
        "no relay answered:\n  "
        + "\n  ".join(unreachable_relays(result.query) or ["no relay to ask"])
        + f"\n{UNREACHABLE_HINT}",
    )
