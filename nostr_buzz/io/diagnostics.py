"""Local observer diagnostics (docs/bot.md): a JSON Lines feed plus an in-process callback.

Each record is ``{seq, timestamp, kind, channelId, sessionId, turnId, payload}``, one compact
JSON object per line.  ``seq`` increases by one per record and continues from the last record
already in the file, so a restarted bot keeps the feed monotonic.  The feed never carries
secrets (strings that look like secret keys are replaced) nor prompt text, unless the feed was
opened with ``include_prompt_text=True``.  The clock is injected.

The file is private (``0600`` in a ``0700`` directory) and bounded: once it reaches
``max_bytes`` (10 MiB by default) it is renamed to ``NAME.1`` (replacing the previous one) and
a new file starts, so refused events from a flood can never fill the disk; ``seq`` goes on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final, Literal

import msgspec

from nostr_buzz.errors import SECRET_HINT, looks_secret
from nostr_buzz.io.filemodes import open_private, read_private
from nostr_buzz.manifest import Manifest
from nostr_buzz.timestamps import rfc3339_ms

__all__ = [
    "AgentDiagnosticKind",
    "DiagnosticCallback",
    "DiagnosticKind",
    "DiagnosticRecord",
    "DiagnosticsFeed",
    "rfc3339_ms",
]

#: What the ACP driver reports about the agent process and its sessions.
AgentDiagnosticKind = Literal[
    "agent_started",  # {agentName, protocolVersion, steeringSupported, pid}
    "agent_exited",  # {returncode}
    "session_started",  # {standingStrategy, permissionMode?, reopened?}
    "session_retired",  # {}
    "steer_sent",  # {method, result}
    "permission_policy_failed",  # {error}
    "permission_decision",  # {decision, title, toolKind, turnRunning, reason, part?, actor?}
]

#: ``on_diagnostic(kind, session_id, payload)``: driver-level observer records (no prompt text).
DiagnosticCallback = Callable[[AgentDiagnosticKind, str | None, dict[str, Any]], None]

#: Every kind of record the feed carries (docs/bot.md).  ``emit`` takes nothing else.
DiagnosticKind = (
    AgentDiagnosticKind
    | Literal[
        # a turn
        "turn_started",
        "prompt_context_delivery",
        "prompt_context_steer",
        "turn_completed",
        "turn_failed",
        "turn_ended",  # {}: the turn left the running turns (settled, cancelled, abandoned)
        "telemetry_failed",  # {error}: the telemetry sink failed (its class; reported once)
        "event_dead_lettered",
        # budgets (docs/bot.md, "Budgets"): {decision, over: [{cap, limit, spent, period}], …}
        "budget_warned",  # over a cap under action "warn": the turn runs, the owner is told
        "budget_stopped",  # over a cap under "stop": the turn is held {eventIds, until, notified}
        "budget_changed",  # the owner's !budget {cap, value} (null: no cap)
        "budget_released",  # {channels}: the holds of an earlier run, decided again at start
        "budget_spend_unread",  # {error}: other shards' metrics could not be read this time
        # what reached the bot
        "event_rejected",
        "owner_command",
        "permission_asked",  # {title, toolKind, sent}: the owner was asked (never the code)
        "permission_limit",  # {unasked, maxQuestions, sent}: requests a turn could not ask
        "approval_refused",  # {reason, verdict, eventId, actor?}: an !allow/!deny, no effect
        "standing_context_frozen",
        "replay_completed",
        "relay_cut_off",
        "relay_backing_off",  # {relay, reason, retryIn, scope}: skipped until then
        "state_unconfirmed",  # {kinds, relays: {url: why}}: a newer version may be there
        "state_import_failed",
        # the agent, as the bot's supervisor sees it
        "agent_restarted",
        "agent_restart_failed",
        "session_replaced",
        # {adapterSessionId, reason: "max_live", sessionClose}: an idle session closed to
        # keep [sessions] max_live (sessionClose: session/close was sent); its receipt stays
        "session_closed",
        # {adapterSessionId, reason, error?}: a new session instead (a private channel's error:
        # its class only, bot/privacy.py)
        "session_not_resumed",
        # thread checkpoints (nips/NIP-TC.md; docs/bot.md, "Thread checkpoints")
        "thread_checkpoint_used",  # {eventId, coversThrough, method}: a new session starts there
        "thread_checkpoint_ignored",  # {eventId, author, reason}: a relay's event not taken
        "thread_checkpoint_queued",  # {eventId, method}: in the outbox with its turn
        "thread_checkpoint_published",  # {eventId, relays}
        "thread_checkpoint_failed",  # {error, method}: a checkpoint not made
        "agent_group_ended",  # {pgid, processes, signal, left}: a killed run's leftover group
        "agent_group_spared",  # {pgid, processes, reason}: a recorded group left alone
        # what the bot sends
        "reply_published",
        "reply_failed",
        "reply_split",
        "reply_cut",  # {keptBytes, droppedBytes, maxReplyBytes}: past [agent] max_reply_bytes
        "reply_relay_skipped",  # {relays, partFloor}: their NIP-11 limits cannot hold a part
        "metric_queued",  # {eventId, costUsd}: the turn's cost, null when not reported
        "metric_published",
        "metric_invalid",
        "outbox_nudged",
        "outbox_given_up",  # {eventId, kind, attempts, error, delivered, missing}: give_up_after
        "private_room_narrowed",  # {inReplyTo, reason, room, maxRecipients}: sender only
        "dm_relays_published",
        "dm_relays_failed",
        "dm_relays_kept",  # {reason}: relay_lists = "leave", unchanged, or not the bot's
        "relay_list_published",
        "relay_list_failed",
        "relay_list_kept",  # {reason}: as dm_relays_kept
    ]
)

_TAIL_BYTES: Final = 64 * 1024
#: Size at which the feed file is rotated.
MAX_FEED_BYTES: Final = 10 << 20


class DiagnosticRecord(msgspec.Struct, frozen=True, rename="camel"):
    """One line of the diagnostics feed (docs/bot.md): its sequence number in the feed, when
    (RFC 3339, UTC), what happened (``kind``: ``turn_started``, ``metric_published``, …), the
    channel, agent session and turn it concerns when any, and the kind's own ``payload``
    (never a secret; never prompt text unless asked for)."""

    seq: int
    timestamp: str
    kind: DiagnosticKind
    channel_id: str | None
    session_id: str | None
    turn_id: str | None
    payload: dict[str, Any]


def _scrub(value: Any) -> Any:
    """Replace anything that looks like a secret key, at any depth."""
    if isinstance(value, str):
        return SECRET_HINT if looks_secret(value) else value
    if isinstance(value, Mapping):
        return {str(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _last_seq(path: Path) -> int:
    """The seq of the file's last complete record, 0 for none."""
    try:
        with read_private(path) as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            tail = fh.read()
    except FileNotFoundError:
        return 0
    for line in reversed(tail.split(b"\n")):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line (crash mid-write) or the cut-off first one
        if isinstance(record, dict) and type(record.get("seq")) is int:
            return int(record["seq"])
    return 0


