"""Text rules shared by profiles and the compiler (docs/envelope.md, "Words used below").

Pure: no I/O. Whitespace is exactly the Unicode White_Space set, passed explicitly
because Python's ``str.strip()`` also strips U+001C-U+001F.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

__all__ = [
    "DEFAULT_IGNORABLE",
    "LABEL_MAX_CHARS",
    "LINE_BREAKS",
    "WHITESPACE",
    "ascii_lower",
    "backslash_escape",
    "escape_hidden",
    "is_blank",
    "is_hidden",
    "is_utf8_encodable",
    "sanitize_label",
    "split_lines",
    "trim",
    "utf8_document",
    "utf8_head",
    "utf8_size",
]

#: The Unicode White_Space property set, as listed in docs/envelope.md.
WHITESPACE: str = (
    "\u0009\u000a\u000b\u000c\u000d"
    "\u0020\u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

#: Every character a reader (or a model) may take as the end of a line: LF, VT, FF, CR, the
#: information separators U+001C-U+001E, NEL, and the Unicode line and paragraph separators
#: (the set of ``str.splitlines``).  CR LF counts as one break.
LINE_BREAKS: str = "\n\x0b\x0c\r\x1c\x1d\x1e\x85\u2028\u2029"

_LINE_BREAK: re.Pattern[str] = re.compile("\r\n|[" + LINE_BREAKS + "]")

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

#: A sanitized label keeps at most this many characters (Unicode scalar values).
LABEL_MAX_CHARS: int = 64


#: Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties; ``unicodedata`` lacks it):
#: characters a renderer draws as nothing, whatever their category (fillers, variation
#: selectors, tags and the code points reserved for more of them).
DEFAULT_IGNORABLE: re.Pattern[str] = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)

#: Categories that are never seen as what they are: controls, format characters (bidirectional
#: controls, zero-width characters, the soft hyphen, …), line and paragraph separators, surrogates.
_HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def is_hidden(c: str) -> bool:
    """True for a character a reader cannot see as itself: a control or format character, a
    line or paragraph separator, or a default-ignorable code point."""
    return unicodedata.category(c) in _HIDDEN_CATEGORIES or DEFAULT_IGNORABLE.match(c) is not None


def _joins_emoji(s: str, i: int) -> bool:
    # ZWJ inside an emoji sequence and the emoji variation selectors after a symbol only choose
    # a picture: shown as they are, so that names with emoji stay readable.
    c, before = s[i], s[i - 1] if i else ""
    if c in "\ufe0e\ufe0f":
        return unicodedata.category(before or " ") == "So"
    if c != "\u200d" or i + 1 >= len(s) or unicodedata.category(s[i + 1]) != "So":
        return False
    return bool(before) and (
        unicodedata.category(before) == "So"
        or before == "\ufe0f"
        or "\U0001f3fb" <= before <= "\U0001f3ff"
    )


def escape_hidden(s: str, shown: Callable[[str], str], keep: str = "") -> str:
    """``s`` with every :func:`is_hidden` character not in ``keep`` replaced by ``shown(c)``.

    A zero-width joiner between emoji and an emoji variation selector stay: they only choose
    the picture.  Returns ``s`` itself when nothing is hidden.
    """
    hidden = [
        i for i, c in enumerate(s) if c not in keep and is_hidden(c) and not _joins_emoji(s, i)
    ]
    if not hidden:
        return s
    out = list(s)
    for i in hidden:
        out[i] = shown(s[i])
    return "".join(out)


def backslash_escape(c: str) -> str:
    """``c`` as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``: how a hidden character is shown to a
    human reader (with :func:`escape_hidden`)."""
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def trim(s: str) -> str:
    """Remove Unicode White_Space characters from both ends of ``s``."""
    return s.strip(WHITESPACE)


def is_blank(s: str) -> bool:
    """True when ``s`` is empty after :func:`trim`."""
    return trim(s) == ""


def sanitize_label(s: str) -> str:
    """Sanitized label: drop Cc characters, trim, keep the first 64 characters, trim again.

    Returns ``""`` when nothing is left (meaning "no label"). Idempotent.
    """
    without_controls = "".join(ch for ch in s if unicodedata.category(ch) != "Cc")
    return trim(trim(without_controls)[:LABEL_MAX_CHARS])


def ascii_lower(s: str) -> str:
    """Lowercase A-Z only: profile keys are hex, and non-ASCII must compare unchanged."""
    return s.translate(_ASCII_LOWER)


def is_utf8_encodable(s: str) -> bool:
    """False for a str holding a lone surrogate, which no UTF-8 encoder accepts."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_document(data: object) -> bytes:
    """The bytes of a JSON document given as ``str`` or bytes-like, its UTF-8 checked whole.

    msgspec validates the UTF-8 of the strings it decodes but skips ignored members unchecked,
    so every reader of a document starts here.  Raises ``UnicodeError`` for text that is not
    UTF-8 (or a ``str`` with a lone surrogate) and ``TypeError`` for anything but text (never
    ``bytes(n)`` of an int, which would allocate n zero bytes).
    """
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        raw.decode("utf-8")
        return raw
    raise TypeError("expected JSON text as str or bytes")


def split_lines(s: str) -> list[str]:
    """``s`` cut at every line break of :data:`LINE_BREAKS` (CR LF as one), breaks removed.

    Unlike ``str.splitlines`` a trailing break gives a trailing empty line, so joining the
    result with ``"\\n"`` only normalizes the breaks and loses nothing else.
    """
    return _LINE_BREAK.split(s)


def utf8_size(s: str) -> int:
    """Bytes of ``s`` in UTF-8 (a lone surrogate, which JSON text may carry, counts 3)."""
    return len(s.encode("utf-8", "surrogatepass"))


def utf8_head(s: str, max_bytes: int) -> str:
    """The longest start of ``s`` whose UTF-8 encoding has at most ``max_bytes`` bytes (never
    half a character)."""
    head = s[: max(0, max_bytes)]  # a character is at least one byte: the cut is in here
    raw = head.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return head
    return raw[:max_bytes].decode("utf-8", "ignore")
