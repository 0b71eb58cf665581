"""Fixtures of the operator tests: the real kopf operator (herald_operator.runner.run, in a task of
the test's loop) against kmock's Kubernetes emulator, with a real `herald standalone` behind the
admin API. Resources are applied over HTTP to the emulator, as kubectl would."""

from __future__ import annotations

import asyncio
import datetime
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import kmock
import kopf
import pytest
import yaml
from herald.client.admin import AdminClient
from herald.local_process import free_port
from herald_operator.observability import OperatorMetrics
from herald_operator.runner import run
from herald_operator.settings import OperatorSettings

from tests.conftest import StandaloneProcess, running_standalone

CRDS = Path(__file__).resolve().parents[2] / "operator" / "crds"
NAMESPACE = "herald-test"
OTHER_NAMESPACE = "herald-test-other"  # for resources in two Kubernetes namespaces
PEERING = "herald-operator"  # the KopfPeering object of the leader election tests
TOPICS = "/apis/herald.io/v1alpha1/namespaces/{ns}/topics"
SUBSCRIPTIONS = "/apis/herald.io/v1alpha1/namespaces/{ns}/subscriptions"
# Short enough that drift is reverted within a test's wait, long enough not to spin.
RESYNC_INTERVAL = 1.0
RETRY_DELAY = 0.5


def crd(name: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / f"{name}.yaml").read_text())  # type: ignore[no-any-return]


