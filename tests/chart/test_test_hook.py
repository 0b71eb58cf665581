"""The chart's `helm test` hook: a Pod that produces one message through the service and consumes it
with the herald image's CLI. Rendered by default (and refused with auth on but no token to use); its
command line, taken from the rendered YAML, runs against a real `herald standalone`."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]

from tests.chart.render import (
    KUBERNETES_VERSION,
    NAMESPACE,
    PRODUCTION_VALUES,
    SECURE_VALUES,
    Manifest,
    of_kind,
    render,
    render_failure,
)
from tests.conftest import StandaloneProcess, service_env
from tests.helpers import unique_name

HOOK = "herald-test-produce-consume"


def hook(manifests: list[Manifest]) -> Manifest:
    (pod,) = [p for p in of_kind(manifests, "Pod") if p["metadata"]["name"] == HOOK]
    return pod


def command_line(pod: Manifest) -> str:
    (container,) = pod["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-c"]
    script: str = container["command"][2]
    return script


def test_the_hook_is_a_valid_test_pod_that_produces_and_consumes_through_the_proxy(
        default_manifests: list[Manifest]) -> None:
    pod = hook(default_manifests)
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    script = command_line(pod)
    url = f"herald://herald-proxy.{NAMESPACE}.svc.cluster.local:6660"
    assert re.fullmatch(rf"herald produce --url {re.escape(url)} -n 1 .*&& herald consume --url {re.escape(url)} "
                        r"-s herald-helm-test -n 1 --timeout 30 \S+", script), script


def test_without_a_proxy_the_hook_goes_through_lookup() -> None:
    script = command_line(hook(render(sets=("proxy.enabled=false",))))
    assert f"--url herald://herald-lookup.{NAMESPACE}.svc.cluster.local:6660 " in script


def test_the_hook_can_be_turned_off() -> None:
    assert not of_kind(render(sets=("tests.enabled=false",)), "Pod")


def test_with_security_on_the_hook_trusts_the_ca_and_sends_a_token(secure_manifests: list[Manifest]) -> None:
    pod = hook(secure_manifests)
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    assert "--url herald+ssl://" in command_line(pod)
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"HERALD_TLS_TRUST_CERTS_FILE": "/etc/herald/tls/ca.crt",
                   "HERALD_AUTH_TOKEN_FILE": "/etc/herald/token/token"}
    volumes = {v["name"]: v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v}
    assert volumes == {"tls": "herald-tls", "token": "herald-token-operator"}  # the operator's by default
    own = hook(render(PRODUCTION_VALUES, SECURE_VALUES, sets=("tests.tokenSecret=herald-token-tester",)))
    assert {v["name"]: v["secret"]["secretName"] for v in own["spec"]["volumes"] if "secret" in v}["token"] \
        == "herald-token-tester"


def test_auth_without_a_token_for_the_hook_is_refused() -> None:
    error = render_failure(PRODUCTION_VALUES, SECURE_VALUES,
                           sets=("operator.enabled=false", "auth.tokens.operatorSecret="))
    assert "tests.enabled with auth.enabled needs tests.tokenSecret" in error


def herald_on_path(directory: Path) -> dict[str, str]:
    """An environment whose `herald` is this checkout's CLI (the image's entry point is the same)."""
    directory.mkdir()
    script = directory / "herald"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m herald.cli "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, **service_env()}
    env["PATH"] = f"{directory}{os.pathsep}{env['PATH']}"
    return env


def test_the_hook_s_command_line_produces_and_consumes_on_a_real_standalone(
        default_manifests: list[Manifest], standalone: StandaloneProcess, tmp_path: Path) -> None:
    script = command_line(hook(default_manifests))
    topic = f"persistent://public/default/{unique_name('helm-test')}"
    script = script.replace(f"herald://herald-proxy.{NAMESPACE}.svc.cluster.local:6660", standalone.proxy_url)
    script = script.replace("persistent://public/default/herald-helm-test", topic)
    env = herald_on_path(tmp_path / "bin")
    result = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{script}\n{result.stdout}\n{result.stderr}"
    assert "helm test of herald" in result.stdout
