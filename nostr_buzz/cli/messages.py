"""``buzz messages``: fetch raw events, read channels and threads, send chat messages (docs/cli.md).

Every event printed here came through :class:`~nostr_buzz.event.Event` verification in the relay
client; a relay's own bytes are never echoed, only ``Event.to_json()``.  Exit codes follow
docs/cli.md: 1 bad input, 2 nothing reachable or nobody accepted, 3 not found, 4 verification
failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, ClassVar, Literal

import typer

from nostr_buzz.cli.access import RelayAccess, Relays, SigningRelays, relay_command
from nostr_buzz.cli.common import (
    EventRef,
    check_channel,
    check_format,
    one_line,
    parse_event_ref,
    parse_public_key,
    progress,
    refuse_secrets,
    report_publish,
    require_fetched,
    run,
    text_argument,
    warn_list_problems,
)
from nostr_buzz.cli.kit import LazyGroup, LazySpec, sub_app
from nostr_buzz.cli.options import ChannelOption, JsonOption, argument, option
from nostr_buzz.cli.output import CliFailure, ExitCode, note, utc_time, write_stdout
from nostr_buzz.cli.signing import local_secret, sign_and_publish
from nostr_buzz.event import Event
from nostr_buzz.io.fetch import fetch_event_result
from nostr_buzz.io.pool import MAX_HINT_RELAYS, PoolQueryResult, RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import as_signer
from nostr_buzz.nips import nip10, nip27
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.nips.relay_url import check_relay_url
from nostr_buzz.signer import Signer, signed, template

#: LocalRelay served at most 500 events per query in our measurements (docs/cli.md).
MAX_QUERY_LIMIT = 500


class _MessagesGroup(LazyGroup):
    # Private messages need NIP-44/59 and build on this module: loaded when asked for.
    lazy: ClassVar[dict[str, LazySpec]] = {
        "dm": ("private", "dm_command", "Send a NIP-17 private message to one key."),
        "inbox": ("private", "inbox_command", "Private messages (NIP-17) addressed to your key."),
    }


messages_app = sub_app(
    "messages",
    "Fetch raw events, read channels and threads, send chat and private messages.",
    cls=_MessagesGroup,
)

Format = Literal["json", "table"]
FORMATS: tuple[Format, ...] = ("json", "table")
FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="[json|table]",
        help="json: one canonical event per line; table: for reading.",
        case_sensitive=False,
    ),
]


# --- shared steps --------------------------------------------------------------------------


def _usable_hints(hints: Iterable[str]) -> list[str]:
    """nevent relay hints that are ws:// or wss:// URLs; anything else is skipped (docs/cli.md)."""
    usable: list[str] = []
    for hint in hints:
        try:
            usable.append(check_relay_url(hint))
        except ValueError:
            continue
    return usable


def _read_setup(
    access: RelayAccess, hints: Sequence[str] = ()
) -> tuple[tuple[str, ...], list[str], SecretKey | None]:
    """Read relays, usable hints and the key used for NIP-42 on the configured relays only."""
    relays = access.relays_if_any("read")
    usable = _usable_hints(hints)
    if not relays and not usable:
        raise CliFailure(
            ExitCode.BAD_INPUT, f"no relay configured: give {access.cfg.RELAY_SOURCES}"
        )
    return relays, usable, access.secret_key()


def _asked(relays: Sequence[str], hints: Sequence[str]) -> int:
    """How many relays a query asks: the listed ones, plus the hints the pool follows."""
    followed = [h for h in dict.fromkeys(hints) if h not in set(relays)]
    return len(relays) + min(len(followed), MAX_HINT_RELAYS)


async def _fetch(
    ref: EventRef,
    relays: Sequence[str],
    hints: Sequence[str],
    secret: SecretKey | Signer | None,
    timeout: float,
    *,
    wait_all: bool = False,
) -> tuple[Event, PoolQueryResult]:
    """:func:`~nostr_buzz.io.fetch.fetch_event_result` with the command line's progress line,
    warnings and exit codes; the key authenticates (NIP-42) to the configured relays only."""
    progress(f"asking {_asked(relays, hints)} relay(s) for {ref.id}…")
    pool = RelayPool(relays, signer=None if secret is None else as_signer(secret), timeout=timeout)
    result = await fetch_event_result(
        ref._replace(relays=tuple(hints)), pool=pool, timeout=timeout, wait_all=wait_all
    )
    return require_fetched(result), result.query


