"""Herald's errors as Pulsar's ServerError codes, so an official client reacts as it does to Pulsar:
ServiceNotReady looks the topic up again and retries, TopicNotFound and AuthorizationError fail the
call, ProducerBusy / ConsumerBusy refuse a second exclusive one."""

from __future__ import annotations

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.errors import ErrorCode, HeraldError

_SERVER_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_ERROR: pulsar.UnknownError,
    ErrorCode.INVALID_ARGUMENT: pulsar.UnknownError,
    ErrorCode.CHECKSUM_ERROR: pulsar.ChecksumError,
    ErrorCode.PERSISTENCE_ERROR: pulsar.PersistenceError,
    ErrorCode.METADATA_ERROR: pulsar.MetadataError,
    ErrorCode.NOT_OWNER: pulsar.ServiceNotReady,  # look the topic up again
    ErrorCode.TOPIC_NOT_FOUND: pulsar.TopicNotFound,
    ErrorCode.PRODUCER_BUSY: pulsar.ProducerBusy,
    ErrorCode.CONSUMER_BUSY: pulsar.ConsumerBusy,
    ErrorCode.MESSAGE_TOO_LARGE: pulsar.NotAllowedError,
    ErrorCode.TOPIC_TERMINATED: pulsar.TopicTerminatedError,
    ErrorCode.FENCED: pulsar.ServiceNotReady,  # another broker took the topic over: look it up again
    ErrorCode.LEDGER_NOT_FOUND: pulsar.PersistenceError,
    ErrorCode.ENTRY_NOT_FOUND: pulsar.PersistenceError,
    ErrorCode.SERVICE_NOT_READY: pulsar.ServiceNotReady,
    ErrorCode.TIMEOUT: pulsar.ServiceNotReady,
    ErrorCode.DUPLICATE_UNKNOWN: pulsar.PersistenceError,  # the producer reconnects and resends
    ErrorCode.PRODUCER_NOT_FOUND: pulsar.UnknownError,
    ErrorCode.CONSUMER_NOT_FOUND: pulsar.ConsumerNotFound,
    ErrorCode.NOT_ALLOWED: pulsar.NotAllowedError,
    ErrorCode.BAD_VERSION: pulsar.MetadataError,
    ErrorCode.TOO_MANY_REQUESTS: pulsar.TooManyRequests,
    ErrorCode.BACKLOG_QUOTA_EXCEEDED: pulsar.ProducerBlockedQuotaExceededException,
    ErrorCode.NOT_FOUND: pulsar.TopicNotFound,
    ErrorCode.ALREADY_EXISTS: pulsar.UnknownError,
    ErrorCode.PRECONDITION_FAILED: pulsar.NotAllowedError,
    ErrorCode.AUTHENTICATION_ERROR: pulsar.AuthenticationError,
    ErrorCode.AUTHORIZATION_ERROR: pulsar.AuthorizationError,
}
# Codes added to ErrorCode later than this table map by name when Pulsar has the same one.
_BY_NAME = {"INCOMPATIBLE_SCHEMA": pulsar.IncompatibleSchema, "PRODUCER_FENCED": pulsar.ProducerFenced,
            "SUBSCRIPTION_NOT_FOUND": pulsar.SubscriptionNotFound}


def server_error(error: HeraldError) -> int:
    """The ServerError an official client should see for `error`."""
    code = _SERVER_ERRORS.get(error.code)
    if code is not None:
        return code
    try:
        name = ErrorCode(error.code).name
    except ValueError:
        return int(pulsar.UnknownError)
    return int(_BY_NAME.get(name, pulsar.UnknownError))
