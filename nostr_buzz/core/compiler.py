"""The context compiler (docs/envelope.md): one batch plus resolved context → sections + manifest.

Pure: no I/O, clock, environment or randomness.  Identical inputs give byte-identical sections
and manifests in any process.  docs/envelope.md states the format; the section names in the comments
are its headings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple

import msgspec

from nostr_buzz.core.compaction import REDELIVERED_AFTER_COMPACTION
from nostr_buzz.core.labels import message_lines, one_line, unique_labels
from nostr_buzz.core.turn_input import (
    BUZZ_RETRIEVAL,
    ChannelInfo,
    ProfileInfo,
    Retrieval,
    Standing,
    ThreadCheckpointInput,
    TurnContext,
    TurnEvent,
    TurnInput,
)
from nostr_buzz.event import Event
from nostr_buzz.manifest import (
    Layer,
    Manifest,
    content_hash,
    estimate_tokens,
    manifest_from_layers,
)
from nostr_buzz.nips import nip10
from nostr_buzz.text.escape import escape_attribute, escape_name, escape_text
from nostr_buzz.text.unicode import (
    LINE_BREAKS,
    WHITESPACE,
    ascii_lower,
    is_blank,
    sanitize_label,
    trim,
)

#: The fixed ``<continuation-guidance>`` note of every steer (docs/envelope.md).
STEER_NOTE: Final = (
    "A new message arrived while you were working. Keep going with your current work and take "
    "the new message into account if it is relevant; if it is not, acknowledge it briefly and "
    "carry on."
)

#: The body of ``<workspace>`` (docs/envelope.md); ``{cwd}`` is the directory as configured.
WORKSPACE_BODY: Final = (
    "Your working directory is {cwd}. Keep the files you create and the repositories you "
    "clone there."
)

#: The body of ``<buzz-checkpoint-request>`` (docs/envelope.md, "The thread checkpoint"): what
#: the agent is asked before its session closes, when a summary turn is configured.
CHECKPOINT_REQUEST: Final = (
    "This session is about to close. Write a summary of the conversation so far for whoever "
    "continues it: who asked what, what was decided or done, and what is still open. Reply "
    "with the summary alone; it is not sent to anyone in the conversation."
)

DESCRIPTION_LIMIT: Final = 500
_NEWLINES: Final = re.compile("[" + LINE_BREAKS + "]")
_HANDLE: Final = re.compile(r"[A-Za-z0-9._-]+")


class CompiledTurn(msgspec.Struct, frozen=True):
    """The prompt sections (each one text block to the agent) and their manifest."""

    sections: list[str]
    manifest: Manifest


class CompiledSteer(msgspec.Struct, frozen=True):
    """A steer (docs/bot.md): one text block and its manifest (with ``steer_delivery_contract``)."""

    text: str
    manifest: Manifest


class _Profiles:
    """Profile lookups with ASCII-lowercased keys; on a collision the later key wins.

    :meth:`label` gives the label shown in this turn: unique among the turn's actors (see
    :mod:`nostr_buzz.core.labels`) once :meth:`settle` has seen them all.
    """

    def __init__(self, profiles: Mapping[str, ProfileInfo]) -> None:
        self._table: dict[str, ProfileInfo] = {}
        for key, profile in profiles.items():
            self._table[ascii_lower(key)] = profile
        self._shown: dict[str, str] = {}

    def sanitized_label(self, pubkey: str) -> str:
        """The sanitized profile label, or "" for none."""
        profile = self._table.get(ascii_lower(pubkey))
        if profile is None or profile.label is None:
            return ""
        return sanitize_label(profile.label)

    def settle(self, actors: Iterable[str]) -> None:
        """Fix the labels shown for the turn's actors (every pubkey the turn names)."""
        self._shown = unique_labels(actors, self.sanitized_label)

    def label(self, pubkey: str) -> str:
        """The label shown for ``pubkey`` in this turn, or "" for none."""
        shown = self._shown.get(ascii_lower(pubkey))
        return self.sanitized_label(pubkey) if shown is None else shown

    def is_agent(self, pubkey: str) -> bool:
        profile = self._table.get(ascii_lower(pubkey))
        return profile is not None and profile.is_agent

    def known_labels(self) -> list[str]:
        """Non-empty sanitized profile labels, longest first (ties in table order, stable)."""
        labels = [sanitize_label(p.label) for p in self._table.values() if p.label is not None]
        return sorted((label for label in labels if label), key=len, reverse=True)


