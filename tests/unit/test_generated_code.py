"""The generated code in services/herald/api (Herald's contracts in v1/, Pulsar's protocol in pulsar/) is
what `make proto` makes from proto/ now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), str(tmp_path)], check=True,
                   capture_output=True)
    committed = ROOT / "services" / "herald" / "api"
    fresh = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    current = {str(p.relative_to(committed)): p.read_text() for p in committed.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    stale = sorted(name for name in fresh.keys() | current.keys() if fresh.get(name) != current.get(name))
    assert not stale, f"run `make proto`: these generated files are out of date: {stale}"
