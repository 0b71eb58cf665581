"""Producer access modes with the official client, as Pulsar documents them: Shared (the default)
producers are refused while an exclusive one holds the topic; a second Exclusive producer fails at
once; WaitForExclusive waits (told so: PRODUCER_SUCCESS with producer_ready false) and gets the topic
when its holder leaves; ExclusiveWithFencing takes the topic and the producer it fenced fails its
next send. Each exclusive taker moves the topic epoch on, and a producer bringing an older epoch is
fenced."""

from __future__ import annotations

import threading
from typing import Any

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar_api

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.raw import Command, RawConnection

RECEIVE_MS = 10_000
Mode = pulsar.ProducerAccessMode


def test_a_second_exclusive_producer_fails_at_once(client: pulsar.Client) -> None:
    topic = unique_topic("access-exclusive")
    first = client.create_producer(topic, producer_name="p1", access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):  # what Pulsar's broker answers (and its client tests expect)
        client.create_producer(topic, producer_name="p2", access_mode=Mode.Exclusive)
    first.send(b"still mine")
    first.close()
    # Once it left, another may take the topic.
    client.create_producer(topic, producer_name="p3", access_mode=Mode.Exclusive).send(b"mine now")


def test_an_exclusive_producer_fails_while_shared_ones_are_connected(client: pulsar.Client) -> None:
    topic = unique_topic("access-exclusive-shared")
    client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)


def test_shared_producers_are_refused_while_an_exclusive_one_holds_the_topic(client: pulsar.Client) -> None:
    topic = unique_topic("access-shared")
    exclusive = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    exclusive.close()
    client.create_producer(topic).send(b"shared again")


def test_wait_for_exclusive_gets_the_topic_when_its_holder_closes(client: pulsar.Client) -> None:
    topic = unique_topic("access-wait")
    consumer = client.subscribe(topic, "s")
    holder = client.create_producer(topic, producer_name="holder", access_mode=Mode.Exclusive)
    made: dict[str, Any] = {}

    def create() -> None:
        try:
            made["producer"] = client.create_producer(topic, producer_name="waiter",
                                                      access_mode=Mode.WaitForExclusive)
        except Exception as error:
            made["error"] = error

    waiting = threading.Thread(target=create, daemon=True)
    waiting.start()
    holder.send(b"from the holder")
    holder.close()
    waiting.join(30)
    assert "error" not in made and "producer" in made, made
    made["producer"].send(b"from the waiter")
    received = [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(2)]
    assert received == [b"from the holder", b"from the waiter"]


def test_fencing_takes_the_topic_and_the_fenced_producer_fails(client: pulsar.Client,
                                                                make_client: Any) -> None:
    topic = unique_topic("access-fencing")
    consumer = client.subscribe(topic, "s")
    old = make_client().create_producer(topic, producer_name="old", access_mode=Mode.Exclusive)
    old.send(b"before")
    new = client.create_producer(topic, producer_name="new", access_mode=Mode.ExclusiveWithFencing)
    new.send(b"after")
    with pytest.raises(pulsar.ProducerFenced):
        old.send(b"fenced")
    with pytest.raises(pulsar.ProducerFenced):  # and stays fenced
        old.send(b"fenced again")
    received = [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(2)]
    assert received == [b"before", b"after"]


# ---- on the wire: producer_ready, topic epochs ----

def _producer(topic: str, producer_id: int, request_id: int, mode: int, name: str,
              topic_epoch: int | None = None) -> Command:
    request = pulsar_api.CommandProducer(topic=topic, producer_id=producer_id, request_id=request_id,
                                         producer_name=name, producer_access_mode=mode)  # type: ignore[arg-type]
    if topic_epoch is not None:
        request.topic_epoch = topic_epoch
    return Command(type=Command.PRODUCER, producer=request)


def test_wait_for_exclusive_is_told_it_is_queued_then_ready_with_the_next_epoch(
    server: StandaloneProcess, client: pulsar.Client,
) -> None:
    topic = unique_topic("access-wire-wait")
    holder = client.create_producer(topic, producer_name="holder", access_mode=Mode.Exclusive)
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(_producer(topic, 1, 10, pulsar_api.WaitForExclusive, "raw-waiter"))
        queued = raw.receive()
        assert queued.type == Command.PRODUCER_SUCCESS
        assert queued.producer_success.request_id == 10 and not queued.producer_success.producer_ready
        # While it waits, the connection serves its other producers.
        other = unique_topic("access-wire-other")
        raw.send(Command(type=Command.LOOKUP, lookupTopic=pulsar_api.CommandLookupTopic(topic=other, request_id=98)))
        assert raw.receive().type == Command.LOOKUP_RESPONSE
        raw.send(_producer(other, 2, 11, pulsar_api.Shared, "raw-other"))
        served = raw.receive()
        assert served.type == Command.PRODUCER_SUCCESS and served.producer_success.request_id == 11, served
        holder.close()
        ready = raw.receive()
        assert ready.type == Command.PRODUCER_SUCCESS, ready
        assert ready.producer_success.request_id == 10 and ready.producer_success.producer_ready
        assert ready.producer_success.topic_epoch == 1  # the holder had epoch 0


def test_each_exclusive_taker_moves_the_epoch_on_and_an_older_one_is_fenced(server: StandaloneProcess) -> None:
    topic = unique_topic("access-wire-epoch")
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.LOOKUP, lookupTopic=pulsar_api.CommandLookupTopic(topic=topic, request_id=99)))
        assert raw.receive().type == Command.LOOKUP_RESPONSE  # the topic is served here from now on
        epochs = []
        for producer_id in (1, 2):
            raw.send(_producer(topic, producer_id, producer_id, pulsar_api.Exclusive, f"p{producer_id}"))
            success = raw.receive()
            assert success.type == Command.PRODUCER_SUCCESS, success
            epochs.append(success.producer_success.topic_epoch)
            raw.send(Command(type=Command.CLOSE_PRODUCER, close_producer=pulsar_api.CommandCloseProducer(
                producer_id=producer_id, request_id=100 + producer_id)))
            assert raw.receive().type == Command.SUCCESS
        assert epochs == [0, 1]
        # A producer reconnecting with the epoch it had before another took the topic: fenced.
        raw.send(_producer(topic, 3, 3, pulsar_api.Exclusive, "p1", topic_epoch=0))
        refused = raw.receive()
        assert refused.type == Command.ERROR and refused.error.error == pulsar_api.ProducerFenced, refused
        assert "epoch" in refused.error.message
        # The current one (a reconnect after an unload) keeps it.
        raw.send(_producer(topic, 4, 4, pulsar_api.Exclusive, "p2", topic_epoch=1))
        kept = raw.receive()
        assert kept.type == Command.PRODUCER_SUCCESS and kept.producer_success.topic_epoch == 1, kept
