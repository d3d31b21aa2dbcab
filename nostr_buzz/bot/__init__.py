"""The bot plugin (``buzz run``): an agent that answers Nostr mentions through ACP.

The package follows the path a turn takes:

* :mod:`.config` — :class:`PluginConfig` and the ``--shard i/n`` split;
* :mod:`.intake` — the bot's gate (the decision itself is the public
  :mod:`nostr_buzz.core.gate`: owner command, refusal with its reason, another shard's, or
  admission to the queue); the position an event moves the bot to;
* :mod:`.replay` — the live subscription and the replay of what was missed (paged back to the
  saved position on start and on every reconnect, only authors the gate admits, clock skew);
* :mod:`.state` — the one SQLite database (:mod:`.state_db`: connection, schema, transactions,
  remembered ids; :mod:`.queue_journal`: the queue's rows; :mod:`.legacy_state`: older state
  files taken in once): queue journal, position, remembered ids, outbox;
* :mod:`.context` — thread/DM history (the public :mod:`nostr_buzz.io.context` and
  :mod:`nostr_buzz.core.context`), profiles and channel metadata for the compiler;
* :mod:`.standing` — the standing context each new session starts with, frozen for its life
  (configured files, plus a channel's canvas, huddle guidelines and the agent's core memory);
* :mod:`.turn` — the worker and the running turn (phases preparing → live → ended →
  settled; it goes live when the driver's stream of facts says its prompt is on the wire),
  steering within the authority boundary, turns the agent starts on its own, the running
  turns on which the agent's permission requests are decided, and settlement: outcome, reply
  and metric in one transaction (the decisions are pure functions of the turn); its parts are
  :mod:`.worker` (the loop), :mod:`.preparer`, :mod:`.running`, :mod:`.steering`,
  :mod:`.turn_report` (reply, metric and their diagnostics) and :mod:`.settling`;
* :mod:`.supervisor` — the agent process and its sessions only, restarts with backoff
  (:mod:`.agent_drivers` builds the driver, :mod:`.channel_sessions` opens or continues a
  channel's session; the
  agent edge itself is :mod:`nostr_buzz.acp`, without I/O, and
  :mod:`nostr_buzz.io.agent_driver`);
* :mod:`.outputs` — pure builders of the reply (:mod:`nostr_buzz.core.reply`, in parts when
  too large), the metric payload, the dead-letter notice, secret redaction;
* :mod:`.delivery` — stores replies and metrics in the outbox, sends and retries them
  (:mod:`.reply_signing` signs and routes a reply, :mod:`.delivery_reports` tells what became
  of each);
* :mod:`.telemetry` — each turn handed to a telemetry sink (``PluginConfig(telemetry=``
  :class:`Telemetry` ``(...))``: OpenTelemetry over OTLP/HTTP, :mod:`nostr_buzz.io.otel`);
* :mod:`.plugin` — :class:`BuzzPlugin`, which wires them; :mod:`.tasks` — what it runs on the
  event loop (its signals, the worker and retry loops, the tasks it spawns) and how it stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nostr_buzz._lazy import lazy_getattr as _lazy_getattr

if TYPE_CHECKING:
    from nostr_buzz.core.telemetry import Telemetry

    from .config import PluginConfig, Shard, parse_shard, shard_of
    from .plugin import BuzzPlugin

__all__ = ["BuzzPlugin", "PluginConfig", "Shard", "Telemetry", "parse_shard", "shard_of"]

# Each name loads on first use: a command that needs only the gate's pure decisions (``buzz
# audit`` imports :mod:`.intake`) stays light, and the plugin loads its running parts when it
# is made and started, not when it is imported.
_EXPORTS: dict[str, str] = {
    "BuzzPlugin": "nostr_buzz.bot.plugin",
    "Telemetry": "nostr_buzz.core.telemetry",
    **dict.fromkeys(("PluginConfig", "Shard", "parse_shard", "shard_of"), "nostr_buzz.bot.config"),
}

__getattr__ = _lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
