"""``buzz req``: query relays with any filter (nak's ``req``).

The filter comes from flags, from JSON (the argument: one filter object or a list of them; or
stdin, one per line, with ``-`` or, as in nak, whenever no filter is given and stdin is not a
terminal), or both: the flags are added to every filter, replacing what it says of the same
field.  A filter holding a secret key is never sent (docs/cli.md).  Verified,
de-duplicated events are printed as JSON lines; a relay that served forgeries is named on
stderr and its forgeries are dropped.  ``--stream`` stays subscribed and prints new events as
they arrive, until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncGenerator
from typing import Annotated, Any, cast

import typer

from nostr_buzz.cli.access import Relays, relay_command
from nostr_buzz.cli.common import (
    given_json,
    json_strings,
    one_line,
    parse_event_ref,
    parse_public_key,
    refuse_secrets,
    run,
    warn_list_problems,
)
from nostr_buzz.cli.options import argument, kind_option, time_option
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips.nip01 import Filter


def _filter_docs(doc: Any, where: str) -> list[dict[str, Any]]:
    docs = doc if isinstance(doc, list) else [doc]
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise CliFailure(
            ExitCode.BAD_INPUT, f"{where}: a filter is a JSON object (or a list of them)"
        )
    return docs


def _tag_condition(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or len(name) != 1 or not name.isascii() or not name.isalpha():
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"-t: {one_line(text, 60)!r}: expected LETTER=VALUE, e.g. -t h=engineering",
        )
    return name, value


#: What --since and --until take.
_TIME_HELP = "Unix seconds, a date or RFC 3339."


@relay_command
def req_command(
    filter_json: Annotated[
        str | None,
        argument(
            "[FILTER]",
            'A filter as JSON, e.g. \'{"kinds":[1],"limit":5}\' (or a list of filters); '
            "'-' reads one filter per line from stdin, as does no FILTER when stdin is not a "
            "terminal.",
        ),
    ] = None,
    kind: Annotated[list[int] | None, kind_option("Event kind; repeatable.")] = None,
    author: Annotated[
        list[str] | None,
        typer.Option("-a", "--author", metavar="KEY", help="Public key (hex or npub); repeatable."),
    ] = None,
    event_id: Annotated[
        list[str] | None,
        typer.Option("-i", "--id", metavar="EVENT", help="Hex, note1… or nevent1…; repeatable."),
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option(
            "-t", "--tag", metavar="LETTER=VALUE", help="A tag condition (#LETTER); repeatable."
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("-l", "--limit", metavar="N", min=0, help="At most N events.")
    ] = None,
    since: Annotated[str | None, time_option("--since", _TIME_HELP)] = None,
    until: Annotated[str | None, time_option("--until", _TIME_HELP)] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Stay subscribed: print new events until interrupted.")
    ] = False,
    *,
    access: Relays,
) -> None:
    """Query relays with a filter; print the verified events as JSON lines."""
    docs = _given_filters(filter_json)
    extra = _flag_conditions(kind, author, event_id, tag, limit, since, until)
    secret = access.secret_key()
    # A filter is sent to every relay: a secret key in it would be published.  Checked before
    # Filter.from_dict, whose messages (a RelayError: exit 1) name unknown keys and bad values.
    refuse_secrets(json_strings(docs), secret, where="the filter")
    filters = [Filter.from_dict({**doc, **extra}) for doc in docs]
    pool = RelayPool(access.relays("read"), secret=secret, timeout=access.timeout)
    if stream:
        run(_stream(pool, filters))
        return

    async def body() -> list[Event]:
        result = await pool.query(filters, timeout=access.timeout)
        warn_list_problems(result)
        return result.events

    write_stdout("".join(e.to_json() + "\n" for e in run(body())))


def _given_filters(filter_json: str | None) -> list[dict[str, Any]]:
    """The filters given as FILTER, on stdin, or none (the flags alone: one empty filter)."""
    given = given_json(filter_json, "FILTER", "filter")
    return [d for where, doc in given for d in _filter_docs(doc, where)] or [{}]


def _flag_conditions(
    kind: list[int] | None,
    author: list[str] | None,
    event_id: list[str] | None,
    tag: list[str] | None,
    limit: int | None,
    since: str | None,
    until: str | None,
) -> dict[str, Any]:
    """What the flags add to every filter."""
    extra: dict[str, Any] = {}
    if kind:
        extra["kinds"] = list(dict.fromkeys(kind))
    if author:
        extra["authors"] = list(dict.fromkeys(parse_public_key(a, option="-a") for a in author))
    if event_id:
        extra["ids"] = list(dict.fromkeys(parse_event_ref(i, option="-i").id for i in event_id))
    for name, value in map(_tag_condition, tag or ()):
        extra.setdefault(f"#{name}", []).append(value)
    if limit is not None:
        extra["limit"] = limit
    if since is not None or until is not None:
        from nostr_buzz.cli.metrics import parse_time

        if since is not None:
            extra["since"] = parse_time(since, option="--since")
        if until is not None:
            extra["until"] = parse_time(until, option="--until", end_of_day=True)
    return extra


async def _stream(pool: RelayPool, filters: list[Filter]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    handled = (signal.SIGINT, signal.SIGTERM)
    for signum in handled:
        loop.add_signal_handler(signum, stop.set)
    # An async generator: aclose() ends every relay's subscription.
    events = cast(AsyncGenerator[Event, None], pool.subscribe(filters))

    async def pump() -> None:
        async for event in events:
            write_stdout(event.to_json() + "\n")  # at once: a stream is read as it comes

    printer = asyncio.create_task(pump())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({printer, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        for task in (printer, stopper):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await printer
        await events.aclose()
    if not stop.is_set():
        note("buzz: every relay's subscription ended")
        raise CliFailure(ExitCode.NETWORK, "no relay is left to stream from; check the relays")
