"""A misbehaving relay for tests: a small websockets server on 127.0.0.1 with scripted lies.

``async with hostile_relay("forged_sig", stored=[event]) as relay: ... relay.url ...``

Behaviours (what it does with a ``REQ``, unless noted):
- ``honest``: serves the stored events that match, then EOSE; ``OK true`` for every EVENT.
- ``wrong_id``: serves each stored event under the first requested id (content unchanged).
- ``forged_sig``: serves each stored event with one signature byte flipped.
- ``other_event``: serves a valid event that is not the one asked for, then EOSE.
- ``mixed``: a forged copy, an unrelated valid event, garbage frames, then the real one, EOSE.
- ``ok_empty_id``: answers EVENT with ``["OK", "", false, "blocked: …"]``.
- ``auth_never_ack``: sends an AUTH challenge on connect, refuses everything with
  ``auth-required:`` and never answers the AUTH.
- ``drop_mid_query``: serves one stored event, then drops the TCP connection (no EOSE).
- ``endless_garbage``: an endless stream of malformed frames, forged events and frames for
  other subscriptions; never EOSE.
- ``endless_valid``: an endless stream of distinct, valid, matching events; never EOSE.
- ``huge_frame``: one frame larger than the client's frame limit.
- ``flood_big_events``: 1,500 distinct, valid events matching the query, 1 MB of content each.
- ``flood_many_tags``: 200 distinct, valid events matching the query, 100,000 tags each.
- ``silent``: accepts the WebSocket and says nothing, ever.
- ``frozen``: completes the handshake, then stops reading: not even a close frame is answered.

:func:`tarpit` is a TCP server that accepts connections and never completes the handshake.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey

_STRANGER = SecretKey.generate()


def forge_signature(event: Event) -> dict[str, Any]:
    d = event.to_dict()
    sig = bytearray(bytes.fromhex(d["sig"]))
    sig[5] ^= 0x01
    d["sig"] = sig.hex()
    return d


def under_id(event: Event, other_id: str) -> dict[str, Any]:
    d = event.to_dict()
    d["id"] = other_id
    return d


def _compact(frame: Any) -> str:
    """JSON without spaces: a 1 MB event stays under the client's 1 MiB frame limit."""
    return json.dumps(frame, separators=(",", ":"))


def stranger_event(
    content: str = "not what you asked for", created_at: int = 1_700_000_000
) -> Event:
    return sign_event(_STRANGER, kind=1, content=content, created_at=created_at)


