"""``buzz messages dm`` and ``buzz messages inbox``: NIP-17 private messages.

``dm`` sends a kind 14 message sealed and gift-wrapped to the receiver (at their kind 10050 DM
relays when they published some, else at the write relays) plus a copy to the sender.
``inbox`` lists the private messages addressed to the configured key, each opened and checked
(seal signature, rumor author = seal signer); refused wraps are counted by reason, never shown.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from nostr_buzz.cli.access import SigningRelays, relay_command
from nostr_buzz.cli.common import (
    check_format,
    one_line,
    progress,
    refusal_lines,
    refuse_secrets,
    run,
    text_argument,
    warn_list_problems,
)
from nostr_buzz.cli.messages import FORMATS, FormatOption
from nostr_buzz.cli.options import JsonOption, argument
from nostr_buzz.cli.output import CliFailure, ExitCode, note, utc_time, write_stdout
from nostr_buzz.cli.signing import local_secret, opened_signer
from nostr_buzz.errors import InvalidKey
from nostr_buzz.io.private import MAX_QUERY_LIMIT, Delivery, Inbox, dm_relays_of, read_inbox
from nostr_buzz.io.private import send_private as _send_private
from nostr_buzz.keys import PublicKey
from nostr_buzz.nips import nip17


def _parse_to(value: str) -> str:
    try:
        return PublicKey.from_str(value.strip()).hex
    except InvalidKey as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"--to: {exc}") from None


@relay_command
def dm_command(
    to: Annotated[
        str,
        typer.Option("--to", metavar="KEY", help="The receiver's public key (npub1… or 64-hex)."),
    ],
    text: Annotated[str, argument("TEXT", "The message text; - reads it from standard input.")],
    *,
    access: SigningRelays,
    json_output: JsonOption = False,
) -> None:
    """Send a NIP-17 private message: only the receiver (and you) can read it.

    It goes to the receiver's DM relays (kind 10050, the first three) when they published some,
    else to your write relays; a copy wrapped to you goes to your own DM relays, else your
    write relays.
    Prints the message id (the kind 14 rumor's id).
    """
    receiver = _parse_to(to)
    body_text = text_argument(text, what="message text")
    choice = access.key_choice()
    # Encrypted, yet read by the receiver: a secret key is refused before any relay is asked.
    refuse_secrets([body_text], local_secret(choice), where="the message text")
    write_relays = access.relays("write")
    read_relays = access.relays_if_any("read") or write_relays
    timeout = access.timeout

    async def body() -> tuple[str, str, list[Delivery]]:
        async with opened_signer(choice, access.cfg) as signer:
            me = signer.public_key.hex
            progress(f"looking up DM relays on {len(read_relays)} relay(s)…")
            known = await dm_relays_of([receiver, me], read_relays, secret=signer, timeout=timeout)
            # The clock is read here, at the edge; the library itself never reads one.
            now = int(time.time())
            rumor = nip17.message(me, [receiver], body_text, created_at=now)
            progress(f"sending {rumor.id}…")
            deliveries = await _send_private(
                signer, rumor, write_relays=write_relays, dm_relays=known, now=now, timeout=timeout
            )
            return me, rumor.id, deliveries

    me, message_id, deliveries = run(body())
    _report_sent(message_id, receiver, me, deliveries, json_output)


def _report_sent(
    message_id: str, receiver: str, me: str, deliveries: list[Delivery], json_output: bool
) -> None:
    """What ``dm`` prints: a failure when no relay took the message to the receiver, a warning
    per refusal and for a copy to yourself stored nowhere, then the id (or JSON)."""
    to_them = [d for d in deliveries if d.addressee != me]
    copy = next(d for d in deliveries if d.addressee == me)
    if not all(d.result.ok for d in to_them):
        lines = [line for d in to_them for line in refusal_lines(d.result)]
        raise CliFailure(
            ExitCode.NETWORK,
            f"no relay accepted the message {message_id}:\n  " + "\n  ".join(lines),
        )
    for d in deliveries:
        for line in refusal_lines(d.result):
            note(f"buzz: warning: not stored on {line}")
    if not copy.result.ok:
        note("buzz: warning: your own copy was stored nowhere (buzz messages inbox won't show it)")
    if not json_output:
        write_stdout(message_id + "\n")
        return
    payload = {
        "id": message_id,
        "to": receiver,
        "accepted": to_them[0].result.accepted,
        "dmRelays": to_them[0].to_dm_relays,
        "copyAccepted": copy.result.accepted,
    }
    write_stdout(json.dumps(payload, ensure_ascii=False) + "\n")


def _render(inbox: Inbox, fmt: str, me: str) -> str:
    if fmt == "json":
        return "".join(o.rumor.to_json() + "\n" for o in inbox.messages)
    lines = []
    for o in inbox.messages:
        when = utc_time(o.rumor.created_at)
        who = "me" if o.sender == me else o.sender[:12]
        lines.append(f"{when}  {o.rumor.id[:12]}  {who:<12}  {one_line(o.rumor.content, 80)}\n")
    return "".join(lines)


@relay_command
def inbox_command(
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            metavar="N",
            min=1,
            max=MAX_QUERY_LIMIT,
            help="How many gift wraps to ask each relay for.",
        ),
    ] = 100,
    output_format: FormatOption = "table",
    *,
    access: SigningRelays,
) -> None:
    """Private messages (NIP-17) addressed to your key, opened and checked, oldest first.

    Read from your read relays and the DM relays you published there.  json prints each
    message (the kind 14 rumor, whose author the seal's signature proved) on one line.
    """
    fmt = check_format(output_format, FORMATS)
    choice = access.key_choice()
    relays = access.relays("read")

    async def body() -> tuple[str, Inbox]:
        async with opened_signer(choice, access.cfg) as signer:
            progress(f"asking {len(relays)} relay(s) for gift wraps…")
            inbox = await read_inbox(signer, relays, timeout=access.timeout, limit=limit)
            return signer.public_key.hex, inbox

    me, inbox = run(body())
    warn_list_problems(inbox.query)
    if inbox.refused:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(inbox.refused.items()))
        note(f"buzz: warning: gift wraps refused: {reasons}")
    write_stdout(_render(inbox, fmt, me))
