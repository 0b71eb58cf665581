"""The Herald chart as Kubernetes sees it: helm lint, every rendered object valid for the pinned
Kubernetes version, pods non-root with read-only roots, probes on ports that exist, Services and
budgets that select pods, storage and Redis durable, monitoring objects well formed, and values that
the schema or the chart's own checks refuse."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from kubernetes_validate.utils import ValidationError  # type: ignore[import-untyped]

from tests.chart.render import (
    CHART,
    KUBERNETES_VERSION,
    NAMESPACE,
    PRODUCTION_VALUES,
    SECURE_VALUES,
    Manifest,
    component_name,
    component_of,
    containers,
    helm,
    named,
    of_kind,
    pod_spec,
    render,
    render_failure,
    workloads,
)

MONITORING_KINDS = ("ServiceMonitor", "PodMonitor")
# Custom resources of other projects' CRDs, which the validator does not know: their structure is
# checked by their own tests (monitoring here and test_alerts.py, cert-manager's Certificate in
# test_security, kopf's peering objects in test_operator_chart).
FOREIGN_KINDS = (*MONITORING_KINDS, "PrometheusRule", "Certificate", "KopfPeering", "ClusterKopfPeering")


def validate(manifest: Manifest) -> None:
    """Against Kubernetes' own OpenAPI schemas, strictly (an unknown field is an error)."""
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


# ---- helm's own checks ------------------------------------------------------------------------


@pytest.mark.parametrize("values", [(), (PRODUCTION_VALUES,), (PRODUCTION_VALUES, SECURE_VALUES)],
                         ids=["default", "production", "secure"])
def test_helm_lint_passes(values: tuple[Any, ...]) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBERNETES_VERSION]
    for path in values:
        args += ["-f", str(path)]
    result = helm(*args)
    assert "0 chart(s) failed" in result.stdout


def test_every_object_is_valid_for_the_pinned_kubernetes_version(manifests: list[Manifest]) -> None:
    problems = []
    for manifest in manifests:
        if manifest["kind"] in FOREIGN_KINDS:
            continue  # not a built-in kind: see FOREIGN_KINDS
        try:
            validate(manifest)
        except ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            problems.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {path}: {error.message}")
    assert not problems, "\n".join(problems)


def test_the_validator_rejects_an_unknown_field(default_manifests: list[Manifest]) -> None:
    """The check above can fail: a misspelt field in a pod template is refused."""
    broker = copy.deepcopy(named(default_manifests, "Deployment", component_name("broker")))
    pod_spec(broker)["containers"][0]["livenesProbe"] = {"httpGet": {"path": "/healthz", "port": "metrics"}}
    with pytest.raises(ValidationError):
        validate(broker)


def test_every_object_is_in_the_release_namespace_or_cluster_scoped(manifests: list[Manifest]) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    for manifest in manifests:
        if manifest["kind"] not in cluster_scoped:
            assert manifest["metadata"].get("namespace", NAMESPACE) == NAMESPACE, manifest["metadata"]


def test_object_names_are_unique_per_kind(manifests: list[Manifest]) -> None:
    seen = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert len(seen) == len(set(seen)), sorted(seen)


def test_the_default_render_has_every_component(default_manifests: list[Manifest]) -> None:
    kinds = {(m["kind"], m["metadata"]["name"]) for m in default_manifests}
    for component in ("lookup", "broker", "proxy", "dlq-worker", "operator"):
        assert ("Deployment", component_name(component)) in kinds
    for component in ("storage", "redis"):
        assert ("StatefulSet", component_name(component)) in kinds
    assert ("CustomResourceDefinition", "topics.herald.io") in kinds
    assert ("CustomResourceDefinition", "subscriptions.herald.io") in kinds


# ---- pods: security, probes, ports --------------------------------------------------------------


def test_every_pod_runs_as_non_root_with_a_read_only_root(manifests: list[Manifest]) -> None:
    for workload in workloads(manifests):
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in containers(workload):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, (name, container["name"])
            assert context["allowPrivilegeEscalation"] is False, (name, container["name"])
            assert context["capabilities"]["drop"] == ["ALL"], (name, container["name"])
            mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{name}/{container['name']} has a read-only root but no writable /tmp"


def test_only_the_operator_gets_a_kubernetes_api_token(manifests: list[Manifest]) -> None:
    for workload in workloads(manifests):
        expected = component_of(workload) == "operator"
        assert pod_spec(workload)["automountServiceAccountToken"] is expected, workload["metadata"]["name"]


