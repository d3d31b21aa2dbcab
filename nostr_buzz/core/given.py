"""Values given in Python to a public constructor: checked, and put in one form, where given.

A public key may be written as 64 hex digits, ``npub1…`` or a :class:`~nostr_buzz.keys.
PublicKey` wherever one is taken; the constructor keeps the form its code compares (hex), so
an npub never silently differs from the hex of the same key.  A collection given as one string
is refused: a string is iterable, and a relay list ``"wss://…"`` would otherwise be read as its
characters.  Every error names the field and what was given (a type, or a value cut short and
never when it may be a secret key), in the error class of the constructor that checks it.

``buzz.toml`` values take the same checks (``nostr_buzz.config``, ``core/choices.py``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nostr_buzz.errors import BuzzError, ConfigError, InvalidKey, RelayError, describe_input
from nostr_buzz.keys import PublicKey, as_public_key
from nostr_buzz.nips.relay_url import check_relay_url

__all__ = [
    "given_bool",
    "given_ints",
    "given_key",
    "given_key_set",
    "given_relays",
    "given_strings",
    "shown",
]

_Error = type[BuzzError]


def shown(value: object) -> str:
    """What was given, for an error: its type, and a string cut short (never a secret)."""
    if isinstance(value, str):
        return f"the str {describe_input(value, limit=40, hex_may_be_secret=True)}"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    kind = type(value)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__} itself"
    return f"a {module}{kind.__qualname__}"


def given_key(value: object, where: str, error: _Error = ConfigError) -> PublicKey:
    """``value`` (hex, ``npub1…`` or a :class:`PublicKey`) as a :class:`PublicKey`."""
    if not isinstance(value, (str, PublicKey)):
        expected = "a public key (hex, npub1… or PublicKey)"
        raise error(f"{where}: expected {expected}, got {shown(value)}")
    try:
        return as_public_key(value, where)
    except InvalidKey as exc:
        raise error(str(exc)) from None


def given_key_set(values: object, where: str, error: _Error = ConfigError) -> frozenset[str]:
    """A collection of public keys (each hex, ``npub1…`` or a :class:`PublicKey`) as hex."""
    items = _collection(values, where, "public keys", error)
    return frozenset(given_key(v, f"{where}[{i}]", error).hex for i, v in enumerate(items))


def given_strings(values: object, where: str, error: _Error = ConfigError) -> tuple[str, ...]:
    """A collection of strings, kept in order (a single string is refused)."""
    items = _collection(values, where, "strings", error)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise error(f"{where}[{i}]: expected a str, got {shown(item)}")
    return tuple(items)


def given_relays(values: object, where: str, error: _Error = ConfigError) -> tuple[str, ...]:
    """Relay URLs (``ws://``/``wss://``), each checked, repeats dropped."""
    urls = _collection(values, where, "relay URLs", error)
    seen: dict[str, None] = {}
    for i, url in enumerate(urls):
        try:
            seen.setdefault(check_relay_url(url), None)
        except RelayError as exc:
            raise error(f"{where}[{i}]: {exc} (got {shown(url)})") from None
    return tuple(seen)


def given_ints(
    values: object, where: str, error: _Error = ConfigError, low: int = 0, high: int = 65535
) -> tuple[int, ...]:
    """Integers from ``low`` to ``high`` (event kinds by default); a bool is no integer."""
    items = _collection(values, where, "integers", error)
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
            raise error(f"{where}[{i}]: expected an integer {low}–{high}, got {shown(item)}")
    return tuple(items)


def given_bool(value: object, where: str, error: _Error = ConfigError) -> bool:
    if not isinstance(value, bool):
        raise error(f"{where}: expected True or False, got {shown(value)}")
    return value


def _collection(values: object, where: str, what: str, error: _Error) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        hint = " (one of them? give it in a tuple: (value,))" if isinstance(values, str) else ""
        raise error(f"{where}: expected a collection of {what}, got {shown(values)}{hint}")
    if isinstance(values, dict):
        raise error(f"{where}: expected a collection of {what}, got {shown(values)}")
    return list(values)
