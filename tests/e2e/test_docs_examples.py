"""The guide's examples run: every ```python block of docs/client.md, docs/pulsar.md, docs/schemas.md,
docs/compaction.md and README.md is run as a script of its own against a real `herald standalone`
(its `herald://localhost:6660` and `pulsar://localhost:6650` replaced by the standalone's URLs) and
must exit 0. Fragments that are not whole programs are fenced ```py instead, so nothing a reader
may copy and run goes untested."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, StandaloneProcess, service_env

DOCUMENTED_URL = "herald://localhost:6660"
DOCUMENTED_PULSAR_URL = "pulsar://localhost:6650"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples(path: Path) -> list[tuple[str, str]]:
    """(id, code) of each runnable block, the id naming the file and the block's first line."""
    text = path.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((f"{path.name}:{line}", match.group(1)))
    return found


EXAMPLES = [*examples(ROOT / "docs" / "client.md"), *examples(ROOT / "docs" / "pulsar.md"),
            *examples(ROOT / "docs" / "schemas.md"), *examples(ROOT / "docs" / "compaction.md"),
            *examples(ROOT / "README.md")]


def test_the_guide_has_examples_for_both_apis() -> None:
    code = "\n".join(block for _, block in EXAMPLES)
    assert "AsyncClient" in code and "Client(" in code
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_example_runs(where: str, code: str, shared_standalone: StandaloneProcess, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code.replace(DOCUMENTED_URL, shared_standalone.service_url)
                      .replace(DOCUMENTED_PULSAR_URL, shared_standalone.pulsar_url))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90,
                            env=service_env(), cwd=tmp_path)
    assert result.returncode == 0, f"{where} failed:\n{result.stdout}\n{result.stderr}"
