"""What the publisher's reports on the bot's stored events become (:mod:`.delivery`): a metric
or thread checkpoint published; a reply published or failed, with every relay's refusal (a
reply too large for the relays is then split, by the caller); each wrap of a private answer
published or failed (the agent's own copy only when it fails); an entry that no relay took
within ``[outbox] give_up_after`` given up, once.  Ids, kinds and relays only, never the text.

Until its report, what each stored event is for is kept here in memory: its turn's ids, what a
private answer's wrap carries, whether it is the agent's own message to the owner.  After a
restart only the event itself is known (a wrap's ``p`` tag names its addressee)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticKind, DiagnosticsFeed
from nostr_buzz.io.publisher import PublishReport
from nostr_buzz.nips import nip10, nip59
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_tc import CHECKPOINT_KIND

from .outputs import TurnIds, too_large

__all__ = ["DeliveryReports", "Split"]

#: Told a reply that relays refused as too large, the size that fits, and its turn's ids.
Split = Callable[[Event, int, TurnIds | None], None]


class DeliveryReports:
    """The diagnostics of the publisher's reports, and what they need to know of each stored
    event (see the module docstring)."""

    def __init__(
        self, agent: str, give_up_after: float, diagnostics: DiagnosticsFeed, split: Split
    ) -> None:
        self.agent = agent
        #: Event id → the ids of the turn it came from (its reports carry them).
        self.ids: dict[str, TurnIds] = {}
        #: What each private answer's wrap carries: (answer id, message answered, addressee).
        self.wraps: dict[str, tuple[str, str, str]] = {}
        #: The wraps of the agent's own messages to the owner (``Delivery.tell_owner``): their
        #: callers report them (``permission_asked``, ``budget_warned``), not as replies.
        self.notes: set[str] = set()
        self._give_up_after = give_up_after
        self._diagnostics = diagnostics
        self._split = split

    def on_report(self, report: PublishReport) -> None:
        event = report.event
        if event is None:
            return
        if report.given_up:
            self._given_up(event, report)
            return
        if report.earlier:  # delivered and said so before: this was for the slower relays
            return
        if event.kind in (METRIC_KIND, CHECKPOINT_KIND):
            if report.delivered:
                ids = self.ids.pop(event.id, None)
                accepted = [url for url, v in report.verdicts.items() if v.ok]
                kwargs = ids.as_kwargs() if ids is not None else {}
                kind: DiagnosticKind = "metric_published"
                if event.kind == CHECKPOINT_KIND:
                    kind = "thread_checkpoint_published"
                self._diagnostics.metric_published(event.id, accepted, kind=kind, **kwargs)
            return
        if event.id in self.notes:
            if report.delivered or report.given_up:
                self.notes.discard(event.id)
            return
        if event.kind == nip59.GIFT_WRAP_KIND:
            self._private_report(event, report)
            return
        self._reply_report(event, report)

    def _given_up(self, event: Event, report: PublishReport) -> None:
        """An entry no relay took in time has left the outbox for good: said once, with what
        went wrong (ids and relay refusals, never the text)."""
        ids = self.ids.pop(event.id, None)
        self.wraps.pop(event.id, None)
        kwargs = ids.as_kwargs() if ids is not None else {}
        payload = {
            "eventId": event.id,
            "kind": event.kind,
            "attempts": report.attempts,
            "error": report.error,
            "giveUpAfter": self._give_up_after,
            "delivered": report.delivered,
            "missing": list(report.waiting),
        }
        self._diagnostics.emit("outbox_given_up", **kwargs, payload=payload)

    def _private_report(self, wrap: Event, report: PublishReport) -> None:
        """Each wrap of a private answer: published (to its addressee; the agent's own copy
        is not reported when it succeeds) or failed, with ids and relays, never the text."""
        # After a restart only the wrap itself is known: its p tag names the addressee.
        addressee = next((t[1] for t in wrap.tags if len(t) >= 2 and t[0] == "p"), None)
        answer, answered, addressee = self.wraps.get(wrap.id, (None, None, addressee))
        ids = self.ids.get(wrap.id)
        own_copy = addressee == self.agent
        if report.delivered:
            self.ids.pop(wrap.id, None)
            self.wraps.pop(wrap.id, None)
            if own_copy:
                return
        payload: dict[str, Any] = {
            "eventId": answer or wrap.id,
            "inReplyTo": answered,
            "private": True,
            "wrap": wrap.id,
            "relays": [url for url, v in report.verdicts.items() if v.ok],
        }
        if not report.delivered:
            payload.update(error=report.error, attempts=report.attempts, ownCopy=own_copy)
        kind: DiagnosticKind = "reply_published" if report.delivered else "reply_failed"
        self._diagnostics.emit(kind, **(ids.as_kwargs() if ids else {}), payload=payload)

    def _reply_report(self, event: Event, report: PublishReport) -> None:
        ids = self.ids.get(event.id)
        kwargs = ids.as_kwargs() if ids is not None else {"channel_id": nip10.channel(event)}
        payload: dict[str, Any] = {
            "eventId": event.id,
            "inReplyTo": nip10.thread_ref(event).parent,
            "relays": [url for url, v in report.verdicts.items() if v.ok],
        }
        if report.delivered:
            self.ids.pop(event.id, None)
            self._diagnostics.emit("reply_published", **kwargs, payload=payload)
            return
        refusals = {url: v.reason for url, v in report.verdicts.items() if not v.ok}
        payload.update(error=report.error, refusals=refusals, attempts=report.attempts)
        self._diagnostics.emit("reply_failed", **kwargs, payload=payload)
        content = len(event.content.encode("utf-8"))
        sizes = [s for r in refusals.values() if (s := too_large(r, content)) is not None]
        if sizes and report.stored:
            self._split(event, min(sizes), ids)
