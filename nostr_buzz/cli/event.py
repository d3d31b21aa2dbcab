"""``buzz event``: sign any event with the configured key (or bunker, ``--bunker``) and publish
it (nak's ``event``).

The event comes from flags, from a template given as JSON (the argument; or stdin, one per
line, with ``-`` or, as in nak, whenever no template is given and stdin is not a terminal), or
both: flags override the template's kind, content and created_at, and their tags are added to
its tags.  Nothing that would be published may hold a secret key (docs/cli.md).  Each signed
event is printed on stdout as one line of canonical JSON; each relay's verdict goes to stderr.
Exit 2 when some event was accepted by no relay (stdout then stays empty, as on every failure).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any, Final

from nostr_buzz.cli.access import RelayAccess, SigningRelays, relay_command
from nostr_buzz.cli.common import (
    describe_input,
    given_json,
    json_strings,
    one_line,
    parse_event_ref,
    parse_public_key,
    read_stdin_text,
    refuse_secrets,
    run,
    verdict_text,
)
from nostr_buzz.cli.options import argument, kind_option, option, time_option
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.cli.signing import KeyChoice, local_secret, opened_signer
from nostr_buzz.event import Event, check_structure
from nostr_buzz.io.pool import PublishResult, RelayPool
from nostr_buzz.signer import EventTemplate, signed

DEFAULT_KIND: Final = 1
#: Template members; id, pubkey and sig are accepted and ignored (the event is signed anew).
_TEMPLATE_KEYS: Final = frozenset({"kind", "content", "tags", "created_at"})
_IGNORED_KEYS: Final = frozenset({"id", "pubkey", "sig"})


def parse_tag(text: str) -> list[str]:
    """``NAME=VALUE[;VALUE…]`` (or a bare ``NAME``) as a tag."""
    name, sep, values = text.partition("=")
    if not name:
        raise CliFailure(
            ExitCode.BAD_INPUT, f"--tag: {one_line(text, 60)!r} has no name (NAME=VALUE[;VALUE…])"
        )
    return [name, *values.split(";")] if sep else [name]


def _template(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise CliFailure(ExitCode.BAD_INPUT, f"{where}: an event template is a JSON object")
    unknown = sorted(set(doc) - _TEMPLATE_KEYS - _IGNORED_KEYS)
    if unknown:
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"{where}: unknown member(s) {', '.join(map(describe_input, unknown))}; "
            "a template has kind, content, tags and created_at",
        )
    return {k: v for k, v in doc.items() if k in _TEMPLATE_KEYS}


def _checked(kind: Any, content: Any, tags: Any, created_at: Any) -> EventTemplate:
    """An event template whose members are checked as a signed event's would be (kind range,
    tags of strings…: InvalidEvent exits 1) before any signer is asked."""
    if not isinstance(tags, list) or not all(isinstance(t, list) for t in tags):
        raise CliFailure(ExitCode.BAD_INPUT, "a template's tags are a list of lists")
    unsigned = EventTemplate(kind, content, tuple(tuple(t) for t in tags), created_at)
    placeholder = "0" * 64  # the id, pubkey and sig are the signer's: only their shape is used
    check_structure(placeholder, placeholder, created_at, kind, unsigned.tags, content, "0" * 128)
    return unsigned


def _sign_and_publish(
    templates: Sequence[EventTemplate],
    choice: KeyChoice,
    access: RelayAccess,
    relays: Sequence[str],
) -> tuple[list[Event], list[PublishResult]]:
    async def body() -> tuple[list[Event], list[PublishResult]]:
        async with opened_signer(choice, access.cfg) as signer:
            events = [await signed(signer, unsigned) for unsigned in templates]
            pool = RelayPool(relays, signer=signer, timeout=access.timeout)
            return events, [await pool.publish(event, min_ok=1) for event in events]

    return run(body())


_TemplateArgument = Annotated[
    str | None,
    argument(
        "[TEMPLATE]",
        "An event template as JSON ({kind, content, tags, created_at}); '-' reads one template "
        "per line from stdin, as does no TEMPLATE when stdin is not a terminal.",
    ),
]
_ContentOption = Annotated[
    str | None,
    option("-c", "--content", metavar="TEXT", help="The content; '-' reads it from stdin."),
]
_TagOption = Annotated[
    list[str] | None,
    option(
        "-t",
        "--tag",
        metavar="NAME=VALUE[;VALUE…]",
        help="A tag, e.g. -t h=engineering or -t e=ID;wss://relay;root; repeatable.",
    ),
]
_PubkeyOption = Annotated[
    list[str] | None,
    option("-p", metavar="KEY", help="A p tag for this public key (hex or npub); repeatable."),
]
_EventOption = Annotated[
    list[str] | None,
    option(
        "-e", metavar="EVENT", help="An e tag for this event (hex, note1… or nevent1…); repeatable."
    ),
]
_CreatedAtOption = Annotated[
    str | None,
    time_option("--created-at", "Unix seconds, a date or an RFC 3339 date-time (default: now)."),
]


@relay_command
def event_command(
    template: _TemplateArgument = None,
    kind: Annotated[int | None, kind_option(f"Event kind (default {DEFAULT_KIND}).")] = None,
    content: _ContentOption = None,
    tag: _TagOption = None,
    pubkey: _PubkeyOption = None,
    event_id: _EventOption = None,
    created_at: _CreatedAtOption = None,
    *,
    access: SigningRelays,
) -> None:
    """Sign an event with the configured key (or bunker) and publish it to the write relays."""
    given = _given_templates(template, content)
    if content == "-":
        content = read_stdin_text()
    extra_tags = _flag_tags(tag, pubkey, event_id)
    when: int | None = None
    if created_at is not None:
        from nostr_buzz.cli.metrics import parse_time

        when = parse_time(created_at, option="--created-at")
    choice = access.key_choice()
    secret = local_secret(choice)
    # Before a template is checked (its messages name members) and before any relay is asked.
    refuse_secrets(json_strings([doc for _, doc in given]), secret, where="the template")
    refuse_secrets(json_strings([content, extra_tags]), secret, where="the event")
    docs = [_template(doc, where) for where, doc in given] or [{}]
    relays = access.relays("write")
    now = int(time.time())  # the clock is read here, at the edge
    templates = [
        _checked(
            kind if kind is not None else doc.get("kind", DEFAULT_KIND),
            content if content is not None else doc.get("content", ""),
            [*tags, *extra_tags] if isinstance(tags := doc.get("tags", []), list) else tags,
            when if when is not None else doc.get("created_at", now),
        )
        for doc in docs
    ]
    events, results = _sign_and_publish(templates, choice, access, relays)
    _report(events, results)
    write_stdout("".join(e.to_json() + "\n" for e in events))


def _given_templates(template: str | None, content: str | None) -> list[tuple[str, Any]]:
    """The templates given as TEMPLATE or on stdin, each with where it came from."""
    if template == "-" and content == "-":
        raise CliFailure(
            ExitCode.BAD_INPUT, "stdin can hold the templates or the content, not both"
        )
    # Content from stdin leaves no piped template to read.
    return given_json(template, "TEMPLATE", "event template", piped=content != "-")


def _flag_tags(
    tag: list[str] | None, pubkey: list[str] | None, event_id: list[str] | None
) -> list[list[str]]:
    """The tags the -t, -p and -e flags add to every event."""
    tags = [parse_tag(t) for t in tag or ()]
    tags += [["p", parse_public_key(k, option="-p")] for k in pubkey or ()]
    tags += [["e", parse_event_ref(e, option="-e").id] for e in event_id or ()]
    return tags


def _report(events: list[Event], results: list[PublishResult]) -> None:
    """Each relay's verdict on stderr; a failure when some event no relay accepted."""
    refused = []
    for event, result in zip(events, results, strict=True):
        for url, v in result.verdicts.items():
            answer = verdict_text(v.accepted, v.duplicate, v.message, v.prefix)
            note(f"{one_line(url, 200)}: {event.id[:12]}: {answer}")
        if not result.ok:
            refused.append(event.id)
    if refused:
        raise CliFailure(ExitCode.NETWORK, f"no relay accepted {', '.join(refused)}")
