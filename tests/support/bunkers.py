"""NIP-46 remote signers ("bunkers") for the tests of nostr_buzz.io.nip46 and ``buzz run
--bunker``.

- :func:`ndk_bunker`: NDK's ``NDKNip46Backend`` (pinned in tests/agents/package.json, installed
  by ``make agents``) run by tests/agents/nip46_bunker.mjs: an independent implementation that
  holds the key.  ``bunker.stop_answering()`` SIGSTOPs it (a bunker that hangs).
- :class:`HostileBunker`: a bunker written here, on the project's own relay client, that
  answers every request properly except ``sign_event``, where it signs a different event
  (``tamper``) or lets a third key answer first (``impostor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import msgspec
import pytest

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip44, nip46
from nostr_buzz.nips.nip46 import Request, Response
from tests.support.waits import wait_for

AGENTS = Path(__file__).resolve().parents[1] / "agents"
SCRIPT = AGENTS / "nip46_bunker.mjs"


def bunker_uri(remote_signer: PublicKey, relays: list[str], secret: str | None) -> str:
    query = "&".join(f"relay={quote(url, safe='')}" for url in relays)
    return f"bunker://{remote_signer.hex}?{query}" + (f"&secret={secret}" if secret else "")


@dataclass
class NdkBunker:
    """A running NDK bunker: its URI, its process and what it printed."""

    uri: str
    secret: str
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)

    def answered(self, method: str) -> int:
        return self.lines.count(f"answered {method}")

    def stop_answering(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def answer_again(self) -> None:
        self.process.send_signal(signal.SIGCONT)


@asynccontextmanager
async def ndk_bunker(
    relays: list[str], key: SecretKey, *, secret: str | None = None
) -> AsyncIterator[NdkBunker]:
    """NDK's bunker holding ``key`` on ``relays``, ready (its subscription live) on entry."""
    node_modules = AGENTS / "node_modules" / "@nostr-dev-kit" / "ndk"
    if not node_modules.is_dir():
        pytest.fail(f"{node_modules} is missing: run `make agents` (npm ci in tests/agents)")
    secret = secret or secrets.token_hex(8)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "BUNKER_KEY": key.hex}
    env["BUNKER_SECRET"] = secret
    process = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        *relays,
        cwd=AGENTS,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    bunker = NdkBunker(bunker_uri(key.public_key, relays, secret), secret, process)

    async def read() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            bunker.lines.append(raw.decode().strip())

    reader = asyncio.create_task(read())
    try:
        await wait_for(
            lambda: any(line.startswith("ready ") for line in bunker.lines) or reader.done(),
            "the NDK bunker to be ready",
            timeout=20,
        )
        assert not reader.done(), f"the NDK bunker exited: {bunker.lines}"
        yield bunker
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.kill()
        await process.wait()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


Mode = Literal["honest", "tamper", "impostor", "approval", "refuse"]

#: What the ``approval`` bunker asks the user to visit (a stranger's text: it has a line break).
APPROVAL_URL = "https://bunker.example/approve?r=1\nbuzz: forged line"


class HostileBunker:
    """A bunker on one relay: ``remote`` (its key) answers, ``user`` signs (two keys, as NIP-46
    allows).  Modes: ``tamper`` signs ``sign_event`` requests with another content;
    ``impostor`` has a third key answer each request first (right id, encrypted to the client,
    a tampered event), then answers honestly itself; ``approval`` answers ``sign_event`` first
    with an auth challenge (NIP-46: a URL to visit), then for real; ``refuse`` refuses
    ``sign_event`` with a long, many-line error."""

    def __init__(self, relay_url: str, *, mode: Mode = "honest") -> None:
        self.url = relay_url
        self.mode = mode
        self.remote = SecretKey.generate()
        self.user = SecretKey.generate()
        self.impostor = SecretKey.generate()
        self.secret = secrets.token_hex(8)
        self.requests: list[str] = []
        #: Forged answers (``impostor``) that the relay took, so that ignoring them is tested.
        self.forged_sent = 0
        self._client = RelayClient(relay_url, timeout=5)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def uri(self) -> str:
        return bunker_uri(self.remote.public_key, [self.url], self.secret)

    async def __aenter__(self) -> HostileBunker:
        self._task = asyncio.create_task(self._serve())
        async with asyncio.timeout(10):
            await self._ready.wait()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _serve(self) -> None:
        flt = {"kinds": [nip46.KIND], "#p": [self.remote.public_key.hex]}
        async for event in self._client.subscribe(flt, on_eose=self._ready.set):
            try:
                req = nip46.open_request(event, recipient=self.remote)
            except Exception:
                continue
            self.requests.append(req.method)
            client = PublicKey(bytes.fromhex(event.pubkey))
            if self.mode == "impostor":
                forged = self._answer(req, tampered=True)
                self.forged_sent += await self._send(forged, client, sender=self.impostor)
            if req.method == "sign_event" and self.mode == "approval":
                await self._send(Response(req.id, "auth_url", APPROVAL_URL), client)
            if req.method == "sign_event" and self.mode == "refuse":
                await self._send(Response(req.id, "error", "no\nway " * 200), client)
                continue
            await self._send(self._answer(req, tampered=self.mode == "tamper"), client)

    def _answer(self, req: Request, *, tampered: bool) -> Response:
        def ok(result: str) -> Response:
            return Response(req.id, result)

        handlers: dict[str, Callable[[], Response]] = {
            "connect": lambda: ok("ack"),
            "ping": lambda: ok("pong"),
            "get_public_key": lambda: ok(self.user.public_key.hex),
            "sign_event": lambda: ok(self._sign(req.params[0], tampered).to_json()),
            "nip44_encrypt": lambda: ok(nip44.encrypt(req.params[1], self._key(req))),
            "nip44_decrypt": lambda: ok(nip44.decrypt(req.params[1], self._key(req))),
        }
        handler = handlers.get(req.method)
        return handler() if handler is not None else Response(req.id, "error", "unsupported")

    def _key(self, req: Request) -> bytes:
        return nip44.conversation_key(self.user, req.params[0])

    def _sign(self, template_json: str, tampered: bool) -> Event:
        template = msgspec.json.decode(template_json)
        content = template["content"] + (" (and something else)" if tampered else "")
        return sign_event(
            self.user,
            kind=template["kind"],
            content=content,
            tags=template["tags"],
            created_at=template["created_at"],
        )

    async def _send(
        self, response: Response, client: PublicKey, *, sender: SecretKey | None = None
    ) -> bool:
        event = nip46.seal(
            response, sender=sender or self.remote, recipient=client, created_at=int(time.time())
        )
        return (await self._client.publish(event)).ok
