"""Who said what, unforgeably: the names and line layout of message text in a turn envelope.

History lines read ``{label}: {content}``.  Two rules keep a sender from speaking with someone
else's voice there (see docs/envelope.md, "Deliberate differences"):

- **Continuation lines cannot start a message.**  Every line break of
  :data:`~nostr_buzz.core.text.LINE_BREAKS` (not only ``\\n``: also CR, NEL, U+2028, U+2029, …)
  ends a line and is written as ``\\n``; a continuation line that holds a colon (or a character
  that reads as one) is indented by two spaces, so only a message's first line can have the
  ``label:`` shape at the start of a line.  Continuation lines without a colon keep their bytes.
- **Labels are unique within a turn.**  When two different actors would show the same label
  (compared after NFKC and case folding, with line breaks and colons read as spaces), each gets
  its short npub as a suffix: ``Morgan (npub1qely3nrx)``; when even those collide (a label
  made to look like a suffixed one, or a ground npub prefix), the colliding actors get their
  full npub.

Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Final

from nostr_buzz.core.text import LINE_BREAKS, ascii_lower, split_lines
from nostr_buzz.errors import Nip19Error
from nostr_buzz.nips import nip19

#: Characters a reader may take for a colon; NFKC already maps the full-width and small forms.
_COLON_LIKE: Final = ":\u02f8\u0589\u05c3\u1804\u205a\u2236\ua789\ufe13\ufe30\ufe55\uff1a"
_COLON: Final = re.compile("[" + re.escape(_COLON_LIKE) + "]")
_LINE_BREAK: Final = re.compile("[" + LINE_BREAKS + "]")
_SPACES: Final = re.compile(r"\s+")
CONTINUATION_INDENT: Final = "  "
#: Characters of the npub kept in the short suffix ("npub1" and eight data characters).
SHORT_NPUB: Final = 13


def _has_colon(line: str) -> bool:
    return _COLON.search(unicodedata.normalize("NFKC", line)) is not None


def message_lines(text: str) -> str:
    """``text`` with every line break written as ``\\n`` and risky continuation lines indented.

    The caller escapes the result; escaping adds no line break and no colon.
    """
    lines = split_lines(text)
    rest = (CONTINUATION_INDENT + line if _has_colon(line) else line for line in lines[1:])
    return "\n".join([lines[0], *rest])


def one_line(label: str) -> str:
    """A label for the start of a history line: line breaks and colons read as spaces."""
    return _COLON.sub(" ", _LINE_BREAK.sub(" ", label))


def _collision_key(label: str) -> str:
    folded = unicodedata.normalize("NFKC", one_line(label)).casefold()
    return _SPACES.sub(" ", _COLON.sub(" ", folded)).strip()


def _npub(actor: str, short: bool) -> str:
    try:
        npub = nip19.encode("npub", ascii_lower(actor))
    except Nip19Error:
        return actor  # not a public key (a hand-written turn file): the string itself
    return npub[:SHORT_NPUB] if short else npub


def unique_labels(actors: Iterable[str], label_of: Callable[[str], str]) -> dict[str, str]:
    """Each actor's label, made unique within the turn; keys are ASCII-lowercased actors.

    ``label_of(actor)`` is the actor's sanitized label, ``""`` for none; an actor with none is
    shown by its own string (the history line's fallback), and that takes part in the check.
    Actors with no collision keep their label unchanged (``""`` stays ``""``).
    """
    names: dict[str, str] = {}
    for actor in actors:
        names.setdefault(ascii_lower(actor), label_of(actor) or actor)
    shown = dict(names)
    rendered = {key: label_of(key) for key in names}
    for short in (True, False):
        groups: dict[str, set[str]] = {}
        for key, label in shown.items():
            groups.setdefault(_collision_key(label), set()).add(key)
        clashing = sorted(k for group in groups.values() if len(group) > 1 for k in group)
        if not clashing:
            break
        for key in clashing:
            rendered[key] = shown[key] = f"{names[key]} ({_npub(key, short)})"
    return rendered
