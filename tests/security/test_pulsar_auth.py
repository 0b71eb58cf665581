"""The Pulsar protocol under token authentication and authorization: the official client's
AuthenticationToken is Herald's token; no token, a forged or an expired one are refused at CONNECT;
a role reaches only what it was granted, exactly as through Herald's own protocol."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2
from herald.client import AuthenticationToken, Client
from herald.client.admin import SyncAdminClient
from herald.common.security.tokens import create_token, new_secret_key

from tests.conftest import StandaloneProcess, free_port
from tests.helpers import unique_name, unique_topic
from tests.pulsar.raw import RawConnection
from tests.security.conftest import ADMIN, Keys, Pki, secure_process

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture(scope="module")
def tenant(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> Iterator[str]:
    """A tenant with namespace `ns` where role `app` may produce and consume."""
    name = unique_name("ptenant")
    with SyncAdminClient(secure_standalone.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                         tls_trust_certs_file_path=str(pki.ca_cert)) as admin:
        admin.create_tenant(name)
        admin.create_namespace(f"{name}/ns")
        admin.grant_permission("app", ["produce", "consume"], namespace=f"{name}/ns")
    yield name


def pulsar_client(server: StandaloneProcess, token: str | None) -> pulsar.Client:
    auth = pulsar.AuthenticationToken(token) if token is not None else None
    return pulsar.Client(server.pulsar_url, authentication=auth, operation_timeout_seconds=10, logger=QUIET)


def herald_send(server: StandaloneProcess, pki: Pki, keys: Keys, topic: str, value: bytes) -> None:
    with Client(server.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                tls_trust_certs_file_path=str(pki.ca_cert)) as client:
        producer = client.create_producer(topic)
        producer.send(value)
        producer.close()


def test_a_granted_role_consumes_with_its_token(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("t", f"{tenant}/ns")
    client = pulsar_client(secure_standalone, keys.token("app"))
    try:
        consumer = client.subscribe(topic, "s")
        herald_send(secure_standalone, pki, keys, topic, b"for app")
        assert consumer.receive(timeout_millis=10_000).data() == b"for app"
    finally:
        client.close()


def bad_token(keys: Keys, credentials: str) -> str | None:
    return {
        "none": None,
        "forged": create_token("app", secret_key=new_secret_key()),
        "expired": keys.token("app", expiry_seconds=-60),
        "garbage": "not.a.token",
    }[credentials]


def connect(server: StandaloneProcess, token: str | None) -> tuple[PulsarApi_pb2.BaseCommand, bool]:
    """A CONNECT as the official clients send it: the broker's answer, and (after a refusal)
    whether it then closed the connection."""
    with RawConnection(server.pulsar_port) as raw:
        answer = raw.connect(token)
        return answer, answer.type != PulsarApi_pb2.BaseCommand.CONNECTED and raw.closed_by_broker()


@pytest.mark.parametrize("credentials", ["none", "forged", "expired", "garbage"])
def test_bad_credentials_are_refused_at_connect(
    secure_standalone: StandaloneProcess, keys: Keys, credentials: str,
) -> None:
    answer, closed = connect(secure_standalone, bad_token(keys, credentials))
    assert answer.type == PulsarApi_pb2.BaseCommand.ERROR
    assert answer.error.error == PulsarApi_pb2.AuthenticationError
    assert closed
    good, _ = connect(secure_standalone, keys.token("app"))
    assert good.type == PulsarApi_pb2.BaseCommand.CONNECTED


@pytest.mark.parametrize("credentials", ["none", "forged"])
def test_the_official_client_with_bad_credentials_gets_nothing(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str, credentials: str,
) -> None:
    """The C++ client (4.x) treats an ERROR before CONNECTED as a disconnection and retries until
    its operation timeout, as it does against Pulsar: the call fails, nothing is delivered."""
    topic = unique_topic("t", f"{tenant}/ns")
    client = pulsar.Client(secure_standalone.pulsar_url, operation_timeout_seconds=2, logger=QUIET,
                           authentication=(pulsar.AuthenticationToken(token)
                                           if (token := bad_token(keys, credentials)) else None))
    try:
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "s")
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
    finally:
        client.close()


def test_a_role_without_a_grant_is_refused_on_another_tenants_topic(
    secure_standalone: StandaloneProcess, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("t", f"{tenant}/ns")
    client = pulsar_client(secure_standalone, keys.token("intruder"))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "s")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
    finally:
        client.close()


def test_a_role_granted_consume_only_cannot_produce(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    with SyncAdminClient(secure_standalone.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                         tls_trust_certs_file_path=str(pki.ca_cert)) as admin:
        admin.grant_permission("reader", ["consume"], namespace=f"{tenant}/ns")
    topic = unique_topic("t", f"{tenant}/ns")
    deadline = time.monotonic() + 10  # grants reach the broker's cache within about a second
    client = pulsar_client(secure_standalone, keys.token("reader"))
    try:
        while True:
            try:
                client.subscribe(topic, "s")
                break
            except pulsar.AuthorizationError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
    finally:
        client.close()


# ---- TLS: pulsar+ssl:// on --pulsar-tls-port ----

TlsServer = tuple[StandaloneProcess, int]


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[TlsServer]:
    """The secure standalone serving Pulsar's protocol over TLS too, and its TLS port."""
    server, tls_port = secure_process(tmp_path_factory.mktemp("pulsar-tls") / "data", pki, keys), free_port()
    server.extra_args += ["--pulsar-tls-port", str(tls_port)]
    server.start()
    try:
        yield server, tls_port
    finally:
        server.stop()


