"""The lookup service as a real process on a real Redis: registration, heartbeats, expiry of
silent brokers, and ownership assignment (SEEDS §5)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import grpc
import pytest
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc

from tests.conftest import VENV_BIN, free_port, wait_for_port
from tests.helpers import eventually_sync

HEARTBEAT = 0.3  # seconds; expiry is 3 heartbeats


@pytest.fixture
def lookup(redis_db_url: str, herald_env: dict[str, str]) -> Iterator[lookup_pb2_grpc.LookupServiceStub]:
    port = free_port()
    proc = subprocess.Popen(
        [str(VENV_BIN / "herald"), "lookup", "--metadata-url", redis_db_url, "--port", str(port),
         "--heartbeat-interval", str(HEARTBEAT), "--metrics-port", "-1"],
        env=herald_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield lookup_pb2_grpc.LookupServiceStub(channel)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def register(stub: lookup_pb2_grpc.LookupServiceStub, broker_id: str) -> int:
    response = stub.RegisterBroker(lookup_pb2.RegisterBrokerRequest(
        broker_id=broker_id, address=f"{broker_id}.local:6661", cluster="test"))
    assert response.heartbeat_interval_seconds == pytest.approx(HEARTBEAT)
    assert response.expiry_seconds == pytest.approx(3 * HEARTBEAT)
    return int(response.lease_id)


def heartbeat_then_list(lookup: lookup_pb2_grpc.LookupServiceStub, broker_id: str, lease_id: int) -> list[str]:
    """One heartbeat of `broker_id` (its lease must still be valid), then the live brokers."""
    assert lookup.Heartbeat(lookup_pb2.HeartbeatRequest(broker_id=broker_id, lease_id=lease_id)).lease_valid
    return [b.broker_id for b in lookup.GetClusterInfo(lookup_pb2.ClusterInfoRequest()).brokers]


def test_lookup_without_brokers_is_a_clear_retryable_error(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="t"))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no broker is available" in raised.value.details()


def test_registered_broker_is_listed_and_owns_looked_up_topics(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    register(lookup, "b1")
    info = lookup.GetClusterInfo(lookup_pb2.ClusterInfoRequest())
    assert [b.broker_id for b in info.brokers] == ["b1"]
    owner = lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="my-topic"))
    assert (owner.broker_id, owner.broker_address) == ("b1", "b1.local:6661")
    # The same topic always resolves to the same owner.
    again = lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="persistent://public/default/my-topic"))
    assert again.broker_id == "b1"


def test_topics_spread_over_the_least_loaded_brokers(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    leases = {name: register(lookup, name) for name in ("b1", "b2")}
    owners = [lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=f"t{i}")).broker_id for i in range(6)]
    assert owners.count("b1") == owners.count("b2") == 3
    assert leases["b1"] != leases["b2"]


def test_silent_broker_expires_and_its_topics_are_reassigned(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    lease_a = register(lookup, "a")
    owner = lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="orders"))
    assert owner.broker_id == "a"
    lease_b = register(lookup, "b")
    # b keeps heart-beating; a falls silent.
    eventually_sync(lambda: heartbeat_then_list(lookup, "b", lease_b), "silent broker a expiring",
                    until=lambda brokers: brokers == ["b"], interval=HEARTBEAT / 2)
    assert lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="orders")).broker_id == "b"
    # The expired broker learns it from its next heartbeat and must register again.
    assert not lookup.Heartbeat(lookup_pb2.HeartbeatRequest(broker_id="a", lease_id=lease_a)).lease_valid


def test_heartbeats_keep_a_broker_alive(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    lease = register(lookup, "steady")
    # Several expiry periods, each measured by the lookup itself: a broker registered beside the
    # steady one and never heard from again expires, and only then does the next one register.
    for period in range(3):
        register(lookup, f"silent-{period}")
        eventually_sync(lambda: heartbeat_then_list(lookup, "steady", lease), f"silent-{period} expiring",
                        until=lambda brokers: brokers == ["steady"], interval=HEARTBEAT / 2)


def test_unregistered_broker_drops_its_topics(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    lease = register(lookup, "leaving")
    register(lookup, "staying")
    topic = next(
        f"t{i}" for i in range(20)
        if lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=f"t{i}")).broker_id == "leaving"
    )
    lookup.UnregisterBroker(lookup_pb2.UnregisterBrokerRequest(broker_id="leaving", lease_id=lease))
    assert lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic)).broker_id == "staying"


def test_invalid_topic_name_is_refused(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    register(lookup, "b1")
    with pytest.raises(grpc.RpcError) as raised:
        lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="bad name"))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid" in raised.value.details()


def test_registration_needs_an_id_and_address(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        lookup.RegisterBroker(lookup_pb2.RegisterBrokerRequest(broker_id="", address=""))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unpartitioned_topic_reports_zero_partitions(lookup: lookup_pb2_grpc.LookupServiceStub) -> None:
    response = lookup.GetPartitionedTopicMetadata(lookup_pb2.PartitionedTopicMetadataRequest(topic="plain"))
    assert response.partitions == 0