class _LayerKind(NamedTuple):
    """What the manifest says of one kind of layer, apart from its content."""

    order: int
    scope: str
    source: str
    authority: str
    freshness: str


#: The freshness of a layer read from relays when its newest version could not be confirmed
#: (a relay that should have answered did not: nips/STANDING.md).
UNCONFIRMED: Final = "unconfirmed"

#: Every layer a turn or a steer can record, by name: the manifest's fixed columns.
LAYER_TABLE: Final[Mapping[str, _LayerKind]] = {
    "workspace": _LayerKind(1, "session", "agent_workspace", "instructions", "session_start"),
    "platform_contract": _LayerKind(1, "runtime", "base_prompt", "instructions", "configured"),
    "persona_and_team_guidance": _LayerKind(
        2, "agent_community", "agent_configuration", "instructions", "configured"
    ),
    "core_memory": _LayerKind(3, "agent_owner", "core_engram", "advisory_context", "session_start"),
    "channel_snapshot": _LayerKind(4, "channel", "channel_metadata", "shared_evidence", "cached"),
    "channel_canvas": _LayerKind(
        4, "channel", "channel_canvas", "shared_evidence", "session_start"
    ),
    # A new session's summary of its thread so far (nips/NIP-TC.md): versioned by the signed
    # checkpoint's event id, not by a hash of its text.
    "thread_checkpoint": _LayerKind(
        5, "thread", "thread_checkpoint_event", "advisory_context", "session_start"
    ),
    "context_status": _LayerKind(6, "turn", "delivery_state", "evidence", "current"),
    # The scope of the thread delta is the context's kind (thread or dm), given per turn.
    "recent_thread_delta": _LayerKind(6, "thread", "relay_events", "evidence", "current"),
    "interrupted_turn": _LayerKind(6, "thread", "cancelled_events", "evidence", "current"),
    "current_instruction": _LayerKind(7, "turn", "nostr_event", "authoritative", "current"),
    # The request for a summary before a session closes (a turn of its own, no Nostr event).
    "checkpoint_request": _LayerKind(
        7, "session", "buzz_checkpoint_request", "instructions", "current"
    ),
    "delivery_contract": _LayerKind(8, "turn", "buzz_routing", "routing_constraint", "current"),
    "steer_delivery_contract": _LayerKind(
        8, "turn", "native_steer_framing", "routing_constraint", "current"
    ),
}


def _read(redelivered: str | None, unconfirmed: bool) -> str | None:
    """The freshness of a layer read from relays: :data:`UNCONFIRMED` when a relay that should
    have answered did not (a newer version may exist: that outranks a redelivery), else the
    redelivery's, else the table's (docs/envelope.md)."""
    return UNCONFIRMED if unconfirmed else redelivered


def _layer(
    name: str,
    content: str,
    *,
    scope: str | None = None,
    version: str | None = None,
    truncated: bool = False,
    freshness: str | None = None,
) -> Layer:
    """The manifest entry of layer ``name`` (see :data:`LAYER_TABLE`) holding ``content``;
    ``freshness``: instead of the table's (:func:`_read`, a redelivery after a compaction)."""
    kind = LAYER_TABLE[name]
    return Layer(
        order=kind.order,
        layer=name,
        scope=kind.scope if scope is None else scope,
        source=kind.source,
        version=content_hash(content) if version is None else version,
        authority=kind.authority,
        freshness=kind.freshness if freshness is None else freshness,
        estimated_tokens=estimate_tokens(content),
        truncated=truncated,
    )


# ---------------------------------------------------------------------------------------------
# Standing sections


def _section(tag: str, body: str) -> str:
    return f"<{tag}>\n{escape_text(body)}\n</{tag}>"


def _prerendered_or_section(tag: str, raw: str | None) -> str | None:
    """core-memory / channel-canvas: trim; an already rendered section is used unescaped."""
    if raw is None:
        return None
    body = trim(raw)
    if not body:
        return None
    if body.startswith(f"<{tag}>") and body.endswith(f"</{tag}>"):
        return body
    return _section(tag, body)


