"""``buzz relay``: an embedded Nostr relay on 127.0.0.1 for development and the demo (docs/cli.md).

It is nostr-sdk's ``LocalRelay`` (the optional ``relay`` extra), imported only when the command
runs.  The relay's ``ws://`` URL is the one line on stdout; it runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nostr_buzz.cli.common import progress, run
from nostr_buzz.cli.output import CliFailure, ExitCode, write_stdout

INSTALL_HINT = "pip install 'nostr-buzz[relay]'"

# nostr-sdk's defaults (60 events per minute per connection) throttle local bulk publishing.
LOCAL_NOTES_PER_MINUTE = 100_000
LOCAL_MAX_REQS = 500


def local_relay_builder(sdk: Any, host: str) -> Any:
    """nostr-sdk's ``LocalRelayBuilder`` on ``host``, with limits that let local bulk
    publishing (a burst, the metrics) through."""
    limit = sdk.RateLimit(max_reqs=LOCAL_MAX_REQS, notes_per_minute=LOCAL_NOTES_PER_MINUTE)
    return sdk.LocalRelayBuilder().addr(host).rate_limit(limit)


def _import_nostr_sdk() -> Any:
    try:
        import nostr_sdk
    except ImportError:
        raise CliFailure(
            ExitCode.BAD_INPUT, f"the embedded relay needs nostr-sdk: {INSTALL_HINT}"
        ) from None
    return nostr_sdk


async def _serve(sdk: Any, *, host: str, port: int, db: Path | None, auth: bool) -> None:
    loop = asyncio.get_running_loop()
    # LMDB (and any Python callback) needs the loop registered with uniffi first.
    sdk.uniffi_set_event_loop(loop)
    builder = local_relay_builder(sdk, host)
    if port:  # without a port the relay picks a free one and reports it in url()
        builder = builder.port(port)
    database: Any = None
    if db is not None:
        try:
            db.mkdir(parents=True, exist_ok=True)
            database = await sdk.NostrLmdb.open(str(db))
        except Exception as exc:  # OSError or the binding's own error type
            raise CliFailure(ExitCode.BAD_INPUT, f"cannot open the store at {db}: {exc}") from None
        builder = builder.database(database)
    if auth:
        builder = builder.nip42(
            sdk.LocalRelayBuilderNip42(mode=sdk.LocalRelayBuilderNip42Mode.BOTH)
        )
    relay = builder.build()
    stop = asyncio.Event()
    handled = (signal.SIGINT, signal.SIGTERM)
    for signum in handled:
        loop.add_signal_handler(signum, stop.set)
    try:
        try:
            await relay.run()
            url = str(await relay.url())
        except Exception as exc:  # e.g. the port is taken; the binding raises its own types
            raise CliFailure(
                ExitCode.NETWORK, f"cannot start the relay on {host}:{port or 'any port'}: {exc}"
            ) from None
        write_stdout(url + "\n")
        progress(
            f"relay running at {url} ({'LMDB ' + str(db) if db else 'in memory'}"
            f"{', NIP-42 required' if auth else ''}); Ctrl-C stops it"
        )
        await stop.wait()
    finally:
        relay.shutdown()
        for signum in handled:
            loop.remove_signal_handler(signum)
        # Release nostr-sdk's objects now, while the loop runs: left to interpreter teardown,
        # the LMDB store was freed from a runtime thread and crashed the process (SIGSEGV in
        # about one stop in four with --db; about one in a hundred after this).
        del relay, builder, database
        gc.collect()


def relay_command(
    port: Annotated[
        int,
        typer.Option(
            "--port", metavar="PORT", min=0, max=65535, help="TCP port (0: any free port)."
        ),
    ] = 0,
    host: Annotated[
        str, typer.Option("--host", metavar="ADDRESS", help="Address to listen on.")
    ] = "127.0.0.1",
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="DIR",
            help="LMDB directory: events survive restarts (default: in memory).",
            file_okay=False,
            show_default=False,
        ),
    ] = None,
    auth: Annotated[
        bool, typer.Option("--auth", help="Require NIP-42 authentication to read and write.")
    ] = False,
) -> None:
    """Run a local Nostr relay and print its ws:// URL; SIGINT or SIGTERM stops it."""
    sdk = _import_nostr_sdk()
    run(_serve(sdk, host=host, port=port, db=db, auth=auth))
    if db is not None:
        # nostr-sdk 0.45's LMDB store can still crash the interpreter's teardown from one of
        # its runtime threads (see above).  The relay has stopped and LMDB commits are durable,
        # so end the process here, after flushing, instead of risking a SIGSEGV exit status.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
