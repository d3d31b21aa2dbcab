"""``buzz messages`` history order, pure: messages of the same second keep thread order (the
command against real relays is in tests/e2e/cli/test_messages.py)."""

from __future__ import annotations

import pytest

from nostr_buzz.event import sign_event
from tests.support.keys import ALICE, BOB

pytestmark = pytest.mark.usefixtures("no_ambient_config")


# --- real subprocesses ---------------------------------------------------------------------


def test_same_second_messages_keep_thread_order() -> None:
    from itertools import permutations

    from nostr_buzz.nips.nip10 import chronological as _chronological

    t = 1_700_000_500
    root = sign_event(ALICE, kind=9, content="root", tags=[["h", "c"]], created_at=t)
    reply = sign_event(
        BOB, kind=9, content="reply", tags=[["h", "c"], ["e", root.id, "", "root"]], created_at=t
    )
    nested = sign_event(
        ALICE,
        kind=9,
        content="nested",
        tags=[["h", "c"], ["e", root.id, "", "root"], ["e", reply.id, "", "reply"]],
        created_at=t,
    )
    earlier = sign_event(BOB, kind=9, content="earlier", tags=[["h", "c"]], created_at=t - 1)
    for perm in permutations([root, reply, nested, earlier]):
        assert _chronological(perm) == [earlier, root, reply, nested]
    # With the middle reply missing, the nested one still follows its root.
    for perm in permutations([root, nested]):
        assert _chronological(perm) == [root, nested]
