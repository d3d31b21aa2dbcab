"""A :class:`~nostr_buzz.signer.Signer` whose key lives in a NIP-46 remote signer ("bunker").

:class:`Nip46Signer` keeps a client key in memory (or uses one it is given, so that a bunker
that remembers its clients takes it back after a restart), holds one live subscription on each
of the bunker's relays for kind 24133 events by the remote-signer key p-tagged to the client
key, and sends each request (NIP-44 v2 encrypted, with a random id) to every relay; the answer
is matched by id.  Events by any other key, undecryptable ones and answers to no pending
request are ignored (and counted).  Every call is bounded: past its timeout it raises
:class:`~nostr_buzz.signer.SignerError` naming the method and the relays.  A signed event is
verified and must be the very event that was asked for, signed by the user key
(:func:`~nostr_buzz.signer.check_signed`).  The pure half is :mod:`nostr_buzz.nips.nip46`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from nostr_buzz.errors import ConfigError, InvalidKey, Nip46Error
from nostr_buzz.event import Event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip46
from nostr_buzz.nips.nip46 import BunkerUri, Request, Response
from nostr_buzz.signer import EventTemplate, SignerError, check_signed
from nostr_buzz.text.unicode import LINE_BREAKS

from .filemodes import open_private, read_private
from .relay import RelayClient

__all__ = ["CLIENT_KEY_FILE", "DEFAULT_TIMEOUT", "Nip46Signer", "client_key_in"]

T = TypeVar("T")

#: Seconds one call may take (a person approving a request in their bunker needs a while).
DEFAULT_TIMEOUT: Final = 30.0
#: The client key a bot keeps in its state directory (``0600``), so that its bunker, which
#: remembers the client, serves it again after a restart.
CLIENT_KEY_FILE: Final = "nip46-client.key"
#: Characters of a bunker's error text repeated in a :class:`SignerError`.
_ERROR_SHOWN: Final = 200


class _Refused(SignerError):
    """The bunker answered with an error (as opposed to not answering)."""


def _usable(read: Callable[[], T]) -> T:
    """``read()``, a result of :mod:`nostr_buzz.nips.nip46`, its error as a SignerError."""
    try:
        return read()
    except Nip46Error as exc:
        raise SignerError(f"the remote signer's answer is unusable: {exc}") from None


def _flat(text: str) -> str:
    """A bunker's text on one line, cut short: it is a stranger's text."""
    flat = "".join(" " if c in LINE_BREAKS or not c.isprintable() else c for c in text)
    return flat if len(flat) <= _ERROR_SHOWN else flat[: _ERROR_SHOWN - 1] + "…"


def client_key_in(state_dir: str | Path) -> SecretKey:
    """The NIP-46 client key kept in ``state_dir`` (:data:`CLIENT_KEY_FILE`), made on first use.

    It is not the agent's key, but whoever holds it may ask the bunker to sign for as long as
    the bunker serves this client: it is a private file of the private state directory."""
    path = Path(state_dir) / CLIENT_KEY_FILE
    try:
        with read_private(path) as file:
            text = file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        key = SecretKey.generate()
        with open_private(path, append=False) as file:
            file.write(key.hex.encode() + b"\n")
        return key
    except OSError as exc:
        raise ConfigError(f"cannot read the NIP-46 client key {path}: {exc.strerror}") from None
    try:
        return SecretKey.from_str(text.strip())
    except InvalidKey:
        raise ConfigError(
            f"{path} does not hold a NIP-46 client key: remove it (a new one is made, and the "
            "bunker must accept it as a new client)"
        ) from None


class Nip46Signer:
    """A NIP-46 client: ``signer = await Nip46Signer.connect("bunker://…")``, then use it as
    any :class:`~nostr_buzz.signer.Signer`; ``await signer.close()`` (or ``async with``).

    ``client_secret``: the client key to use, so that a bunker that remembers it serves it
    again after a restart although the URI's secret is single-use (a refused ``connect`` is
    then followed by a ``ping``, which such a bunker answers); by default a fresh key, kept in
    memory only.  It also answers the bunker relays' NIP-42 challenges.  ``timeout``: seconds
    per call, connecting included.  ``on_auth_url(url)`` is told when the bunker asks for
    approval at a URL (the call then goes on waiting for the answer, within its timeout).
    """

    def __init__(
        self,
        uri: BunkerUri | str,
        *,
        client_secret: SecretKey | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        on_auth_url: Callable[[str], None] | None = None,
    ) -> None:
        self.uri = uri if isinstance(uri, BunkerUri) else nip46.parse_bunker_uri(uri)
        self._remembered = client_secret is not None
        self._client = client_secret if client_secret is not None else SecretKey.generate()
        self.timeout = float(timeout)
        self.on_auth_url = on_auth_url
        #: Events that reached the subscription but answered no pending request (counted).
        self.ignored = 0
        self._relays = [
            RelayClient(url, secret=self._client, timeout=self.timeout) for url in self.uri.relays
        ]
        self._listening = asyncio.Event()
        self._pending: dict[str, asyncio.Future[Response]] = {}
        self._auth_url: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._user: PublicKey | None = None
        self._closed = False

    def __repr__(self) -> str:
        user = self._user.bech32 if self._user is not None else "not connected"
        return f"Nip46Signer({self.uri.remote_signer.hex}, relays={self.uri.relays!r}, {user})"

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        uri: BunkerUri | str,
        *,
        client_secret: SecretKey | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        on_auth_url: Callable[[str], None] | None = None,
    ) -> Nip46Signer:
        """A started signer (see :meth:`start`); closed again if starting fails."""
        signer = cls(uri, client_secret=client_secret, timeout=timeout, on_auth_url=on_auth_url)
        try:
            await signer.start()
        except BaseException:
            await signer.close()
            raise
        return signer

    async def start(self) -> None:
        """Subscribe on the bunker's relays, ``connect`` (with the URI's secret) and learn the
        user key (``get_public_key``).  Once started, a no-op."""
        if self._closed:
            raise SignerError("the NIP-46 signer is closed")
        if self._user is not None:
            return
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._listen(relay), name=f"nip46 {relay.url}")
                for relay in self._relays
            ]
        await self._until_listening()
        request = nip46.connect_request(self._new_id(), self.uri.remote_signer, self.uri.secret)
        try:
            response = await self._ask(request)
        except _Refused as refusal:
            # The secret is good for one connection: a bunker that remembers this client key
            # may refuse a second connect and still serve it, which a ping tells (get_public_key
            # does not: some bunkers answer it to anyone).
            if not self._remembered:
                raise
            try:
                await self.ping()
            except _Refused:
                raise refusal from None
        else:
            _usable(lambda: nip46.check_connect_result(response, self.uri.secret))
        self._user = await self._get_public_key()

    async def close(self) -> None:
        """Close the relays and stop listening; pending calls fail.  Safe to call twice."""
        self._closed = True
        for relay in self._relays:
            await relay.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SignerError("the NIP-46 signer was closed"))

    async def __aenter__(self) -> Nip46Signer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the Signer protocol ----------------------------------------------------------------

    @property
    def public_key(self) -> PublicKey:
        """The user key (``get_public_key``'s answer; it may differ from the remote-signer
        key).  Before :meth:`start` has learnt it: :class:`SignerError`."""
        if self._user is None:
            raise SignerError("the NIP-46 signer is not connected yet (no user key)")
        return self._user

    @property
    def client_public_key(self) -> PublicKey:
        """The client key this signer talks to the bunker with."""
        return self._client.public_key

    async def sign_event(self, unsigned: EventTemplate) -> Event:
        user = self.public_key
        response = await self._ask(nip46.sign_event_request(self._new_id(), unsigned))
        event = _usable(lambda: nip46.signed_event_result(response))
        return check_signed(event, unsigned, user)

    async def nip44_encrypt(self, peer: PublicKey, plaintext: str) -> str:
        return await self._text("nip44_encrypt", peer.hex, plaintext)

    async def nip44_decrypt(self, peer: PublicKey, payload: str) -> str:
        return await self._text("nip44_decrypt", peer.hex, payload)

    async def ping(self) -> None:
        """``ping``: the bunker answers ``pong`` within the timeout, else :class:`SignerError`."""
        if await self._text("ping") != "pong":
            raise SignerError("the remote signer answered ping with something else than pong")

    # -- requests ---------------------------------------------------------------------------

    def _new_id(self) -> str:
        return secrets.token_hex(16)

    async def _get_public_key(self) -> PublicKey:
        response = await self._ask(nip46.request(self._new_id(), "get_public_key"))
        return _usable(lambda: nip46.public_key_result(response))

    async def _text(self, method: nip46.Method, *params: str) -> str:
        response = await self._ask(nip46.request(self._new_id(), method, *params))
        text = _usable(lambda: nip46.text_result(response, method))
        if not text and method != "nip44_decrypt":
            raise SignerError(f"the remote signer answered {method} with nothing")
        return text

    async def _ask(self, request: Request) -> Response:
        """Send ``request`` and wait for its answer, bounded by the timeout."""
        if self._closed:
            raise SignerError("the NIP-46 signer is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        future: asyncio.Future[Response] = loop.create_future()
        self._pending[request.id] = future
        try:
            event = nip46.seal(
                request,
                sender=self._client,
                recipient=self.uri.remote_signer,
                created_at=int(time.time()),
            )
            await self._send(event, request.method, deadline)
            try:
                async with asyncio.timeout_at(deadline):
                    response = await future
            except TimeoutError:
                raise SignerError(self._silence(request.method)) from None
        finally:
            self._pending.pop(request.id, None)
        if (refusal := response.refusal) is not None:
            raise _Refused(f"the remote signer refused {request.method}: {_flat(refusal)}")
        return response

    async def _send(self, event: Event, method: str, deadline: float) -> None:
        """Publish a request on every relay; :class:`SignerError` when none takes it."""
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        verdicts = await asyncio.gather(
            *(relay.publish(event, timeout=remaining) for relay in self._relays)
        )
        if not any(v.ok for v in verdicts):
            why = "; ".join(f"{v.relay}: {_flat(v.reason)}" for v in verdicts)
            raise SignerError(f"no relay of the remote signer took the {method} request ({why})")

    def _silence(self, method: str) -> str:
        text = (
            f"the remote signer did not answer {method} within {self.timeout:g} s "
            f"(relays: {', '.join(self.uri.relays)})"
        )
        if self._auth_url is not None:
            text += f"; it asked for approval at {_flat(self._auth_url)}"
        return text

    # -- the subscription -------------------------------------------------------------------

    async def _listen(self, relay: RelayClient) -> None:
        flt = {
            "kinds": [nip46.KIND],
            "authors": [self.uri.remote_signer.hex],
            "#p": [self._client.public_key.hex],
            "since": int(time.time()),
        }
        async for event in relay.subscribe(flt, on_eose=self._listening.set):
            self._receive(event)

    async def _until_listening(self) -> None:
        """Until one relay's subscription is live (its EOSE): requests sent before it could be
        answered unseen, since relays keep no kind 24133 event."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._listening.wait()
        except TimeoutError:
            why = "; ".join(f"{r.url}: {r.last_error or 'no answer'}" for r in self._relays)
            raise SignerError(
                f"could not subscribe on any relay of the remote signer within "
                f"{self.timeout:g} s ({why})"
            ) from None

    def _receive(self, event: Event) -> None:
        try:
            response = nip46.open_response(
                event, recipient=self._client, remote_signer=self.uri.remote_signer
            )
        except Nip46Error:
            self.ignored += 1
            return
        future = self._pending.get(response.id)
        if future is None or future.done():
            self.ignored += 1  # a late or repeated answer (each relay delivers one)
            return
        if (url := response.auth_url) is not None:
            self._auth_url = url
            if self.on_auth_url is not None:
                self.on_auth_url(url)
            return  # the answer follows with the same id (NIP-46 "Auth Challenges")
        future.set_result(response)