def _render(events: Sequence[Event], fmt: Format) -> str:
    if fmt == "json":
        return "".join(e.to_json() + "\n" for e in events)
    lines = []
    for e in events:
        when = utc_time(e.created_at)
        lines.append(f"{when}  {e.id[:12]}  {e.pubkey[:12]}  {one_line(e.content, 80)}\n")
    return "".join(lines)


# --- commands ------------------------------------------------------------------------------


def _event_option(what: str) -> Any:
    """``--event EVENT``, saying ``what`` it names and the forms it takes."""
    return typer.Option("--event", metavar="EVENT", help=f"{what}: 64-hex, note1… or nevent1….")


@messages_app.command("raw")
@relay_command
def raw(
    event: Annotated[str, _event_option("Event id")],
    *,
    access: Relays,
    wait_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Wait for every relay (to see which ones misbehave) instead of printing the "
            "first valid copy at once.",
        ),
    ] = False,
) -> None:
    """Fetch one signed event by id and print its canonical JSON (one line) after checking it."""
    ref = parse_event_ref(event)
    relays, hints, secret = _read_setup(access, ref.relays)
    found, _ = run(_fetch(ref, relays, hints, secret, access.timeout, wait_all=wait_all))
    write_stdout(found.to_json() + "\n")


@messages_app.command("get")
@relay_command
def get(
    channel: ChannelOption,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", metavar="N", min=1, max=MAX_QUERY_LIMIT, help="How many recent messages."
        ),
    ] = 50,
    output_format: FormatOption = "json",
    *,
    access: Relays,
) -> None:
    """Recent chat messages of a channel (kind 9, h = CHANNEL), oldest first."""
    channel = check_channel(channel)
    fmt = check_format(output_format, FORMATS)
    relays, _, secret = _read_setup(access)
    timeout = access.timeout

    async def body() -> list[Event]:
        pool = RelayPool(relays, secret=secret, timeout=timeout)
        progress(f"asking {len(relays)} relay(s) for channel {channel}…")
        flt = Filter(kinds=(CHAT_KIND,), limit=limit, tags={"h": (channel,)})
        result = await pool.query(flt, timeout=timeout)
        warn_list_problems(result)
        # Relays may pass events whose first h tag is another channel; nip10 decides.
        mine = [e for e in result.events if nip10.channel(e) == channel]
        return nip10.chronological(mine)[-limit:]

    write_stdout(_render(run(body()), fmt))


@messages_app.command("thread")
@relay_command
def thread(
    channel: ChannelOption,
    event: Annotated[str, _event_option("Any event of the thread")],
    output_format: FormatOption = "json",
    *,
    access: Relays,
) -> None:
    """The thread EVENT belongs to, in CHANNEL: its root, then the replies, oldest first."""
    channel = check_channel(channel)
    fmt = check_format(output_format, FORMATS)
    ref = parse_event_ref(event)
    relays, hints, secret = _read_setup(access, ref.relays)
    timeout = access.timeout

    async def body() -> list[Event]:
        start, _ = await _fetch(ref, relays, hints, secret, timeout)
        root_id = nip10.thread_ref(start).root or start.id
        pool = RelayPool(relays, secret=secret, timeout=timeout)
        progress(f"asking {_asked(relays, hints)} relay(s) for thread {root_id}…")
        replies_filter = Filter(
            kinds=(CHAT_KIND,), limit=MAX_QUERY_LIMIT, tags={"h": (channel,), "e": (root_id,)}
        )
        result = await pool.query(
            [Filter(ids=(root_id,)), replies_filter], extra_urls=hints, timeout=timeout
        )
        warn_list_problems(result)
        by_id = {e.id: e for e in result.events}
        by_id.setdefault(start.id, start)
        # An e tag can also be a plain citation: only events nip10 routes into this thread.
        history = nip10.thread_history(by_id.values(), root_id, channel)
        if history.root is None:
            note(f"buzz: warning: the thread's root {root_id} was not found")
        return ([history.root] if history.root is not None else []) + history.replies

    write_stdout(_render(run(body()), fmt))


