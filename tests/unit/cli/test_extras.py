"""The buzz command without an extra: one line naming the extra to install, never for a
missing package that no extra brings (that stays the error it is)."""

from __future__ import annotations

from nostr_buzz.cli.extras import missing_extra


def test_a_missing_package_names_its_extra() -> None:
    typer = ModuleNotFoundError("No module named 'typer'", name="typer")
    assert missing_extra(typer) == (
        "buzz: the buzz command needs the 'cli' extra: pip install 'nostr-buzz[cli]'"
    )
    schema = ModuleNotFoundError("No module named 'acp.schema'", name="acp.schema")
    message = missing_extra(schema)
    assert message is not None and "pip install 'nostr-buzz[acp]'" in message


def test_anything_else_is_not_explained_away() -> None:
    assert missing_extra(ModuleNotFoundError("x", name="nostr_buzz.nope")) is None
    assert missing_extra(ImportError("cannot import name 'x' from 'typer'", name="typer")) is None
