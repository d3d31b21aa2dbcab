"""The cast of keys the tests share: fixed, so that runs are reproducible and failures repeat.

OWNER is the bot's owner, AGENT the bot's own key, ALICE, BOB and CAROL are people in a channel,
STRANGER someone nobody allowed.  NIP19_SECRET is the secret key of NIP-19's worked example (its
public key is NIP-19's example npub), for tests that compare against those published strings.
"""

from __future__ import annotations

from nostr_buzz.keys import SecretKey

OWNER = SecretKey.from_str("0e" * 32)
AGENT = SecretKey.from_str("a7" * 32)
ALICE = SecretKey.from_str("a1" * 32)
BOB = SecretKey.from_str("b2" * 32)
CAROL = SecretKey.from_str("c3" * 32)
STRANGER = SecretKey.from_str("5e" * 32)
NIP19_SECRET = SecretKey.from_str(
    "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
)