def _probe_ports(container: dict[str, Any]) -> list[Any]:
    ports = []
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        action = container.get(probe, {})
        for kind in ("httpGet", "tcpSocket", "grpc"):
            if kind in action:
                ports.append(action[kind]["port"])
    return ports


def test_every_probe_port_is_a_container_port(manifests: list[Manifest]) -> None:
    for workload in workloads(manifests):
        for container in containers(workload):
            names = {port["name"] for port in container.get("ports", []) if "name" in port}
            numbers = {port["containerPort"] for port in container.get("ports", [])}
            for port in _probe_ports(container):
                assert port in (names if isinstance(port, str) else numbers), (
                    f"{workload['metadata']['name']}/{container['name']} probes port {port!r}, "
                    f"which is not one of its ports {sorted(names)} {sorted(numbers)}")


def test_herald_services_probe_healthz_and_readyz(manifests: list[Manifest]) -> None:
    for workload in workloads(manifests):
        if component_of(workload) in ("redis", "etcd", "operator"):
            continue
        (container,) = containers(workload)
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
        metrics_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
        assert f"--metrics-port={metrics_port}" in container["args"]
        assert "--metrics-host=0.0.0.0" in container["args"], "probes come from the kubelet, not loopback"


def test_every_service_selects_pods_and_targets_their_ports(manifests: list[Manifest]) -> None:
    for service in of_kind(manifests, "Service"):
        selector = service["spec"]["selector"]
        matching = [w for w in workloads(manifests)
                    if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert matching, f"Service {service['metadata']['name']} selects no pods"
        port_names = {p["name"] for w in matching for c in containers(w) for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, (service["metadata"]["name"], port)


def test_every_pod_disruption_budget_selects_a_workload(manifests: list[Manifest]) -> None:
    budgets = of_kind(manifests, "PodDisruptionBudget")
    assert budgets
    for budget in budgets:
        selector = budget["spec"]["selector"]["matchLabels"]
        assert any(selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
                   for w in workloads(manifests)), budget["metadata"]["name"]


def test_workload_selectors_match_their_pod_labels(manifests: list[Manifest]) -> None:
    for workload in workloads(manifests):
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()


# ---- storage and Redis ----------------------------------------------------------------------------


def test_storage_keeps_journal_and_ledgers_on_their_own_volumes(production_manifests: list[Manifest]) -> None:
    storage = named(production_manifests, "StatefulSet", component_name("storage"))
    claims = {t["metadata"]["name"]: t for t in storage["spec"]["volumeClaimTemplates"]}
    assert set(claims) == {"journal", "ledgers"}
    assert claims["ledgers"]["spec"]["resources"]["requests"]["storage"] == "500Gi"
    (container,) = containers(storage)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    data_dir = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--data-dir="))
    # The ledger store keeps its journal in <data_dir>/journal (herald.storage.node.ledger_store).
    assert mounts["ledgers"] == data_dir
    assert mounts["journal"] == f"{data_dir}/journal"
    assert storage["spec"]["serviceName"] == f"{component_name('storage')}-headless"
    assert storage["spec"]["replicas"] == 3


def test_storage_nodes_are_spread_over_hosts_in_production(production_manifests: list[Manifest]) -> None:
    storage = named(production_manifests, "StatefulSet", component_name("storage"))
    terms = pod_spec(storage)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["topologyKey"] == "kubernetes.io/hostname"
    assert terms[0]["labelSelector"]["matchLabels"].items() <= storage["spec"]["template"]["metadata"]["labels"].items()


def test_the_storage_headless_service_names_every_node(manifests: list[Manifest]) -> None:
    storage = named(manifests, "StatefulSet", component_name("storage"))
    headless = named(manifests, "Service", f"{component_name('storage')}-headless")
    assert headless["spec"]["clusterIP"] == "None"
    broker = named(manifests, "Deployment", component_name("broker"))
    (container,) = containers(broker)
    nodes = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--storage-nodes=")).split(",")
    expected = [f"{component_name('storage')}-{i}.{headless['metadata']['name']}.{NAMESPACE}.svc.cluster.local:3181"
                for i in range(storage["spec"]["replicas"])]
    assert nodes == expected


def test_production_ledgers_are_striped_3_2_2(production_manifests: list[Manifest]) -> None:
    broker = named(production_manifests, "Deployment", component_name("broker"))
    (container,) = containers(broker)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["HERALD_BROKER_ENSEMBLE_SIZE"], env["HERALD_BROKER_WRITE_QUORUM"],
            env["HERALD_BROKER_ACK_QUORUM"]) == ("3", "2", "2")
    assert broker["spec"]["replicas"] == 3
    assert named(production_manifests, "Deployment", component_name("proxy"))["spec"]["replicas"] == 2


def test_redis_fsyncs_every_write_to_its_append_only_file(default_manifests: list[Manifest]) -> None:
    # The default render's: production runs etcd instead (tests/chart/test_metadata_backend.py).
    redis = named(default_manifests, "StatefulSet", component_name("redis"))
    (container,) = containers(redis)
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "always"
    assert {t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]} == {"data"}
    assert container["image"].startswith("redis:")


