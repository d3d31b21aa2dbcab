"""Fixtures shared by the whole tree (helpers to import live in tests/support/).

- ``no_ambient_config``: no BUZZ_* variable from the machine, an empty working directory (so no
  ./buzz.toml), for tests that run ``buzz`` in process;
- ``common_umask``: umask 022, for tests of which files the code makes private;
- ``bg``: a module-wide background loop for relays that synchronous tests talk to;
- ``relay``: a real LocalRelay on 127.0.0.1 for one test;
- ``world``: that relay with fresh owner, agent and human keys, for bot tests.

The fixed keys most tests share are in tests/support/keys.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nostr_buzz.keys import SecretKey
from tests.support.bot_world import World
from tests.support.cli import BackgroundLoop
from tests.support.relays import RunningRelay, local_relay


@pytest.fixture
def no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("BUZZ_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def common_umask() -> Iterator[None]:
    """The common default umask (files 0644 unless the code makes them private)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="module")
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture
async def relay() -> AsyncIterator[RunningRelay]:
    async with local_relay() as running:
        yield running


@pytest.fixture
async def world(relay: RunningRelay, tmp_path: Path) -> World:
    return World(relay, *(SecretKey.generate() for _ in range(3)), tmp_path)
