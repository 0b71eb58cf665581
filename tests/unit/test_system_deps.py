"""`make system-deps` installs packaged servers without letting apt start their services: a policy-rc.d
forbidding starts is in place during the install, written for it when the machine has none."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import ROOT


def run_system_deps(tmp_path: Path, policy: Path) -> str:
    """`make system-deps` with a stand-in apt-get that records whether starts were forbidden."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen"
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\nif [ "$1" = install ]; then "{policy}" etcd start; echo "$* policy=$?" >> "{seen}"; fi\n'
    )
    (bin_dir / "apt-get").chmod(0o755)
    subprocess.run(
        ["make", "-s", "-C", str(ROOT), "system-deps", "APT_PACKAGES=etcd-server", "SUDO=", f"POLICY_RC={policy}"],
        check=True, capture_output=True, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    return seen.read_text()


def test_apt_runs_with_service_starts_forbidden_and_a_temporary_policy_is_removed(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    assert run_system_deps(tmp_path, policy) == "install -y -qq etcd-server policy=101\n"
    assert not policy.exists()  # the machine had none: it is gone again


def test_an_existing_policy_is_kept(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    assert run_system_deps(tmp_path, policy) == "install -y -qq etcd-server policy=101\n"
    assert policy.read_text() == "#!/bin/sh\nexit 101\n"