def test_external_redis_replaces_the_in_chart_one() -> None:
    manifests = render(sets=("redis.enabled=false", "redis.external.existingSecret=herald-redis"))
    assert not [w for w in workloads(manifests) if component_of(w) == "redis"]
    for component in ("lookup", "broker"):
        (container,) = containers(named(manifests, "Deployment", component_name(component)))
        (url,) = [e for e in container["env"] if e["name"] == f"HERALD_{component.upper()}_METADATA_URL"]
        assert url["valueFrom"]["secretKeyRef"] == {"name": "herald-redis", "key": "url"}


# ---- monitoring ------------------------------------------------------------------------------------


def test_monitoring_objects_have_the_required_structure(production_manifests: list[Manifest]) -> None:
    monitors = [m for m in production_manifests if m["kind"] in MONITORING_KINDS]
    assert {(m["kind"], component_of(m)) for m in monitors} == {
        ("ServiceMonitor", "lookup"), ("ServiceMonitor", "broker"), ("ServiceMonitor", "storage"),
        ("ServiceMonitor", "proxy"), ("PodMonitor", "dlq-worker"), ("PodMonitor", "operator")}
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        spec = monitor["spec"]
        endpoints = spec["endpoints"] if monitor["kind"] == "ServiceMonitor" else spec["podMetricsEndpoints"]
        assert endpoints and all(e["port"] == "metrics" and e["path"] == "/metrics" for e in endpoints)
        assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        selector = spec["selector"]["matchLabels"]
        if monitor["kind"] == "ServiceMonitor":
            targets = [s for s in of_kind(production_manifests, "Service")
                       if selector.items() <= s["metadata"]["labels"].items()]
            assert targets and all(any(p["name"] == "metrics" for p in s["spec"]["ports"]) for s in targets)
        else:
            assert any(selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
                       for w in workloads(production_manifests))


def test_monitoring_is_off_by_default(default_manifests: list[Manifest]) -> None:
    assert not [m for m in default_manifests if m["kind"] in MONITORING_KINDS]
    assert not of_kind(default_manifests, "ConfigMap")


def test_every_dashboard_becomes_a_configmap_grafana_finds(production_manifests: list[Manifest]) -> None:
    files = sorted((CHART / "dashboards").glob("*.json"))
    maps = of_kind(production_manifests, "ConfigMap")
    assert len(maps) == len(files) >= 1
    shipped = {}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"]["grafana_folder"] == "Herald"
        ((name, text),) = config_map["data"].items()
        shipped[name] = json.loads(text)
    assert shipped == {path.name: json.loads(path.read_text()) for path in files}


# ---- RBAC ----------------------------------------------------------------------------------------


def _rules(role: Manifest) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_operator_may_do_what_kopf_needs(default_manifests: list[Manifest]) -> None:
    role = named(default_manifests, "ClusterRole", component_name("operator"))
    rules = _rules(role)
    crds = of_kind(default_manifests, "CustomResourceDefinition")
    for crd in (crd for crd in crds if crd["spec"]["group"] == "herald.io"):  # kopf.dev: peering's
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        for verb in ("get", "list", "watch", "patch"):
            assert (group, plural, verb) in rules
        assert (group, f"{plural}/status", "patch") in rules
    assert ("", "events", "create") in rules
    assert {("", "namespaces", "list"), ("", "namespaces", "watch")} <= rules
    assert {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")} <= rules
    assert not [r for r in rules if r[0] == "kopf.dev"], "peering is off by default"
    binding = named(default_manifests, "ClusterRoleBinding", component_name("operator"))
    operator = named(default_manifests, "Deployment", component_name("operator"))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod_spec(operator)["serviceAccountName"],
                                    "namespace": NAMESPACE}]


def test_spark_drivers_get_a_role_only_when_asked(default_manifests: list[Manifest],
                                                  production_manifests: list[Manifest]) -> None:
    assert not of_kind(default_manifests, "Role")
    role = named(production_manifests, "Role", f"{component_name('spark')}")
    rules = _rules(role)
    for resource in ("pods", "services", "configmaps", "persistentvolumeclaims"):
        assert ("", resource, "create") in rules and ("", resource, "delete") in rules
    binding = named(production_manifests, "RoleBinding", component_name("spark"))
    account = named(production_manifests, "ServiceAccount", component_name("spark"))
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]


