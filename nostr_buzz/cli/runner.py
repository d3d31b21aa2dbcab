"""The event loop each ``buzz`` command runs its async body on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class _UnjoinedExecutor(ThreadPoolExecutor):
    """The event loop's default executor, whose blocking calls run in daemon threads that
    nobody waits for.

    The loop resolves relay host names (``getaddrinfo``) in its default executor.  A lookup
    cannot be cancelled, and ``asyncio.run`` and interpreter exit both join executor threads,
    so a stalled DNS server would hold the command well past ``--timeout`` (docs/cli.md).  The
    caller has already given up on such a lookup, so its thread is simply left behind.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the awaiting caller, as an executor does
                future.set_exception(exc)
            else:
                future.set_result(result)

        threading.Thread(target=work, name="buzz-blocking", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None  # nothing pooled; running lookups are abandoned, not joined


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's async body to completion on a fresh event loop."""
    with asyncio.Runner() as runner:
        runner.get_loop().set_default_executor(_UnjoinedExecutor())
        return runner.run(coro)
