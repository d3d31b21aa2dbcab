"""The two escapes of the turn envelope (docs/envelope.md, "Escaping").

The envelope is XML-like, not XML: these escapes only keep model-visible text from opening or
closing envelope elements, and keep attribute values on one line inside their quotes.
"""

from __future__ import annotations

from typing import Final

from nostr_buzz.core.text import LINE_BREAKS

_ATTRIBUTE_EXTRA: Final = str.maketrans(
    {'"': "&quot;", "'": "&apos;", "\t": " ", **dict.fromkeys(LINE_BREAKS, " ")}
)


def escape_text(s: str) -> str:
    """``&`` → ``&amp;``, then ``<`` → ``&lt;``, then ``>`` → ``&gt;``."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attribute(s: str) -> str:
    """:func:`escape_text`, then quotes to entities and each line break and tab to a space.

    Line breaks are all of :data:`~nostr_buzz.core.text.LINE_BREAKS` (newline, CR, U+2028, …),
    so an attribute value always stays on its line.
    """
    return escape_text(s).translate(_ATTRIBUTE_EXTRA)
