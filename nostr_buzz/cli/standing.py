"""``buzz canvas`` and ``buzz mem``: read and update the standing context an agent starts with.

``buzz canvas get|set --channel C [TEXT|-]`` reads or publishes a channel's canvas (kind 40100);
``buzz mem get|set core [TEXT|-]`` reads or publishes the configured key's core memory (kind
30174, ``d`` = ``core``), NIP-44 encrypted to that same key, so relays only ever store
ciphertext.  An agent with shell access uses these, as its envelope tells it to.  A ``get`` is
a read of state: it waits for every relay (up to ``--timeout``) and shows the newest version.

Start-up stays light: the relay client, the pool and the codecs are imported when a command
runs, not when ``buzz`` builds its command list.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated

from nostr_buzz.cli.access import RelayAccess, Relays, SigningRelays, relay_command
from nostr_buzz.cli.common import (
    check_channel,
    progress,
    refuse_secrets,
    report_publish,
    run,
    text_argument,
    unreachable_relays,
)
from nostr_buzz.cli.kit import sub_app
from nostr_buzz.cli.options import ChannelOption, JsonOption, argument, option
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.cli.signing import local_secret, opened_signer, sign_and_publish
from nostr_buzz.signer import Signer, signed

if TYPE_CHECKING:
    from nostr_buzz.event import Event
    from nostr_buzz.io.pool import PoolQueryResult
    from nostr_buzz.keys import SecretKey
    from nostr_buzz.nips.nip01 import Filter

canvas_app = sub_app(
    "canvas", "Read or update a channel's canvas (the shared document agents are pointed at)."
)
mem_app = sub_app("mem", "Read or update your core memory (encrypted to your own key).")

TextArgument = Annotated[
    str, argument("TEXT", "The new text, or - (the default) to read it from stdin.")
]
AuthorOption = Annotated[
    list[str] | None,
    option(
        "--author",
        metavar="KEY",
        help="Also trust canvases signed by this public key (hex or npub); repeatable. "
        "The owner, your own key and [gate] trusted keys always are; a relay's NIP-11 key "
        "never is.",
    ),
]
MemoryName = Annotated[str, argument("NAME", "Which memory: core.")]


# --- shared steps --------------------------------------------------------------------------


def _memory_name(name: str) -> None:
    if name != "core":
        raise CliFailure(ExitCode.BAD_INPUT, "only the 'core' memory exists: buzz mem get core")


def _not_found(result: PoolQueryResult, what: str) -> CliFailure:
    problems = unreachable_relays(result)
    if not result.any_finished:
        return CliFailure(
            ExitCode.NETWORK, "no relay answered:\n  " + "\n  ".join(problems or ["no relay"])
        )
    for line in problems:
        note(f"buzz: warning: relay {line}")
    return CliFailure(ExitCode.NOT_FOUND, f"{what} not found")


def _query(
    filters: list[Filter], relays: Sequence[str], secret: SecretKey | None, timeout: float
) -> PoolQueryResult:
    from nostr_buzz.io.pool import RelayPool

    progress(f"asking {len(relays)} relay(s)…")
    # A read of state: every relay is waited for (up to the timeout), the newest version counts.
    pool = RelayPool(relays, secret=secret, timeout=timeout)
    return run(pool.query_state(filters, timeout=timeout))


def _document(event: Event, content: str) -> str:
    return (
        json.dumps(
            {
                "id": event.id,
                "pubkey": event.pubkey,
                "created_at": event.created_at,
                "content": content,
            },
            ensure_ascii=False,
        )
        + "\n"
    )


def _as_text(content: str) -> str:
    return content if content.endswith("\n") else content + "\n"


# --- buzz canvas ----------------------------------------------------------------------------


@canvas_app.command("get")
@relay_command
def canvas_get(
    channel: ChannelOption,
    author: AuthorOption = None,
    *,
    access: Relays,
    json_output: JsonOption = False,
) -> None:
    """Print the newest canvas of CHANNEL by a trusted key: the owner, you, [gate] trusted
    keys, --author (never a relay's NIP-11 key: any relay could announce anyone's)."""
    from nostr_buzz.keys import PublicKey
    from nostr_buzz.nips import standing

    channel = check_channel(channel)
    relays = access.relays("read")
    secret = access.secret_key()
    given = [*(author or ()), *access.cfg.file.gate.trusted]
    trusted = {PublicKey.from_str(a.strip()).hex for a in given}
    owner = access.cfg.owner()
    if owner is not None:
        trusted.add(owner.hex)
    if secret is not None:
        trusted.add(secret.public_key.hex)
    if not trusted:
        raise CliFailure(
            ExitCode.BAD_INPUT, "no trusted author: configure an owner or a key, or give --author"
        )
    result = _query([standing.canvas_filter(channel, trusted)], relays, secret, access.timeout)
    chosen = standing.select_canvas(result.events, channel, trusted)
    if chosen is None:
        raise _not_found(result, f"no canvas for channel {channel}")
    write_stdout(_document(chosen, chosen.content) if json_output else _as_text(chosen.content))


def _publish(
    text: str,
    where: str,
    make: Callable[[str, int], Callable[[Signer], Awaitable[Event]]],
    access: RelayAccess,
    json_output: bool,
) -> None:
    """A new version of standing context, published: TEXT (or stdin), never holding a secret
    key (agents read it), made by ``make(content, now)`` and signed with your key or bunker."""
    import time

    content = text_argument(text, whole=True)
    choice = access.key_choice()
    refuse_secrets([content], local_secret(choice), where=where)
    relays = access.relays("write")
    sign = make(content, int(time.time()))  # the clock is read here, at the edge
    report_publish(*sign_and_publish(sign, choice, access.cfg, relays, access.timeout), json_output)


@canvas_app.command("set")
@relay_command
def canvas_set(
    channel: ChannelOption,
    text: TextArgument = "-",
    *,
    access: SigningRelays,
    json_output: JsonOption = False,
) -> None:
    """Publish a new revision of CHANNEL's canvas, signed with your key."""
    from nostr_buzz.nips import standing

    channel = check_channel(channel)

    def make(content: str, now: int) -> Callable[[Signer], Awaitable[Event]]:
        unsigned = standing.canvas_template(channel, content, created_at=now)
        return lambda signer: signed(signer, unsigned)

    _publish(text, "the canvas", make, access, json_output)