def _rotated(path: Path) -> Path:
    return path.with_name(path.name + ".1")


def _ends_with_newline(path: Path) -> bool:
    with read_private(path) as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


class DiagnosticsFeed:
    """Append-only JSON Lines observer feed; see the module docstring.

    ``path`` None keeps the feed in-process (callback only).  The callback gets each
    :class:`DiagnosticRecord` after it was written; an exception from it propagates.
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        clock: Callable[[], datetime],
        callback: Callable[[DiagnosticRecord], None] | None = None,
        include_prompt_text: bool = False,
        max_bytes: int = MAX_FEED_BYTES,
    ) -> None:
        self._path = Path(path) if path is not None else None
        self._max_bytes = max_bytes
        self._clock = clock
        self._callback = callback
        self.include_prompt_text = include_prompt_text
        self._file: IO[bytes] | None = None
        self._seq = 0
        self._closed = False
        # The file is opened by the first record, not here: creating a feed (and the bot
        # plugin that owns one) creates nothing on disk.
        self._opened = self._path is None
        if self._path is not None:
            # Just after a rotation the current file is empty: the last record is in NAME.1.
            self._seq = _last_seq(self._path) or _last_seq(_rotated(self._path))

    def _open(self) -> None:
        self._opened = True
        if self._path is not None:
            self._file = open_private(self._path)
            if self._file.tell() > 0 and not _ends_with_newline(self._path):
                self._file.write(b"\n")  # a torn last line must not swallow the next record

    @property
    def seq(self) -> int:
        """The seq of the last record (emitted, or already in the file; 0 for none)."""
        return self._seq

    def emit(
        self,
        kind: DiagnosticKind,
        *,
        channel_id: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> DiagnosticRecord:
        if not self._opened and not self._closed:
            self._open()
        self._seq += 1
        record = DiagnosticRecord(
            seq=self._seq,
            timestamp=rfc3339_ms(self._clock()),
            kind=kind,
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload=_scrub(dict(payload or {})),
        )
        if self._file is not None:
            self._file.write(msgspec.json.encode(record) + b"\n")
            self._file.flush()
            if self._file.tell() >= self._max_bytes:
                self._rotate()
        if self._callback is not None:
            self._callback(record)
        return record

    def _rotate(self) -> None:
        assert self._file is not None and self._path is not None
        self._file.close()
        os.replace(self._path, _rotated(self._path))
        self._file = open_private(self._path)

    def close(self) -> None:
        """Close the file; later records reach only the callback."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> DiagnosticsFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the kinds of docs/bot.md -------------------------------------------------------------

    def turn_started(
        self,
        triggering_event_ids: Sequence[str],
        *,
        channel_id: str | None,
        session_id: str | None,
        turn_id: str | None,
    ) -> DiagnosticRecord:
        return self.emit(
            "turn_started",
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload={"triggeringEventIds": list(triggering_event_ids)},
        )

    def prompt_context_delivery(
        self,
        sections: Sequence[str],
        manifest: Manifest,
        *,
        standing_context_included: bool,
        event_delta_count: int,
        channel_id: str | None,
        session_id: str | None,
        turn_id: str | None,
        private: bool = False,
    ) -> DiagnosticRecord:
        """Just before ``session/prompt``: its size and manifest; the text only on request,
        and never when the prompt holds a private message (``private``)."""
        payload: dict[str, Any] = {
            "promptBytes": sum(len(s.encode("utf-8")) for s in sections),
            "standingContextIncluded": standing_context_included,
            "eventDeltaCount": event_delta_count,
            "contextManifest": _manifest_obj(manifest),
        }
        if self.include_prompt_text and not private:
            payload["promptText"] = list(sections)
        return self.emit(
            "prompt_context_delivery",
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload=payload,
        )

    def prompt_context_steer(
        self,
        delivery_outcome: str,
        manifest: Manifest | None,
        *,
        channel_id: str | None,
        session_id: str | None,
        turn_id: str | None,
    ) -> DiagnosticRecord:
        """``injected`` with the ledger snapshot, ``startedNewTurn`` with the steer's own
        manifest (docs/bot.md, "Steering")."""
        payload: dict[str, Any] = {"deliveryOutcome": delivery_outcome}
        if manifest is not None:
            payload["contextManifest"] = _manifest_obj(manifest)
        return self.emit(
            "prompt_context_steer",
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload=payload,
        )

    def turn_completed(
        self,
        outcome: str,
        stop_reason: str,
        *,
        channel_id: str | None,
        session_id: str | None,
        turn_id: str | None,
    ) -> DiagnosticRecord:
        return self.emit(
            "turn_completed",
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload={"outcome": outcome, "stopReason": stop_reason},
        )

    def metric_queued(
        self,
        event_id: str,
        *,
        cost_usd: float | None = None,
        channel_id: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
    ) -> DiagnosticRecord:
        """A metric stored in the outbox, with the turn's cost in USD (what ``buzz watch``
        sums as the day's spend; None when the agent reported none)."""
        return self.emit(
            "metric_queued",
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload={"eventId": event_id, "costUsd": cost_usd},
        )

    def metric_published(
        self,
        event_id: str,
        relays: Iterable[str],
        *,
        channel_id: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
        kind: DiagnosticKind = "metric_published",
    ) -> DiagnosticRecord:
        """An event for the owner some relay accepted: a metric (``kind``: or a thread
        checkpoint's ``thread_checkpoint_published``)."""
        return self.emit(
            kind,
            channel_id=channel_id,
            session_id=session_id,
            turn_id=turn_id,
            payload={"eventId": event_id, "relays": list(relays)},
        )

    def event_rejected(
        self,
        reason: str,
        *,
        event_id: str | None = None,
        channel_id: str | None = None,
    ) -> DiagnosticRecord:
        payload: dict[str, Any] = {"reason": reason}
        if event_id is not None:
            payload["eventId"] = event_id
        return self.emit("event_rejected", channel_id=channel_id, payload=payload)


def _manifest_obj(manifest: Manifest) -> Any:
    """The manifest as its canonical JSON object (what NIP-AM's ``contextManifest`` holds)."""
    return json.loads(manifest.to_json())
