"""The generated gRPC code in services/herald/api is what `make proto` makes from proto/ now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), str(tmp_path)], check=True,
                   capture_output=True)
    committed = ROOT / "services" / "herald" / "api" / "v1"
    fresh = {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()}
    current = {p.name: p.read_text() for p in committed.iterdir() if p.is_file()}
    stale = sorted(name for name in fresh.keys() | current.keys() if fresh.get(name) != current.get(name))
    assert not stale, f"run `make proto`: these generated files are out of date: {stale}"
