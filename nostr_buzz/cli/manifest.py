"""``buzz manifest diff A B``: what changed between two context manifests (docs/envelope.md,
docs/cli.md).

Each of A and B may be a manifest (``{"schemaVersion", "hash", "layers"}``), the output of
``buzz compile --format json`` (``{"sections", "manifest"}``) or a decrypted NIP-AM metric
payload (``{…, "contextManifest": {…}}``).  Both are read strictly before anything is compared.

Exit codes: 0 whether or not the manifests differ (the diff is the answer, not an error; 1 is
taken by bad input, so a git-style "differ → 1" is not offered); 1 for a file that is unreadable,
not JSON or not one of the three shapes; 4 for a manifest whose hash does not match its layers.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from nostr_buzz.cli.compile import (
    STDIN,
    OutputFormat,
    aligned,
    display_name,
    read_input,
    resolve_format,
    terminal_safe,
)
from nostr_buzz.cli.kit import sub_app
from nostr_buzz.cli.options import JsonFormatOption, argument, option
from nostr_buzz.cli.output import CliFailure, ExitCode, write_stdout
from nostr_buzz.manifest import SCHEMA_VERSION, Layer, Manifest, layers_hash
from nostr_buzz.reports.manifest_diff import LAYER_FIELDS, LayerKey, ManifestDiff, diff_manifests

manifest_app = sub_app(
    "manifest",
    "Inspect context manifests.",
)


def _manifest_member(doc: Any, name: str) -> tuple[Any, str]:
    """The manifest object inside a decoded document and where it was found."""
    if not isinstance(doc, dict):
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"{name}: expected a JSON object (a manifest, a compile output or a metric payload)",
        )
    if "schemaVersion" in doc:
        return doc, "manifest"
    if "manifest" in doc:
        return doc["manifest"], "member 'manifest' (buzz compile output)"
    if "contextManifest" in doc or "harness" in doc:
        if doc.get("contextManifest") is None:
            raise CliFailure(
                ExitCode.BAD_INPUT, f"{name}: this metric payload carries no contextManifest"
            )
        return doc["contextManifest"], "member 'contextManifest' (metric payload)"
    raise CliFailure(
        ExitCode.BAD_INPUT,
        f"{name}: not a manifest, a 'buzz compile --format json' output or a metric payload "
        "(no schemaVersion, manifest or contextManifest member)",
    )


def load_manifest(data: bytes, name: str) -> Manifest:
    """Strictly read one input's manifest; shape errors exit 1.  The hash is not checked here."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        hint = " (for buzz compile output use --format json)" if data.lstrip()[:1] == b"<" else ""
        raise CliFailure(ExitCode.BAD_INPUT, f"{name}: not valid JSON{hint}: {exc}") from None
    except RecursionError:  # msgspec's untyped decode recurses per nesting level
        raise CliFailure(ExitCode.BAD_INPUT, f"{name}: JSON nested too deeply") from None
    obj, where = _manifest_member(doc, name)
    try:
        # The same strict read as Manifest.from_obj, split so that shape (exit 1) and a hash
        # mismatch (exit 4) can be told apart.
        manifest = msgspec.convert(obj, type=Manifest)
    except msgspec.ValidationError as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"{name}: invalid {where}: {exc}") from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"{name}: unsupported manifest schemaVersion {manifest.schema_version} "
            f"(expected {SCHEMA_VERSION})",
        )
    return manifest


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return terminal_safe(str(value), multiline=False)


def _record(layer: Layer) -> str:
    return (
        f"order={layer.order} version={_value(layer.version)} "
        f"estimatedTokens={layer.estimated_tokens} truncated={_value(layer.truncated)}"
    )


def render_diff_text(diff: ManifestDiff) -> str:
    """A short human report; one line per added, removed or changed layer."""
    attr = dict(LAYER_FIELDS)
    keys: list[LayerKey] = [
        *(LayerKey(x.layer, x.occurrence) for x in diff.added),
        *(LayerKey(x.layer, x.occurrence) for x in diff.removed),
        *(LayerKey(x.layer, x.occurrence) for x in diff.changed),
        *diff.unchanged,
    ]
    # Occurrence indexes are shown only for names that occur more than once.
    repeated = {k.layer for k in keys if k.occurrence > 0}

    def label(name: str, occurrence: int) -> str:
        shown = terminal_safe(name, multiline=False)
        return f"{shown}[{occurrence}]" if name in repeated else shown

    lines = (
        [f"hash moved: {_value(diff.hash_before)} -> {_value(diff.hash_after)}"]
        if diff.hash_changed
        else [f"hash unchanged: {_value(diff.hash_before)}"]
    )
    rows: list[tuple[str, str, str]] = []
    rows += [("added", label(x.layer, x.occurrence), _record(x.after)) for x in diff.added]
    rows += [("removed", label(x.layer, x.occurrence), _record(x.before)) for x in diff.removed]
    for x in diff.changed:
        changes = "; ".join(
            f"{field}: {_value(getattr(x.before, attr[field]))} -> "
            f"{_value(getattr(x.after, attr[field]))}"
            for field in x.fields
        )
        rows.append(("changed", label(x.layer, x.occurrence), changes))
    if rows:
        lines += aligned(rows)
    if diff.reordered:
        lines.append("reordered: the layers present in both appear in a different order")
    lines.append(
        f"layers: {diff.layers_before} -> {diff.layers_after} ({len(diff.unchanged)} unchanged); "
        f"the first {diff.common_prefix} are identical in both"
    )
    return "\n".join(lines) + "\n"


@manifest_app.command("diff")
def diff_command(
    a: Annotated[
        str,
        argument(
            "A",
            "The earlier manifest: a manifest file, 'buzz compile --format json' output or a "
            "decrypted metric payload; '-' reads standard input.",
        ),
    ],
    b: Annotated[str, argument("B", "The later manifest, in any of the same forms.")],
    fmt: Annotated[
        OutputFormat | None,
        option(
            "--format",
            metavar="[text|json]",
            help="text (default): a short report. json: one line with the full comparison.",
        ),
    ] = None,
    json_flag: JsonFormatOption = False,
) -> None:
    """Explain what changed from manifest A to manifest B.

    Names the layers added, removed or changed (matched by name and occurrence) and whether
    the hash moved.

    Exit 0 whether or not they differ; 1 for bad input; 4 for a manifest whose hash does not
    match its layers.
    """
    output = resolve_format(fmt, json_flag)
    if a == STDIN and b == STDIN:
        raise CliFailure(ExitCode.BAD_INPUT, "only one of A and B can be '-' (standard input)")
    before = load_manifest(read_input(a, "manifest file"), display_name(a))
    after = load_manifest(read_input(b, "manifest file"), display_name(b))
    # Both shapes first, then the hashes: exit 4 only for inputs that are otherwise valid.
    forged = [
        f"{name}: manifest hash {_value(m.hash)} does not match its layers "
        f"({layers_hash(m.layers)})"
        for name, m in ((display_name(a), before), (display_name(b), after))
        if not m.hash_matches()
    ]
    if forged:
        raise CliFailure(ExitCode.VERIFICATION, "; ".join(forged))
    diff = diff_manifests(before, after)
    if output is OutputFormat.json:
        write_stdout(msgspec.json.encode(diff).decode("utf-8") + "\n")
    else:
        write_stdout(render_diff_text(diff))
