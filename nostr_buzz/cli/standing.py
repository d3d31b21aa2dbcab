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

import typer

from nostr_buzz.cli.common import (
    DEFAULT_TIMEOUT,
    ChannelOption,
    ConfigOption,
    JsonOption,
    KeyOption,
    RelayOption,
    TimeoutOption,
    check_channel,
    progress,
    refuse_secrets,
    report_publish,
    run,
    sources,
    text_argument,
    unreachable_relays,
)
from nostr_buzz.cli.kit import sub_app
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.cli.signing import (
    BunkerOption,
    KeyChoice,
    local_secret,
    opened_signer,
    require_key_choice,
)
from nostr_buzz.signer import Signer, signed

if TYPE_CHECKING:
    from nostr_buzz.config import ConfigSources
    from nostr_buzz.event import Event
    from nostr_buzz.io.pool import PoolQueryResult, PublishResult
    from nostr_buzz.keys import SecretKey
    from nostr_buzz.nips.nip01 import Filter

canvas_app = sub_app(
    "canvas", "Read or update a channel's canvas (the shared document agents are pointed at)."
)
mem_app = sub_app("mem", "Read or update your core memory (encrypted to your own key).")

TextArgument = Annotated[
    str,
    typer.Argument(
        metavar="TEXT",
        help="The new text, or - (the default) to read it from stdin.",
        show_default=False,
    ),
]
AuthorOption = Annotated[
    list[str] | None,
    typer.Option(
        "--author",
        metavar="KEY",
        help="Also trust canvases signed by this public key (hex or npub); repeatable. "
        "The owner, your own key and [gate] trusted keys always are; a relay's NIP-11 key "
        "never is.",
        show_default=False,
    ),
]
MemoryName = Annotated[
    str, typer.Argument(metavar="NAME", help="Which memory: core.", show_default=False)
]


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


def _sign_and_publish(
    sign: Callable[[Signer], Awaitable[Event]],
    choice: KeyChoice,
    cfg: ConfigSources,
    relays: Sequence[str],
    timeout: float,
) -> tuple[Event, PublishResult]:
    """The event ``sign`` makes with the configured key (or bunker), published."""
    from nostr_buzz.io.pool import RelayPool

    async def body() -> tuple[Event, PublishResult]:
        async with opened_signer(choice, cfg) as signer:
            event = await sign(signer)
            progress(f"publishing {event.id} to {len(relays)} relay(s)…")
            pool = RelayPool(relays, signer=signer, timeout=timeout)
            return event, await pool.publish(event, min_ok=1)

    return run(body())


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
def canvas_get(
    channel: ChannelOption,
    author: AuthorOption = None,
    relay: RelayOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    key: KeyOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Print the newest canvas of CHANNEL by a trusted key: the owner, you, [gate] trusted
    keys, --author (never a relay's NIP-11 key: any relay could announce anyone's)."""
    from nostr_buzz.keys import PublicKey
    from nostr_buzz.nips import standing

    channel = check_channel(channel)
    cfg = sources(config)
    relays = cfg.require_relays(relay or (), direction="read")
    secret = cfg.secret_key(key)
    given = [*(author or ()), *cfg.file.gate.trusted]
    trusted = {PublicKey.from_str(a.strip()).hex for a in given}
    owner = cfg.owner()
    if owner is not None:
        trusted.add(owner.hex)
    if secret is not None:
        trusted.add(secret.public_key.hex)
    if not trusted:
        raise CliFailure(
            ExitCode.BAD_INPUT, "no trusted author: configure an owner or a key, or give --author"
        )
    result = _query([standing.canvas_filter(channel, trusted)], relays, secret, timeout)
    chosen = standing.select_canvas(result.events, channel, trusted)
    if chosen is None:
        raise _not_found(result, f"no canvas for channel {channel}")
    write_stdout(_document(chosen, chosen.content) if json_output else _as_text(chosen.content))


@canvas_app.command("set")
def canvas_set(
    channel: ChannelOption,
    text: TextArgument = "-",
    relay: RelayOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    key: KeyOption = None,
    bunker: BunkerOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Publish a new revision of CHANNEL's canvas, signed with your key."""
    import time

    from nostr_buzz.nips import standing

    channel = check_channel(channel)
    content = text_argument(text, whole=True)
    cfg = sources(config)
    choice = require_key_choice(cfg, key, bunker)
    refuse_secrets([content], local_secret(choice), where="the canvas")
    relays = cfg.require_relays(relay or (), direction="write")
    # The clock is read here, at the edge.
    unsigned = standing.canvas_template(channel, content, created_at=int(time.time()))

    async def sign(signer: Signer) -> Event:
        return await signed(signer, unsigned)

    report_publish(*_sign_and_publish(sign, choice, cfg, relays, timeout), json_output)


# --- buzz mem -------------------------------------------------------------------------------


@mem_app.command("get")
def mem_get(
    name: MemoryName,
    relay: RelayOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    key: KeyOption = None,
    bunker: BunkerOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Print your core memory, decrypted with your key."""
    from nostr_buzz.nips import standing

    _memory_name(name)
    cfg = sources(config)
    choice = require_key_choice(cfg, key, bunker)
    relays = cfg.require_relays(relay or (), direction="read")

    async def body() -> tuple[Event, str]:
        from nostr_buzz.io.pool import RelayPool

        async with opened_signer(choice, cfg) as signer:
            mine = signer.public_key.hex
            progress(f"asking {len(relays)} relay(s)…")
            pool = RelayPool(relays, signer=signer, timeout=timeout)
            result = await pool.query_state([standing.core_memory_filter(mine)], timeout=timeout)
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
def mem_set(
    name: MemoryName,
    text: TextArgument = "-",
    relay: RelayOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    key: KeyOption = None,
    bunker: BunkerOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Replace your core memory; relays store it encrypted to your own key."""
    import time

    from nostr_buzz.nips import standing

    _memory_name(name)
    content = text_argument(text, whole=True)
    cfg = sources(config)
    choice = require_key_choice(cfg, key, bunker)
    # Encrypted to your own key, but the text is fed to agents: never a secret key.
    refuse_secrets([content], local_secret(choice), where="the memory")
    relays = cfg.require_relays(relay or (), direction="write")
    now = int(time.time())

    async def sign(signer: Signer) -> Event:
        return await standing.core_memory_with(signer, content, created_at=now)

    report_publish(*_sign_and_publish(sign, choice, cfg, relays, timeout), json_output)