# ---- values that must be refused ------------------------------------------------------------------


def test_the_values_schema_refuses_a_wrong_type() -> None:
    error = render_failure(sets=("broker.replicas=three",))
    assert "/broker/replicas" in error and "want integer" in error


def test_the_values_schema_refuses_an_unknown_key() -> None:
    error = render_failure(sets=("storage.replica=3",))
    assert "additional properties 'replica' not allowed" in error


def test_the_values_schema_refuses_an_unknown_setting() -> None:
    error = render_failure(sets=("broker.settings.max_mesage_size=10",))
    assert "max_mesage_size" in error


def test_an_ensemble_larger_than_the_storage_nodes_is_refused() -> None:
    error = render_failure(sets=("broker.ledger.ensembleSize=3", "broker.ledger.writeQuorum=2",
                                 "broker.ledger.ackQuorum=2"))
    assert "broker.ledger.ensembleSize (3) needs at least that many storage nodes: storage.replicas is 1" in error


def test_an_ack_quorum_above_the_write_quorum_is_refused() -> None:
    error = render_failure(sets=("broker.ledger.ackQuorum=2",))
    assert "writeQuorum (1) must be at least ackQuorum (2)" in error


def test_external_redis_without_an_address_is_refused() -> None:
    error = render_failure(sets=("redis.enabled=false",))
    assert "set redis.external.url" in error


def test_every_values_key_is_documented() -> None:
    """Each key of values.yaml has a comment on the line before it, or sits inside a value documented
    as a whole (a `# --` comment above an ancestor: resources, security contexts...), so that
    values.yaml is the reference."""
    lines = (CHART / "values.yaml").read_text().splitlines()

    def commented(index: int, marker: str = "#") -> bool:
        return index > 0 and lines[index - 1].strip().startswith(marker)

    def parent(index: int) -> int | None:
        indent = len(lines[index]) - len(lines[index].lstrip())
        for i in range(index - 1, -1, -1):
            text = lines[i].strip()
            if text and not text.startswith("#") and len(lines[i]) - len(lines[i].lstrip()) < indent:
                return i
        return None

    undocumented = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped or commented(number):
            continue
        ancestor = parent(number)
        while ancestor is not None and not commented(ancestor, "# --"):
            ancestor = parent(ancestor)
        if ancestor is None:
            undocumented.append(f"values.yaml:{number + 1}: {stripped}")
    assert not undocumented, "\n".join(undocumented)


def test_values_yaml_and_the_schema_agree() -> None:
    """Every key of values.yaml is a property of values.schema.json (the schema refuses unknown keys,
    so a key missing there would make the defaults themselves invalid) and vice versa at the top."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert set(values) == set(schema["properties"]) - {"global"}


def _service_ports(manifests: list[Manifest], component: str) -> dict[str, int]:
    service = named(manifests, "Service", component_name(component))
    return {port["name"]: port["port"] for port in service["spec"]["ports"]}


def test_brokers_serve_pulsar_s_ports_as_pulsar_s_chart_does(default_manifests: list[Manifest]) -> None:
    ports = _service_ports(default_manifests, "broker")
    assert (ports["pulsar"], ports["http"]) == (6650, 8080)
    assert "pulsarssl" not in ports  # TLS is off
    args = pod_spec(named(default_manifests, "Deployment", component_name("broker")))["containers"][0]["args"]
    expected = {"--pulsar-port=6650", "--web-port=8080", "--pulsar-tls-port=-1", "--pulsar-advertised-host=$(POD_IP)"}
    assert expected <= set(args)


def test_with_tls_brokers_serve_pulsar_ssl_on_6651() -> None:
    secure = render(PRODUCTION_VALUES, SECURE_VALUES)
    assert _service_ports(secure, "broker")["pulsarssl"] == 6651


def test_the_proxy_serves_pulsar_s_protocol_on_6650(default_manifests: list[Manifest]) -> None:
    assert _service_ports(default_manifests, "proxy")["pulsar"] == 6650
    args = pod_spec(named(default_manifests, "Deployment", component_name("proxy")))["containers"][0]["args"]
    assert "--pulsar-port=6650" in args


def test_pulsar_s_ports_can_be_turned_off() -> None:
    ports = _service_ports(render(sets=("broker.pulsarPort=-1", "broker.webPort=-1")), "broker")
    assert "pulsar" not in ports and "http" not in ports
