"""NIP-46 remote signing, pure: connection URIs and the kind 24133 request and response messages.

A *remote signer* ("bunker") holds the user's key and answers a *client* over relays: the
client sends kind 24133 events p-tagged to the remote-signer key, their content a NIP-44 v2
encrypted JSON request ``{"id", "method", "params"}``; the signer answers with kind 24133
events p-tagged to the client key, their content an encrypted ``{"id", "result", "error"}``.

Three keys take part: the *client key* (made by the client, disposable), the *remote-signer
key* (the bunker's, named in its ``bunker://`` URI: requests are encrypted to it) and the *user
key* (the one events are signed with, learnt with ``get_public_key``; it may differ from the
remote-signer key).

``bunker://<remote-signer-pubkey>?relay=…&relay=…&secret=…`` is the connection a bunker hands
out; ``nostrconnect://<client-pubkey>?relay=…&secret=…&perms=…&name=…`` the one a client hands
a bunker.  The secret in either is a credential: the parsed URIs never show it in their repr,
and no error repeats it (nor any part of the URI: it may sit anywhere in a mangled one).
``connect`` is answered ``"ack"`` or with the secret itself (NIP-46 allows both).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Final, Literal
from urllib.parse import parse_qsl

import msgspec

from nostr_buzz.errors import InvalidEvent, InvalidKey, Nip44Error, Nip46Error, RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.nips.relay_url import check_relay_url, normalize_relay_url
from nostr_buzz.signer import EventTemplate

__all__ = [
    "KIND",
    "BunkerUri",
    "Method",
    "NostrConnectUri",
    "Request",
    "Response",
    "check_connect_result",
    "connect_request",
    "decode_request",
    "decode_response",
    "encode_message",
    "open_request",
    "open_response",
    "parse_bunker_uri",
    "parse_nostrconnect_uri",
    "parse_uri",
    "public_key_result",
    "request",
    "seal",
    "sign_event_request",
    "signed_event_result",
    "text_result",
]

#: The kind of every NIP-46 request and response event (ephemeral: relays do not store it).
KIND: Final = 24133
#: Longest connection URI accepted (a real one is a few hundred characters).
MAX_URI_LENGTH: Final = 8192
#: Relays one URI may name; more are refused rather than each becoming a connection.
MAX_RELAYS: Final = 16
#: Longest connection secret accepted.
MAX_SECRET_LENGTH: Final = 512
#: Longest request id accepted in a message (ids this client makes are 32 characters).
MAX_ID_LENGTH: Final = 128
#: What a client tells a bunker about itself in ``connect`` (NIP-46 "Client metadata").
CLIENT_METADATA: Final = '{"name":"nostr-buzz"}'

Method = Literal[
    "connect",
    "sign_event",
    "ping",
    "get_public_key",
    "nip04_encrypt",
    "nip04_decrypt",
    "nip44_encrypt",
    "nip44_decrypt",
    "switch_relays",
    "logout",
]

_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")
_HIDDEN: Final = "<hidden>"


# --- connection URIs ------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class BunkerUri:
    """A parsed ``bunker://`` URI: the remote-signer key, its relays and the optional
    single-use connection secret (never shown by ``repr``/``str``)."""

    remote_signer: PublicKey
    relays: tuple[str, ...]
    secret: str | None = None

    def __repr__(self) -> str:
        secret = _HIDDEN if self.secret is not None else None
        return f"BunkerUri({self.remote_signer.hex}, relays={self.relays!r}, secret={secret})"

    __str__ = __repr__


@dataclass(frozen=True, repr=False)
class NostrConnectUri:
    """A parsed ``nostrconnect://`` URI: the client key, the relays it listens on, the secret
    the bunker must return (never shown by ``repr``/``str``), and what the client asks for."""

    client: PublicKey
    relays: tuple[str, ...]
    secret: str
    perms: tuple[str, ...] = ()
    name: str | None = None
    url: str | None = None
    image: str | None = None

    def __repr__(self) -> str:
        return (
            f"NostrConnectUri({self.client.hex}, relays={self.relays!r}, secret={_HIDDEN}, "
            f"perms={self.perms!r}, name={self.name!r})"
        )

    __str__ = __repr__


def parse_uri(text: str) -> BunkerUri | NostrConnectUri:
    """A ``bunker://`` or ``nostrconnect://`` URI, by its scheme."""
    if isinstance(text, str) and text.strip().lower().startswith("nostrconnect://"):
        return parse_nostrconnect_uri(text)
    return parse_bunker_uri(text)


def parse_bunker_uri(text: str) -> BunkerUri:
    """``bunker://<remote-signer-pubkey>?relay=wss://…[&relay=…][&secret=…]``: at least one
    relay; unknown parameters are ignored; :class:`Nip46Error` says what is wrong."""
    key, params = _split_uri(text, "bunker", "the remote-signer key")
    relays = _relays(params.get("relay", []))
    secret = _secret(params.get("secret", []), required=False)
    return BunkerUri(key, relays, secret)