def workspace_section(cwd: str | None) -> str | None:
    """``<workspace>`` for an absolute working directory other than ``/`` (written exactly as
    configured), else None."""
    if cwd is None or not cwd.startswith("/") or cwd == "/":
        return None
    return _section("workspace", WORKSPACE_BODY.format(cwd=cwd))


def standing_sections(standing: Standing) -> list[tuple[str, str]]:
    """(tag, rendered section) in the table's order, ``<workspace>`` first, blank ones
    omitted."""
    out: list[tuple[str, str]] = []
    workspace = workspace_section(standing.workspace)
    if workspace is not None:
        out.append(("workspace", workspace))
    if standing.base is not None:
        body = standing.base.rstrip(WHITESPACE).lstrip("\n\r")
        if not is_blank(body):
            out.append(("base", _section("base", body)))
    if standing.persona is not None:
        body = standing.persona.strip("\n\r")
        if not is_blank(body):
            out.append(("system", _section("system", body)))
    if standing.team_instructions is not None:
        body = trim(standing.team_instructions)
        if body:
            out.append(("team-instructions", _section("team-instructions", body)))
    core = _prerendered_or_section("core-memory", standing.core_memory)
    if core is not None:
        out.append(("core-memory", core))
    if standing.huddle_instructions is not None:
        body = trim(standing.huddle_instructions)
        if body:
            out.append(("huddle-instructions", _section("huddle-instructions", body)))
    canvas = _prerendered_or_section("channel-canvas", standing.channel_canvas)
    if canvas is not None:
        out.append(("channel-canvas", canvas))
    return out


def standing_text(standing: Standing) -> str:
    """A session's system-role text: its standing sections joined by blank lines, "" when there
    is nothing to say.  The driver sends it as is, so the ``workspace``, ``core_memory`` and
    ``channel_canvas`` layers hash exactly the sections the agent received (docs/envelope.md)."""
    return "\n\n".join(text for _, text in standing_sections(standing))


# ---------------------------------------------------------------------------------------------
# Fragments of the envelope


def _event_block(item: TurnEvent, profiles: _Profiles) -> str:
    event = item.event
    ref = nip10.thread_ref(event)
    attrs = [("type", item.prompt_tag.lstrip("@")), ("actor", event.pubkey)]
    author = profiles.label(event.pubkey)
    if author:
        attrs.append(("author", author))
    attrs.append(("event_id", event.id))
    if ref.root is not None:
        if ref.parent is not None and ref.parent != ref.root:
            attrs.append(("parent", ref.parent))
        attrs.append(("thread_root", ref.root))
    mentions = nip10.mentions(event)
    if mentions:
        rendered = []
        for value in mentions:
            label = profiles.label(value)
            rendered.append(f"{label} ({value})" if label else value)
        attrs.append(("mentions", ", ".join(rendered)))
    head = " ".join(f'{name}="{escape_attribute(value)}"' for name, value in attrs)
    return f"<event {head}>\nContent: {escape_text(message_lines(event.content))}\n</event>"


def _scope(channel: ChannelInfo | None, newest: Event) -> str:
    if channel is not None and channel.type == "dm":
        return "dm"
    return "thread" if nip10.thread_ref(newest).root is not None else "channel"


def _context_status(ti: TurnInput, scope: str, channel_id: str, newest: Event) -> str:
    lines = [f"Scope: {scope}"]
    if ti.context is None or ti.context.truncated:
        if ti.context is not None:
            status = "truncated"
        elif ti.context_had_delivered_events:
            status = "already delivered"
        else:
            status = "not loaded"
        in_thread = nip10.thread_ref(newest).root is not None
        command = ti.retrieval.command(channel_id, newest.id if in_thread else None)
        hint = status if command is None else f"{status}; retrieve: {command}"
        lines.append("History: " + escape_text(hint))
    return "\n".join(lines)


def _channel_snapshot(channel: ChannelInfo) -> tuple[str, bool]:
    """(fragment, description truncated); the fragment is "" when nothing is left."""
    lines: list[str] = []
    name = trim(_NEWLINES.sub(" ", channel.name))
    if name:
        lines.append(f"Channel: {escape_name(name)}")
    truncated = False
    if channel.type != "dm" and channel.description is not None:
        pieces = (trim(p) for p in _NEWLINES.split(channel.description))
        desc = " ".join(p for p in pieces if p)
        if len(desc) > DESCRIPTION_LIMIT:
            desc = desc[:DESCRIPTION_LIMIT] + "\u2026"
            truncated = True
        if desc:
            lines.append(f"Description: {escape_text(desc)}")
    return "\n".join(lines), truncated


