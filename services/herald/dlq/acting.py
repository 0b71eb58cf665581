"""The worker acts for the role on whose authority a dead letter moves (the subscriber's, or that of
the admin who set the subscription's policy; the broker names it in each letter): every call made
for the letter (lookups, the publish, the initial subscription) names that role in
x-herald-original-principal, which brokers and lookup take from dlq_worker_roles and then authorize
instead of the worker's own role. So the worker writes no more than the subscriber may.

`acting_for(role)` marks the calls made inside it (and in the tasks started inside it: grpc.aio
runs interceptors in a task, which copies the context); `ActingToken` is the worker's token, and
adds the header to those calls. An empty role (authorization off, or a policy kept from before
roles were recorded) adds nothing: the worker acts as itself."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from herald.common.security.authentication import ORIGINAL_PRINCIPAL
from herald.common.security.credentials import AuthenticationToken

_ACTING_FOR: contextvars.ContextVar[str] = contextvars.ContextVar("herald_dlq_acting_for", default="")


@contextlib.contextmanager
def acting_for(role: str) -> Iterator[None]:
    token = _ACTING_FOR.set(role)
    try:
        yield
    finally:
        _ACTING_FOR.reset(token)


class ActingToken(AuthenticationToken):
    """The worker's own token, naming the role it acts for inside `acting_for`."""

    def metadata(self) -> list[tuple[str, str]]:
        pairs = super().metadata()
        role = _ACTING_FOR.get()
        if role:
            pairs.append((ORIGINAL_PRINCIPAL, role))
        return pairs
