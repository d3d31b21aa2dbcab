from nostr_buzz.cli import main

main()
