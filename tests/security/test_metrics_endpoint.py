"""Who may read /metrics, which names every tenant's topics: a `herald standalone` (TLS, tokens and
authorization on its gRPC ports) whose metrics endpoint asks for a bearer token, over plain HTTP and
over HTTPS; the probes stay open; metrics_topic_level=false leaves every topic name out; settings
that cannot work stop the process with the setting named."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.client import AsyncClient, AuthenticationToken, InitialPosition
from herald.common.http.endpoint import HttpEndpoint
from herald.common.security.settings import MetricsEndpointSettings
from herald.local_cluster import free_port
from prometheus_client import CollectorRegistry

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import eventually, eventually_sync, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki

FAST = {"operation_timeout": 5.0, "connection_timeout": 2.0, "stats_interval": 0}
DEADLINE = 30.0
METRICS_TOKEN = "scraper-" + uuid.uuid4().hex


def _secure_flags(pki: Pki, keys: Keys) -> list[str]:
    return ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
            "--tls-ca-file", str(pki.ca_cert), "--authentication", "--token-secret-key-file", str(keys.secret_key),
            "--authorization", "--superuser-roles", ADMIN]


def _standalone(directory: Path, flags: list[str]) -> StandaloneProcess:
    server = StandaloneProcess(directory / "data", service_env())
    server.scheme = "herald+ssl"
    server.extra_args = flags
    server.start()
    return server


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("metrics-token") / "metrics.token"
    path.write_text(METRICS_TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys,
            token_file: Path) -> Iterator[StandaloneProcess]:
    """/metrics over plain HTTP behind a bearer token; topic-level metrics on (the default)."""
    server = _standalone(tmp_path_factory.mktemp("guarded"),
                         [*_secure_flags(pki, keys), "--metrics-auth-token-file", str(token_file)])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def guarded_tls(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys,
                token_file: Path) -> Iterator[StandaloneProcess]:
    """/metrics over HTTPS behind a bearer token, with no topic-level metrics."""
    server = _standalone(tmp_path_factory.mktemp("guarded-tls"), [
        *_secure_flags(pki, keys), "--metrics-auth-token-file", str(token_file),
        "--metrics-tls-cert-file", str(pki.server_cert), "--metrics-tls-key-file", str(pki.server_key),
        "--no-metrics-topic-level"])
    try:
        yield server
    finally:
        server.stop()


def get(url: str, token: str | None = None, scheme: str = "Bearer",
        context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of a GET."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def base(server: StandaloneProcess, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.metrics_port}"


def trusting(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_cert))


async def _produce_and_consume(server: StandaloneProcess, pki: Pki, keys: Keys, topic: str, count: int) -> None:
    async with AsyncClient(server.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert), **FAST) as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "reader", initial_position=InitialPosition.Earliest)
        for i in range(count):
            await producer.send(b"%d" % i)
        for _ in range(count):
            message = await consumer.receive(timeout=10)
            assert message is not None
            consumer.acknowledge(message)


async def _scrape_until(url: str, holds: str, context: ssl.SSLContext | None = None) -> str:
    """Scrape (with the token) until `holds` is in the exposition; the last one."""
    async def scrape() -> str:
        status, _, text = await asyncio.to_thread(get, url, METRICS_TOKEN, "Bearer", context)
        assert status == 200, text
        return text

    return await eventually(scrape, f"{holds!r} in /metrics", until=lambda text: holds in text, timeout=DEADLINE)


# ---- a bearer token over plain HTTP ----

def test_metrics_without_the_token_are_refused_with_401(guarded: StandaloneProcess) -> None:
    for token, scheme in ((None, "Bearer"), ("wrong-" + METRICS_TOKEN, "Bearer"), (METRICS_TOKEN[:-1], "Bearer"),
                          (METRICS_TOKEN, "Basic"), ("", "Bearer")):
        status, headers, body = get(f"{base(guarded)}/metrics", token, scheme)
        assert status == 401, (token, scheme, body)
        assert headers["WWW-Authenticate"].startswith("Bearer"), headers
        assert "herald_" not in body
    status, _, body = get(f"{base(guarded)}/any-other-path")  # prometheus-client serves metrics on any path
    assert status == 401 and "herald_" not in body


def test_metrics_with_the_token_are_served(guarded: StandaloneProcess) -> None:
    status, _, body = get(f"{base(guarded)}/metrics", METRICS_TOKEN)
    assert status == 200
    assert "herald_broker_topics" in body and "herald_storage_ledgers" in body and "herald_lookup_live_brokers" in body
    assert "the token crosses the network in clear text" in guarded.log_path.read_text()  # warned: no HTTPS


def test_a_token_file_gone_after_start_closes_metrics_rather_than_opening_them(tmp_path: Path) -> None:
    path = tmp_path / "metrics.token"
    path.write_text(METRICS_TOKEN)
    endpoint = HttpEndpoint(CollectorRegistry(), access=MetricsEndpointSettings(metrics_auth_token_file=str(path)))
    endpoint.start()
    try:
        assert get(f"{endpoint.url}/metrics", METRICS_TOKEN)[0] == 200
        path.unlink()
        status, _, body = get(f"{endpoint.url}/metrics", METRICS_TOKEN)
        assert status == 503 and "the metrics token cannot be read on the server" in body
        assert get(f"{endpoint.url}/healthz")[0] == 200
        path.write_text(METRICS_TOKEN)
        assert get(f"{endpoint.url}/metrics", METRICS_TOKEN)[0] == 200
    finally:
        endpoint.stop()


def test_the_probes_need_no_token(guarded: StandaloneProcess) -> None:
    status, _, body = get(f"{base(guarded)}/healthz")
    assert status == 200 and json.loads(body) == {"alive": True}
    _, _, body = eventually_sync(lambda: get(f"{base(guarded)}/readyz"), "/readyz answering 200",
                                 until=lambda answer: answer[0] == 200, timeout=DEADLINE)
    assert json.loads(body)["ready"] is True


async def test_by_default_metrics_name_every_topic(guarded: StandaloneProcess, pki: Pki, keys: Keys) -> None:
    """What the token protects: topic-level metrics carry each tenant's topic names."""
    topic = unique_topic("secret-plans")
    await _produce_and_consume(guarded, pki, keys, topic, 3)
    await _scrape_until(f"{base(guarded)}/metrics", f'topic="{topic}"')


