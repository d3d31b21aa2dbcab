"""Headless Chromium driven over the DevTools protocol, for tests that render a page.

``async with chromium(tmp) as browser: page = await browser.open(path)`` loads a file in a
fresh tab and returns what the page said on its console (``Runtime.consoleAPICalled``,
``Runtime.exceptionThrown``, ``Log.entryAdded``); ``browser.evaluate(js)`` runs an expression
in it and ``browser.screenshot(png)`` keeps the whole page as a PNG.  Chromium listens on
127.0.0.1 only, on a port it picks (read from its ``DevTools listening on`` line), with a
throwaway profile.  Debian's ``chromium`` comes from ``make browser`` (run by ``make test``);
without it the test fails and says so, it never skips.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

WAIT = 20.0  # bound on starting Chromium and on any one protocol call
_LISTENING = re.compile(rb"DevTools listening on (ws://127\.0\.0\.1:[0-9]+/\S+)")


def chromium_path() -> str:
    """Chromium's path; an AssertionError naming the fix when it is not installed."""
    path = shutil.which("chromium")
    if path is None:
        raise AssertionError(
            "chromium is not on PATH: run `make browser` (Debian's chromium package, "
            "apt-get install -y chromium), which `make test` does first"
        )
    return path


@dataclass
class PageLoad:
    """What the page wrote on its console while it loaded: errors and every other message."""

    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


class Browser:
    """One tab of a running Chromium, on one DevTools connection (flat sessions)."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())
        self._session: str | None = None

    async def _read(self) -> None:
        try:
            async for frame in self._socket:
                message = json.loads(frame)
                future = self._pending.pop(message.get("id", -1), None)
                if future is not None and not future.done():
                    future.set_result(message)
                elif "method" in message:
                    self._events.put_nowait(message)
        except ConnectionClosed:
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("DevTools connection closed"))

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol command (in the tab once one is open); its result, or AssertionError."""
        number = next(self._ids)
        request: dict[str, Any] = {"id": number, "method": method, "params": params}
        if self._session is not None:
            request["sessionId"] = self._session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[number] = future
        await self._socket.send(json.dumps(request))
        answer = await asyncio.wait_for(future, WAIT)
        if "error" in answer:
            raise AssertionError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def open_tab(self) -> None:
        target = await self.call("Target.createTarget", url="about:blank")
        attached = await self.call(
            "Target.attachToTarget", targetId=target["targetId"], flatten=True
        )
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            await self.call(f"{domain}.enable")

    async def open(self, path: Path) -> PageLoad:
        """Load ``path`` and wait for its load event; the console's messages meanwhile (and up
        to a round trip after it)."""
        while not self._events.empty():
            self._events.get_nowait()
        await self.call("Page.navigate", url=path.resolve().as_uri())
        load = PageLoad()
        async with asyncio.timeout(WAIT):
            while True:
                event = await self._events.get()
                if event["method"] == "Page.loadEventFired":
                    break
                _note(event, load)
        await self.evaluate("1")  # whatever the page logged before it loaded has arrived
        while not self._events.empty():
            _note(self._events.get_nowait(), load)
        return load

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (JSON-like), or AssertionError on a throw."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:60]!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path, width: int = 1280) -> Path:
        """The whole page (not only the window) as a PNG at ``path``."""
        size = (await self.call("Page.getLayoutMetrics"))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": width, "height": min(size["height"], 8000), "scale": 1}
        shot = await self.call(
            "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        """Ask Chromium to quit (a browser command, outside the tab), then hang up."""
        self._session = None
        with suppress(AssertionError, TimeoutError, OSError):
            await self.call("Browser.close")
        self._reader.cancel()
        with suppress(asyncio.CancelledError):
            await self._reader
        await self._socket.close()


def _note(event: dict[str, Any], load: PageLoad) -> None:
    method, params = event["method"], event.get("params", {})
    if method == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
        (load.errors if params["type"] in ("error", "assert") else load.messages).append(text)
    elif method == "Runtime.exceptionThrown":
        load.errors.append(f"exception: {params['exceptionDetails']}")
    elif method == "Log.entryAdded":
        entry = params["entry"]
        line = f"{entry['level']} ({entry['source']}): {entry['text']}"
        (load.errors if entry["level"] == "error" else load.messages).append(line)


async def _devtools_url(process: asyncio.subprocess.Process) -> str:
    assert process.stderr is not None
    seen: list[bytes] = []
    async with asyncio.timeout(WAIT):
        while True:
            line = await process.stderr.readline()
            if not line:
                raise AssertionError(
                    "chromium exited before listening:\n" + b"".join(seen).decode()
                )
            seen.append(line)
            found = _LISTENING.search(line)
            if found is not None:
                return found[1].decode()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():  # Chromium's own chatter (D-Bus, …): not the page's console
        pass


@asynccontextmanager
async def chromium(profile: Path, width: int = 1280, height: int = 900) -> AsyncIterator[Browser]:
    """A headless Chromium with a throwaway profile under ``profile``, one tab open."""
    process = await asyncio.create_subprocess_exec(
        chromium_path(),
        "--headless",
        "--no-sandbox",  # root in a container: the sandbox needs user namespaces
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "about:blank",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: its helpers end with it
    )
    drain: asyncio.Task[None] | None = None
    try:
        url = await _devtools_url(process)
        assert process.stderr is not None
        drain = asyncio.create_task(_drain(process.stderr))
        async with connect(url, max_size=64 * 2**20, open_timeout=WAIT) as socket:
            browser = Browser(socket)
            try:
                await browser.open_tab()
                yield browser
            finally:
                await browser.close()
    finally:
        with suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 5)
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await asyncio.wait_for(process.wait(), WAIT)
        if drain is not None:
            drain.cancel()
            with suppress(asyncio.CancelledError):
                await drain
