"""Which extra a missing third-party package belongs to, as a one-line message for ``buzz``."""

from __future__ import annotations

from typing import Final

#: A third-party package the command line may miss → the extra that installs it.
EXTRA_OF: Final = {
    "typer": "cli",
    "click": "cli",
    "rich": "cli",
    "shellingham": "cli",
    "acp": "acp",
    "pydantic": "acp",
}


def missing_extra(exc: ImportError) -> str | None:
    """The message for an import that failed because an extra is not installed, else None."""
    top = (exc.name or "").split(".", 1)[0]
    extra = EXTRA_OF.get(top)
    if not isinstance(exc, ModuleNotFoundError) or extra is None:
        return None
    needs = "the buzz command" if extra == "cli" else "this command (the bot and ACP agents)"
    return f"buzz: {needs} needs the {extra!r} extra: pip install 'nostr-buzz[{extra}]'"