def parse_nostrconnect_uri(text: str) -> NostrConnectUri:
    """``nostrconnect://<client-pubkey>?relay=…&secret=…[&perms=a,b][&name=…][&url=…]``."""
    key, params = _split_uri(text, "nostrconnect", "the client key")
    relays = _relays(params.get("relay", []))
    secret = _secret(params.get("secret", []), required=True)
    assert secret is not None
    perms = tuple(p.strip() for v in params.get("perms", []) for p in v.split(",") if p.strip())
    name, url, image = (_single(params, field) for field in ("name", "url", "image"))
    return NostrConnectUri(key, relays, secret, perms, name, url, image)


def _split_uri(text: object, scheme: str, what: str) -> tuple[PublicKey, dict[str, list[str]]]:
    """The URI's key and its query parameters (name → values in order)."""
    if not isinstance(text, str):
        raise Nip46Error("bad_uri", f"a {scheme}:// URI must be a string")
    text = text.strip()
    if len(text) > MAX_URI_LENGTH:
        raise Nip46Error("bad_uri", f"the {scheme}:// URI is longer than {MAX_URI_LENGTH}")
    prefix = f"{scheme}://"
    if text[: len(prefix)].lower() != prefix:
        raise Nip46Error("bad_uri", f"expected a URI starting with {prefix}")
    head, _, query = text[len(prefix) :].partition("?")
    if "#" in query:
        raise Nip46Error("bad_uri", f"a {scheme}:// URI has no fragment (#…)")
    key_text = head.rstrip("/")
    if not _HEX64.fullmatch(key_text):
        raise Nip46Error("bad_pubkey", f"{what} must be 64 hex characters")
    try:
        key = PublicKey(bytes.fromhex(key_text))
    except InvalidKey:
        raise Nip46Error("bad_pubkey", f"{what} is not a point on secp256k1") from None
    try:
        pairs = parse_qsl(
            query,
            keep_blank_values=True,
            strict_parsing=bool(query),
            errors="strict",
            max_num_fields=4 * MAX_RELAYS,
        )
    except ValueError:  # a bad pair, bad percent-encoding (UnicodeDecodeError) or too many
        raise Nip46Error("bad_uri", f"the {scheme}:// URI's query is malformed") from None
    params: dict[str, list[str]] = {}
    for name, value in pairs:
        params.setdefault(name, []).append(value)
    return key, params


def _relays(values: list[str]) -> tuple[str, ...]:
    if not values:
        raise Nip46Error("bad_relay", "the URI names no relay (relay=wss://…)")
    if len(values) > MAX_RELAYS:
        raise Nip46Error("bad_relay", f"the URI names more than {MAX_RELAYS} relays")
    found: dict[str, str] = {}
    for i, value in enumerate(values, 1):
        try:
            url = check_relay_url(value)
        except RelayError:
            raise Nip46Error("bad_relay", f"relay {i} is not a ws:// or wss:// URL") from None
        found.setdefault(normalize_relay_url(url), url)
    return tuple(found.values())


def _secret(values: list[str], *, required: bool) -> str | None:
    if len(values) > 1:
        raise Nip46Error("bad_secret", "the URI gives the secret more than once")
    secret = values[0] if values else ""
    if not secret:
        if required:
            raise Nip46Error("bad_secret", "the URI has no secret (secret=…)")
        return None
    if len(secret) > MAX_SECRET_LENGTH:
        raise Nip46Error("bad_secret", f"the secret is longer than {MAX_SECRET_LENGTH}")
    if not secret.isprintable():
        raise Nip46Error("bad_secret", "the secret holds control characters")
    return secret


def _single(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name, [])
    if len(values) > 1:
        raise Nip46Error("bad_uri", f"the URI gives {name} more than once")
    return values[0] if values and values[0] else None


# --- messages -------------------------------------------------------------------------------

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_LENGTH)]


class Request(msgspec.Struct, frozen=True):
    """A client's request.  Its repr leaves the parameters out (a secret, a plaintext)."""

    id: _Id
    method: str
    params: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Request(id={self.id!r}, method={self.method!r}, params=<{len(self.params)}>)"


class Response(msgspec.Struct, frozen=True, omit_defaults=True):
    """A remote signer's answer to the request ``id``.  A non-empty ``error`` is a refusal,
    except for an *auth challenge* (``result`` ``"auth_url"``, ``error`` the URL to visit),
    after which the real answer comes with the same id.  Its repr leaves the result out (a
    plaintext, a signed event)."""

    id: _Id
    result: str | None = None
    error: str | None = None

    @property
    def auth_url(self) -> str | None:
        """The URL of an auth challenge, else ``None``."""
        return self.error if self.result == "auth_url" and self.error else None

    @property
    def refusal(self) -> str | None:
        """The error text of a refusal (not of an auth challenge), else ``None``."""
        return self.error if self.error and self.auth_url is None else None

    def __repr__(self) -> str:
        shown = None if self.result is None else f"<{len(self.result)} characters>"
        return f"Response(id={self.id!r}, result={shown}, error={self.error!r})"


