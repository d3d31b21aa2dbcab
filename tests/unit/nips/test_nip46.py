"""NIP-46, pure: connection URIs (hostile ones included; the secret is never shown) and the
kind 24133 request and response codecs.  Nip46Signer against real bunkers is in
tests/e2e/io/test_nip46.py."""

from __future__ import annotations

import json

import pytest

from nostr_buzz.errors import Nip46Error
from nostr_buzz.event import sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44, nip46
from nostr_buzz.nips.nip46 import BunkerUri, NostrConnectUri, Response
from nostr_buzz.signer import template

# Fixed keys: the URIs built from them are test ids, which every pytest-xdist worker must
# collect alike.
REMOTE = SecretKey.from_str("4e" * 32)
CLIENT = SecretKey.from_str("c1" * 32)
USER = SecretKey.from_str("05" * 32)
HEX = REMOTE.public_key.hex
SECRET = "0s8j2djs-very-secret"


# --- bunker:// -------------------------------------------------------------------------------


def test_a_bunker_uri_gives_the_remote_signer_its_relays_and_the_secret() -> None:
    uri = nip46.parse_uri(
        f"bunker://{HEX}?relay=wss%3A%2F%2Frelay.one&relay=wss://relay.two/&secret={SECRET}"
    )
    assert uri == BunkerUri(REMOTE.public_key, ("wss://relay.one", "wss://relay.two/"), SECRET)
    assert (
        nip46.parse_bunker_uri(f"BUNKER://{HEX.upper()}/?relay=ws://127.0.0.1:7777").secret is None
    )


def test_repeated_relays_are_kept_once_and_unknown_parameters_ignored() -> None:
    uri = nip46.parse_bunker_uri(
        f"bunker://{HEX}?relay=wss://r.example&relay=WSS://R.example:443/&perms=x&secret="
    )
    assert uri.relays == ("wss://r.example",) and uri.secret is None


def test_the_secret_is_never_shown() -> None:
    uri = nip46.parse_bunker_uri(f"bunker://{HEX}?relay=wss://r.example&secret={SECRET}")
    for text in (repr(uri), str(uri), f"{uri}", repr([uri])):
        assert SECRET not in text and "<hidden>" in text
    connect = nip46.parse_nostrconnect_uri(
        f"nostrconnect://{HEX}?relay=wss://r.example&secret={SECRET}&perms=sign_event:1,"
        "nip44_encrypt&name=My+Client"
    )
    assert connect == NostrConnectUri(
        REMOTE.public_key,
        ("wss://r.example",),
        SECRET,
        ("sign_event:1", "nip44_encrypt"),
        "My Client",
    )
    assert SECRET not in repr(connect) and SECRET not in str(connect)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"nostr://{HEX}?relay=wss://r.example", "bad_uri"),
        (f"bunker:{HEX}?relay=wss://r.example", "bad_uri"),
        (f"bunker://{HEX[:-2]}?relay=wss://r.example", "bad_pubkey"),
        ("bunker://" + "f" * 64 + "?relay=wss://r.example", "bad_pubkey"),  # off the curve
        (f"bunker://{REMOTE.public_key.bech32}?relay=wss://r.example", "bad_pubkey"),
        (f"bunker://{HEX}", "bad_relay"),
        (f"bunker://{HEX}?secret={SECRET}", "bad_relay"),
        (f"bunker://{HEX}?relay=https://r.example&secret={SECRET}", "bad_relay"),
        (f"bunker://{HEX}?relay=wss://r.example&secret={SECRET}&secret=other", "bad_secret"),
        (f"bunker://{HEX}?relay=wss://r.example&secret=" + "s" * 513, "bad_secret"),
        (f"bunker://{HEX}?relay=wss://r.example&secret={SECRET}%0A", "bad_secret"),
        (f"bunker://{HEX}?relay=wss://r.example&secret=%ff{SECRET}", "bad_uri"),
        (f"bunker://{HEX}?relay=wss://r.example&&&secret={SECRET}", "bad_uri"),
        (f"bunker://{HEX}?relay=wss://r.example#secret={SECRET}", "bad_uri"),
        (f"bunker://{HEX}?" + "&".join(["relay=wss://r.example"] * 17), "bad_relay"),
        (f"bunker://{HEX}?" + "&".join(f"x{i}=1" for i in range(100)), "bad_uri"),
        (f"bunker://{HEX}?relay=wss://r.example&secret={SECRET}" + "x" * 9000, "bad_uri"),
        (f"nostrconnect://{HEX}?relay=wss://r.example", "bad_secret"),
        (f"nostrconnect://{HEX}?relay=wss://r.example&secret=s&name=a&name=b", "bad_uri"),
    ],
)
def test_hostile_uris_are_refused_by_reason_without_repeating_them(text: str, reason: str) -> None:
    with pytest.raises(Nip46Error) as caught:
        nip46.parse_uri(text)
    assert caught.value.reason == reason
    message = str(caught.value)
    assert SECRET not in message and "r.example" not in message and HEX not in message


def test_a_uri_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(Nip46Error, match="must be a string"):
        nip46.parse_bunker_uri(b"bunker://" + HEX.encode())  # type: ignore[arg-type]


# --- messages ----------------------------------------------------------------------------------