def test_a_rotated_metrics_token_replaces_the_old_one(guarded: StandaloneProcess, token_file: Path) -> None:
    rotated = "rotated-" + uuid.uuid4().hex
    token_file.write_text(rotated + "\n")
    try:
        assert get(f"{base(guarded)}/metrics", rotated)[0] == 200
        assert get(f"{base(guarded)}/metrics", METRICS_TOKEN)[0] == 401
    finally:
        token_file.write_text(METRICS_TOKEN + "\n")
    assert get(f"{base(guarded)}/metrics", METRICS_TOKEN)[0] == 200


# ---- HTTPS, and no topic-level metrics ----

def test_metrics_over_https_are_scraped_with_the_ca_and_the_token(guarded_tls: StandaloneProcess, pki: Pki) -> None:
    context = trusting(pki)
    status, _, body = get(f"{base(guarded_tls, 'https')}/metrics", METRICS_TOKEN, context=context)
    assert status == 200 and "herald_broker_topics" in body
    assert get(f"{base(guarded_tls, 'https')}/metrics", context=context)[0] == 401
    for probe in ("/healthz", "/readyz"):
        assert get(f"{base(guarded_tls, 'https')}{probe}", context=context)[0] in (200, 503), probe
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP gets no answer from a TLS port
        get(f"{base(guarded_tls)}/healthz")
    untrusting = ssl.create_default_context()  # the system's CAs did not sign it
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(f"{base(guarded_tls, 'https')}/healthz", context=untrusting)
    assert f"https://127.0.0.1:{guarded_tls.metrics_port}/metrics" in guarded_tls.log_path.read_text()


