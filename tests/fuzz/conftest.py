"""The fuzzing targets: one `herald standalone` (lookup, broker, storage, proxy) for the whole fuzz
session with its checking traffic (tests/fuzz/target.py), and a second one with TLS, token
authentication and authorization holding an attacker and a victim tenant (tests/fuzz/tenants.py),
started when a test asks for it; each test is followed by the target's checks.

How long fuzzing runs is a hypothesis profile: `HERALD_FUZZ_EXAMPLES` examples per property
(default 150: tests/fuzz takes well under two minutes; `make fuzz` runs 5,000)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.client import Client
from hypothesis import HealthCheck, settings

from tests.conftest import running_standalone
from tests.fuzz.target import CHECK_TENANT, DEADLINE, FUZZ_ENV, CheckingTraffic, FuzzTarget
from tests.fuzz.tenants import TenantsTarget

settings.register_profile(
    "herald-fuzz",
    max_examples=int(os.environ.get("HERALD_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                           HealthCheck.function_scoped_fixture],
    print_blob=True,
)
settings.load_profile("herald-fuzz")


@pytest.fixture(scope="session")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    from herald.client.admin import SyncAdminClient

    with running_standalone(Path(tmp_path_factory.mktemp("fuzz")) / "data", extra_env=FUZZ_ENV) as server:
        with SyncAdminClient(server.service_url, timeout=DEADLINE) as admin:
            admin.create_tenant(CHECK_TENANT)
            admin.create_namespace(f"{CHECK_TENANT}/ns")
        checker = CheckingTraffic(Client(server.service_url, operation_timeout=DEADLINE),
                                  f"persistent://{CHECK_TENANT}/ns/checked")
        target = FuzzTarget(server, checker)
        checker.start()
        try:
            yield target
        finally:
            checker.stop()
            target.check_alive()


@pytest.fixture
def target(fuzz_target: FuzzTarget) -> Iterator[FuzzTarget]:
    """The fuzz target, checked after the test: alive, serving, nothing lost so far."""
    yield fuzz_target
    fuzz_target.check_alive()
    fuzz_target.checker.check_so_far()


@pytest.fixture(scope="session")
def tenants_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantsTarget]:
    """A second standalone, with TLS, token authentication and authorization, holding an attacker
    tenant and a victim tenant whose checking traffic runs all along (tests/fuzz/tenants.py)."""
    with TenantsTarget.running(tmp_path_factory.mktemp("fuzz-tenants")) as made:
        yield made


@pytest.fixture
def tenants(tenants_target: TenantsTarget) -> Iterator[TenantsTarget]:
    """The secure target, checked after the test as `target` is."""
    yield tenants_target
    tenants_target.check_alive()
    tenants_target.checker.check_so_far()
