"""The proxy speaking Pulsar's binary protocol: an official client given only the proxy's pulsar://
URL reaches topics owned by every broker of a cluster (lookups answered through a broker and
rewritten to send the client through the proxy; each broker connection spliced); a
proxy_to_broker_url naming anything but a live broker is refused; a connection that never says
CONNECT is closed; the connection limits hold; with token authentication the proxy refuses bad
credentials itself and brokers authorize the client's role, not the proxy's."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import grpc
import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.client import AuthenticationToken, Client
from herald.common.security.tokens import create_token, new_secret_key
from herald.local_cluster import ClusterProcess, ClusterSettings, LocalCluster, free_port

from tests.conftest import StandaloneProcess, service_env
from tests.e2e.test_proxy import start_proxy
from tests.helpers import eventually_sync, unique_topic
from tests.pulsar.raw import RawConnection
from tests.security.conftest import ADMIN, Keys, Pki, new_keys, new_pki, secure_process

Command = PulsarApi_pb2.BaseCommand
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
RECEIVE_MS = 15_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """2 brokers serving Pulsar's protocol, a proxy in front of them serving it too."""
    made = LocalCluster(ClusterSettings(base_dir=str(tmp_path_factory.mktemp("pcluster")), heartbeat_interval=0.5,
                                        proxies=1, extra_env=service_env()))
    made.start()
    try:
        yield made
    finally:
        made.stop()


def owner_of(cluster: LocalCluster, topic: str) -> ClusterProcess:
    with grpc.insecure_channel(cluster.lookup.address) as channel:
        reply = lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=topic), timeout=30)
    return cluster.broker_at(reply.broker_address)


def topics_on_each_broker(cluster: LocalCluster) -> dict[str, str]:
    """broker name -> a topic it owns (lookup spreads new topics over the brokers)."""
    found: dict[str, str] = {}
    for _ in range(100):
        topic = unique_topic("proxied")
        found.setdefault(owner_of(cluster, topic).name, topic)
        if len(found) == len(cluster.brokers):
            return found
    raise AssertionError(f"lookup put 100 topics on the brokers {sorted(found)} only")


def lookup_through_proxy(cluster: LocalCluster, topic: str) -> PulsarApi_pb2.CommandLookupTopicResponse:
    proxy = cluster.proxies[0]
    assert proxy.pulsar_port is not None
    with RawConnection(proxy.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.LOOKUP, lookupTopic=PulsarApi_pb2.CommandLookupTopic(topic=topic, request_id=7)))
        answer = raw.receive()
    assert answer.type == Command.LOOKUP_RESPONSE, answer
    return answer.lookupTopicResponse