def test_a_peer_stalling_its_tls_handshake_holds_up_no_other_request(
    guarded_tls: StandaloneProcess, pki: Pki,
) -> None:
    with socket.create_connection(("127.0.0.1", guarded_tls.metrics_port), timeout=10):
        # connected, and silent: no ClientHello
        status, _, body = get(f"{base(guarded_tls, 'https')}/healthz", context=trusting(pki))
        assert status == 200, body


async def test_without_topic_level_metrics_no_topic_name_is_exposed(
    guarded_tls: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    topic = unique_topic("secret-plans")
    await _produce_and_consume(guarded_tls, pki, keys, topic, 5)
    text = await _scrape_until(f"{base(guarded_tls, 'https')}/metrics", "herald_broker_messages_out_total 5.0",
                               trusting(pki))
    assert "herald_broker_messages_in_total 5.0" in text
    assert topic not in text and topic.rsplit("/", 1)[1] not in text
    assert "topic=" not in text and "subscription=" not in text


# ---- a service process of its own ----

def test_a_lookup_process_serves_its_metrics_over_https_behind_the_token(
    tmp_path: Path, pki: Pki, token_file: Path,
) -> None:
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "lookup.log"
    with open(log, "wb") as out:
        lookup = subprocess.Popen(
            [str(VENV_BIN / "herald"), "lookup", "--port", str(port), "--metrics-port", str(metrics_port),
             "--metadata-url", f"sqlite:///{tmp_path / 'meta.db'}", "--metrics-auth-token-file", str(token_file),
             "--metrics-tls-cert-file", str(pki.server_cert), "--metrics-tls-key-file", str(pki.server_key)],
            stdout=out, stderr=subprocess.STDOUT, env=service_env())
    try:
        def started() -> bool:
            assert lookup.poll() is None, log.read_text()
            return f"lookup metrics on https://127.0.0.1:{metrics_port}/metrics" in log.read_text()

        eventually_sync(started, "lookup serving its metrics", timeout=DEADLINE)
        url = f"https://127.0.0.1:{metrics_port}"
        status, _, body = get(f"{url}/metrics", METRICS_TOKEN, context=trusting(pki))
        assert status == 200 and "herald_lookup_live_brokers" in body
        assert get(f"{url}/metrics", context=trusting(pki))[0] == 401
        assert get(f"{url}/healthz", context=trusting(pki))[0] == 200
    finally:
        lookup.terminate()
        lookup.wait(timeout=30)


# ---- settings that cannot work ----

@pytest.mark.parametrize(("flags", "message"), [
    (["--metrics-auth-token-file", "{missing}"], "metrics_auth_token_file: token file"),
    (["--metrics-auth-token-file", "{empty}"], "is empty"),
    (["--metrics-tls-cert-file", "{cert}"], "metrics TLS needs both metrics_tls_cert_file and metrics_tls_key_file"),
    (["--metrics-tls-cert-file", "{missing}", "--metrics-tls-key-file", "{key}"], "metrics_tls_cert_file"),
    (["--metrics-tls-cert-file", "{cert}", "--metrics-tls-key-file", "{other_key}"],
     "are not a certificate chain and its private key"),
], ids=["missing-token-file", "empty-token-file", "cert-without-key", "missing-cert", "key-of-another-cert"])
def test_metrics_settings_that_cannot_work_stop_the_standalone(
    tmp_path: Path, pki: Pki, flags: list[str], message: str,
) -> None:
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    _, other_key = pki.client("someone-else")
    files = {"missing": str(tmp_path / "missing"), "empty": str(empty), "cert": str(pki.server_cert),
             "key": str(pki.server_key), "other_key": str(other_key)}
    result = subprocess.run(
        [str(VENV_BIN / "herald"), "standalone", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
         "--broker-port", str(free_port()), "--storage-port", str(free_port()), "--proxy-port", "-1",
         "--metrics-port", str(free_port()), "--no-dlq-worker", *[flag.format(**files) for flag in flags]],
        capture_output=True, text=True, timeout=60, env=service_env(), check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
