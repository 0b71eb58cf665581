"""What a session answers a front end with when something fails: always a HeraldError (which each front
end maps to its own wire error in one place), an unexpected exception logged and wrapped, so that no
front end needs a catch-all of its own."""

from __future__ import annotations

import logging

from herald.common.errors import HeraldError

log = logging.getLogger(__name__)


def as_herald_error(exc: BaseException, operation: str) -> HeraldError:
    """`exc` itself when it is a HeraldError; otherwise logged (it is a bug) and wrapped, naming
    `operation` ("registering a producer", "seeking"...)."""
    if isinstance(exc, HeraldError):
        return exc
    log.error("internal error while %s", operation, exc_info=exc)
    return HeraldError(f"internal error while {operation}: {exc!r}")
