"""Relay URLs: the one check every relay URL passes (config, relay hints, the relay client)
and the comparison form used to tell whether two URLs name the same relay.  Pure."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit, urlunsplit

from nostr_buzz.errors import RelayError, describe_input

__all__ = ["check_relay_url", "normalize_relay_url", "same_relay"]

_DEFAULT_PORTS: Final = {"ws": 80, "wss": 443}


def _shown(text: str) -> str:
    """A URL for an error message; a secret key pasted in the wrong place is never repeated."""
    return describe_input(text, limit=100)


def check_relay_url(url: str) -> str:
    """Return ``url`` stripped if it is a usable ``ws://`` or ``wss://`` URL, else raise."""
    if not isinstance(url, str):
        raise RelayError("a relay URL must be a string")
    text = url.strip()
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        raise RelayError(f"not a valid relay URL: {_shown(text)}") from None
    if parts.scheme.lower() not in _DEFAULT_PORTS:
        raise RelayError(f"relay URL must start with ws:// or wss://: {_shown(text)}")
    if not parts.hostname:
        raise RelayError(f"relay URL has no host: {_shown(text)}")
    return text


def normalize_relay_url(url: str) -> str:
    """A comparison form: lowercase scheme and host, default port and a bare ``/`` path dropped.

    ``WSS://Relay.Example:443/`` and ``wss://relay.example`` normalize alike; the query string is
    kept because some relays route on it.
    """
    parts = urlsplit(check_relay_url(url))
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    port = parts.port
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    path = parts.path.rstrip("/")
    return urlunsplit((scheme, netloc, path, parts.query, ""))


def same_relay(a: str, b: str) -> bool:
    """True when two relay URLs name the same relay (after :func:`normalize_relay_url`)."""
    return normalize_relay_url(a) == normalize_relay_url(b)
