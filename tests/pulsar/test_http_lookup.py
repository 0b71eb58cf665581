"""A Pulsar client built with an http:// service URL (HTTP lookup on the broker's web port) works
like one given pulsar://, and Pulsar's admin REST API, asked at a broker that does not own a topic,
redirects (307) to the owner's web service, as Pulsar's brokers do."""

from __future__ import annotations

import aiohttp
import pulsar
from herald.client import Client
from herald.local_cluster import LocalCluster

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.conftest import QUIET
from tests.pulsar.test_failover import owner_of


def test_a_client_given_the_web_service_url_produces_and_consumes(server: StandaloneProcess) -> None:
    client = pulsar.Client(server.web_url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = unique_topic("pulsar-http")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"found over http")
        assert consumer.receive(timeout_millis=10_000).data() == b"found over http"
    finally:
        client.close()


async def test_a_topic_call_at_another_broker_is_redirected_to_the_owner(local_cluster: LocalCluster) -> None:
    topic = unique_topic("rest-redirect")
    with Client(local_cluster.service_url) as herald:
        herald.create_producer(topic).send(b"x")
    owner = local_cluster.broker_at(owner_of(local_cluster, topic))
    other = next(broker for broker in local_cluster.brokers if broker is not owner)
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    async with aiohttp.ClientSession() as session:
        async with session.get(other.web_url + path, allow_redirects=False) as reply:
            assert reply.status == 307
            assert reply.headers["Location"] == owner.web_url + path
        async with session.get(other.web_url + path) as followed:  # as Pulsar's tools follow it
            assert followed.status == 200
            assert (await followed.json())["msgInCounter"] == 1
