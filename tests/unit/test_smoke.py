"""The public API is importable from where the README says."""

import nostr_buzz

SPEC_ROOT_NAMES = [
    "Event",
    "sign_event",
    "SecretKey",
    "PublicKey",
    "BuzzError",
    "InvalidEvent",
    "InvalidKey",
    "Nip19Error",
    "Nip44Error",
    "MetricError",
    "ManifestError",
    "TurnInputError",
    "QueueError",
    "Profile",
    "compile_turn",
    "TurnInput",
    "Layer",
    "Manifest",
    "manifest_from_layers",
    "escape_text",
    "escape_attribute",
    "TurnLedger",
    "DispatchQueue",
    "RelayClient",
    "RelayPool",
    "UsageTracker",
]


def test_public_names_exported() -> None:
    for name in nostr_buzz.__all__:
        assert hasattr(nostr_buzz, name), name
    assert set(SPEC_ROOT_NAMES) <= set(nostr_buzz.__all__)


def test_errors_are_value_errors() -> None:
    for name in [
        "InvalidEvent",
        "InvalidKey",
        "Nip19Error",
        "Nip44Error",
        "MetricError",
        "ManifestError",
        "TurnInputError",
        "QueueError",
    ]:
        cls = getattr(nostr_buzz, name)
        assert issubclass(cls, nostr_buzz.BuzzError) and issubclass(cls, ValueError), name


def test_nip_modules_expose_the_spec_names() -> None:
    from nostr_buzz.nips import nip10, nip19, nip44, nip_am

    for module, names in [
        (nip10, ["thread_ref", "destination", "channel", "mentions", "ThreadRef"]),
        (nip19, ["encode", "decode", "EventPointer", "ProfilePointer"]),
        (nip44, ["conversation_key", "encrypt", "decrypt", "calc_padded_len", "Nip44Error"]),
        (
            nip_am,
            [
                "MetricPayload",
                "TokenCounts",
                "PricingIdentity",
                "build_metric_event",
                "open_metric_event",
                "MetricError",
            ],
        ),
    ]:
        for name in names:
            assert hasattr(module, name), f"{module.__name__}.{name}"
