"""Events and keys to and from the other Python Nostr libraries: nostr-sdk (``nostr_sdk``, the
rust-nostr bindings; ``pip install 'nostr-buzz[relay]'`` or ``pip install nostr-sdk``) and
pynostr (a dependency of the library, for bech32).

Neither is needed to import this module: each is imported when a function that makes its
objects is called, and a missing one raises :class:`ImportError` saying what to install.
Converting *from* a library needs only the object in hand.

An event from another library becomes a nostr-buzz :class:`~nostr_buzz.event.Event` through
:meth:`Event.from_dict` or :meth:`Event.from_json`: its id is recomputed and its signature
checked, so what another library built but never signed or verified is refused here
(:class:`~nostr_buzz.errors.InvalidEvent`), never passed on.  Keys are converted through their
64-hex form; no error message shows a secret key.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Final

from nostr_buzz.errors import InvalidEvent, InvalidKey
from nostr_buzz.event import Event
from nostr_buzz.keys import PublicKey, SecretKey

__all__ = [
    "event_from_nostr_sdk",
    "event_from_pynostr",
    "event_to_nostr_sdk",
    "event_to_pynostr",
    "public_key_from_nostr_sdk",
    "public_key_from_pynostr",
    "public_key_to_nostr_sdk",
    "public_key_to_pynostr",
    "secret_key_from_nostr_sdk",
    "secret_key_from_pynostr",
    "secret_key_to_nostr_sdk",
    "secret_key_to_pynostr",
]

#: What to install for each library, in the words of the ImportError.
_INSTALL: Final = {
    "nostr_sdk": "nostr-sdk is not installed: pip install 'nostr-buzz[relay]' (or nostr-sdk)",
    "pynostr": "pynostr is not installed: pip install pynostr",
}


def _library(name: str) -> ModuleType:
    """``name`` (``nostr_sdk``, ``pynostr.event``, …) imported, or ImportError saying what to
    install."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportError(_INSTALL[name.split(".")[0]]) from None


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_from(value: object, library: str, *names: str) -> bool:
    """``value`` is one of the classes ``names`` of ``library`` (a secret and a public key of
    one library both have a hex form: the class tells them apart)."""
    kind = type(value)
    return kind.__module__.split(".")[0] == library and kind.__name__ in names


# --- nostr-sdk ---------------------------------------------------------------------------------


def event_from_nostr_sdk(event: Any) -> Event:
    """A ``nostr_sdk.Event`` as a verified :class:`Event` (id and signature checked again)."""
    if not _is_from(event, "nostr_sdk", "Event"):
        raise InvalidEvent("malformed", f"expected a nostr_sdk.Event, got {_type_name(event)}")
    return Event.from_json(event.as_json())


def event_to_nostr_sdk(event: Event) -> Any:
    """An :class:`Event` as a ``nostr_sdk.Event``."""
    if not isinstance(event, Event):
        raise InvalidEvent("malformed", f"expected a nostr_buzz Event, got {_type_name(event)}")
    return _library("nostr_sdk").Event.from_json(event.to_json())


def secret_key_from_nostr_sdk(key: Any) -> SecretKey:
    """A ``nostr_sdk.SecretKey`` (or the secret of a ``nostr_sdk.Keys``) as a :class:`SecretKey`."""
    if _is_from(key, "nostr_sdk", "Keys"):
        key = key.secret_key()
    if not _is_from(key, "nostr_sdk", "SecretKey"):
        raise InvalidKey(f"expected a nostr_sdk.SecretKey or Keys, got {_type_name(key)}")
    return SecretKey.from_str(key.to_hex())


def secret_key_to_nostr_sdk(key: SecretKey) -> Any:
    """A :class:`SecretKey` as a ``nostr_sdk.SecretKey`` (``nostr_sdk.Keys(it)`` signs)."""
    if not isinstance(key, SecretKey):
        raise InvalidKey(f"expected a nostr_buzz SecretKey, got {_type_name(key)}")
    return _library("nostr_sdk").SecretKey.parse(key.hex)


def public_key_from_nostr_sdk(key: Any) -> PublicKey:
    """A ``nostr_sdk.PublicKey`` as a :class:`PublicKey`."""
    if not _is_from(key, "nostr_sdk", "PublicKey"):
        raise InvalidKey(f"expected a nostr_sdk.PublicKey, got {_type_name(key)}")
    return PublicKey.from_str(key.to_hex())


def public_key_to_nostr_sdk(key: PublicKey) -> Any:
    """A :class:`PublicKey` as a ``nostr_sdk.PublicKey``."""
    if not isinstance(key, PublicKey):
        raise InvalidKey(f"expected a nostr_buzz PublicKey, got {_type_name(key)}")
    return _library("nostr_sdk").PublicKey.parse(key.hex)


# --- pynostr -----------------------------------------------------------------------------------


def event_from_pynostr(event: Any) -> Event:
    """A ``pynostr.event.Event`` as a verified :class:`Event`: one pynostr made but never
    signed, or whose fields were changed after signing, raises
    :class:`~nostr_buzz.errors.InvalidEvent`."""
    if not _is_from(event, "pynostr", "Event"):
        raise InvalidEvent("malformed", f"expected a pynostr Event, got {_type_name(event)}")
    fields = event.to_dict()
    kind = fields.get("kind")
    if isinstance(kind, int):  # pynostr's EventKind is an IntEnum: the wire has the number
        fields["kind"] = int(kind)
    return Event.from_dict(fields)


def event_to_pynostr(event: Event) -> Any:
    """An :class:`Event` as a ``pynostr.event.Event``."""
    if not isinstance(event, Event):
        raise InvalidEvent("malformed", f"expected a nostr_buzz Event, got {_type_name(event)}")
    fields = event.to_dict()
    converted = _library("pynostr.event").Event.from_dict(fields)
    converted.id = fields["id"]
    return converted


def secret_key_from_pynostr(key: Any) -> SecretKey:
    """A ``pynostr.key.PrivateKey`` as a :class:`SecretKey`."""
    if not _is_from(key, "pynostr", "PrivateKey"):
        raise InvalidKey(f"expected a pynostr PrivateKey, got {_type_name(key)}")
    return SecretKey.from_str(key.hex())


def secret_key_to_pynostr(key: SecretKey) -> Any:
    """A :class:`SecretKey` as a ``pynostr.key.PrivateKey``."""
    if not isinstance(key, SecretKey):
        raise InvalidKey(f"expected a nostr_buzz SecretKey, got {_type_name(key)}")
    return _library("pynostr.key").PrivateKey.from_hex(key.hex)


def public_key_from_pynostr(key: Any) -> PublicKey:
    """A ``pynostr.key.PublicKey`` as a :class:`PublicKey`."""
    if not _is_from(key, "pynostr", "PublicKey"):
        raise InvalidKey(f"expected a pynostr PublicKey, got {_type_name(key)}")
    return PublicKey.from_str(key.hex())


def public_key_to_pynostr(key: PublicKey) -> Any:
    """A :class:`PublicKey` as a ``pynostr.key.PublicKey``."""
    if not isinstance(key, PublicKey):
        raise InvalidKey(f"expected a nostr_buzz PublicKey, got {_type_name(key)}")
    return _library("pynostr.key").PublicKey.from_hex(key.hex)
