"""``buzz audit``: check the layers of the owner's metrics against the signed events they name
(docs/cli.md, "buzz audit").

The owner audits with their own secret key (``--key``, else ``BUZZ_PRIVATE_KEY``, else
``buzz.toml``), which opens the metrics and answers NIP-42 challenges on the listed relays:
one metric (``--metric ID``: hex, ``note1…`` or ``nevent1…``), or every metric of the owner's
agents in a period (``--since`` / ``--until``, as ``buzz metrics`` reads them).  For each layer
of a metric's context manifest whose version is an event id, the event is fetched from every
relay and judged (:mod:`nostr_buzz.reports.audit`): valid id and signature, a kind the layer takes,
an author the layer trusts — for the current instruction, an event the gate of ``buzz.toml``
admits (``[gate]`` and ``[subscriptions]``, with the metric's signer as the agent).  Layers
versioned by a hash are reported as known only by hash; a private message's rumor as private.

Output (stdout when every layer verified; on any failure stdout stays empty and the same report
goes to stderr):

- ``--format table`` (default): per metric a header line and one row per layer (order, layer,
  version, verdict, detail), then a summary line.
- ``--format json`` / ``--json``: one object::

      {"owner": hex, "metric": id|null, "since": unix|null, "until": unix|null,
       "metrics": [{"eventId", "agent", "timestamp", "channelId", "manifestHash",
                    "manifestValid", "ok",
                    "layers": [{"order", "layer", "version", "verdict", "detail", "kind",
                                "author", "servedBy", "forgers"}],
                    "channel": {"actor", "verdict", "detail"}|null}],
       "verdicts": {verdict: n}, "ok": bool}

Exit codes (docs/cli.md): 0 every layer that names an event verified; 4 a layer's event is
missing, forged, of the wrong kind or by an author the layer does not trust, or a manifest's
hash does not match its layers (each named on stderr); 1 bad input; 2 no relay answered; 3 the
metric asked for is not found.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Annotated, Final, Literal

import msgspec

from nostr_buzz.cli.access import Relays, relay_command
from nostr_buzz.cli.common import (
    one_line,
    parse_event_ref,
    pick_format,
    progress,
    require_fetched,
    run,
)
from nostr_buzz.cli.metrics import (
    AgentOption,
    SinceOption,
    UntilOption,
    parse_window,
    read_window,
)
from nostr_buzz.cli.options import JsonFormatOption, format_option, option
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.config import BuzzConfig
from nostr_buzz.core.gate import Gate, author_refusal, refusal
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.audit import look_up_events
from nostr_buzz.io.fetch import fetch_event_result
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips.nip17 import PRIVATE_MESSAGE_KIND
from nostr_buzz.nips.nip19 import EventRef
from nostr_buzz.nips.nip_tc import open_checkpoint_event
from nostr_buzz.reports.audit import Authority, MetricAudit, audit_metric, event_ids
from nostr_buzz.reports.metrics_report import OpenedMetric, open_metric

Format = Literal["table", "json"]
FORMATS: Final[tuple[Format, ...]] = ("table", "json")

_VERDICT_WORDS: Final = {
    "verified": "verified",
    "hash_only": "known only by hash",
    "private": "private",
}


def _hex_keys(keys: Sequence[str]) -> frozenset[str]:
    return frozenset(PublicKey.from_str(k).hex for k in keys)


def authority_for(
    file: BuzzConfig,
    owner: str,
    agent: str,
    agents: Collection[str] = (),
    owner_secret: SecretKey | None = None,
) -> Authority:
    """Who counts for a turn of ``agent``: the gate ``buzz run`` would build from the same
    configuration (``[gate]``, ``[subscriptions]``), with ``agent`` as the bot's key;
    ``agents``: the owner's configured agents (hex); ``owner_secret``: opens the agent's
    thread checkpoints (their channel is checked against the metric's)."""
    gate = Gate(
        agent=agent,
        owner=owner,
        kinds=frozenset(file.subscriptions.kinds),
        channels=frozenset(file.subscriptions.channels),
        mentions_required=file.subscriptions.mentions_required,
        mode=file.gate.mode,
        allowlist=_hex_keys(file.gate.allowlist),
        plaintext_dm=file.subscriptions.plaintext_dm,
    )
    known_agents = _hex_keys(file.gate.agents)
    return Authority(
        owner=owner,
        agent=agent,
        trusted=_hex_keys(file.gate.trusted),
        gate_refusal=lambda event: refusal(event, gate, known_agents),
        private_refusal=lambda actor: private_refusal(actor, gate),
        agent_known=agent in agents,
        checkpoint_key=None if owner_secret is None else _checkpoint_key(owner_secret, agent),
    )


def _checkpoint_key(owner: SecretKey, agent: str) -> Callable[[Event], str | None]:
    def key(event: Event) -> str | None:
        try:
            return open_checkpoint_event(owner, agent, event).session_key
        except BuzzError:
            return None

    return key


def private_refusal(actor: str, gate: Gate) -> str | None:
    """Why the gate refuses every private message from ``actor`` (None: it admits them)."""
    if PRIVATE_MESSAGE_KIND not in gate.kinds:
        return "kind_not_subscribed"
    return author_refusal(actor, gate)


# --- reading ----------------------------------------------------------------------------------


async def _one_metric(
    ref: EventRef, pool: RelayPool, owner: SecretKey, agents: Sequence[str], timeout: float
) -> list[OpenedMetric]:
    progress(f"asking {len(pool.urls)} relay(s) for metric {ref.id}…")
    found = require_fetched(await fetch_event_result(ref, pool=pool, timeout=timeout))
    opened = open_metric(owner, found)
    if isinstance(opened, str):
        raise CliFailure(
            ExitCode.VERIFICATION, f"event {found.id} is not a metric for you ({opened})"
        )
    if agents and opened.agent not in agents:
        raise CliFailure(
            ExitCode.VERIFICATION,
            f"metric {found.id} is signed by {opened.agent}, which is not one of your agents "
            "(--agent or agents in buzz.toml)",
        )
    return [opened]


def _metrics(
    ref: EventRef | None,
    owner: SecretKey,
    relays: Sequence[str],
    agents: Sequence[str],
    window: tuple[int | None, int | None],
    timeout: float,
) -> list[OpenedMetric]:
    """The metric asked for, or every metric of the owner's agents in ``window``."""
    if ref is not None:
        pool = RelayPool(relays, secret=owner, timeout=timeout)
        return run(_one_metric(ref, pool, owner, agents, timeout))
    _, fetch = read_window(owner, relays, agents, window, timeout)
    mine = [m for m in fetch.metrics if not agents or m.agent in agents]
    return sorted(mine, key=lambda m: (m.payload.timestamp, m.event_id))


async def _audit(
    metrics: Sequence[OpenedMetric],
    owner: SecretKey,
    relays: Sequence[str],
    file: BuzzConfig,
    agents: Sequence[str],
    timeout: float,
) -> list[MetricAudit]:
    pool = RelayPool(relays, secret=owner, timeout=timeout)
    ids = [i for m in metrics for i in event_ids(m)]
    progress(f"asking {len(pool.urls)} relay(s) for {len(set(ids))} event(s)…")
    lookups = await look_up_events(ids, pool, timeout=timeout)
    me = owner.public_key.hex
    return [
        audit_metric(m, lookups, authority_for(file, me, m.agent, agents, owner)) for m in metrics
    ]


# --- rendering --------------------------------------------------------------------------------


def _verdicts(audits: Sequence[MetricAudit]) -> Counter[str]:
    return Counter(layer.verdict for audit in audits for layer in audit.layers)


def render_json(
    audits: Sequence[MetricAudit],
    owner: str,
    metric: str | None,
    window: tuple[int | None, int | None],
) -> str:
    doc = {
        "owner": owner,
        "metric": metric,
        "since": window[0],
        "until": window[1],
        "metrics": msgspec.to_builtins(audits),
        "verdicts": dict(_verdicts(audits)),
        "ok": all(a.ok for a in audits),
    }
    return json.dumps(doc, ensure_ascii=False) + "\n"


def _version_cell(version: str) -> str:
    # An event id is shown whole (it is what one looks up); a hash by its start.
    return one_line(version if len(version) <= 64 else version[:23] + "…", 72)


def _header(audit: MetricAudit) -> str:
    manifest = "no manifest"
    if audit.manifest_hash is not None:
        state = "ok" if audit.manifest_valid else "HASH MISMATCH"
        manifest = f"manifest {one_line(audit.manifest_hash, 24)} {state}"
    channel = one_line(audit.channel_id, 64) if audit.channel_id is not None else "-"
    return (
        f"metric {audit.event_id}  agent {audit.agent[:16]}…  "
        f"{one_line(audit.timestamp, 32)}  channel {channel}  {manifest}\n"
    )


def render_table(audits: Sequence[MetricAudit]) -> str:
    parts: list[str] = []
    for audit in audits:
        rows = [["order", "layer", "version", "verdict", "detail"]]
        rows += [
            [
                str(layer.order),
                one_line(layer.layer, 40),
                _version_cell(layer.version),
                _VERDICT_WORDS.get(layer.verdict, layer.verdict.upper()),
                one_line(layer.detail, 400),
            ]
            for layer in audit.layers
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        parts.append(_header(audit))
        if audit.channel is not None:
            word = _VERDICT_WORDS.get(audit.channel.verdict, audit.channel.verdict.upper())
            parts.append(f"  channel: {word}: {one_line(audit.channel.detail, 400)}\n")
        parts.extend(
            "  "
            + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False))
            + "  "
            + r[4]
            + "\n"
            for r in rows
        )
        parts.append("\n")
    counts = ", ".join(f"{n} {_VERDICT_WORDS.get(v, v)}" for v, n in _verdicts(audits).items())
    parts.append(f"{len(audits)} metric(s) audited: {counts or 'no layers'}\n")
    return "".join(parts)


