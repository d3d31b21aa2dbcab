"""Who said what, unforgeably: the names and line layout of message text in a turn envelope.

History lines read ``{label}: {content}``.  Two rules keep a sender from speaking with someone
else's voice there (see docs/envelope.md, "Deliberate differences"):

- **Continuation lines cannot start a message.**  Every line break of
  :data:`~nostr_buzz.text.unicode.LINE_BREAKS` (not only ``\\n``: also CR, NEL, U+2028, U+2029, …)
  ends a line and is written as ``\\n``; a continuation line that holds a colon (or a character
  that reads as one) is indented by two spaces, so only a message's first line can have the
  ``label:`` shape at the start of a line.  Continuation lines without a colon keep their bytes.
- **Labels are unique within a turn.**  When two different actors would show labels that look
  alike (the same :func:`collision_key`: UTS #39 confusable skeletons after NFKC, with invisible
  characters, blank symbols (U+2800) and combining marks dropped, case folded, line breaks and
  colons read as spaces, dots at either end stripped, and text under a bidirectional override
  read in display order too), each gets its short npub
  as a suffix: ``Morgan (npub1qely3nrx)``; when even those collide (a label made to look like a
  suffixed one, or a ground npub prefix), the colliding actors get their full npub, and past
  that their hex key.

Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Final

from nostr_buzz.errors import Nip19Error
from nostr_buzz.nips import nip19
from nostr_buzz.text.confusables import PROTOTYPES
from nostr_buzz.text.unicode import DEFAULT_IGNORABLE, LINE_BREAKS, ascii_lower, split_lines

#: Characters a reader may take for a colon: every one confusables.txt maps to ``:`` and a few
#: more; NFKC already maps the full-width and small forms.
COLON_LIKE: Final = (
    ":\u02d0\u02f8\u0589\u05c3\u0703\u0704\u0903\u0a83\u16ec\u1803\u1804\u1809\u205a\u2236"
    "\ua4fd\ua789\ufe13\ufe30\ufe55\uff1a"
)
_COLON: Final = re.compile("[" + re.escape(COLON_LIKE) + "]")
_LINE_BREAK: Final = re.compile("[" + LINE_BREAKS + "]")
#: Gaps: whitespace, and U+2800 BRAILLE PATTERN BLANK, a symbol (not a space, not ignorable,
#: so neither the skeleton nor ``\s`` drops it) whose glyph is empty.
_SPACES: Final = re.compile(r"[\s\u2800]+")
#: What a label's skeleton may end (or start) with that reads as a speck beside the name: the
#: prototypes of every full stop, middle dot and comma of confusables.txt (``.`` ``·`` ``˳``
#: ``,``) and the raised dot, which has none.
_SPECKS: Final = ".\u00b7\u02f3\u2e33,"
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


@functools.cache
def prototypes() -> dict[int, str]:
    """confusables.txt as a ``str.translate`` table: code point to its prototype."""
    table: dict[int, str] = {}
    for line in PROTOTYPES.splitlines():
        target, *sources = line.split(" ")
        if sources:
            prototype = "".join(chr(int(c, 16)) for c in target.split("+"))
            table.update(dict.fromkeys((int(c, 16) for c in sources), prototype))
    return table


def _ignorable(c: str) -> bool:
    return unicodedata.category(c) == "Cf" or DEFAULT_IGNORABLE.match(c) is not None


def skeleton(text: str) -> str:
    """UTS #39's skeleton: NFD, default-ignorable (and any other format) characters removed,
    each character replaced by its confusables.txt prototype, NFD again."""
    decomposed = unicodedata.normalize("NFD", text)
    visible = "".join(c for c in decomposed if not _ignorable(c))
    return unicodedata.normalize("NFD", visible.translate(prototypes()))


#: Explicit bidirectional openers: (right-to-left, override).  FSI counts as LRI: labels are
#: compared in display order only as far as an override decides it.
_BIDI_OPEN: Final = {
    "\u202a": (False, False),  # LRE
    "\u202b": (True, False),  # RLE
    "\u202d": (False, True),  # LRO
    "\u202e": (True, True),  # RLO
    "\u2066": (False, False),  # LRI
    "\u2067": (True, False),  # RLI
    "\u2068": (False, False),  # FSI
}
_BIDI_CLOSE: Final = "\u202c\u2069"  # PDF, PDI


def _display_order(text: str) -> str:
    """``text`` in the order a bidirectional renderer shows it, as far as its explicit
    embeddings and overrides decide (levels of UAX #9 X1-X8 and I1-I2, reordered by L2;
    neutrals take their embedding's level, mirroring is left out)."""
    stack: list[tuple[int, str | None]] = [(0, None)]
    chars: list[str] = []
    levels: list[int] = []
    for c in text:
        if c in _BIDI_OPEN:
            rtl, override = _BIDI_OPEN[c]
            level = stack[-1][0]
            level = level + 1 | 1 if rtl else level + 2 & ~1
            stack.append((level, ("R" if rtl else "L") if override else None))
            continue
        if c in _BIDI_CLOSE:
            if len(stack) > 1:
                stack.pop()
            continue
        level, forced = stack[-1]
        kind = forced or unicodedata.bidirectional(c)
        if (kind == "L" and level % 2) or (kind in ("R", "AL", "AN", "EN") and not level % 2):
            level += 1
        chars.append(c)
        levels.append(level)
    odd = [level for level in levels if level % 2]
    for at in range(max(levels, default=0), min(odd, default=1) - 1, -1):
        i = 0
        while i < len(chars):
            if levels[i] < at:
                i += 1
                continue
            j = i
            while j < len(chars) and levels[j] >= at:
                j += 1
            chars[i:j] = chars[i:j][::-1]
            levels[i:j] = levels[i:j][::-1]
            i = j
    return "".join(chars)


def collision_key(label: str) -> str:
    """What a reader sees of a label: two labels with the same key pass for each other.

    NFKC, then the skeleton; then case folding and the skeleton again (a prototype may be a
    capital letter); combining marks are dropped (an accent is a few pixels), and so are
    colons, line breaks and gaps (a blank filler passes for a space, a space is a gap), and
    dots and commas at either end (``Grace Cooper.`` is read as ``Grace Cooper``).
    """
    s = skeleton(unicodedata.normalize("NFKC", one_line(label)))
    s = skeleton(s.casefold())
    s = "".join(c for c in s if unicodedata.category(c) not in ("Mn", "Me"))
    return _SPACES.sub("", _COLON.sub("", one_line(s))).strip(_SPECKS)


def _collision_keys(label: str) -> set[str]:
    keys = {collision_key(label)}
    if any(c in _BIDI_OPEN for c in label):
        keys.add(collision_key(_display_order(label)))
    return keys


def _npub(actor: str, short: bool) -> str:
    try:
        npub = nip19.encode("npub", ascii_lower(actor))
    except Nip19Error:
        return actor  # not a public key (a hand-written turn file): the string itself
    return npub[:SHORT_NPUB] if short else npub


#: How far a label is spelled out: as chosen, then with the short npub, the full npub, the hex key.
_MAX_SUFFIX: Final = 3


def _suffixed(name: str, actor: str, level: int) -> str:
    if level == 0:
        return name
    suffix = actor if level == _MAX_SUFFIX else _npub(actor, short=level == 1)
    return f"{name} ({suffix})"


def unique_labels(actors: Iterable[str], label_of: Callable[[str], str]) -> dict[str, str]:
    """Each actor's label, made unique within the turn; keys are ASCII-lowercased actors.

    ``label_of(actor)`` is the actor's sanitized label, ``""`` for none; an actor with none is
    shown by its own string (the history line's fallback), and that takes part in the check.
    Actors with no collision keep their label unchanged (``""`` stays ``""``).  Actors whose
    labels collide are all spelled out one step further (short npub, full npub, hex key), until
    no two shown labels have a :func:`collision_key` in common.
    """
    names: dict[str, str] = {}
    for actor in actors:
        names.setdefault(ascii_lower(actor), label_of(actor) or actor)
    level = dict.fromkeys(names, 0)
    rendered = {key: label_of(key) for key in names}
    while True:
        groups: dict[str, set[str]] = {}
        for key in sorted(names):
            for collision in _collision_keys(_suffixed(names[key], key, level[key])):
                groups.setdefault(collision, set()).add(key)
        raised = False
        for group in groups.values():
            if len(group) < 2:
                continue
            top = min(max(level[key] for key in group) + 1, _MAX_SUFFIX)
            for key in group:
                if level[key] < top:
                    level[key], raised = top, True
        if not raised:
            break
    for key, n in level.items():
        if n:
            rendered[key] = _suffixed(names[key], key, n)
    return rendered
