"""The package imports and its public names exist."""

import nostr_buzz


def test_public_names_exported() -> None:
    for name in nostr_buzz.__all__:
        assert hasattr(nostr_buzz, name), name
