"""The official Pulsar client (PyPI `pulsar-client`, the C++ client 4.x) against a real Herald:
a standalone serving Pulsar's binary protocol on a free port, and clients made for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.conftest import StandaloneProcess, running_standalone

# The C++ client logs through this; warnings and errors show in a failing test's output.
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
OPERATION_TIMEOUT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with running_standalone(tmp_path_factory.mktemp("pulsar") / "data") as standalone:
        yield standalone


@pytest.fixture
def make_client(server: StandaloneProcess) -> Iterator[Callable[..., pulsar.Client]]:
    """pulsar.Client(url, **options) for the module's standalone (its Pulsar port by default),
    closed after the test."""
    made: list[pulsar.Client] = []

    def make(url: str | None = None, **options: Any) -> pulsar.Client:
        options.setdefault("operation_timeout_seconds", OPERATION_TIMEOUT)
        options.setdefault("logger", QUIET)
        client = pulsar.Client(url or server.pulsar_url, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., pulsar.Client]) -> pulsar.Client:
    return make_client()


def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def receive_until(consumers: list[pulsar.Consumer], count: int, deadline: float = 30.0) -> list[list[pulsar.Message]]:
    """What each consumer receives (acknowledged), taking turns, until `count` in all or `deadline`
    seconds passed."""
    got: list[list[pulsar.Message]] = [[] for _ in consumers]
    ends = time.monotonic() + deadline
    while sum(map(len, got)) < count and time.monotonic() < ends:
        for n, consumer in enumerate(consumers):
            try:
                message = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(message)
            got[n].append(message)
    return got
