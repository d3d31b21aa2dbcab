"""The bundled demo: a small deterministic ACP agent (``python -m nostr_buzz.demo.agent``)."""