class HostileRelay:
    def __init__(self, behaviour: str, stored: list[Event]) -> None:
        self.behaviour = behaviour
        self.stored = list(stored)
        self.url = ""
        self.frames_sent = 0
        self.received: list[Any] = []
        self.connections = 0
        self.frozen: list[ServerConnection] = []

    async def _send(self, ws: ServerConnection, frame: Any) -> None:
        await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
        self.frames_sent += 1

    async def handler(self, ws: ServerConnection) -> None:
        self.connections += 1
        try:
            if self.behaviour == "auth_never_ack":
                await self._send(ws, ["AUTH", "challenge-that-goes-nowhere"])
            async for raw in ws:
                msg = json.loads(raw)
                if len(self.received) < 1000:
                    self.received.append(msg)
                await self.on_message(ws, msg)
        except ConnectionClosed:
            pass

    async def on_message(self, ws: ServerConnection, msg: list[Any]) -> None:
        b = self.behaviour
        if b == "silent":
            return
        if b == "frozen":
            ws.transport.pause_reading()
            self.frozen.append(ws)
            return
        if msg[0] == "EVENT":
            event_id = msg[1]["id"]
            if b == "ok_empty_id":
                await self._send(ws, ["OK", "", False, "blocked: you are not welcome"])
            elif b == "auth_never_ack":
                await self._send(ws, ["OK", event_id, False, "auth-required: prove who you are"])
            else:
                await self._send(ws, ["OK", event_id, True, ""])
            return
        if msg[0] != "REQ":
            return  # AUTH and CLOSE: never acknowledged
        sub, filters = msg[1], msg[2:]
        wanted = filters[0].get("ids", []) if filters else []
        handlers: dict[str, Callable[[ServerConnection, str, list[str]], Awaitable[None]]] = {
            "honest": self._honest,
            "wrong_id": self._wrong_id,
            "forged_sig": self._forged_sig,
            "other_event": self._other_event,
            "mixed": self._mixed,
            "auth_never_ack": self._auth_required,
            "drop_mid_query": self._drop,
            "endless_garbage": self._endless_garbage,
            "endless_valid": self._endless_valid,
            "huge_frame": self._huge,
            "flood_big_events": self._flood_big_events,
            "flood_many_tags": self._flood_many_tags,
        }
        if b.startswith("flood_"):
            self.flood_filter = filters[0] if filters else {}
        await handlers[b](ws, sub, wanted)

    async def _honest(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        for ev in self.stored:
            if not wanted or ev.id in wanted:
                await self._send(ws, ["EVENT", sub, ev.to_dict()])
        await self._send(ws, ["EOSE", sub])

    async def _wrong_id(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        for ev in self.stored:
            await self._send(ws, ["EVENT", sub, under_id(ev, wanted[0] if wanted else "0" * 64)])
        await self._send(ws, ["EOSE", sub])

    async def _forged_sig(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        for ev in self.stored:
            await self._send(ws, ["EVENT", sub, forge_signature(ev)])
        await self._send(ws, ["EOSE", sub])

    async def _other_event(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        await self._send(ws, ["EVENT", sub, stranger_event().to_dict()])
        await self._send(ws, ["EOSE", sub])

    async def _mixed(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        for ev in self.stored:
            await self._send(ws, ["EVENT", sub, forge_signature(ev)])
            await self._send(ws, ["EVENT", sub, stranger_event().to_dict()])
            await self._send(ws, "this is not json")
            await self._send(ws, {"an": "object"})
            await self._send(ws, ["EVENT", "someone-elses-sub", ev.to_dict()])
            await self._send(ws, ["WHATEVER", sub])
            await self._send(ws, ["EVENT", sub, ev.to_dict()])
            await self._send(ws, ["EVENT", sub, ev.to_dict()])  # duplicate: kept once
        await self._send(ws, ["EOSE", sub])

    async def _auth_required(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        await self._send(ws, ["CLOSED", sub, "auth-required: prove who you are"])

    async def _drop(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        for ev in self.stored[:1]:
            await self._send(ws, ["EVENT", sub, ev.to_dict()])
        ws.transport.abort()

    async def _endless_garbage(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        forged = [json.dumps(["EVENT", sub, forge_signature(ev)]) for ev in self.stored]
        frames = [
            *forged,
            "][ not json",
            json.dumps(["EVENT", "other-sub", {"x": 1}]),
            json.dumps(["NOTICE", "x" * 2000]),
            json.dumps(["EVENT", sub, {"id": "nope"}]),
        ]
        for frame in itertools.cycle(frames):
            await self._send(ws, frame)

    async def _endless_valid(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        secret = SecretKey.generate()
        now = int(time.time())
        for i in itertools.count():
            ev = sign_event(secret, kind=1, content=f"spam {i} " + "x" * 200, created_at=now)
            await self._send(ws, ["EVENT", sub, ev.to_dict()])

    def _matching(self, i: int, content: str, extra_tags_json: str) -> str:
        """A valid, distinct event (compact JSON) that the last flooded query asked for: its
        kind, tags and time window.  ``content`` is plain ASCII; the extra tags come already
        serialized, so a 100,000-tag event costs one hash, not a Python walk over its tags
        (the relay shares its loop with the test)."""
        flt = getattr(self, "flood_filter", {})
        kind = (flt.get("kinds") or [1])[0]
        tags = [[k[1:], values[0]] for k, values in flt.items() if k[:1] == "#" and values]
        tags_json = _compact(tags)
        if extra_tags_json:
            tags_json = tags_json[:-1] + ("," if tags else "") + extra_tags_json[1:]
        created_at = min(flt.get("until", 2**31), int(time.time())) - i % 60
        created_at = max(created_at, flt.get("since", 0))
        pubkey = _STRANGER.public_key.hex
        text = f'"{i:08d}{content}"'
        preimage = f'[0,"{pubkey}",{created_at},{kind},{tags_json},{text}]'
        event_id = hashlib.sha256(preimage.encode()).hexdigest()
        sig = _STRANGER.sign_schnorr(bytes.fromhex(event_id), bytes(32)).hex()
        return (
            f'{{"id":"{event_id}","pubkey":"{pubkey}","created_at":{created_at},'
            f'"kind":{kind},"tags":{tags_json},"content":{text},"sig":"{sig}"}}'
        )

    async def _flood(self, ws: ServerConnection, sub: str, count: int, event_json: Any) -> None:
        for i in range(count):
            await self._send(ws, f'["EVENT",{json.dumps(sub)},{event_json(i)}]')
        await self._send(ws, ["EOSE", sub])

    async def _flood_big_events(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        content = "x" * (1_000_000 - 8)
        await self._flood(ws, sub, 1_500, lambda i: self._matching(i, content, ""))

    async def _flood_many_tags(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        tags_json = _compact([["t", "a"]] * 100_000)
        await self._flood(ws, sub, 200, lambda i: self._matching(i, " tags", tags_json))

    async def _huge(self, ws: ServerConnection, sub: str, wanted: list[str]) -> None:
        await self._send(ws, ["NOTICE", "x" * (2 << 20)])
        await self._send(ws, ["EOSE", sub])


def nip11_responder(document: dict[str, Any] | None) -> Any:
    """A ``process_request`` hook that answers NIP-11 requests with ``document``."""

    def respond(connection: ServerConnection, request: Any) -> Any:
        if document is None or request.headers.get("Accept") != "application/nostr+json":
            return None
        response = connection.respond(200, json.dumps(document))
        response.headers["Content-Type"] = "application/nostr+json"
        return response

    return respond


@asynccontextmanager
async def hostile_relay(
    behaviour: str, stored: list[Event] | None = None, *, nip11: dict[str, Any] | None = None
) -> AsyncIterator[HostileRelay]:
    """The relay; ``nip11``: the information document it serves over HTTP (NIP-11)."""
    relay = HostileRelay(behaviour, stored or [])
    async with serve(
        relay.handler,
        "127.0.0.1",
        0,
        max_size=None,
        compression=None,
        process_request=nip11_responder(nip11),
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        relay.url = f"ws://127.0.0.1:{port}"
        yield relay
        for ws in relay.frozen:  # it never reads again, so it would never see a close
            ws.transport.abort()
        server.close(close_connections=True)


@asynccontextmanager
async def tarpit() -> AsyncIterator[str]:
    """A TCP listener that accepts and never speaks: the WebSocket handshake never completes."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.transport.abort()
        server.close()
        await server.wait_closed()
