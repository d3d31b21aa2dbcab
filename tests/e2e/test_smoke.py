"""Importing nostr_buzz in a fresh interpreter loads no network code."""

import subprocess
import sys


def test_importing_the_core_loads_no_network_code() -> None:
    code = "import sys, nostr_buzz; print('websockets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
