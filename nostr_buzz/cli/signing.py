"""Who signs for a command: a secret key (``--key``, ``$BUZZ_PRIVATE_KEY``, ``buzz.toml``) or a
NIP-46 bunker (``--bunker``, ``$BUZZ_BUNKER``, ``[signer] bunker``), never both.

A bunker is asked with the NIP-46 client key kept in the state directory (``state_dir``), the
bot's own, so that a bunker that remembers that client serves every command and the bot alike
although the URI's secret is good for one connection only (docs/signers.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from nostr_buzz.cli.common import one_line, progress, run
from nostr_buzz.cli.options import BUNKER_HELP as BUNKER_HELP  # re-exported
from nostr_buzz.cli.options import BunkerOption as BunkerOption  # re-exported
from nostr_buzz.cli.output import CliFailure, ExitCode, bad_input, note
from nostr_buzz.config import ConfigSources, state_directory
from nostr_buzz.errors import ConfigError
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.nips.nip46 import BunkerUri
from nostr_buzz.signer import Signer, SignerError

if TYPE_CHECKING:
    from nostr_buzz.event import Event
    from nostr_buzz.io.nip46 import Nip46Signer
    from nostr_buzz.io.pool import PublishResult

#: The key that signs: held here, or in a bunker.
KeyChoice = SecretKey | BunkerUri


def key_choice(cfg: ConfigSources, key: str | None, bunker: str | None) -> KeyChoice | None:
    """The configured key or bunker, flags first; None when no source names either."""
    if key is not None and key.strip() and bunker is not None and bunker.strip():
        raise CliFailure(ExitCode.BAD_INPUT, "give --key or --bunker, not both")
    with bad_input(ConfigError):
        if key is not None and key.strip():
            return cfg.require_secret_key(key)
        uri = cfg.bunker(bunker)
        return uri if uri is not None else cfg.secret_key()


def require_key_choice(cfg: ConfigSources, key: str | None, bunker: str | None) -> KeyChoice:
    choice = key_choice(cfg, key, bunker)
    if choice is None:
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"no secret key configured: give {cfg.KEY_SOURCES}, or a NIP-46 bunker (--bunker, "
            "BUZZ_BUNKER or [signer] bunker)",
        )
    return choice


def local_secret(choice: KeyChoice | None) -> SecretKey | None:
    """The secret key when it is held here (what :func:`~nostr_buzz.cli.common.refuse_secrets`
    looks for in a command's text), else None."""
    return choice if isinstance(choice, SecretKey) else None


@asynccontextmanager
async def opened_signer(choice: KeyChoice, cfg: ConfigSources) -> AsyncIterator[Signer]:
    """A ready signer for ``choice`` (a bunker connected, then closed on exit)."""
    if isinstance(choice, SecretKey):
        yield LocalSigner(choice)
        return
    signer = await connect_bunker(choice, cfg)
    try:
        yield signer
    finally:
        await signer.close()


async def connect_bunker(bunker: BunkerUri, cfg: ConfigSources) -> Nip46Signer:
    """A signer in the NIP-46 bunker, connected with the client key kept in the state
    directory; a network failure (exit 3) when the bunker does not serve."""
    from nostr_buzz.io.filemodes import private_dir
    from nostr_buzz.io.nip46 import Nip46Signer, client_key_in

    try:
        state = state_directory(cfg)
        client = client_key_in(private_dir(state))
    except (ConfigError, OSError) as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"the NIP-46 client key: {exc}") from None
    note(f"buzz: asking the NIP-46 bunker on {', '.join(bunker.relays)} for the key")
    try:
        return await Nip46Signer.connect(
            bunker,
            client_secret=client,
            timeout=cfg.file.signer.timeout,
            on_auth_url=lambda url: note(
                f"buzz: the bunker asks for approval at {one_line(url, 300)}"
            ),
        )
    except SignerError as exc:
        raise CliFailure(ExitCode.NETWORK, f"the NIP-46 bunker: {exc}") from None


def sign_and_publish(
    sign: Callable[[Signer], Awaitable[Event]],
    choice: KeyChoice,
    cfg: ConfigSources,
    relays: Sequence[str],
    timeout: float,
) -> tuple[Event, PublishResult]:
    """The event ``sign`` makes with ``choice`` (a bunker connected for it, then closed),
    published to ``relays``: the publish is done when one of them has stored it."""
    from nostr_buzz.io.pool import RelayPool

    async def body() -> tuple[Event, PublishResult]:
        async with opened_signer(choice, cfg) as signer:
            event = await sign(signer)
            progress(f"publishing {event.id} to {len(relays)} relay(s)…")
            pool = RelayPool(relays, signer=signer, timeout=timeout)
            return event, await pool.publish(event, min_ok=1)

    return run(body())
