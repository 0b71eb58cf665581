"""The Herald Python client: producers and consumers for Herald topics, in two APIs of equal
standing. `AsyncClient` is the asyncio core; `Client` is a blocking facade that runs that core on
one background thread.

    from herald.client import Client

    with Client("herald://localhost:6650") as client:
        producer = client.create_producer("my-topic")
        producer.send(b"hello")
        consumer = client.subscribe("my-topic", "my-subscription")
        message = consumer.receive(timeout=5)
        consumer.acknowledge(message)

This package talks to the services only through the gRPC contracts in herald.api and the shared
types in herald.common; it knows nothing of the services' code.
"""

from herald.client.client import AsyncClient
from herald.client.config import (
    ClientConfig,
    ConsumerConfig,
    ConsumerType,
    InitialPosition,
    ProducerConfig,
)
from herald.client.consumer import AsyncConsumer
from herald.client.message import Message
from herald.client.producer import AsyncProducer
from herald.client.sync import Client, Consumer, Producer
from herald.common.errors import (
    AlreadyClosedError,
    ChecksumError,
    ConnectionError_,
    ConsumerBusyError,
    ConsumerClosedError,
    HeraldError,
    HeraldTimeoutError,
    InvalidArgumentError,
    InvalidTopicNameError,
    MessageTooLargeError,
    NotAllowedError,
    ProducerBusyError,
    ProducerClosedError,
    ProducerQueueIsFullError,
    SendTimeoutError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from herald.common.message_id import MessageId

__all__ = [
    "AlreadyClosedError",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncProducer",
    "ChecksumError",
    "Client",
    "ClientConfig",
    "ConnectionError_",
    "Consumer",
    "ConsumerBusyError",
    "ConsumerClosedError",
    "ConsumerConfig",
    "ConsumerType",
    "HeraldError",
    "HeraldTimeoutError",
    "InitialPosition",
    "InvalidArgumentError",
    "InvalidTopicNameError",
    "Message",
    "MessageId",
    "MessageTooLargeError",
    "NotAllowedError",
    "Producer",
    "ProducerBusyError",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerQueueIsFullError",
    "SendTimeoutError",
    "TopicNotFoundError",
    "TopicTerminatedError",
]
