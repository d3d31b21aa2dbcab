from nostr_buzz.cli.app import run

run()
