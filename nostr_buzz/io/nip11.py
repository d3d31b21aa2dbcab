"""A relay's own public key from its NIP-11 information document.

``GET`` the relay's URL over HTTP(S) with ``Accept: application/nostr+json``; the document's
``self`` (the relay's own key, newer NIP-11) or else ``pubkey`` names the key a NIP-29 relay
signs group metadata with.  Bounded: one request, the timeout, at most 64 KiB read; any problem
means "no key" (the relay's metadata is then simply not trusted).
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from typing import Final

__all__ = ["relay_public_key"]

MAX_DOCUMENT_BYTES: Final = 64 << 10
_HEX64: Final = re.compile(r"[0-9a-f]{64}")


def _http_url(relay_url: str) -> str | None:
    lowered = relay_url.lower()
    if lowered.startswith("wss://"):
        return "https://" + relay_url[6:]
    if lowered.startswith("ws://"):
        return "http://" + relay_url[5:]
    return None


def _fetch(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/nostr+json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data: bytes = response.read(MAX_DOCUMENT_BYTES + 1)
    return data


async def relay_public_key(relay_url: str, *, timeout: float = 5.0) -> str | None:
    """The relay's own key (lowercase hex) as its NIP-11 document announces it, or None."""
    url = _http_url(relay_url)
    if url is None:
        return None
    try:
        async with asyncio.timeout(timeout + 1):
            data = await asyncio.to_thread(_fetch, url, timeout)
    except (OSError, TimeoutError, ValueError):
        return None
    if len(data) > MAX_DOCUMENT_BYTES:
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    for field in ("self", "pubkey"):
        value = document.get(field)
        if isinstance(value, str) and _HEX64.fullmatch(value):
            return value
    return None
