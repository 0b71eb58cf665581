"""One exception hierarchy for client and services, mapped to wire error codes in one place.

Every error says what was wrong; `retryable` says whether trying again may help.
"""

from __future__ import annotations

from herald.api.v1 import common_pb2


class HeraldError(Exception):
    """Base of every Herald error."""

    code: int = common_pb2.UNKNOWN_ERROR
    retryable: bool = False

    def to_proto(self) -> common_pb2.Error:
        return common_pb2.Error(code=self.code, message=str(self))  # type: ignore[arg-type]


class InvalidArgumentError(HeraldError, ValueError):
    code = common_pb2.INVALID_ARGUMENT


class InvalidTopicNameError(InvalidArgumentError):
    pass


class ChecksumError(HeraldError):
    code = common_pb2.CHECKSUM_ERROR


class PersistenceError(HeraldError):
    code = common_pb2.PERSISTENCE_ERROR
    retryable = True


class MetadataError(HeraldError):
    code = common_pb2.METADATA_ERROR


class NotOwnerError(HeraldError):
    """This broker does not own the topic; the client looks it up again."""

    code = common_pb2.NOT_OWNER
    retryable = True


class TopicNotFoundError(HeraldError):
    code = common_pb2.TOPIC_NOT_FOUND


class ProducerBusyError(HeraldError):
    code = common_pb2.PRODUCER_BUSY
    retryable = True


class ConsumerBusyError(HeraldError):
    code = common_pb2.CONSUMER_BUSY


class MessageTooLargeError(HeraldError):
    code = common_pb2.MESSAGE_TOO_LARGE


class TopicTerminatedError(HeraldError):
    code = common_pb2.TOPIC_TERMINATED


class FencedError(HeraldError):
    """The ledger was fenced by a newer writer: this writer lost the topic."""

    code = common_pb2.FENCED


class LedgerNotFoundError(HeraldError):
    code = common_pb2.LEDGER_NOT_FOUND


class EntryNotFoundError(HeraldError):
    code = common_pb2.ENTRY_NOT_FOUND


class ServiceNotReadyError(HeraldError):
    code = common_pb2.SERVICE_NOT_READY
    retryable = True


class HeraldTimeoutError(HeraldError, TimeoutError):
    code = common_pb2.TIMEOUT
    retryable = True


class DuplicateUnknownError(HeraldError):
    """Dedup cannot tell yet whether the message is a duplicate; the producer retries."""

    code = common_pb2.DUPLICATE_UNKNOWN
    retryable = True


class ProducerNotFoundError(HeraldError):
    code = common_pb2.PRODUCER_NOT_FOUND


class ConsumerNotFoundError(HeraldError):
    code = common_pb2.CONSUMER_NOT_FOUND


class NotAllowedError(HeraldError):
    code = common_pb2.NOT_ALLOWED


class BadVersionError(HeraldError):
    """A compare-and-set lost against a concurrent writer."""

    code = common_pb2.BAD_VERSION
    retryable = True


class TooManyRequestsError(HeraldError):
    code = common_pb2.TOO_MANY_REQUESTS
    retryable = True


class BacklogQuotaExceededError(HeraldError):
    """The topic's backlog is over its quota and its policy is producer_exception."""

    code = common_pb2.BACKLOG_QUOTA_EXCEEDED


class NotFoundError(HeraldError):
    """A tenant, namespace or subscription that does not exist."""

    code = common_pb2.NOT_FOUND


class AlreadyExistsError(HeraldError):
    code = common_pb2.ALREADY_EXISTS


class PreconditionFailedError(HeraldError):
    """The operation needs a state the resource is not in (e.g. no clients connected)."""

    code = common_pb2.PRECONDITION_FAILED


class AuthenticationError(HeraldError):
    """The call carried no credentials, or ones the service could not verify (an expired token, a
    bad signature, an unknown key): get a valid token or certificate; retrying the same will not help."""

    code = common_pb2.AUTHENTICATION_ERROR


class AuthorizationError(HeraldError):
    """The authenticated role may not do this (produce, consume, administer the tenant): an
    administrator must grant the permission."""

    code = common_pb2.AUTHORIZATION_ERROR


# Client-side errors (never sent on the wire).
class ConnectionError_(HeraldError):
    """A connection to a service failed or was lost."""

    retryable = True


class AlreadyClosedError(HeraldError):
    pass


class ProducerClosedError(HeraldError):
    pass


class ConsumerClosedError(HeraldError):
    pass


class ProducerQueueIsFullError(HeraldError):
    retryable = True


class SendTimeoutError(HeraldTimeoutError):
    pass


class SchemaError(InvalidArgumentError):
    """A message's bytes do not decode with the consumer's schema (or a value does not encode)."""


_BY_CODE: dict[int, type[HeraldError]] = {
    cls.code: cls
    for cls in (
        HeraldError, InvalidArgumentError, ChecksumError, PersistenceError, MetadataError,
        NotOwnerError, TopicNotFoundError, ProducerBusyError, ConsumerBusyError, MessageTooLargeError,
        TopicTerminatedError, FencedError, LedgerNotFoundError, EntryNotFoundError,
        ServiceNotReadyError, HeraldTimeoutError, DuplicateUnknownError, ProducerNotFoundError,
        ConsumerNotFoundError, NotAllowedError, BadVersionError, TooManyRequestsError,
        BacklogQuotaExceededError, NotFoundError, AlreadyExistsError, PreconditionFailedError,
        AuthenticationError, AuthorizationError,
    )
}


def from_proto(error: common_pb2.Error) -> HeraldError:
    """The exception a wire error stands for."""
    return _BY_CODE.get(error.code, HeraldError)(error.message)
