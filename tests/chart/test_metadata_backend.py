"""The chart's metadata backends: the production values run a 3-member etcd cluster (StatefulSet behind a
headless Service, a volume per member, one member per host, a disruption budget keeping a majority)
and point every service at all three members; external and Redis backends still work."""

from __future__ import annotations

import kubernetes_validate  # type: ignore[import-untyped]

from tests.chart.render import (
    KUBERNETES_VERSION,
    NAMESPACE,
    Manifest,
    component_name,
    component_of,
    containers,
    named,
    of_kind,
    pod_spec,
    render,
    render_failure,
    workloads,
)

ETCD = component_name("etcd")
MEMBERS = [f"{ETCD}-{i}.{ETCD}-headless.{NAMESPACE}.svc.cluster.local:2379" for i in range(3)]


def metadata_urls(manifests: list[Manifest]) -> dict[str, dict[str, object]]:
    """Every METADATA_URL env entry, by workload."""
    found = {}
    for workload in workloads(manifests):
        for container in containers(workload):
            for entry in container.get("env", []):
                if entry["name"].endswith("_METADATA_URL"):
                    found[workload["metadata"]["name"]] = entry
    return found


def test_production_values_render_a_three_member_etcd_statefulset(production_manifests: list[Manifest]) -> None:
    etcd = named(production_manifests, "StatefulSet", ETCD)
    kubernetes_validate.validate(etcd, KUBERNETES_VERSION, strict=True)
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["serviceName"] == f"{ETCD}-headless"
    assert etcd["spec"]["podManagementPolicy"] == "Parallel"
    assert {t["metadata"]["name"] for t in etcd["spec"]["volumeClaimTemplates"]} == {"data"}
    anti = pod_spec(etcd)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    (container,) = containers(etcd)
    command = container["command"]
    peers = [f"{ETCD}-{i}=http://{member.replace(':2379', ':2380')}" for i, member in enumerate(MEMBERS)]
    assert f"--initial-cluster={','.join(peers)}" in command
    headless = named(production_manifests, "Service", f"{ETCD}-headless")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    pdb = named(production_manifests, "PodDisruptionBudget", ETCD)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == etcd["spec"]["selector"]["matchLabels"]


def test_production_services_use_the_three_etcd_members_and_no_redis(production_manifests: list[Manifest]) -> None:
    urls = metadata_urls(production_manifests)
    assert set(urls) == {component_name("lookup"), component_name("broker"), component_name("storage")}
    for entry in urls.values():
        assert entry["value"] == "etcd://" + ",".join(MEMBERS)
    assert not [w for w in workloads(production_manifests) if component_of(w) == "redis"]


def test_etcd_is_off_by_default(default_manifests: list[Manifest]) -> None:
    assert not [m for m in default_manifests if m["metadata"]["name"].startswith(ETCD)]
    for entry in metadata_urls(default_manifests).values():
        assert str(entry["value"]).startswith("redis://")


def test_an_external_etcd_replaces_the_in_chart_stores() -> None:
    url = "etcd://etcd-a:2379,etcd-b:2379,etcd-c:2379"
    escaped = url.replace(",", "\\,")  # --set splits on unescaped commas
    manifests = render(sets=("metadata.backend=external", f"metadata.external.url={escaped}"))
    assert not [w for w in workloads(manifests) if component_of(w) in ("redis", "etcd")]
    assert {str(entry["value"]) for entry in metadata_urls(manifests).values()} == {url}


def test_an_external_store_may_come_from_a_secret() -> None:
    manifests = render(sets=("metadata.backend=external", "metadata.external.existingSecret=herald-etcd"))
    for entry in metadata_urls(manifests).values():
        assert entry["valueFrom"] == {"secretKeyRef": {"name": "herald-etcd", "key": "url"}}


def test_an_external_backend_without_an_address_is_refused() -> None:
    assert "set metadata.external.url" in render_failure(sets=("metadata.backend=external",))


def test_an_even_number_of_etcd_members_is_refused() -> None:
    assert "'/etcd/replicas': value must be one of 1, 3, 5, 7" in render_failure(
        sets=("metadata.backend=etcd", "etcd.replicas=4"))


def test_five_members_are_named_in_the_url() -> None:
    manifests = render(sets=("metadata.backend=etcd", "etcd.replicas=5"))
    assert named(manifests, "StatefulSet", ETCD)["spec"]["replicas"] == 5
    for entry in metadata_urls(manifests).values():
        assert str(entry["value"]).count(",") == 4
    assert of_kind(manifests, "PodDisruptionBudget")


def test_storage_nodes_register_under_their_stable_names(production_manifests: list[Manifest]) -> None:
    """Brokers find storage nodes in the metadata store (scaling up needs no broker restart), by the
    same pod DNS names ledger metadata records."""
    (storage,) = [w for w in workloads(production_manifests) if component_of(w) == "storage"]
    args = storage["spec"]["template"]["spec"]["containers"][0]["args"]
    name = component_name("storage")
    assert f"--advertised-address=$(POD_NAME).{name}-headless.{NAMESPACE}.svc.cluster.local:3181" in args
