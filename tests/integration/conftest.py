"""Fixtures of the integration tests (one service, or the broker core, against real parts: a
storage node, an embedded or Redis metadata store). A Redis metadata store of a test writes under
`redis_namespace`, a key prefix of its own on the session's redis-server (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.helpers import unique_name


@pytest.fixture
def redis_namespace() -> str:
    """A key prefix on the shared redis-server that no other test uses."""
    return f"{unique_name('test')}:"