_encode = msgspec.json.Encoder().encode
_decode_request = msgspec.json.Decoder(Request).decode
_decode_response = msgspec.json.Decoder(Response).decode


def encode_message(message: Request | Response) -> str:
    """The JSON text of a request or a response (what NIP-44 encrypts)."""
    return _encode(message).decode("utf-8")


def decode_request(text: str) -> Request:
    """A request from its JSON text; :class:`Nip46Error` ``malformed_message`` naming the path
    that failed (msgspec names paths and types, never values)."""
    try:
        return _decode_request(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise Nip46Error("malformed_message", f"not a NIP-46 request: {exc}") from None


def decode_response(text: str) -> Response:
    """A response from its JSON text (strict types: a number is not a string)."""
    try:
        return _decode_response(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise Nip46Error("malformed_message", f"not a NIP-46 response: {exc}") from None


def request(request_id: str, method: Method, *params: str) -> Request:
    return Request(request_id, method, params)


def connect_request(
    request_id: str, remote_signer: PublicKey, secret: str | None, perms: Sequence[str] = ()
) -> Request:
    """``connect``: the remote-signer key, the secret (``""`` for none), the permissions asked
    for, and this client's metadata."""
    return request(
        request_id, "connect", remote_signer.hex, secret or "", ",".join(perms), CLIENT_METADATA
    )


def sign_event_request(request_id: str, unsigned: EventTemplate) -> Request:
    """``sign_event`` of ``{kind, content, tags, created_at}``."""
    return request(request_id, "sign_event", _encode(unsigned).decode("utf-8"))


# --- the kind 24133 envelope ----------------------------------------------------------------


def seal(
    message: Request | Response, *, sender: SecretKey, recipient: PublicKey, created_at: int
) -> Event:
    """``message`` NIP-44 encrypted from ``sender`` to ``recipient`` in a signed kind 24133
    event p-tagging the recipient."""
    content = nip44.encrypt(encode_message(message), nip44.conversation_key(sender, recipient))
    return sign_event(
        sender, kind=KIND, content=content, tags=(("p", recipient.hex),), created_at=created_at
    )


def _open(event: Event, recipient: SecretKey, sender: PublicKey) -> str:
    if event.kind != KIND:
        raise Nip46Error("not_a_response", f"kind {event.kind} is not NIP-46's {KIND}")
    if event.pubkey != sender.hex:
        raise Nip46Error("not_a_response", "the event is not by the expected key")
    if recipient.public_key.hex not in event.tag_values("p"):
        raise Nip46Error("not_a_response", "the event is not p-tagged to this key")
    try:
        return nip44.decrypt(event.content, nip44.conversation_key(recipient, sender))
    except Nip44Error as exc:
        raise Nip46Error("undecryptable", str(exc)) from None


def open_response(event: Event, *, recipient: SecretKey, remote_signer: PublicKey) -> Response:
    """The response in ``event``, which must be kind 24133 by ``remote_signer`` p-tagging the
    client key ``recipient``; anything else is a :class:`Nip46Error`."""
    return decode_response(_open(event, recipient, remote_signer))


def open_request(event: Event, *, recipient: SecretKey) -> Request:
    """The request in ``event`` (the remote signer's side: ``recipient`` is its key)."""
    return decode_request(_open(event, recipient, PublicKey(bytes.fromhex(event.pubkey))))


# --- results --------------------------------------------------------------------------------


def text_result(response: Response, method: str) -> str:
    """A string result (``nip44_encrypt``'s payload, ``nip44_decrypt``'s plaintext, …)."""
    if response.result is None:
        raise Nip46Error("bad_result", f"the answer to {method} has no result")
    return response.result


def check_connect_result(response: Response, secret: str | None) -> None:
    """``connect`` succeeded: the result is ``"ack"`` or the secret that was sent."""
    result = text_result(response, "connect")
    if result == "ack":
        return
    if secret is not None and hmac.compare_digest(result.encode(), secret.encode()):
        return
    raise Nip46Error("bad_result", 'connect was answered with neither "ack" nor the secret')


def public_key_result(response: Response) -> PublicKey:
    """``get_public_key``'s result: the user key, 64 hex characters."""
    text = text_result(response, "get_public_key")
    if not _HEX64.fullmatch(text):
        raise Nip46Error("bad_result", "get_public_key did not answer a hex public key")
    try:
        return PublicKey(bytes.fromhex(text))
    except InvalidKey:
        raise Nip46Error("bad_result", "get_public_key answered a key off the curve") from None


def signed_event_result(response: Response) -> Event:
    """``sign_event``'s result: a signed event, verified (id and signature); whether it is the
    event that was asked for is :func:`nostr_buzz.signer.check_signed`'s question."""
    try:
        return Event.from_json(text_result(response, "sign_event"))
    except InvalidEvent as exc:
        raise Nip46Error("bad_result", f"the signed event is invalid ({exc.reason})") from None
