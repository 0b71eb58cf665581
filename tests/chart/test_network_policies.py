"""The chart's NetworkPolicies (networkPolicy.enabled): none by default; on, valid for the pinned
Kubernetes version, a default deny into every pod of the release, and allow rules whose ports are the
ports the chart's Services and pods expose, from exactly the peers each flow needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.chart.render import (
    KUBERNETES_VERSION,
    PRODUCTION_VALUES,
    RELEASE,
    SECURE_VALUES,
    Manifest,
    component_of,
    containers,
    of_kind,
    render,
    workloads,
)

ON = ("networkPolicy.enabled=true",)
RENDERS = {"default": (), "production": (PRODUCTION_VALUES,), "secure": (PRODUCTION_VALUES, SECURE_VALUES)}


@pytest.fixture(scope="module", params=sorted(RENDERS))
def with_policies(request: pytest.FixtureRequest) -> list[Manifest]:
    values: tuple[Path, ...] = RENDERS[request.param]
    return render(*values, sets=ON)


def policies(manifests: list[Manifest]) -> dict[str, Manifest]:
    """Component ("" for the default deny) -> its NetworkPolicy."""
    found = {}
    for policy in of_kind(manifests, "NetworkPolicy"):
        labels = policy["metadata"]["labels"]
        found[labels.get("app.kubernetes.io/component", "")] = policy
    return found


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return bool(selector["matchLabels"].items() <= labels.items())


def pod_labels(workload: Manifest) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def peer_components(rule: dict[str, Any]) -> set[str] | None:
    """The components a rule admits (None: anyone)."""
    if "from" not in rule:
        return None
    return {peer["podSelector"]["matchLabels"].get("app.kubernetes.io/component", "*release*")
            for peer in rule["from"]}


def allowed(policy: Manifest) -> dict[int | str, set[str] | None]:
    """Port -> who may connect to it."""
    return {port["port"]: peer_components(rule) for rule in policy["spec"]["ingress"] for port in rule["ports"]}


def test_no_network_policy_by_default(manifests: list[Manifest]) -> None:
    assert not of_kind(manifests, "NetworkPolicy")


def test_every_network_policy_is_valid_for_the_pinned_kubernetes_version(with_policies: list[Manifest]) -> None:
    found = of_kind(with_policies, "NetworkPolicy")
    assert len(found) >= 6
    for policy in found:
        kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)


def test_a_default_deny_covers_every_pod_of_the_release(with_policies: list[Manifest]) -> None:
    deny = policies(with_policies)[""]
    assert deny["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in deny["spec"]
    pods = [pod_labels(w) for w in workloads(with_policies)] + \
        [p["metadata"]["labels"] for p in of_kind(with_policies, "Pod")]
    assert pods and all(selects(deny["spec"]["podSelector"], labels) for labels in pods)


def test_every_allowed_port_is_a_port_the_pods_and_their_service_expose(with_policies: list[Manifest]) -> None:
    found = policies(with_policies)
    for workload in workloads(with_policies):
        component = component_of(workload)
        policy = found[component]
        assert selects(policy["spec"]["podSelector"], pod_labels(workload)), component
        container_ports = {p["containerPort"]: p["name"] for c in containers(workload) for p in c.get("ports", [])}
        ports = allowed(policy)
        if component == "operator":
            # Only Prometheus, to the operator's metrics endpoint, named: whatever number it listens on.
            assert ports == {"metrics": None}
            assert set(container_ports.values()) <= {"metrics", "health"}, container_ports
            continue
        assert set(ports) == set(container_ports), (component, sorted(ports), container_ports)
        for service in of_kind(with_policies, "Service"):
            if service["spec"]["selector"].items() <= pod_labels(workload).items():
                for port in service["spec"]["ports"]:
                    assert port["port"] in ports, (component, service["metadata"]["name"], port)
                    assert container_ports[port["port"]] == port["targetPort"], (component, port)


def test_each_flow_is_open_to_exactly_the_components_that_need_it(with_policies: list[Manifest]) -> None:
    found = policies(with_policies)
    components = {component_of(w) for w in workloads(with_policies)}
    storage = allowed(found["storage"])
    assert storage[3181] == {"broker", "storage"}  # brokers' ledgers, autorecovery's re-replication
    metadata_clients = {"lookup", "broker", "storage"}
    if "etcd" in components:
        etcd = allowed(found["etcd"])
        assert etcd[2379] == metadata_clients | {"etcd"} and etcd[2380] == {"etcd"}
    else:
        assert allowed(found["redis"])[6379] == metadata_clients
    # Clients, the proxy, the dlq-worker and the operator (admin calls go to lookup): anyone by default.
    assert allowed(found["lookup"])[6660] is None
    assert allowed(found["broker"])[6661] is None


def test_restricted_clients_keep_the_release_s_own_pods_and_prometheus_its_metrics_ports() -> None:
    clients = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}}
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    manifests = render(sets=(*ON, "networkPolicy.clients[0].namespaceSelector.matchLabels.kubernetes\\.io/"
                             "metadata\\.name=apps",
                             "networkPolicy.prometheus[0].namespaceSelector.matchLabels.kubernetes\\.io/"
                             "metadata\\.name=monitoring"))
    found = policies(manifests)
    release = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "herald",
                                               "app.kubernetes.io/instance": RELEASE}}}
    for component, port, metrics in (("lookup", 6660, 9101), ("broker", 6661, 9102), ("proxy", 6660, 9104)):
        rules = {p["port"]: rule for rule in found[component]["spec"]["ingress"] for p in rule["ports"]}
        assert rules[port]["from"] == [clients, release], component
        assert rules[metrics]["from"] == [monitoring], component
    storage_rules = found["storage"]["spec"]["ingress"]
    assert [r["from"] for r in storage_rules if r["ports"][0]["port"] == 9103] == [[monitoring]]
