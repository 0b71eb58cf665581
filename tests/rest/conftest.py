"""Fixtures of the Pulsar admin REST API tests: `herald standalone` started with --web-port on a free
port (plain HTTP), and the same with TLS, token authentication and authorization (HTTPS), and a
small aiohttp client (`Rest`) that answers (status, JSON body or bytes, headers)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import unique_name
from tests.security.conftest import Keys, Pki, keys, pki, running_secure_standalone  # noqa: F401 - keys, pki: fixtures

V2 = "/admin/v2"


@dataclass
class Reply:
    status: int
    body: Any  # the JSON body, or the raw bytes when it is not JSON
    headers: dict[str, str]

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""


class Rest:
    """HTTP calls on one web port (`token`: sent as `Authorization: Bearer <token>`)."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession, token: str | None = None) -> None:
        self.base_url = base_url
        self.session = session
        self.token = token

    def as_role(self, token: str | None) -> Rest:
        return Rest(self.base_url, self.session, token)

    async def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                   params: dict[str, str] | None = None) -> Reply:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.session.request(method, self.base_url + path, data=data, headers=headers,
                                        params=params) as response:
            content = await response.read()
            try:
                parsed: Any = json.loads(content) if content else None
            except ValueError:
                parsed = content
            return Reply(response.status, parsed, dict(response.headers))

    async def get(self, path: str, **kwargs: Any) -> Reply:
        return await self.call("GET", path, **kwargs)

    async def put(self, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return await self.call("PUT", path, body, **kwargs)

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return await self.call("POST", path, body, **kwargs)

    async def delete(self, path: str, **kwargs: Any) -> Reply:
        return await self.call("DELETE", path, **kwargs)


async def new_namespace(rest: Rest, admin_roles: tuple[str, ...] = ()) -> str:
    """A new tenant (with `admin_roles`) and a namespace in it, made through the REST API."""
    tenant = unique_name("tenant")
    info = {"adminRoles": list(admin_roles), "allowedClusters": ["standalone"]}
    made = await rest.put(f"{V2}/tenants/{tenant}", info)
    assert made.status == 204, made
    namespace = f"{tenant}/{unique_name('ns')}"
    made = await rest.put(f"{V2}/namespaces/{namespace}")
    assert made.status == 204, made
    return namespace


@pytest.fixture(scope="module")
def rest_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """`herald standalone` serving the REST API on a free port (as every test standalone does), no security."""
    with running_standalone(tmp_path_factory.mktemp("rest") / "data") as server:
        yield server


@pytest.fixture
async def rest(rest_standalone: StandaloneProcess) -> AsyncIterator[Rest]:
    async with aiohttp.ClientSession() as session:
        yield Rest(f"http://127.0.0.1:{rest_standalone.web_port}", session)


@pytest.fixture(scope="module")
def secure_rest_standalone(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys,  # noqa: F811
                           ) -> Iterator[StandaloneProcess]:
    """`herald standalone` with TLS (HTTPS on the web port), token authentication and authorization
    with super-user `admin` (tests.security.conftest's secure flags)."""
    with running_secure_standalone(tmp_path_factory.mktemp("secure-rest") / "data", pki, keys) as server:
        yield server


@pytest.fixture
async def secure_rest(secure_rest_standalone: StandaloneProcess, pki: Pki) -> AsyncIterator[Rest]:  # noqa: F811
    """HTTPS trusting the test CA; no token (call .as_role(token) for one)."""
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        yield Rest(f"https://127.0.0.1:{secure_rest_standalone.web_port}", session)
