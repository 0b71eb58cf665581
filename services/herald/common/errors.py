"""One exception hierarchy for client and services. Every error says what was wrong; `retryable`
says whether trying again may help; `code` names its kind. Protocol-neutral: what a code is on a
wire (Herald's gRPC Error message, a gRPC status, a Pulsar ServerError) is each transport's
mapping (herald.common.transport.rpc for gRPC).
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """The kinds of error; the numbers are the wire's (proto/herald/v1/common.proto ErrorCode, kept
    equal by tests/unit/test_errors.py)."""

    ERROR_CODE_UNSPECIFIED = 0
    UNKNOWN_ERROR = 1
    INVALID_ARGUMENT = 2
    CHECKSUM_ERROR = 3
    PERSISTENCE_ERROR = 4
    METADATA_ERROR = 5
    NOT_OWNER = 6
    TOPIC_NOT_FOUND = 7
    PRODUCER_BUSY = 8
    CONSUMER_BUSY = 9
    MESSAGE_TOO_LARGE = 10
    TOPIC_TERMINATED = 11
    FENCED = 12
    LEDGER_NOT_FOUND = 13
    ENTRY_NOT_FOUND = 14
    SERVICE_NOT_READY = 15
    TIMEOUT = 16
    DUPLICATE_UNKNOWN = 17
    PRODUCER_NOT_FOUND = 18
    CONSUMER_NOT_FOUND = 19
    NOT_ALLOWED = 20
    BAD_VERSION = 21
    TOO_MANY_REQUESTS = 22
    BACKLOG_QUOTA_EXCEEDED = 23
    NOT_FOUND = 24
    ALREADY_EXISTS = 25
    PRECONDITION_FAILED = 26
    AUTHENTICATION_ERROR = 27
    AUTHORIZATION_ERROR = 28
    PRODUCER_FENCED = 29
    INCOMPATIBLE_SCHEMA = 30


class HeraldError(Exception):
    """Base of every Herald error."""

    code: int = ErrorCode.UNKNOWN_ERROR
    retryable: bool = False



class InvalidArgumentError(HeraldError, ValueError):
    code = ErrorCode.INVALID_ARGUMENT


class InvalidTopicNameError(InvalidArgumentError):
    pass


class ChecksumError(HeraldError):
    code = ErrorCode.CHECKSUM_ERROR


class PersistenceError(HeraldError):
    code = ErrorCode.PERSISTENCE_ERROR
    retryable = True


class StorageFullError(PersistenceError):
    """A storage node refused an add because its disk is full (its data cap reached, its file system
    short of its reserve, or ENOSPC): nothing of the add was kept. Its code is PERSISTENCE_ERROR, so
    a writer treats the node as failed for the ledger and moves on to another node (an ensemble
    change); the node stays readable and takes adds again once space returns."""


class MetadataError(HeraldError):
    code = ErrorCode.METADATA_ERROR


class NotOwnerError(HeraldError):
    """This broker does not own the topic; the client looks it up again."""

    code = ErrorCode.NOT_OWNER
    retryable = True


class TopicNotFoundError(HeraldError):
    code = ErrorCode.TOPIC_NOT_FOUND


class ProducerBusyError(HeraldError):
    code = ErrorCode.PRODUCER_BUSY
    retryable = True


class ProducerFencedError(HeraldError):
    """An exclusive producer took the topic over (ExclusiveWithFencing, or a newer topic epoch): this
    producer may not publish there any more; create a new one if it should take the topic back."""

    code = ErrorCode.PRODUCER_FENCED


class IncompatibleSchemaError(HeraldError):
    """The producer's or consumer's schema differs from the one the topic was first given: use the
    topic's schema (or none), or a new topic for the new schema."""

    code = ErrorCode.INCOMPATIBLE_SCHEMA


class ConsumerBusyError(HeraldError):
    code = ErrorCode.CONSUMER_BUSY


class MessageTooLargeError(HeraldError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class TopicTerminatedError(HeraldError):
    code = ErrorCode.TOPIC_TERMINATED


class FencedError(HeraldError):
    """The ledger was fenced by a newer writer: this writer lost the topic."""

    code = ErrorCode.FENCED


class LedgerNotFoundError(HeraldError):
    code = ErrorCode.LEDGER_NOT_FOUND


class EntryNotFoundError(HeraldError):
    code = ErrorCode.ENTRY_NOT_FOUND


class ServiceNotReadyError(HeraldError):
    code = ErrorCode.SERVICE_NOT_READY
    retryable = True


class AddressInUseError(ServiceNotReadyError):
    """A server cannot listen where it was told: another process holds the address."""

    retryable = False

    @classmethod
    def of(cls, what: str, host: str, port: int, flag: str, *, optional: bool = True) -> AddressInUseError:
        """`optional`: the listener can be turned off (-1)."""
        return cls(f"cannot serve {what} on {host}:{port}: the address is in use (another process listens "
                   f"there): choose another port with {flag}, 0 for any free one"
                   + (", or -1 to serve none" if optional else ""))


class HeraldTimeoutError(HeraldError, TimeoutError):
    code = ErrorCode.TIMEOUT
    retryable = True


class DuplicateUnknownError(HeraldError):
    """Dedup cannot tell yet whether the message is a duplicate; the producer retries."""

    code = ErrorCode.DUPLICATE_UNKNOWN
    retryable = True


class ProducerNotFoundError(HeraldError):
    code = ErrorCode.PRODUCER_NOT_FOUND


class ConsumerNotFoundError(HeraldError):
    code = ErrorCode.CONSUMER_NOT_FOUND


class NotAllowedError(HeraldError):
    code = ErrorCode.NOT_ALLOWED


class BadVersionError(HeraldError):
    """A compare-and-set lost against a concurrent writer."""

    code = ErrorCode.BAD_VERSION
    retryable = True


class TooManyRequestsError(HeraldError):
    code = ErrorCode.TOO_MANY_REQUESTS
    retryable = True


class BacklogQuotaExceededError(HeraldError):
    """The topic's backlog is over its quota and its policy is producer_exception."""

    code = ErrorCode.BACKLOG_QUOTA_EXCEEDED


class NotFoundError(HeraldError):
    """A tenant, namespace or subscription that does not exist."""

    code = ErrorCode.NOT_FOUND


class AlreadyExistsError(HeraldError):
    code = ErrorCode.ALREADY_EXISTS


class CompactionInProgressError(AlreadyExistsError):
    """A topic compaction was asked for while one is running on the topic (Pulsar's 409)."""

    retryable = True


class PreconditionFailedError(HeraldError):
    """The operation needs a state the resource is not in (e.g. no clients connected)."""

    code = ErrorCode.PRECONDITION_FAILED


class AuthenticationError(HeraldError):
    """The call carried no credentials, or ones the service could not verify (an expired token, a
    bad signature, an unknown key): get a valid token or certificate; retrying the same will not help."""

    code = ErrorCode.AUTHENTICATION_ERROR


class AuthorizationError(HeraldError):
    """The authenticated role may not do this (produce, consume, administer the tenant): an
    administrator must grant the permission."""

    code = ErrorCode.AUTHORIZATION_ERROR


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
        AuthenticationError, AuthorizationError, IncompatibleSchemaError,
    )
}


def error_for_code(code: int, message: str) -> HeraldError:
    """The exception an error code and message stand for (unknown codes: HeraldError)."""
    return _BY_CODE.get(code, HeraldError)(message)
