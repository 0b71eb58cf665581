"""Rendering the Herald chart with the real helm binary (.tools/bin/helm, from `make helm`) and
looking into what it rendered: objects by kind, pod specs, containers."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "herald"
HELM = ROOT / ".tools" / "bin" / "helm"
PRODUCTION_VALUES = CHART / "values-production.yaml"
# TLS from cert-manager, HS256 tokens and authorization (layered on the production values).
SECURE_VALUES = CHART / "values-secure.yaml"
# The Kubernetes version objects are validated against (and helm renders for).
KUBERNETES_VERSION = "1.33.0"
RELEASE = "herald"
NAMESPACE = "messaging"

Manifest = dict[str, Any]


def helm_binary() -> Path:
    """The helm the tests run; a missing one fails the test (never skips it)."""
    if not HELM.is_file():
        pytest.fail(f"helm is missing at {HELM}: run `make helm` (make setup and make test do it)", pytrace=False)
    return HELM


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}", pytrace=False)
    return result


def template_args(*values_files: Path, sets: tuple[str, ...] = ()) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds",
            "--kube-version", KUBERNETES_VERSION]
    for path in values_files:
        args += ["-f", str(path)]
    for assignment in sets:
        args += ["--set", assignment]
    return args


def render(*values_files: Path, sets: tuple[str, ...] = ()) -> list[Manifest]:
    """The objects `helm template` makes with these values files and --set assignments."""
    output = helm(*template_args(*values_files, sets=sets)).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def render_failure(*values_files: Path, sets: tuple[str, ...] = ()) -> str:
    """helm template's error output for values it must refuse (fails the test if helm renders)."""
    result = helm(*template_args(*values_files, sets=sets), check=False)
    if result.returncode == 0:
        pytest.fail(f"helm template accepted {values_files} {sets}, which it must refuse", pytrace=False)
    return result.stderr


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    for manifest in of_kind(manifests, kind):
        if manifest["metadata"]["name"] == name:
            return manifest
    raise AssertionError(f"no {kind} {name} among {[m['metadata']['name'] for m in of_kind(manifests, kind)]}")


def component_name(component: str) -> str:
    return f"{RELEASE}-{component}"


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


def workloads(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m["kind"] in WORKLOAD_KINDS]


def pod_spec(workload: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Manifest) -> Iterator[dict[str, Any]]:
    spec = pod_spec(workload)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def component_of(manifest: Manifest) -> str:
    component: str = manifest["metadata"]["labels"]["app.kubernetes.io/component"]
    return component
