"""A wide-area network on 127.0.0.1: relays behind a latency-injecting TLS proxy (the bench).

Each relay gets a *front*, a TCP listener that delays every chunk of bytes by ``delay`` in
each direction (20 ms: a 40 ms round trip) and counts the connections it accepts, in front of
a TLS terminator (a server certificate for ``127.0.0.1`` and ``localhost``, issued at run time
by a test CA: no key is ever written to the repository) that forwards the plaintext to the
relay itself.  So a client dials ``wss://127.0.0.1:PORT`` and pays the delay on the TLS
handshake, the WebSocket upgrade and every frame; only the TCP handshake (done by the kernel)
is not delayed, so a new connection costs one round trip less than on a real WAN.

Clients trust the CA through the standard ``SSL_CERT_FILE`` variable (:func:`trust`), which
Python's default SSL context reads (OpenSSL's default verify paths), so the bot needs no option
of its own.  nostr-sdk trusts only the roots compiled into it (a test CA is an ``UnknownIssuer``
there), so each relay also gets a front with the same delay and no TLS (:class:`Site`).

Bad relays, each behind a delaying front too: :func:`refusing` (its front closes every
connection: the host is up, the relay is not), :func:`silent_relay` (completes the WebSocket
handshake, never answers a frame) and :func:`slow_relay` (answers every REQ with EOSE after
``after`` seconds, takes every EVENT at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import ssl
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay

HOST = "127.0.0.1"
ONE_WAY = 0.020  # seconds each direction: a 40 ms round trip
_CHUNK = 65536


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A fresh test CA: its certificate written to ``directory/ca.pem`` (the file clients
    trust) and a server context holding a certificate it issued for 127.0.0.1 and localhost.
    The private keys stay in memory except for the moment the server context loads them."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("nostr-buzz bench CA"))
        .issuer_name(_name("nostr-buzz bench CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(pem))
    chain = directory / "server.pem"
    chain.touch(mode=0o600)
    chain.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + cert.public_bytes(pem)
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        server.load_cert_chain(chain)
    finally:
        chain.unlink()
    return ca_file, server


@contextlib.contextmanager
def trust(ca_file: Path) -> Any:
    """Within the block, every client of this process trusts ``ca_file`` (``SSL_CERT_FILE``)."""
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(ca_file)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = before


class Front:
    """A listener on 127.0.0.1 forwarding each connection to ``target`` (None: closing it),
    every chunk delayed by ``delay`` each way; ``accepted`` counts the connections."""

    def __init__(
        self, target: int | None, *, delay: float, tls: ssl.SSLContext | None = None
    ) -> None:
        self.target = target
        self.delay = delay
        self.tls = tls
        self.accepted = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Front:
        self._server = await asyncio.start_server(self._handle, HOST, 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.target is None:
                await asyncio.sleep(self.delay)  # the close travels back like any byte
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(HOST, self.target)
            except OSError:
                return
            try:
                pumps = [
                    asyncio.create_task(self._pump(reader, up_writer)),
                    asyncio.create_task(self._pump(up_reader, writer)),
                ]
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
            finally:
                up_writer.transport.abort()
        except asyncio.CancelledError:
            pass
        finally:
            writer.transport.abort()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk written ``delay`` after it was read (so a
        stream of chunks keeps its pace: latency, not a bandwidth limit)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                try:
                    data = await reader.read(_CHUNK)
                except (OSError, ssl.SSLError):
                    data = b""
                queue.put_nowait((loop.time() + self.delay, data))
                if not data:
                    break
            await sender
        except (OSError, ssl.SSLError):
            pass
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)


@dataclass(frozen=True)
class Site:
    """One relay as the WAN serves it: ``wss`` through the TLS terminator, ``ws`` the same
    relay behind its own delaying front without TLS (for clients that cannot be told to trust
    a test CA, such as nostr-sdk's, which reads only its bundled roots)."""

    wss: str
    ws: str


class Wan:
    """The fronts started in one :func:`wan` block; ``fronts`` by relay URL."""

    def __init__(self, stack: AsyncExitStack, tls: ssl.SSLContext, delay: float) -> None:
        self._stack = stack
        self._tls = tls
        self.delay = delay
        self.fronts: dict[str, Front] = {}

    async def _front(self, target: int | None, *, tls: bool) -> str:
        if target is not None and tls:  # the TLS terminator, then the delaying front before it
            terminator = await Front(target, delay=0.0, tls=self._tls).start()
            self._stack.push_async_callback(terminator.close)
            target = terminator.port
        front = await Front(target, delay=self.delay).start()
        self._stack.push_async_callback(front.close)
        url = f"{'wss' if tls else 'ws'}://{HOST}:{front.port}"
        self.fronts[url] = front
        return url

    async def _site(self, target: int | None) -> Site:
        return Site(
            wss=await self._front(target, tls=True), ws=await self._front(target, tls=False)
        )

    async def relay(self, ws_url: str) -> Site:
        """The relay at ``ws_url`` (a loopback ``ws://`` one), reached across the WAN."""
        return await self._site(int(ws_url.rsplit(":", 1)[1]))

    async def refusing(self) -> Site:
        """A relay whose fronts accept and close every connection."""
        return await self._site(None)

    async def silent_relay(self) -> Site:
        """A relay that completes the WebSocket handshake and never answers."""
        relay = await self._stack.enter_async_context(scripted_relay())
        return await self.relay(relay.url)

    async def slow_relay(self, after: float = 2.0) -> Site:
        """A relay that answers every REQ with EOSE after ``after`` s and OKs every EVENT."""
        pending: set[asyncio.Task[None]] = set()

        async def late_eose(conn: Conn, sub: Any) -> None:
            await asyncio.sleep(after)
            with contextlib.suppress(Exception):
                await conn.send(["EOSE", sub])

        async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
            if msg[0] == "REQ":
                task = asyncio.create_task(late_eose(conn, msg[1]))
                pending.add(task)
                task.add_done_callback(pending.discard)
            elif msg[0] == "EVENT" and isinstance(msg[1], dict):
                await conn.send(json.dumps(["OK", msg[1].get("id", ""), True, ""]))

        relay = await self._stack.enter_async_context(scripted_relay(script))
        self._stack.push_async_callback(_cancel_all, pending)
        return await self.relay(relay.url)

    def accepted(self, urls: Iterable[str]) -> int:
        """Connections accepted so far by the fronts of ``urls``."""
        wanted = set(urls)
        return sum(f.accepted for u, f in self.fronts.items() if u in wanted)


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@asynccontextmanager
async def wan(directory: Path, delay: float = ONE_WAY) -> AsyncIterator[Wan]:
    """``async with wan(tmp) as net: site = await net.relay(local.url)`` — a fresh test CA in
    ``directory`` that this process trusts (``SSL_CERT_FILE``) while the block runs."""
    ca_file, tls = make_ca(directory)
    with trust(ca_file):
        async with AsyncExitStack() as stack:
            yield Wan(stack, tls, delay)
