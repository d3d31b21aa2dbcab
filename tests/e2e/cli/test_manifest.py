"""``buzz manifest diff A B`` as a real subprocess: exit codes 0, 4 and 1 in the C locale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nostr_buzz.manifest import manifest_from_layers
from tests.support.buzz_process import c_locale_env
from tests.support.manifests import BEFORE, edit_layer, layer, manifest_obj, write

# --- as a real subprocess ----------------------------------------------------------------------


def test_subprocess_exit_codes(tmp_path: Path) -> None:
    """One process per outcome: 0 with UTF-8 output in the C locale, 4, and 1."""
    ü = [layer("current_instruction", "évènement-1", 7), layer("channel_snapshot", "ç", 4)]
    a = write(tmp_path, "a.json", manifest_from_layers(ü))
    b = write(tmp_path, "b.json", manifest_from_layers([ü[0]]))
    obj = manifest_obj(BEFORE)
    edit_layer(obj)
    forged = write(tmp_path, "forged.json", obj)

    def buzz(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "nostr_buzz", "manifest", "diff", *args],
            capture_output=True,
            env=c_locale_env(),
            timeout=60,
            check=False,
        )

    ok = buzz(str(a), str(b))
    assert ok.returncode == 0, ok.stderr
    assert "removed  channel_snapshot  order=4 version=ç".encode() in ok.stdout
    failed = buzz(str(a), str(forged))
    assert (failed.returncode, failed.stdout) == (4, b"")
    assert b"forged.json" in failed.stderr
    bad = buzz(str(a), str(tmp_path / "missing.json"))
    assert (bad.returncode, bad.stdout) == (1, b"")
