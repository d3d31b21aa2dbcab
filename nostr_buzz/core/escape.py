"""The two escapes of the turn envelope (spec 03, "Escaping").

The envelope is XML-like, not XML: these escapes only keep model-visible text from opening or
closing envelope elements, and keep attribute values on one line inside their quotes.
"""

from __future__ import annotations

from typing import Final

_ATTRIBUTE_EXTRA: Final = str.maketrans(
    {'"': "&quot;", "'": "&apos;", "\n": " ", "\r": " ", "\t": " "}
)


def escape_text(s: str) -> str:
    """``&`` → ``&amp;``, then ``<`` → ``&lt;``, then ``>`` → ``&gt;``."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attribute(s: str) -> str:
    """:func:`escape_text`, then quotes to entities and each newline, CR and tab to a space."""
    return escape_text(s).translate(_ATTRIBUTE_EXTRA)
