"""The escapes of the turn envelope (docs/envelope.md, "Escaping").

The envelope is XML-like, not XML: these escapes only keep model-visible text from opening or
closing envelope elements, keep attribute values on one line inside their quotes, and show the
invisible characters of names (labels, the channel name) as character references.
"""

from __future__ import annotations

from typing import Final

from nostr_buzz.text.unicode import LINE_BREAKS, WHITESPACE, escape_hidden

_ATTRIBUTE_EXTRA: Final = str.maketrans(
    {'"': "&quot;", "'": "&apos;", "\t": " ", **dict.fromkeys(LINE_BREAKS, " ")}
)


def escape_text(s: str) -> str:
    """``&`` → ``&amp;``, then ``<`` → ``&lt;``, then ``>`` → ``&gt;``."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


#: Whitespace and line breaks keep their own rules (a label is one line, an attribute value's
#: breaks and tabs become spaces).
_SHOWN_AS_SPACE: Final = WHITESPACE + LINE_BREAKS


def _reference(c: str) -> str:
    return f"&#x{ord(c):04X};"


def escape_name(s: str) -> str:
    """:func:`escape_text`, then each hidden character (a control, format, bidirectional or
    zero-width character, see :func:`~nostr_buzz.text.unicode.is_hidden`) other than whitespace as
    a character reference: ``Mor\u200bgan`` → ``Mor&#x200B;gan``.

    A name cannot hide a character, reverse the text after it or read as someone else's by an
    invisible difference; ``&`` is already ``&amp;``, so the escape is read back unambiguously.
    """
    return escape_hidden(escape_text(s), _reference, keep=_SHOWN_AS_SPACE)


def escape_attribute(s: str) -> str:
    """:func:`escape_name`, then quotes to entities and each line break and tab to a space.

    Line breaks are all of :data:`~nostr_buzz.text.unicode.LINE_BREAKS` (newline, CR, U+2028, …),
    so an attribute value always stays on its line.
    """
    return escape_name(s).translate(_ATTRIBUTE_EXTRA)