def _recent_delta(context: TurnContext, profiles: _Profiles) -> str:
    opening = (
        f'<recent-thread-delta included="{escape_attribute(str(len(context.messages)))}" '
        f'total="{escape_attribute(str(context.total_count))}" '
        f'truncated="{escape_attribute("true" if context.truncated else "false")}">'
    )
    lines = [opening]
    for m in context.messages:
        label = one_line(profiles.label(m.pubkey) or m.pubkey)
        lines.append(f"{escape_name(label)}: {escape_text(message_lines(m.content))}")
    lines.append("</recent-thread-delta>")
    return "\n".join(lines)


def _thread_checkpoint(checkpoint: ThreadCheckpointInput) -> str | None:
    """``<thread-checkpoint>`` with the trimmed summary escaped; None when it is blank."""
    body = trim(checkpoint.summary)
    return _section("thread-checkpoint", body) if body else None


def _delta_version(context: TurnContext) -> str:
    payload = {
        "messages": [[m.event_id, m.pubkey, m.timestamp, m.content] for m in context.messages],
        "scope": context.kind,
        "total": context.total_count,
        "truncated": context.truncated,
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return content_hash(text)


def _interrupted_turn(ti: TurnInput, profiles: _Profiles) -> str:
    disposition = "superseded" if ti.cancel_reason == "interrupt" else "continue_prior_work"
    lines = [f'<interrupted-turn disposition="{escape_attribute(disposition)}">']
    lines.extend(_event_block(item, profiles) for item in ti.cancelled_events)
    lines.append("</interrupted-turn>")
    return "\n".join(lines)


def _delivery(
    ti: TurnInput, scope: str, channel_id: str, newest: Event, profiles: _Profiles
) -> str:
    root = nip10.thread_ref(newest).root
    reply_to: str | None
    if scope == "dm":
        reply_to = newest.id if root is not None else None
    else:
        human_facing = not profiles.is_agent(newest.pubkey) or any(
            not profiles.is_agent(m) for m in nip10.mentions(newest)
        )
        reply_to = (root if root is not None else newest.id) if human_facing else None
    attrs = [("channel_id", channel_id), ("scope", scope)]
    if reply_to is not None:
        attrs.append(("reply_to", reply_to))
    if ti.cancelled_events:
        merge = "supersede_prior_work" if ti.cancel_reason == "interrupt" else "continue_prior_work"
        attrs.append(("merge_disposition", merge))
    head = " ".join(f'{name}="{escape_attribute(value)}"' for name, value in attrs)
    return f"<delivery {head} />"


# ---------------------------------------------------------------------------------------------
# Slash commands


def _skip_whitespace(s: str, i: int) -> int:
    while i < len(s) and s[i] in WHITESPACE:
        i += 1
    return i


def slash_command(content: str, known_labels: Sequence[str]) -> str | None:
    """The slash-command block of docs/envelope.md for one event's content, or None.

    ``known_labels`` are the non-empty sanitized profile labels, longest first.
    """
    i = _skip_whitespace(content, 0)
    lowered_labels = [(ascii_lower(label), len(label)) for label in known_labels]
    while i < len(content):
        if content.startswith(("nostr:npub1", "nostr:nprofile1"), i):
            j = i
            while j < len(content) and content[j] not in WHITESPACE:
                j += 1
        elif content[i] == "@":
            j = -1
            for lowered, length in lowered_labels:
                end = i + 1 + length
                if (
                    end <= len(content)
                    and ascii_lower(content[i + 1 : end]) == lowered
                    and (end == len(content) or content[end] in WHITESPACE)
                ):
                    j = end
                    break
            if j < 0:
                match = _HANDLE.match(content, i + 1)
                if match is None:
                    return None  # a lone "@" stops the scan: no command
                j = match.end()
        else:
            break
        i = _skip_whitespace(content, j)
    rest = content[i:]
    if len(rest) >= 2 and rest[0] == "/" and rest[1].isascii() and rest[1].isalnum():
        return rest
    return None


# ---------------------------------------------------------------------------------------------
# The compiler


def _actors(ti: TurnInput) -> list[str]:
    """Every pubkey the turn shows with a label: authors, mentions, history senders."""
    actors: list[str] = []
    for item in (*ti.cancelled_events, *ti.events):
        actors.append(item.event.pubkey)
        actors.extend(nip10.mentions(item.event))
    if ti.context is not None:
        actors.extend(m.pubkey for m in ti.context.messages)
    return actors


def compile_turn(turn_input: TurnInput) -> CompiledTurn:
    """Compile one turn input into its sections and manifest (docs/envelope.md, "The sections")."""
    profiles = _Profiles(turn_input.profiles)
    profiles.settle(_actors(turn_input))
    newest = turn_input.events[-1].event
    channel_id = turn_input.channel_id
    scope = _scope(turn_input.channel, newest)
    layers: list[Layer] = []
    sections: list[str] = []

    # 0. slash-command block (raw, no layer): only the owner's, when the owner is known
    owner = turn_input.owner
    from_owner = owner is None or ascii_lower(newest.pubkey) == ascii_lower(owner)
    if len(turn_input.events) == 1 and not turn_input.cancelled_events and from_owner:
        command = slash_command(newest.content, profiles.known_labels())
        if command is not None:
            sections.append(command)

    # 1. standing sections (legacy agents, first turn of a session, and again after the agent
    # compacted it away); recorded as layers always, re-delivered ones with that freshness
    delivered, standing_layers, rendered, fresh = _standing(turn_input)
    sections.extend(delivered)
    layers.extend(standing_layers)

    # 2-3. <buzz-turn> and the ambient context
    sections.append("<buzz-turn>")
    ambient, ambient_layers = _ambient(turn_input, profiles, scope, rendered, fresh)
    sections.extend(ambient)
    layers.extend(ambient_layers)

    # 4. the current instruction
    instruction = "\n".join(_event_block(item, profiles) for item in turn_input.events)
    sections.append(instruction)
    layers.append(
        _layer(
            "current_instruction",
            instruction,
            version=newest.id if len(turn_input.events) == 1 else None,
        )
    )

    # 5-6. the delivery contract and </buzz-turn>
    delivery = _delivery(turn_input, scope, channel_id, newest, profiles)
    sections.append(delivery)
    layers.append(_layer("delivery_contract", delivery))
    sections.append("</buzz-turn>")
    return CompiledTurn(sections=sections, manifest=manifest_from_layers(layers))


def _standing(turn_input: TurnInput) -> tuple[list[str], list[Layer], dict[str, str], str | None]:
    """The standing sections this prompt delivers, the standing layers (all but the canvas's,
    which stands with the ambient context), each standing section by name, and the freshness
    of a re-delivery (None: not one)."""
    delivered: list[str] = []
    layers: list[Layer] = []
    standing = standing_sections(turn_input.standing)
    in_conversation = not turn_input.system_prompt_support
    again = in_conversation and turn_input.standing_context_sent and turn_input.standing_redelivered
    if in_conversation and (not turn_input.standing_context_sent or again):
        delivered.extend(text for _, text in standing)
    fresh = REDELIVERED_AFTER_COMPACTION if again else None
    rendered = dict(standing)
    if "workspace" in rendered:
        layers.append(_layer("workspace", rendered["workspace"], freshness=fresh))
    base = turn_input.standing.base
    if base is not None and not is_blank(base):
        layers.append(_layer("platform_contract", base, freshness=fresh))
    persona_parts = [
        trim(part)
        for part in (
            turn_input.standing.persona,
            turn_input.standing.team_instructions,
            turn_input.standing.huddle_instructions,
        )
        if part is not None and trim(part)
    ]
    unconfirmed = turn_input.standing.unconfirmed
    if persona_parts:
        # The huddle guidelines in it are read from relays with the canvas and core memory.
        huddle = turn_input.standing.huddle_instructions
        from_relays = unconfirmed and huddle is not None and bool(trim(huddle))
        guidance = "\n\n".join(persona_parts)
        layers.append(
            _layer("persona_and_team_guidance", guidance, freshness=_read(fresh, from_relays))
        )
    if "core-memory" in rendered:
        memory = rendered["core-memory"]
        layers.append(_layer("core_memory", memory, freshness=_read(fresh, unconfirmed)))
    return delivered, layers, rendered, fresh


def _ambient(
    turn_input: TurnInput,
    profiles: _Profiles,
    scope: str,
    rendered: dict[str, str],
    fresh: str | None,
) -> tuple[list[str], list[Layer]]:
    """The ``<ambient-context>`` section (none when all of it is blank) and its layers: the
    context status, the channel snapshot and canvas, the thread checkpoint, the recent delta
    and the interrupted turn."""
    newest = turn_input.events[-1].event
    layers: list[Layer] = []
    fragments: list[str] = []
    status = _context_status(turn_input, scope, turn_input.channel_id, newest)
    fragments.append(status)
    if turn_input.channel is not None:
        snapshot, cut = _channel_snapshot(turn_input.channel)
        if snapshot:
            fragments.append(snapshot)
            layers.append(_layer("channel_snapshot", snapshot, truncated=cut))
    if "channel-canvas" in rendered:
        canvas = rendered["channel-canvas"]
        unconfirmed = turn_input.standing.unconfirmed
        layers.append(_layer("channel_canvas", canvas, freshness=_read(fresh, unconfirmed)))
    layers.append(_layer("context_status", status))
    checkpoint = turn_input.thread_checkpoint
    summary = _thread_checkpoint(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and summary is not None:
        fragments.append(summary)
        layers.append(_layer("thread_checkpoint", summary, version=checkpoint.event_id))
    if turn_input.context is not None:
        delta = _recent_delta(turn_input.context, profiles)
        fragments.append(delta)
        layers.append(
            _layer(
                "recent_thread_delta",
                delta,
                scope=turn_input.context.kind,
                version=_delta_version(turn_input.context),
                truncated=turn_input.context.truncated,
            )
        )
    if turn_input.cancelled_events:
        interrupted = _interrupted_turn(turn_input, profiles)
        fragments.append(interrupted)
        layers.append(_layer("interrupted_turn", interrupted))
    non_blank = [f for f in fragments if not is_blank(f)]
    if not non_blank:
        return [], layers
    return ["<ambient-context>\n" + "\n".join(non_blank) + "\n</ambient-context>"], layers


def compile_checkpoint_request() -> CompiledTurn:
    """The summary turn before a session closes (``[sessions] checkpoint =
    "summary_on_close"``): one block, ``<buzz-checkpoint-request>``, and its one-layer
    manifest (``checkpoint_request``, versioned by its text's hash)."""
    text = _section("buzz-checkpoint-request", CHECKPOINT_REQUEST)
    return CompiledTurn(
        sections=[text], manifest=manifest_from_layers([_layer("checkpoint_request", text)])
    )


def steer_guidance() -> str:
    return f"<continuation-guidance>{escape_text(STEER_NOTE)}</continuation-guidance>"


def compile_steer(
    event: Event,
    *,
    channel_id: str,
    channel_type: str = "stream",
    prompt_tag: str = "@mention",
    retrieval: Retrieval = BUZZ_RETRIEVAL,
) -> CompiledSteer:
    """Wrap one event arriving mid-turn as a steer (docs/bot.md, "Steering").

    The event is compiled alone with ``channel = {id, type}`` of the running turn and an empty
    name, no profiles, context or standing sections; a slash-command block is never produced.
    ``retrieval``: the history hint, as the running turn's (:class:`Retrieval`).
    """
    ti = TurnInput(
        events=(TurnEvent(event, prompt_tag),),
        channel=ChannelInfo(name="", id=channel_id, type=channel_type),
        retrieval=retrieval,
    )
    compiled = compile_turn(ti)
    sections = compiled.sections
    if sections[0] != "<buzz-turn>":
        sections = sections[1:]  # drop the slash-command block: a steer never runs a command
    opening = '<buzz-turn-update mode="steer">'
    closing = "</buzz-turn-update>"
    text = "\n".join([opening, *sections, steer_guidance(), closing])
    wrapper = "\n".join([opening, steer_guidance(), closing])
    steer_layer = _layer("steer_delivery_contract", wrapper)
    return CompiledSteer(
        text=text, manifest=manifest_from_layers([*compiled.manifest.layers, steer_layer])
    )
