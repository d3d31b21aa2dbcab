"""Bounded waits on conditions (never a bare sleep as synchronisation)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    """Poll a condition the code under test exposes no event for; bounded."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
