"""Producing test messages and reading them back with Spark."""

from __future__ import annotations

import threading
from typing import Any

from herald.client import Client, HeraldError, MessageId
from pyspark.sql import DataFrame, SparkSession


def produce(url: str, topic: str, count: int, prefix: str = "m", **options: Any) -> dict[str, bytes]:
    """Send `count` messages (values `<prefix><i>`, key i % 10, a property on odd ones, an event
    time on every third); returns value by message id text, once the broker stored them all."""
    stored: dict[str, bytes] = {}
    failures: list[HeraldError] = []
    lock = threading.Lock()
    with Client(url) as client:
        producer = client.create_producer(topic, block_if_queue_full=True, **options)
        for i in range(count):
            value = f"{prefix}{i}".encode()

            def sent(error: HeraldError | None, message_id: MessageId | None, value: bytes = value) -> None:
                with lock:
                    if error is not None:
                        failures.append(error)
                    else:
                        stored[str(message_id)] = value

            producer.send_async(value, sent, key=str(i % 10), properties={"odd": "yes"} if i % 2 else None,
                                event_time=1_700_000_000_000 + i if i % 3 == 0 else None)
        producer.flush()
    assert not failures, failures[:3]
    assert len(stored) == count
    return stored


def read(spark: SparkSession, url: str, **options: str) -> DataFrame:
    reader = spark.read.format("herald").option("service_url", url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()
