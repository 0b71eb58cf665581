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
    BatchingType,
    BatchReceivePolicy,
    ClientConfig,
    CompressionType,
    ConsumerConfig,
    ConsumerType,
    DeadLetterPolicy,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerConfig,
    ReaderConfig,
)
from herald.client.consumer import AsyncConsumer
from herald.client.interceptors import ConsumerInterceptor, ProducerInterceptor
from herald.client.listeners import ConsumerEventListener
from herald.client.message import Message, OutgoingMessage
from herald.client.producer import AsyncProducer
from herald.client.reader import AsyncReader
from herald.client.schema import BytesSchema, JsonSchema, Schema, StringSchema
from herald.client.sync import Client, Consumer, Producer, Reader
from herald.common.codec.message_id import MessageId
from herald.common.errors import (
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
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
    SchemaError,
    SendTimeoutError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from herald.common.security.credentials import AuthenticationTls, AuthenticationToken

__all__ = [
    "AlreadyClosedError",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncReader",
    "AuthenticationError",
    "AuthenticationTls",
    "AuthenticationToken",
    "AuthorizationError",
    "BatchReceivePolicy",
    "BatchingType",
    "BytesSchema",
    "ChecksumError",
    "Client",
    "ClientConfig",
    "CompressionType",
    "ConnectionError_",
    "Consumer",
    "ConsumerBusyError",
    "ConsumerClosedError",
    "ConsumerConfig",
    "ConsumerEventListener",
    "ConsumerInterceptor",
    "ConsumerType",
    "DeadLetterPolicy",
    "HashingScheme",
    "HeraldError",
    "HeraldTimeoutError",
    "InitialPosition",
    "InvalidArgumentError",
    "InvalidTopicNameError",
    "JsonSchema",
    "Message",
    "MessageId",
    "MessageTooLargeError",
    "NotAllowedError",
    "OutgoingMessage",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerBusyError",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerInterceptor",
    "ProducerQueueIsFullError",
    "Reader",
    "ReaderConfig",
    "Schema",
    "SchemaError",
    "SendTimeoutError",
    "StringSchema",
    "TopicNotFoundError",
    "TopicTerminatedError",
]
