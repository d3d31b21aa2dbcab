"""A bot on rust-nostr's Python bindings (``nostr_sdk``, the ``relay`` extra): nostr-sdk keeps
the relay connections and the subscription, and the pure core of ``examples/pure_bot.py`` does
the rest (verify again with nostr-buzz's strict checks, gate, queue, compile, reply, metric).

    BUZZ_PRIVATE_KEY=nsec1… BUZZ_OWNER=npub1… BUZZ_RELAYS=ws://127.0.0.1:7447 \\
        python examples/nostr_sdk_bot.py

(or ``python -m examples.nostr_sdk_bot`` from the repository's root; the key only ever from the
environment, and only nostr-buzz signs with it: nostr-sdk publishes the signed events as they are).
It answers the owner's mentions until SIGINT or SIGTERM, and prints ``listening`` once it is
subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import nostr_sdk

try:
    from examples.pure_bot import PureBot, run
except ModuleNotFoundError:  # run as a script: python examples/NAME.py
    from pure_bot import PureBot, run  # type: ignore[no-redef]


async def serve(relays: list[str], bot: PureBot, stop: asyncio.Event) -> None:
    """Subscribe to mentions of the bot from now on and answer them until ``stop``."""
    nostr_sdk.uniffi_set_event_loop(asyncio.get_running_loop())
    client = nostr_sdk.Client()
    for url in relays:
        await client.add_relay(nostr_sdk.RelayUrl.parse(url))
    await client.connect()
    mentions = (
        nostr_sdk.Filter()
        .kinds([nostr_sdk.Kind(9), nostr_sdk.Kind(1)])
        .pubkey(nostr_sdk.PublicKey.parse(bot.agent.public_key.hex))
        .since(nostr_sdk.Timestamp.now())
    )
    notifications = client.notifications()
    await client.subscribe(nostr_sdk.ReqTarget.auto([mentions]))
    print("listening", flush=True)
    pending: asyncio.Task[Any] | None = None
    try:
        while not stop.is_set():
            wait = bot.wait(time.time())
            pending = pending or asyncio.ensure_future(notifications.next())
            done, _ = await asyncio.wait({pending}, timeout=0.5 if wait is None else min(wait, 0.5))
            if done:
                note, pending = pending.result(), None
                if isinstance(note, nostr_sdk.ClientNotification.NEW_EVENT):
                    bot.receive(note.event.as_json(), time.time())
            for event in bot.next_turn(time.time()):
                await client.send_event(nostr_sdk.Event.from_json(event.to_json()))
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await client.shutdown()


if __name__ == "__main__":
    asyncio.run(run(serve, usage=__doc__))
