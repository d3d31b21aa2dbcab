"""``buzz decode`` and ``buzz encode``: NIP-19 entities to JSON and back (nak's verbs).

Values come from the arguments, or one per line on stdin when there are none; each result is
one line on stdout.  ``decode`` accepts a ``nostr:`` prefix (NIP-21).  Secret keys (``nsec``)
come only on stdin (the command line refuses them as arguments, which other users can see);
``decode`` and ``encode nsec`` then print one because the user asked for exactly that, as
``keys generate`` does; error messages never repeat one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from nostr_buzz.cli.common import describe_input, read_stdin_lines
from nostr_buzz.cli.kit import sub_app
from nostr_buzz.cli.options import argument, option
from nostr_buzz.cli.output import CliFailure, ExitCode, write_stdout
from nostr_buzz.errors import Nip19Error
from nostr_buzz.nips import nip19

encode_app = sub_app(
    "encode", "Encode a key or an event id as npub, nsec, note, nevent or nprofile."
)

Values = Annotated[
    list[str] | None,
    argument(
        "[VALUE]...",
        "64-hex values (a bech32 form of the same kind is accepted too); none: one per line "
        "from stdin.",
    ),
]
HintOption = Annotated[
    list[str] | None,
    option("--relay", metavar="URL", help="A relay hint to put in the code; repeatable."),
]


def _values(given: Sequence[str] | None, what: str) -> list[str]:
    return [v.strip() for v in given] if given else [v.strip() for v in read_stdin_lines(what)]


def decoded_json(code: str) -> dict[str, Any]:
    """One NIP-19 code as a JSON object with its ``type``."""
    text = code.strip()
    if text.lower().startswith("nostr:"):
        text = text[len("nostr:") :]
    try:
        hrp, value = nip19.decode(text)
    except Nip19Error as exc:
        raise CliFailure(
            ExitCode.BAD_INPUT, f"cannot decode {describe_input(text)}: {exc}"
        ) from None
    if isinstance(value, nip19.EventPointer):
        return {
            "type": hrp,
            "id": value.id,
            "relays": list(value.relays),
            "author": value.author,
            "kind": value.kind,
        }
    if isinstance(value, nip19.ProfilePointer):
        return {"type": hrp, "pubkey": value.pubkey, "relays": list(value.relays)}
    field = {"npub": "pubkey", "nsec": "secret_key", "note": "id"}[hrp]
    return {"type": hrp, field: value}


def decode_command(
    codes: Annotated[
        list[str] | None,
        argument(
            "[CODE]...",
            "npub1…, nsec1…, note1…, nevent1… or nprofile1… (nostr: prefix allowed); none: one "
            "per line from stdin.",
        ),
    ] = None,
) -> None:
    """Decode NIP-19 codes (npub, nsec, note, nevent, nprofile) to JSON, one line each."""
    lines = [json.dumps(decoded_json(c)) + "\n" for c in _values(codes, "code")]
    write_stdout("".join(lines))


def _as_hex(value: str, accepted: Sequence[str], what: str) -> str:
    """A 64-hex value, or the same value in one of its ``accepted`` bech32 forms."""
    if len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        hrp, decoded = nip19.decode(value)
    except Nip19Error:
        hrp, decoded = "", None
    if hrp in accepted:
        if isinstance(decoded, nip19.EventPointer):
            return decoded.id
        if isinstance(decoded, nip19.ProfilePointer):
            return decoded.pubkey
        if isinstance(decoded, str):
            return decoded
    raise CliFailure(
        ExitCode.BAD_INPUT,
        f"{describe_input(value)} is not {what} (64 hex characters"
        + (f" or {'/'.join(accepted)}" if accepted else "")
        + ")",
    )


def _encode_each(values: Sequence[str], one: Callable[[str], str]) -> None:
    out = []
    for value in values:
        try:
            out.append(one(value) + "\n")
        except Nip19Error as exc:
            raise CliFailure(ExitCode.BAD_INPUT, str(exc)) from None
    write_stdout("".join(out))


def _check_public_key(hex_key: str) -> str:
    from nostr_buzz.errors import InvalidKey
    from nostr_buzz.keys import PublicKey

    try:
        return PublicKey.from_str(hex_key).hex
    except InvalidKey as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"not a valid public key: {exc}") from None


@encode_app.command("npub")
def encode_npub(values: Values = None) -> None:
    """A public key as npub."""
    keys = [
        _check_public_key(_as_hex(v, ("npub", "nprofile"), "a public key"))
        for v in _values(values, "public key")
    ]
    _encode_each(keys, lambda k: nip19.encode("npub", k))


@encode_app.command("nsec")
def encode_nsec(values: Values = None) -> None:
    """A secret key as nsec, read from stdin (printed on stdout: keep it secret).

    A secret key given as an argument is refused: other users of the machine can read the
    arguments of a running process.
    """
    from nostr_buzz.errors import InvalidKey
    from nostr_buzz.keys import SecretKey

    keys = []
    for value in _values(values, "secret key"):
        try:
            keys.append(SecretKey.from_str(value).bech32)
        except InvalidKey as exc:
            raise CliFailure(ExitCode.BAD_INPUT, f"not a valid secret key: {exc}") from None
    write_stdout("".join(k + "\n" for k in keys))


@encode_app.command("note")
def encode_note(values: Values = None) -> None:
    """An event id as note."""
    ids = [_as_hex(v, ("note", "nevent"), "an event id") for v in _values(values, "event id")]
    _encode_each(ids, lambda i: nip19.encode("note", i))


@encode_app.command("nevent")
def encode_nevent(
    values: Values = None,
    relay: HintOption = None,
    author: Annotated[
        str | None,
        typer.Option("--author", metavar="KEY", help="The author's public key (hex or npub)."),
    ] = None,
    kind: Annotated[
        int | None, typer.Option("--kind", metavar="KIND", min=0, help="The event's kind.")
    ] = None,
) -> None:
    """An event id with relay, author and kind hints as nevent."""
    ids = [_as_hex(v, ("note", "nevent"), "an event id") for v in _values(values, "event id")]
    by = (
        _check_public_key(_as_hex(author, ("npub", "nprofile"), "a public key")) if author else None
    )
    _encode_each(
        ids, lambda i: nip19.encode("nevent", i, relays=list(relay or ()), author=by, kind=kind)
    )


@encode_app.command("nprofile")
def encode_nprofile(values: Values = None, relay: HintOption = None) -> None:
    """A public key with relay hints as nprofile."""
    keys = [
        _check_public_key(_as_hex(v, ("npub", "nprofile"), "a public key"))
        for v in _values(values, "public key")
    ]
    _encode_each(keys, lambda k: nip19.encode("nprofile", k, relays=list(relay or ())))
