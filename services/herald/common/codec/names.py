"""Topic names: `persistent://tenant/namespace/name`, `non-persistent://…`, or a short `name`
meaning `persistent://public/default/name`. Partition i is `<topic>-partition-<i>`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from herald.common.errors import InvalidArgumentError, InvalidTopicNameError

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
_PART = re.compile(r"[A-Za-z0-9_.\-=:]+")
_NAME_RULE = "names may use letters, digits, '-', '_', '.', '=' and ':'"
MAX_NAME_LENGTH = 512


@dataclass(frozen=True, slots=True)
class TopicName:
    persistent: bool
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, text: str) -> TopicName:
        if not isinstance(text, str) or not text:
            raise InvalidTopicNameError("topic name is empty: give a name such as 'my-topic'")
        if len(text) > MAX_NAME_LENGTH:
            raise InvalidTopicNameError(f"topic name is longer than {MAX_NAME_LENGTH} characters")
        persistent = True
        rest = text
        if "://" in text:
            scheme, rest = text.split("://", 1)
            if scheme not in ("persistent", "non-persistent"):
                raise InvalidTopicNameError(
                    f"topic name {text!r} is invalid: the domain must be 'persistent' or 'non-persistent'"
                )
            persistent = scheme == "persistent"
            parts = rest.split("/")
            if len(parts) != 3:
                raise InvalidTopicNameError(
                    f"topic name {text!r} is invalid: expected <domain>://<tenant>/<namespace>/<name>"
                )
        else:
            parts = rest.split("/")
            if len(parts) == 1:
                parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]]
            elif len(parts) != 3:
                raise InvalidTopicNameError(
                    f"topic name {text!r} is invalid: expected <name> or <tenant>/<namespace>/<name>"
                )
        for part in parts:
            if not _PART.fullmatch(part):
                raise InvalidTopicNameError(f"topic name {text!r} is invalid: {_NAME_RULE}")
        return cls(persistent, parts[0], parts[1], parts[2])

    @property
    def domain(self) -> str:
        return "persistent" if self.persistent else "non-persistent"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    def partition(self, index: int) -> TopicName:
        return TopicName(self.persistent, self.tenant, self.namespace,
                         f"{self.local_name}{PARTITION_SUFFIX}{index}")

    @property
    def partition_index(self) -> int:
        """The partition this name denotes, or -1 for a whole (or non-partitioned) topic."""
        base, sep, index = self.local_name.rpartition(PARTITION_SUFFIX)
        return int(index) if sep and base and index.isdigit() else -1

    @property
    def base(self) -> TopicName:
        """The partitioned topic a partition belongs to; the name itself when it is no partition."""
        if self.partition_index < 0:
            return self
        return TopicName(self.persistent, self.tenant, self.namespace, self.local_name.rpartition(PARTITION_SUFFIX)[0])


def validate_tenant_name(name: str) -> str:
    """A tenant's name, checked by the same rule as topic name parts."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("tenant name is empty: give a name such as 'acme'")
    if len(name) > MAX_NAME_LENGTH or not _PART.fullmatch(name):
        raise InvalidArgumentError(f"tenant name {name!r} is invalid: {_NAME_RULE}")
    return name


def parse_namespace(text: str) -> tuple[str, str]:
    """(tenant, namespace) of a namespace name "tenant/namespace"."""
    parts = text.split("/") if isinstance(text, str) else []
    if len(parts) != 2 or not all(parts):
        raise InvalidArgumentError(
            f"namespace {text!r} is invalid: expected <tenant>/<namespace>, e.g. 'public/default'")
    for part in parts:
        if len(part) > MAX_NAME_LENGTH or not _PART.fullmatch(part):
            raise InvalidArgumentError(f"namespace {text!r} is invalid: {_NAME_RULE}")
    return parts[0], parts[1]


def validate_subscription_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidTopicNameError("subscription name is empty")
    if len(name) > MAX_NAME_LENGTH or not _PART.fullmatch(name):
        raise InvalidTopicNameError(f"subscription name {name!r} is invalid: {_NAME_RULE}")
    return name
