"""The bot plugin (``buzz run``): an agent that answers Nostr mentions through ACP.

The package follows the path a turn takes:

* :mod:`.config` — :class:`PluginConfig` and the ``--shard i/n`` split;
* :mod:`.intake` — pure decisions about an incoming event: owner command, refusal (with its
  reason), another shard's, or admission to the queue; the position it moves the bot to;
* :mod:`.state` — the one SQLite database: queue journal, position, remembered ids, outbox;
* :mod:`.context` — thread/DM history, profiles and channel metadata for the compiler;
* :mod:`.standing` — the standing context each new session starts with, frozen for its life
  (configured files, plus a channel's canvas, huddle guidelines and the agent's core memory);
* :mod:`.turn` — the running turn (phases preparing → live → ended → settled), steering,
  settlement in the queue;
* :mod:`.supervisor` — the agent process, its sessions, restarts with backoff;
* :mod:`.outputs` — pure builders of the reply and the metric payload;
* :mod:`.delivery` — stores and sends replies and metrics;
* :mod:`.plugin` — :class:`BuzzPlugin`, which wires them.
"""

from .config import PluginConfig, Shard, parse_shard, shard_of
from .plugin import BuzzPlugin

__all__ = ["BuzzPlugin", "PluginConfig", "Shard", "parse_shard", "shard_of"]
