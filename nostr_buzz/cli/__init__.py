"""The ``buzz`` command line: one module per command group, wired together in ``app``.

The command line is an extra: ``pip install nostr-buzz`` is the library alone, and ``buzz``
then says which extra to install instead of failing with a traceback (:func:`main`).
"""

from __future__ import annotations

import sys

from nostr_buzz.cli.extras import missing_extra


def main() -> None:
    """The console script: the command line, or a one-line message naming the extra to
    install when it is missing (exit 1)."""
    try:
        from nostr_buzz.cli.app import run
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(message, file=sys.stderr, flush=True)
        sys.exit(1)
    run()