def _failures(audits: Sequence[MetricAudit]) -> list[str]:
    lines = []
    for audit in audits:
        if audit.manifest_valid is False:
            lines.append(f"metric {audit.event_id}: the manifest's hash does not match its layers")
        if audit.channel is not None and audit.channel.failed:
            lines.append(
                f"metric {audit.event_id}: channel {one_line(audit.channel_id or '', 80)}: "
                f"{audit.channel.verdict}: {one_line(audit.channel.detail, 400)}"
            )
        for layer in audit.layers:
            if layer.failed or layer.verdict == "unreachable":
                lines.append(
                    f"metric {audit.event_id}: layer {one_line(layer.layer, 40)} "
                    f"{_version_cell(layer.version)}: {layer.verdict}: "
                    f"{one_line(layer.detail, 400)}"
                )
    return lines


def _forgeries(audits: Sequence[MetricAudit]) -> list[str]:
    """Each relay that answered the query for an event a layer names with an event failing
    verification (a forged copy, or junk), once per event."""
    seen: dict[tuple[str, str], str] = {}
    for audit in audits:
        for layer in audit.layers:
            for url, why in layer.forgers.items():
                seen.setdefault(
                    (url, layer.version),
                    f"relay {one_line(url, 200)} answered the query for event {layer.version} "
                    f"(layer {one_line(layer.layer, 40)}) with what failed verification: "
                    f"{', '.join(why)}",
                )
    return list(seen.values())