def crd_schema(name: str) -> dict[str, Any]:
    return crd(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def herald(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone for the module; tests use names of their own."""
    with running_standalone(tmp_path_factory.mktemp("operator") / "data") as server:
        yield server


def declare_resources(emulator: kmock.KubernetesEmulator) -> None:
    """The CRDs' resources (from the manifests, as the API server would serve them), events and
the test's namespace."""
    for name in ("topic", "subscription"):
        spec = crd(name)["spec"]
        names = spec["names"]
        emulator.resources[f"{spec['group']}/{spec['versions'][0]['name']}/{names['plural']}"] = kmock.ResourceInfo(
            kind=names["kind"], singular=names["singular"], shortnames=set(names["shortNames"]),
            namespaced=spec["scope"] == "Namespaced", subresources={"status"},
            verbs={"list", "watch", "get", "patch", "create", "delete", "update"})
    emulator.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True,
                                                        verbs={"create", "list", "get"})
    # kopf waits for the namespaces resource to be discovered before it serves any namespace.
    emulator.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False,
                                                            verbs={"list", "watch", "get"})
    for namespace in (NAMESPACE, OTHER_NAMESPACE):
        emulator.objects["v1/namespaces", None, namespace] = {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    # kopf's peering (operator/crds/kopfpeering.yaml): one object per watched namespace.
    emulator.resources["kopf.dev/v1/kopfpeerings"] = kmock.ResourceInfo(
        kind="KopfPeering", namespaced=True, verbs={"list", "watch", "get", "patch", "create"})
    for namespace in (NAMESPACE, OTHER_NAMESPACE):
        emulator.objects["kopf.dev/v1/kopfpeerings", namespace, PEERING] = {
            "apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
            "metadata": {"name": PEERING, "namespace": namespace}, "status": {}}


class Cluster:
    """The emulated Kubernetes API as a test uses it."""

    def __init__(self, emulator: kmock.KubernetesEmulator) -> None:
        self.emulator = emulator

    async def apply(
        self, kind: str, name: str, spec: dict[str, Any], ns: str = NAMESPACE, *,
        created: datetime.datetime | None = None, annotations: dict[str, str] | None = None,
    ) -> None:
        path = (TOPICS if kind == "Topic" else SUBSCRIPTIONS).format(ns=ns)
        # What the API server would add: a uid (kopf keeps its per-object memory by it), a
        # generation and a resourceVersion (kopf's finalizer patches test it), a creationTimestamp
        # (which resource came first when two name one Herald object).
        when = created or datetime.datetime.now(datetime.UTC)
        metadata: dict[str, Any] = {
            "name": name, "namespace": ns, "uid": str(uuid.uuid4()), "generation": 1, "resourceVersion": "1",
            "creationTimestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if annotations:
            metadata["annotations"] = annotations
        body = {"apiVersion": "herald.io/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}
        async with self.emulator.post(path, json=body) as response:
            assert response.status < 300, await response.text()

    async def patch(self, kind: str, name: str, spec: dict[str, Any], ns: str = NAMESPACE) -> None:
        path = (TOPICS if kind == "Topic" else SUBSCRIPTIONS).format(ns=ns) + f"/{name}"
        current = await self.get(kind, name, ns)
        generation = int((current or {}).get("metadata", {}).get("generation") or 1) + 1
        async with self.emulator.patch(path, json={"metadata": {"generation": generation}, "spec": spec},
                                       headers={"Content-Type": "application/merge-patch+json"}) as response:
            assert response.status < 300, await response.text()

    async def annotate(self, kind: str, name: str, annotations: dict[str, str | None], ns: str = NAMESPACE) -> None:
        path = (TOPICS if kind == "Topic" else SUBSCRIPTIONS).format(ns=ns) + f"/{name}"
        async with self.emulator.patch(path, json={"metadata": {"annotations": annotations}},
                                       headers={"Content-Type": "application/merge-patch+json"}) as response:
            assert response.status < 300, await response.text()

    async def delete(self, kind: str, name: str, ns: str = NAMESPACE) -> None:
        path = (TOPICS if kind == "Topic" else SUBSCRIPTIONS).format(ns=ns) + f"/{name}"
        async with self.emulator.delete(path) as response:
            assert response.status < 300, await response.text()

    async def get(self, kind: str, name: str, ns: str = NAMESPACE) -> dict[str, Any] | None:
        path = (TOPICS if kind == "Topic" else SUBSCRIPTIONS).format(ns=ns) + f"/{name}"
        async with self.emulator.get(path) as response:
            if response.status == 404:
                return None
            assert response.status < 300, await response.text()
            return await response.json()  # type: ignore[no-any-return]

    async def emulator_get(self, path: str) -> dict[str, Any]:
        async with self.emulator.get(path) as response:
            assert response.status < 300, await response.text()
            return await response.json()  # type: ignore[no-any-return]

    async def condition(self, kind: str, name: str, type_: str, ns: str = NAMESPACE) -> dict[str, Any] | None:
        obj = await self.get(kind, name, ns)
        for item in ((obj or {}).get("status") or {}).get("conditions") or ():
            if item.get("type") == type_:
                return item  # type: ignore[no-any-return]
        return None

    def events(self, name: str) -> list[dict[str, Any]]:
        """Events posted about the object `name` (kopf names them by generateName, which the
        emulator does not expand, so they are read from the requests it received)."""
        found = []
        for request in list(self.emulator):
            data = request.data if isinstance(request.data, dict) else None
            if request.method == "POST" and data and data.get("involvedObject", {}).get("name") == name:
                found.append(data)
        return found


@pytest.fixture
async def cluster(kmock: kmock.KubernetesEmulator) -> Cluster:
    declare_resources(kmock)
    return Cluster(kmock)


@pytest.fixture
async def admin(herald: StandaloneProcess) -> AsyncIterator[AdminClient]:
    async with AdminClient(herald.service_url, timeout=10) as client:
        yield client


@dataclass
class RunningOperator:
    """An operator started by `start_operator`: its probe and metrics ports and its metrics."""

    health_port: int
    metrics_port: int
    metrics: OperatorMetrics
    stop: threading.Event
    thread: threading.Thread

    async def halt(self) -> None:
        """Stop it now (the fixture would at the end of the test)."""
        self.stop.set()
        await asyncio.to_thread(self.thread.join, 20)
        assert not self.thread.is_alive(), "the operator did not stop within 20s"


class OperatorStarter(Protocol):
    def __call__(self, admin_url: str, *, peering: bool = False,
                 namespaces: tuple[str, ...] = (NAMESPACE, OTHER_NAMESPACE)) -> Awaitable[RunningOperator]: ...


@pytest.fixture
async def start_operator(cluster: Cluster) -> AsyncIterator[OperatorStarter]:
    """Start the real operator (kopf and Herald's handlers) on the emulator, against `admin_url`,
    on a thread of its own with its own event loop (kopf cancels, when it stops, every task its
    loop gained meanwhile); stopped at the end of the test. With `peering`, replicas elect the
    active one through the emulator's KopfPeering objects; else each runs standalone."""
    started: list[tuple[threading.Thread, threading.Event, list[BaseException]]] = []

    async def start(admin_url: str, *, peering: bool = False,
                    namespaces: tuple[str, ...] = (NAMESPACE, OTHER_NAMESPACE)) -> RunningOperator:
        registry = kopf.OperatorRegistry()
        server = str(cluster.emulator.url).rstrip("/")

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=server, insecure=True)

        settings = OperatorSettings(admin_url=admin_url, admin_timeout=3.0, resync_interval=RESYNC_INTERVAL,
                                    retry_delay=RETRY_DELAY, namespaces=list(namespaces),
                                    # kmock 0.8 cannot parse GET /api/v1/namespaces (it reads
                                    # "namespaces" as the namespaced path prefix): no scanning.
                                    scanning=False, health_port=free_port(), metrics_port=free_port(),
                                    peering_name=PEERING if peering else "")
        stop, ready = threading.Event(), threading.Event()
        failures: list[BaseException] = []
        metrics = OperatorMetrics()

        def main() -> None:
            try:
                asyncio.run(run(settings, registry=registry, standalone=not peering, stop_flag=stop,
                                ready_flag=ready, metrics=metrics))
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=main, name="operator", daemon=True)
        thread.start()
        started.append((thread, stop, failures))
        # ready_flag is a threading.Event (set on the operator's thread): waited for off the loop.
        assert await asyncio.to_thread(ready.wait, 20), f"the operator did not start within 20s: {failures!r}"
        return RunningOperator(settings.health_port, settings.metrics_port, metrics, stop, thread)

    yield start
    for _, stop, _ in started:
        stop.set()
    for thread, _, failures in started:
        await asyncio.to_thread(thread.join, 20)
        assert not thread.is_alive(), "the operator did not stop within 20s"
        assert not failures, failures


def strict_status_schema(kind: str) -> dict[str, Any]:
    """The CRD's status schema with every declared object closed (additionalProperties false): what the
    API server keeps of a status, since it prunes undeclared fields now that status has a real schema."""
    import copy

    schema = copy.deepcopy(crd_schema(kind)["properties"]["status"])

    def close(node: dict[str, Any]) -> None:
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
            for child in node["properties"].values():
                close(child)
        if isinstance(node.get("items"), dict):
            close(node["items"])
    close(schema)
    return schema


def assert_status_declared(kind: str, obj: dict[str, Any] | None) -> None:
    """Every field the operator wrote in `obj`'s status is declared by the CRD (none would be pruned)."""
    import jsonschema

    assert obj is not None and obj.get("status"), obj
    jsonschema.Draft202012Validator(strict_status_schema(kind)).validate(obj["status"])
