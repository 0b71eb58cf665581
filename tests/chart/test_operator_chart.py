"""The operator's part of the chart (issue 22, item 11): probes on kopf's liveness endpoint, a metrics
port scraped by a PodMonitor, replicas (1 by default, 2 in production) with leader election through
kopf's peering (the ClusterKopfPeering or per-namespace KopfPeering objects, their CRDs in crds/, and
the RBAC kopf needs for them), and the operator's address flag spelt --url."""

from __future__ import annotations

from typing import Any

import yaml

from tests.chart.render import (
    CHART,
    PRODUCTION_VALUES,
    Manifest,
    component_name,
    named,
    of_kind,
    pod_spec,
    render,
)

OPERATOR = component_name("operator")


def operator_container(manifests: list[Manifest]) -> dict[str, Any]:
    (container,) = pod_spec(named(manifests, "Deployment", OPERATOR))["containers"]
    return container


def test_the_operator_is_probed_on_kopfs_liveness_endpoint(default_manifests: list[Manifest]) -> None:
    container = operator_container(default_manifests)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
        assert container[probe]["periodSeconds"] > 0
    assert f"--health-port={ports['health']}" in container["args"]
    assert "--health-host=0.0.0.0" in container["args"], "probes come from the kubelet, not loopback"
    assert f"--metrics-port={ports['metrics']}" in container["args"]
    assert any(arg.startswith("--url=herald://") for arg in container["args"]), container["args"]
    assert not any(arg.startswith("--admin-url") for arg in container["args"]), "the deprecated spelling"


def test_one_standalone_replica_by_default(default_manifests: list[Manifest]) -> None:
    deployment = named(default_manifests, "Deployment", OPERATOR)
    assert deployment["spec"]["replicas"] == 1
    assert "--standalone" in operator_container(default_manifests)["args"]
    assert not of_kind(default_manifests, "ClusterKopfPeering") and not of_kind(default_manifests, "KopfPeering")


def test_production_runs_two_replicas_electing_one_through_peering(production_manifests: list[Manifest]) -> None:
    deployment = named(production_manifests, "Deployment", OPERATOR)
    assert deployment["spec"]["replicas"] == 2
    args = operator_container(production_manifests)["args"]
    assert "--standalone" not in args and f"--peering-name={OPERATOR}" in args
    (peering,) = of_kind(production_manifests, "ClusterKopfPeering")
    assert peering["apiVersion"] == "kopf.dev/v1" and peering["metadata"]["name"] == OPERATOR
    role = named(production_manifests, "ClusterRole", OPERATOR)
    rules = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
             for v in rule["verbs"]}
    for verb in ("get", "list", "watch", "patch"):
        assert ("kopf.dev", "clusterkopfpeerings", verb) in rules and ("kopf.dev", "kopfpeerings", verb) in rules
    crds = {yaml.safe_load(path.read_text())["spec"]["names"]["kind"] for path in (CHART / "crds").glob("*.yaml")}
    assert {"ClusterKopfPeering", "KopfPeering"} <= crds


def test_watched_namespaces_get_a_kopfpeering_each() -> None:
    manifests = render(PRODUCTION_VALUES, sets=("operator.watchNamespaces={team-a,team-b}",))
    peerings = of_kind(manifests, "KopfPeering")
    assert {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in peerings} == {
        ("team-a", OPERATOR), ("team-b", OPERATOR)}
    assert not of_kind(manifests, "ClusterKopfPeering")


def test_a_podmonitor_scrapes_the_operators_metrics(production_manifests: list[Manifest]) -> None:
    monitor = named(production_manifests, "PodMonitor", OPERATOR)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    labels = named(production_manifests, "Deployment", OPERATOR)["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