def _exit_code(audits: Sequence[MetricAudit]) -> ExitCode:
    verdicts = _verdicts(audits)
    if any(
        a.manifest_valid is False or (a.channel is not None and a.channel.failed) for a in audits
    ) or any(layer.failed for a in audits for layer in a.layers):
        return ExitCode.VERIFICATION
    return ExitCode.NETWORK if verdicts["unreachable"] else ExitCode.OK


# --- the command ------------------------------------------------------------------------------


@relay_command
def audit_command(
    metric: Annotated[
        str | None,
        option(
            "--metric",
            metavar="ID",
            help="Audit this metric (its event id: hex, note1… or nevent1…); default: every "
            "metric of your agents, within --since/--until when given.",
        ),
    ] = None,
    since: SinceOption = None,
    until: UntilOption = None,
    output_format: Annotated[
        str | None, format_option("[table|json]", "table (default) or json.")
    ] = None,
    json_flag: JsonFormatOption = False,
    agent: AgentOption = None,
    *,
    access: Relays,
) -> None:
    """Check each metric's context layers against the signed events they name: present, valid,
    of the layer's kind and by an author the gate admits; exit 4 naming what is not."""
    fmt = pick_format(output_format, json_flag, FORMATS)
    if metric is not None and (since is not None or until is not None):
        raise CliFailure(ExitCode.BAD_INPUT, "--metric audits one metric: drop --since/--until")
    ref = parse_event_ref(metric, option="--metric") if metric is not None else None
    window = parse_window(since, until)
    owner = access.owner_key()
    relays = access.relays("read")
    agents = access.cfg.agents(agent or ())
    metrics = _metrics(ref, owner, relays, agents, window, access.timeout)
    audits = run(_audit(metrics, owner, relays, access.cfg.file, agents, access.timeout))
    if ref is None and not audits:
        note("buzz: no metrics in this window")
    if fmt == "json":
        text = render_json(audits, owner.public_key.hex, None if ref is None else ref.id, window)
    else:
        text = render_table(audits)
    for line in _forgeries(audits):
        note(f"buzz: warning: {line}")
    code = _exit_code(audits)
    if code == ExitCode.OK:
        write_stdout(text)
        return
    note(text.rstrip("\n"))  # stdout stays empty on failure (docs/cli.md)
    failures = _failures(audits)
    raise CliFailure(
        code,
        f"audit failed: {len(failures)} problem(s):\n  " + "\n  ".join(failures),
    )
