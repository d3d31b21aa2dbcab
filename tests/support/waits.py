"""Bounded waits on conditions (never a bare sleep as synchronisation)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def wait_for(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Poll a condition the code under test exposes no event for (a subprocess's log file, a
    counter); bounded.  Returns the first true value; a timeout says what it waited for."""
    deadline = time.monotonic() + timeout
    while not (found := pred()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return found


async def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    """``wait_for`` without a description."""
    await wait_for(predicate, "the condition", timeout)