def test_a_client_trusting_the_ca_produces_and_consumes_over_tls(
    tls_server: TlsServer, pki: Pki, keys: Keys,
) -> None:
    server, tls_port = tls_server
    topic = unique_topic("pulsar-tls")
    client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{tls_port}",
                           authentication=pulsar.AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert), operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s")
        herald_send(server, pki, keys, topic, b"over tls")
        assert consumer.receive(timeout_millis=10_000).data() == b"over tls"
    finally:
        client.close()


def test_a_client_that_does_not_trust_the_certificate_gets_nothing(
    tls_server: TlsServer, other_ca: Path, keys: Keys,
) -> None:
    client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{tls_server[1]}",
                           authentication=pulsar.AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(other_ca), operation_timeout_seconds=2, logger=QUIET)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(unique_topic("pulsar-tls"), "s")
    finally:
        client.close()


def test_plaintext_on_the_tls_port_is_not_served(tls_server: TlsServer) -> None:
    with RawConnection(tls_server[1], timeout=5) as raw:
        raw.send_bytes(b"\x00\x00\x00\x10" + b"\x00" * 16)
        assert raw.closed_by_broker()


def test_a_topic_s_schema_is_read_only_by_roles_granted_on_it(
    secure_standalone: StandaloneProcess, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("schema", f"{tenant}/ns")
    client = pulsar_client(secure_standalone, keys.token("app"))
    try:
        client.create_producer(topic, schema=pulsar.schema.StringSchema())
    finally:
        client.close()
    Command = PulsarApi_pb2.BaseCommand
    answers = {}
    for role in ("app", "stranger"):
        with RawConnection(secure_standalone.pulsar_port) as raw:
            assert raw.connect(keys.token(role)).type == Command.CONNECTED
            raw.send(Command(type=Command.GET_SCHEMA, getSchema=PulsarApi_pb2.CommandGetSchema(
                request_id=1, topic=topic)))
            answers[role] = raw.receive().getSchemaResponse
    assert not answers["app"].HasField("error_code") and answers["app"].schema.type == PulsarApi_pb2.Schema.String
    refused = answers["stranger"]
    assert refused.error_code == PulsarApi_pb2.AuthorizationError and not refused.HasField("schema"), refused


def test_get_or_create_schema_needs_the_produce_permission(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    with SyncAdminClient(secure_standalone.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                         tls_trust_certs_file_path=str(pki.ca_cert)) as admin:
        admin.grant_permission("schema-reader", ["consume"], namespace=f"{tenant}/ns")
    topic = unique_topic("schema", f"{tenant}/ns")
    Command = PulsarApi_pb2.BaseCommand
    schema = PulsarApi_pb2.Schema(name="t", schema_data=b"", type=PulsarApi_pb2.Schema.String)

    def ask(role: str, command: Command) -> Command:
        with RawConnection(secure_standalone.pulsar_port) as raw:
            assert raw.connect(keys.token(role)).type == Command.CONNECTED
            raw.send(command)
            return raw.receive()

    def get_or_create(role: str) -> PulsarApi_pb2.CommandGetOrCreateSchemaResponse:
        answer: PulsarApi_pb2.CommandGetOrCreateSchemaResponse = ask(role, Command(
            type=Command.GET_OR_CREATE_SCHEMA, getOrCreateSchema=PulsarApi_pb2.CommandGetOrCreateSchema(
                request_id=1, topic=topic, schema=schema))).getOrCreateSchemaResponse
        return answer

    # The consume grant is in force once the role may read the topic's schemas (none yet: TopicNotFound).
    deadline = time.monotonic() + 10  # grants reach the broker's cache within about a second
    get = Command(type=Command.GET_SCHEMA, getSchema=PulsarApi_pb2.CommandGetSchema(request_id=1, topic=topic))
    while (read := ask("schema-reader", get).getSchemaResponse).error_code != PulsarApi_pb2.TopicNotFound:
        assert time.monotonic() < deadline, read
        time.sleep(0.2)
    refused = get_or_create("schema-reader")
    assert refused.error_code == PulsarApi_pb2.AuthorizationError, refused
    assert "may not produce" in refused.error_message and not refused.HasField("schema_version")
    assert get_or_create("stranger").error_code == PulsarApi_pb2.AuthorizationError
    created = get_or_create("app")
    assert not created.HasField("error_code") and created.schema_version == bytes(8), created
