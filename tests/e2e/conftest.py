"""Fixtures of the end-to-end tests: one `herald standalone` per test module (`shared_standalone`)
and the three ways tests talk to it: the client (`client`), the admin client (`admin`) and the raw
wire contract (`wire`, tests/wire.py). A module that needs a standalone with settings of its own
starts it in a module fixture and overrides `client`, `admin` or `wire` to point at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from herald.client import AsyncClient
from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess, running_standalone
from tests.wire import WireClient


@pytest.fixture(scope="module")
def shared_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One `herald standalone` for a whole test module (tests use their own topic names): starting a
    process per test costs seconds. Tests that restart or kill it use `standalone` instead."""
    with running_standalone(tmp_path_factory.mktemp("shared") / "data") as server:
        yield server


@pytest.fixture
async def client(shared_standalone: StandaloneProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(shared_standalone.service_url) as made:
        yield made


@pytest.fixture
async def admin(shared_standalone: StandaloneProcess) -> AsyncIterator[AdminClient]:
    async with AdminClient(shared_standalone.service_url) as made:
        yield made


@pytest.fixture
async def wire(shared_standalone: StandaloneProcess) -> AsyncIterator[WireClient]:
    async with WireClient(shared_standalone.port) as made:
        yield made