def test_requests_have_the_shape_nip46_gives_them() -> None:
    unsigned = template(kind=1, content="hi", tags=[["t", "x"]], created_at=1_700_000_000)
    sign = json.loads(nip46.encode_message(nip46.sign_event_request("id1", unsigned)))
    assert sign == {
        "id": "id1",
        "method": "sign_event",
        "params": ['{"kind":1,"content":"hi","tags":[["t","x"]],"created_at":1700000000}'],
    }
    connect = nip46.connect_request("id2", REMOTE.public_key, SECRET, ("sign_event:1",))
    assert connect.params == (HEX, SECRET, "sign_event:1", '{"name":"nostr-buzz"}')
    assert nip46.connect_request("id3", REMOTE.public_key, None).params[1] == ""
    assert SECRET not in repr(connect)
    assert nip46.decode_request(nip46.encode_message(connect)) == connect


def test_responses_decode_strictly() -> None:
    assert nip46.decode_response('{"id":"a","result":"ack"}') == Response("a", "ack")
    refused = nip46.decode_response('{"id":"a","result":"error","error":"Not authorized"}')
    assert refused.refusal == "Not authorized" and refused.auth_url is None
    challenge = nip46.decode_response('{"id":"a","result":"auth_url","error":"https://x/a"}')
    assert challenge.auth_url == "https://x/a" and challenge.refusal is None
    assert nip46.decode_response('{"id":"a","result":"ok","error":""}').refusal is None
    assert nip46.decode_response('{"id":"a","result":null}').result is None
    for bad in (
        '{"id":1,"result":"ack"}',
        '{"result":"ack"}',
        '{"id":"","result":"ack"}',
        '{"id":"a","result":5}',
        '{"id":"a","error":["x"]}',
        '{"id":"' + "a" * 129 + '"}',
        "[" * 100_000,
        "not json",
    ):
        with pytest.raises(Nip46Error) as caught:
            nip46.decode_response(bad)
        assert caught.value.reason == "malformed_message"


def test_a_response_repr_leaves_the_result_out() -> None:
    assert "plaintext" not in repr(Response("a", "the plaintext"))


# --- the kind 24133 envelope and results -------------------------------------------------------


def test_seal_and_open_round_trip_only_between_the_right_keys() -> None:
    req = nip46.request("r1", "get_public_key")
    event = nip46.seal(req, sender=CLIENT, recipient=REMOTE.public_key, created_at=1)
    assert event.kind == nip46.KIND and event.tag_values("p") == [HEX]
    assert nip46.open_request(event, recipient=REMOTE) == req
    answer = nip46.seal(
        Response("r1", USER.public_key.hex),
        sender=REMOTE,
        recipient=CLIENT.public_key,
        created_at=2,
    )
    response = nip46.open_response(answer, recipient=CLIENT, remote_signer=REMOTE.public_key)
    assert nip46.public_key_result(response) == USER.public_key
    with pytest.raises(Nip46Error) as caught:  # a third key answering
        nip46.open_response(answer, recipient=CLIENT, remote_signer=USER.public_key)
    assert caught.value.reason == "not_a_response"
    with pytest.raises(Nip46Error) as caught:  # for someone else
        nip46.open_response(answer, recipient=USER, remote_signer=REMOTE.public_key)
    assert caught.value.reason == "not_a_response"
    forged_kind = sign_event(REMOTE, kind=4, content=answer.content, tags=answer.tags, created_at=2)
    with pytest.raises(Nip46Error, match="not NIP-46"):
        nip46.open_response(forged_kind, recipient=CLIENT, remote_signer=REMOTE.public_key)


def test_content_encrypted_to_another_key_is_undecryptable() -> None:
    wrong = nip44.encrypt("{}", nip44.conversation_key(REMOTE, USER.public_key))
    event = sign_event(
        REMOTE, kind=nip46.KIND, content=wrong, tags=[["p", CLIENT.public_key.hex]], created_at=3
    )
    with pytest.raises(Nip46Error) as caught:
        nip46.open_response(event, recipient=CLIENT, remote_signer=REMOTE.public_key)
    assert caught.value.reason == "undecryptable"


def test_results_are_checked() -> None:
    nip46.check_connect_result(Response("a", "ack"), None)
    nip46.check_connect_result(Response("a", SECRET), SECRET)  # nostrconnect: the secret back
    for wrong in ("nack", SECRET + "x", ""):
        with pytest.raises(Nip46Error) as caught:
            nip46.check_connect_result(Response("a", wrong), SECRET)
        assert SECRET not in str(caught.value)
    for bad in ("npub1xyz", "f" * 64, None):
        with pytest.raises(Nip46Error, match="get_public_key"):
            nip46.public_key_result(Response("a", bad))
    signed = sign_event(USER, kind=1, content="x", created_at=5)
    assert nip46.signed_event_result(Response("a", signed.to_json())) == signed
    tampered = signed.to_json().replace('"content":"x"', '"content":"y"')
    with pytest.raises(Nip46Error, match="bad_id"):
        nip46.signed_event_result(Response("a", tampered))
    with pytest.raises(Nip46Error, match="has no result"):
        nip46.text_result(Response("a"), "nip44_encrypt")
