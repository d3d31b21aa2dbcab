"""A bot on plain ``websockets``: one relay connection, NIP-01 frames by hand, the pure core of
``examples/pure_bot.py`` for everything else (verify, gate, queue, compile, reply, metric).

    BUZZ_PRIVATE_KEY=nsec1… BUZZ_OWNER=npub1… BUZZ_RELAYS=ws://127.0.0.1:7447 \\
        python examples/websockets_bot.py

(or ``python -m examples.websockets_bot`` from the repository's root; the key only ever from the
environment).  It answers the owner's mentions until SIGINT or SIGTERM, and prints ``listening``
once its subscription is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from websockets.asyncio.client import connect

try:
    from examples.pure_bot import PureBot, run
except ModuleNotFoundError:  # run as a script: python examples/NAME.py
    from pure_bot import PureBot, run  # type: ignore[no-redef]

SUBSCRIPTION = "mentions"


async def serve(relays: list[str], bot: PureBot, stop: asyncio.Event) -> None:
    """Subscribe to mentions of the bot on the first relay from now on and answer them until
    ``stop``."""
    async with connect(relays[0]) as ws:
        wanted = {"kinds": [9, 1], "#p": [bot.agent.public_key.hex], "since": int(time.time())}
        await ws.send(json.dumps(["REQ", SUBSCRIPTION, wanted]))
        while not stop.is_set():
            wait = bot.wait(time.time())
            frame = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5 if wait is None else min(wait, 0.5)):
                    frame = await ws.recv()
            if frame is not None:
                message = json.loads(frame)
                if message[:2] == ["EOSE", SUBSCRIPTION]:
                    print("listening", flush=True)
                elif message[:2] == ["EVENT", SUBSCRIPTION] and len(message) == 3:
                    bot.receive(json.dumps(message[2]), time.time())
            for event in bot.next_turn(time.time()):
                await ws.send(f'["EVENT",{event.to_json()}]')  # the relay's OK is not awaited


if __name__ == "__main__":
    asyncio.run(run(serve, usage=__doc__))
