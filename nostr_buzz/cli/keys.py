"""``buzz keys``: make a key pair, show the public key of the configured key.

``keys generate`` is the one place a secret key is ever printed: on stdout, because the user
asked for a new one.  ``keys show`` prints only the public key.
"""

from __future__ import annotations

import json
import sys

from nostr_buzz.cli.common import ConfigOption, JsonOption, KeyOption, sources
from nostr_buzz.cli.kit import sub_app
from nostr_buzz.cli.output import note, write_stdout
from nostr_buzz.keys import SecretKey

keys_app = sub_app(
    "keys",
    "Make a key pair; show the public key of the configured key.",
)


@keys_app.command("generate")
def generate(json_output: JsonOption = False) -> None:
    """Generate a new key pair and print nsec, npub and the public key's hex."""
    secret = SecretKey.generate()
    public = secret.public_key
    if json_output:
        text = json.dumps({"nsec": secret.bech32, "npub": public.bech32, "hex": public.hex})
    else:
        text = f"nsec: {secret.bech32}\nnpub: {public.bech32}\nhex: {public.hex}"
    if sys.stderr.isatty():
        note("keep the nsec secret: anyone who has it can sign as this key")
    write_stdout(text + "\n")


@keys_app.command("show")
def show(
    key: KeyOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show the public key (npub and hex) of the configured secret key."""
    public = sources(config).require_secret_key(key).public_key
    if json_output:
        text = json.dumps({"npub": public.bech32, "hex": public.hex})
    else:
        text = f"npub: {public.bech32}\nhex: {public.hex}"
    write_stdout(text + "\n")
