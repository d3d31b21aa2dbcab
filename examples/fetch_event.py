"""Fetch one signed event by id and print its JSON, checked: the library's ``fetch_event``
(the event, or None) and ``fetch_event_result`` (why it was not found, and who forged it).

    python examples/fetch_event.py EVENT [RELAY ...]

EVENT is 64 hex characters, ``note1…`` or ``nevent1…`` (whose relay hints are asked too, so
the relays may then be left out).  The first verified copy is printed on stdout as one line of
canonical JSON; relays that served a forgery are named on stderr.  Exit status: 0 found, 1 bad
input, 2 no relay answered, 3 not found, 4 only forgeries.
"""

from __future__ import annotations

import asyncio
import sys

from nostr_buzz import BuzzError, fetch_event_result


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 1
    ref, relays = argv[0], argv[1:]
    try:
        result = asyncio.run(fetch_event_result(ref, relays, timeout=10))
    except BuzzError as exc:  # a bad reference or relay URL
        print(f"fetch_event: {exc}", file=sys.stderr)
        return 1
    for relay, checks in result.forgers.items():
        print(f"relay {relay} served a forgery ({', '.join(checks)})", file=sys.stderr)
    if result.event is not None:
        print(result.event.to_json())
        return 0
    if result.forgers:
        return 4
    if not result.any_answered:
        for relay, why in result.unanswered.items():
            print(f"relay {relay}: {why}", file=sys.stderr)
        return 2
    print(f"event {result.id} not found", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