def active_connections(proxy: ClusterProcess) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=10).read().decode()
    match = re.search(r"^herald_proxy_active_connections (\S+)$", text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


def test_a_lookup_through_the_proxy_names_the_owner_and_sends_the_client_through_the_proxy(
    cluster: LocalCluster,
) -> None:
    for broker_name, topic in topics_on_each_broker(cluster).items():
        answer = lookup_through_proxy(cluster, topic)
        assert answer.response == answer.Connect  # never Redirect: the client would dial the broker
        assert answer.proxy_through_service_url
        assert answer.brokerServiceUrl == cluster.process(broker_name).pulsar_url


def test_the_official_client_given_only_the_proxy_reaches_topics_of_every_broker(cluster: LocalCluster) -> None:
    topics = topics_on_each_broker(cluster)
    client = pulsar.Client(cluster.proxy_pulsar_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumers = {name: client.subscribe(topic, "sub") for name, topic in topics.items()}
        # Producers are served too (a Pulsar producer's SEND waits for the core's Pulsar entries).
        producers = [client.create_producer(topic) for topic in topics.values()]
        # One connection per broker, each through the proxy, besides the lookup connection.
        eventually_sync(lambda: active_connections(cluster.proxies[0]), "a proxied connection per broker",
                        until=lambda live: live >= 1 + len(topics))
        with Client(cluster.service_url) as herald:
            for name, topic in topics.items():
                producer = herald.create_producer(topic)
                producer.send(f"from herald to {name}".encode())
                producer.close()
        for name, consumer in consumers.items():
            message = consumer.receive(timeout_millis=RECEIVE_MS)
            assert message.data() == f"from herald to {name}".encode()
            consumer.acknowledge(message)
        for producer in producers:
            producer.close()
    finally:
        client.close()


def test_a_proxy_to_broker_url_that_is_no_broker_is_refused(cluster: LocalCluster) -> None:
    proxy = cluster.proxies[0]
    assert proxy.pulsar_port is not None
    for address in (cluster.lookup.address, cluster.brokers[0].address, "10.1.2.3:6650"):
        with RawConnection(proxy.pulsar_port) as raw:
            connect = PulsarApi_pb2.CommandConnect(client_version="raw-test", protocol_version=20,
                                                   proxy_to_broker_url=address)
            raw.send(Command(type=Command.CONNECT, connect=connect))
            answer = raw.receive()
            assert answer.type == Command.ERROR, answer
            assert answer.error.error == PulsarApi_pb2.NotAllowedError
            assert f"proxy_to_broker_url {address!r} is not the pulsar:// address of a live broker" in \
                answer.error.message
            assert raw.closed_by_broker()


def test_a_lookup_connection_serves_lookups_only(cluster: LocalCluster) -> None:
    proxy = cluster.proxies[0]
    assert proxy.pulsar_port is not None
    with RawConnection(proxy.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.PRODUCER, producer=PulsarApi_pb2.CommandProducer(
            topic=unique_topic("direct"), producer_id=1, request_id=3)))
        answer = raw.receive()
        assert answer.type == Command.ERROR and answer.error.request_id == 3, answer
        assert "lookup connection to the proxy" in answer.error.message
        metadata = PulsarApi_pb2.CommandPartitionedTopicMetadata(topic=unique_topic("meta"), request_id=4)
        raw.send(Command(type=Command.PARTITIONED_METADATA, partitionMetadata=metadata))
        meta = raw.receive()
        assert meta.type == Command.PARTITIONED_METADATA_RESPONSE and meta.partitionMetadataResponse.request_id == 4


@pytest.fixture(scope="module")
def limited_proxy(cluster: LocalCluster) -> Iterator[ClusterProcess]:
    """A second proxy with one connection per client address and a 1 s wait for CONNECT."""
    proxy = start_proxy(cluster.logs, cluster.lookup.address, name="limited-proxy", pulsar_port=free_port(),
                        max_connections_per_address=1, pulsar_connect_timeout=1)
    try:
        yield proxy
    finally:
        proxy.stop()


def pulsar_port_of(proxy: ClusterProcess) -> int:
    return int(proxy.env["HERALD_PROXY_PULSAR_PORT"])


def test_a_connection_that_never_says_connect_is_closed(limited_proxy: ClusterProcess) -> None:
    with RawConnection(pulsar_port_of(limited_proxy)) as raw:
        answer = raw.receive()  # nothing sent: the proxy gives up after pulsar_connect_timeout
        assert answer.type == Command.ERROR and "no CONNECT within 1 s" in answer.error.message
        assert raw.closed_by_broker()


def test_connections_past_the_per_address_limit_are_refused(limited_proxy: ClusterProcess) -> None:
    port = pulsar_port_of(limited_proxy)
    with RawConnection(port) as first:
        assert first.connect().type == Command.CONNECTED
        with RawConnection(port) as second:
            answer = second.connect()
            assert answer.type == Command.ERROR
            assert answer.error.error == PulsarApi_pb2.TooManyRequests
            assert "max_connections_per_address" in answer.error.message
            assert second.closed_by_broker()
    # The place is given back when the first closes.
    def connects() -> bool:
        with RawConnection(port) as again:
            return again.connect().type == Command.CONNECTED
    eventually_sync(connects, "a connection once the first closed")


# ---- with token authentication and authorization (a secure standalone and its proxy) ----


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return new_pki(tmp_path_factory.mktemp("ppki"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return new_keys(tmp_path_factory.mktemp("pkeys"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[tuple[StandaloneProcess, int]]:
    """A standalone with TLS, token authentication and authorization (super-user admin), its proxy
    serving Pulsar's protocol on the port given."""
    server = secure_process(tmp_path_factory.mktemp("psecure") / "data", pki, keys)
    proxy_pulsar_port = free_port()
    server.extra_args += ["--proxy-pulsar-port", str(proxy_pulsar_port)]
    server.start()
    try:
        yield server, proxy_pulsar_port
    finally:
        server.stop()


@pytest.mark.parametrize("token", ["forged", "none", "garbage"])
def test_bad_credentials_are_refused_at_the_proxy(secure: tuple[StandaloneProcess, int], token: str) -> None:
    given = {"forged": create_token(ADMIN, secret_key=new_secret_key()), "none": None, "garbage": "not.a.token"}[token]
    with RawConnection(secure[1]) as raw:
        answer = raw.connect(given)
        assert answer.type == Command.ERROR, answer
        assert answer.error.error == PulsarApi_pb2.AuthenticationError, answer
        assert raw.closed_by_broker()


def test_brokers_authorize_the_client_role_not_the_proxy(secure: tuple[StandaloneProcess, int], keys: Keys) -> None:
    with RawConnection(secure[1]) as raw:
        assert raw.connect(keys.token("stranger")).type == Command.CONNECTED
        raw.send(Command(type=Command.LOOKUP, lookupTopic=PulsarApi_pb2.CommandLookupTopic(
            topic=unique_topic("private"), request_id=1)))
        answer = raw.receive().lookupTopicResponse
        assert answer.response == answer.Failed and answer.error == PulsarApi_pb2.AuthorizationError, answer


def test_a_granted_client_consumes_through_the_proxy_with_its_token(
    secure: tuple[StandaloneProcess, int], pki: Pki, keys: Keys,
) -> None:
    server, port = secure
    topic = unique_topic("secured")
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", authentication=pulsar.AuthenticationToken(keys.token(ADMIN)),
                           operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s")
        with Client(server.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                    tls_trust_certs_file_path=str(pki.ca_cert)) as herald:
            producer = herald.create_producer(topic)
            producer.send(b"through the proxy")
            producer.close()
        assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"through the proxy"
    finally:
        client.close()
