"""The generated code in services/herald/api (Herald's contracts in v1/, Pulsar's protocol in pulsar/,
etcd's v3 client in etcd/) is what `make proto` makes from proto/ now."""

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


def test_etcd_client_and_its_stubs_are_generated_from_the_vendored_protos(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), str(tmp_path)], check=True,
                   capture_output=True)
    for package, module in (("etcdserverpb", "rpc"), ("mvccpb", "kv"), ("authpb", "auth")):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"):
            assert (tmp_path / "etcd" / package / f"{module}{suffix}").is_file(), f"{package}/{module}{suffix}"
    generated = (tmp_path / "etcd" / "etcdserverpb" / "rpc_pb2.py").read_text()
    assert "from herald.api.etcd.mvccpb import kv_pb2" in generated  # imports point into herald.api