# --- buzz mem -------------------------------------------------------------------------------


@mem_app.command("get")
@relay_command
def mem_get(
    name: MemoryName,
    *,
    access: SigningRelays,
    json_output: JsonOption = False,
) -> None:
    """Print your core memory, decrypted with your key."""
    from nostr_buzz.nips import standing

    _memory_name(name)
    choice = access.key_choice()
    relays = access.relays("read")

    async def body() -> tuple[Event, str]:
        from nostr_buzz.io.pool import RelayPool

        async with opened_signer(choice, access.cfg) as signer:
            mine = signer.public_key.hex
            progress(f"asking {len(relays)} relay(s)…")
            pool = RelayPool(relays, signer=signer, timeout=access.timeout)
            query = [standing.core_memory_filter(mine)]
            result = await pool.query_state(query, timeout=access.timeout)
            candidates = standing.select_core_memory(result.events, mine)
            if not candidates:
                raise _not_found(result, "no core memory")
            try:
                return candidates[0], await standing.open_core_memory_with(signer, candidates[0])
            except standing.StandingError as exc:
                raise CliFailure(ExitCode.VERIFICATION, str(exc)) from None

    event, text = run(body())
    write_stdout(_document(event, text) if json_output else _as_text(text))


@mem_app.command("set")
@relay_command
def mem_set(
    name: MemoryName,
    text: TextArgument = "-",
    *,
    access: SigningRelays,
    json_output: JsonOption = False,
) -> None:
    """Replace your core memory; relays store it encrypted to your own key."""
    from nostr_buzz.nips import standing

    _memory_name(name)

    # Encrypted to your own key, but the text is fed to agents: never a secret key.
    def make(content: str, now: int) -> Callable[[Signer], Awaitable[Event]]:
        return lambda signer: standing.core_memory_with(signer, content, created_at=now)

    _publish(text, "the memory", make, access, json_output)
