"""Item 11 (issue 22), operator part: a running operator answers kopf's liveness endpoint and
serves Prometheus metrics counting its reconciles over real HTTP; two operators sharing a kopf
peering object elect one: the later one waits and reconciles nothing until the first stops, then
takes over."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name
from tests.operator.conftest import NAMESPACE, Cluster, OperatorStarter, RunningOperator


def http_get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.status, response.read().decode()


def sample(text: str, name: str, labels: str) -> float | None:
    """The value of `name{labels}` in a Prometheus text exposition."""
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def synced(cluster: Cluster, name: str) -> bool:
    found = await cluster.condition("Topic", name, "Synced")
    return found is not None and found["status"] == "True"


async def test_the_probe_and_metrics_endpoints_answer_over_http(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess,
) -> None:
    operator = await start_operator(herald.service_url)
    status, body = await eventually_http(operator.health_port, "/healthz")
    assert status == 200 and isinstance(json.loads(body), dict)

    status, text = await eventually_http(operator.metrics_port, "/metrics")
    assert status == 200
    # Known label values exist before any event (dashboards and alerts see 0, not "no data").
    assert sample(text, "herald_operator_reconciles_total", 'kind="subscription",result="conflict"') == 0.0
    name = unique_name("counted")
    await cluster.apply("Topic", name, {"partitions": 1})
    await eventually(lambda: synced(cluster, name), "Synced")

    async def counted() -> str:
        _, text = await eventually_http(operator.metrics_port, "/metrics")
        applied = sample(text, "herald_operator_reconciles_total", 'kind="topic",result="applied"')
        return text if applied is not None and applied >= 1 else ""
    text = await eventually(counted, "a reconcile counted on /metrics")
    count = sample(text, "herald_operator_reconcile_duration_seconds_count", 'kind="topic"')
    assert count is not None and count >= 1
    assert sample(text, "herald_operator_reconcile_errors_total", 'kind="topic"') is not None


async def eventually_http(port: int, path: str) -> tuple[int, str]:
    return await eventually(lambda: asyncio.to_thread(http_get, port, path), f"GET {path} on {port}",
                            retry=(OSError,))


def applied(operator: RunningOperator) -> float:
    return operator.metrics.registry.get_sample_value(
        "herald_operator_reconciles_total", {"kind": "topic", "result": "applied"}) or 0.0


async def test_two_operators_elect_one_and_the_other_takes_over_when_it_stops(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    first = await start_operator(herald.service_url, peering=True, namespaces=(NAMESPACE,))
    assert applied(first) == 0.0
    name = unique_name("leader")
    await cluster.apply("Topic", name, {"ttlSeconds": 10})
    await eventually(lambda: synced(cluster, name), "the first operator reconciles")

    second = await start_operator(herald.service_url, peering=True, namespaces=(NAMESPACE,))

    # kopf starts a replica with mandatory peering paused; it resumes only when no live peer has a
    # higher priority (the first's: it started earlier). Both are in the peering object's status.
    async def peers() -> dict[str, object]:
        found = await cluster.emulator_get(f"/apis/kopf.dev/v1/namespaces/{NAMESPACE}/kopfpeerings/herald-operator")
        return found["status"] if len(found.get("status") or {}) == 2 else {}
    await eventually(peers, "both replicas registered as peers")

    # A resource made now is reconciled by the first only (its timer runs every second).
    other = unique_name("follower")
    await cluster.apply("Topic", other, {"ttlSeconds": 20})
    await eventually(lambda: synced(cluster, other), "reconciled")
    before = applied(first)
    await eventually(lambda: applied(first) >= before + 3, "the first keeps reconciling")
    assert applied(second) == 0.0, "the waiting replica reconciled"

    await first.halt()
    await eventually(lambda: applied(second) >= 1, "the second takes over")
    policies = await admin.topic_policies(f"persistent://public/default/{other}")
    policies.message_ttl_seconds = 1
    await admin.set_topic_policies(f"persistent://public/default/{other}", policies)

    async def reverted() -> bool:
        return (await admin.topic_policies(f"persistent://public/default/{other}")).message_ttl_seconds == 20
    await eventually(reverted, "drift reverted by the second")