def _first_relay_with(result: PoolQueryResult, event_id: str) -> str:
    """A relay hint for an e tag: the first relay that served the event, else empty."""
    for url, per in result.per_relay.items():
        if any(e.id == event_id for e in per.events):
            return url
    return ""


@messages_app.command("send")
@relay_command
def send(
    channel: ChannelOption,
    text: Annotated[str, argument("TEXT", "The message text; '-' reads it from stdin.")],
    reply_to: Annotated[
        str | None,
        option(
            "--reply-to", metavar="EVENT", help="Reply to this event (64-hex, note1… or nevent1…)."
        ),
    ] = None,
    mention: Annotated[
        list[str] | None,
        option(
            "--mention",
            metavar="KEY",
            help="Mention this public key (hex or npub) with a p tag; repeat for more. A bot "
            "that requires mentions answers only messages that mention it.",
        ),
    ] = None,
    *,
    access: SigningRelays,
    json_output: JsonOption = False,
) -> None:
    """Publish a kind 9 chat message to CHANNEL, threaded with NIP-10 marked e tags."""
    channel = check_channel(channel)
    mentioned = [parse_public_key(k, option="--mention") for k in mention or ()]
    text = text_argument(text, what="message text")
    ref = parse_event_ref(reply_to, option="--reply-to") if reply_to is not None else None
    choice = access.key_choice()
    # Before --reply-to is looked up.
    refuse_secrets([text], local_secret(choice), where="the message text")
    write_relays = access.relays("write")
    read_relays = access.relays_if_any("read") or write_relays

    async def message(signer: Signer) -> Event:
        tags: list[list[str]] = [["h", channel]]
        if ref is not None:
            tags += await _reply_tags(ref, channel, read_relays, signer, access.timeout)
        listed = {t[1] for t in tags if t[0] == "p"}
        tags += [["p", k] for k in dict.fromkeys(mentioned) if k not in listed]
        # The clock is read here, at the edge; the library itself never reads one.
        unsigned = template(kind=CHAT_KIND, content=text, tags=tags, created_at=int(time.time()))
        unsigned = nip27.with_references(unsigned)  # as clients (and NDK's bunker) tag it
        return await signed(signer, unsigned)

    sent, published = sign_and_publish(message, choice, access.cfg, write_relays, access.timeout)
    report_publish(sent, published, json_output, with_event=True)


async def _reply_tags(
    ref: EventRef, channel: str, read_relays: Sequence[str], signer: Signer, timeout: float
) -> list[list[str]]:
    """NIP-10 marked tags for a reply to ``ref``: the parent fetched (it must be in
    ``channel``), and its thread's root, for the relay hints."""
    hints = _usable_hints(ref.relays)
    parent, found = await _fetch(ref, read_relays, hints, signer, timeout)
    parent_channel = nip10.channel(parent)
    if parent_channel is not None and parent_channel != channel:
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"--reply-to: that event is in channel {parent_channel}, not {channel}",
        )
    root_id = nip10.thread_ref(parent).root or parent.id
    root: Event | None = parent if root_id == parent.id else None
    root_relay = _first_relay_with(found, root_id)
    if root is None:
        pool = RelayPool(read_relays, signer=signer, timeout=timeout)
        lookup = await pool.query(Filter(ids=(root_id,)), extra_urls=hints, timeout=timeout)
        root = next((e for e in lookup.events if e.id == root_id), None)
        root_relay = _first_relay_with(lookup, root_id)
    return nip10.reply_tags(
        parent,
        sender=signer.public_key.hex,
        root=root,
        parent_relay=_first_relay_with(found, parent.id),
        root_relay=root_relay,
    )
