"""The client's TLS settings against a real gRPC server speaking TLS: Herald's lookup servicer on an
in-process grpc.aio server with a certificate made here (a CA and a server certificate naming
herald.test, and a self-signed one). The services get TLS of their own in a later issue; these
tests prove the client's side: trust file, hostname validation, insecure connections, and clear
errors when the server cannot be trusted."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from herald.api.v1 import lookup_pb2_grpc
from herald.client import AsyncClient
from herald.common.errors import ConnectionError_, HeraldTimeoutError, InvalidArgumentError
from herald.lookup.server import LookupServicer
from herald.lookup.settings import LookupSettings
from herald.metadata.embedded import EmbeddedMetadataStore

from tests.conftest import free_port

TOPIC = "persistent://public/default/tls"
FAST = {"connection_timeout": 1.0, "operation_timeout": 2.0}


@dataclass
class Issued:
    key_pem: bytes
    cert_pem: bytes

    def write(self, directory: Path, name: str) -> Path:
        path = directory / f"{name}.pem"
        path.write_bytes(self.cert_pem)
        return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(common_name: str, *, issuer: Issued | None = None, ca: bool = False,
          dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> Issued:
    """A certificate for `common_name`, signed by `issuer` (self-signed when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    signer_key = key
    signer_name = _name(common_name)
    if issuer is not None:
        signer_key = serialization.load_pem_private_key(issuer.key_pem, None)  # type: ignore[assignment]
        signer_name = x509.load_pem_x509_certificate(issuer.cert_pem).subject
    builder = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(signer_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())  # type: ignore[arg-type]
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return Issued(key_pem, cert.public_bytes(serialization.Encoding.PEM))


@dataclass
class TlsLookup:
    port: int
    ca_file: Path

    @property
    def url(self) -> str:
        return f"herald+ssl://127.0.0.1:{self.port}"


async def serve_lookup(store: EmbeddedMetadataStore, issued: Issued) -> tuple[grpc.aio.Server, int]:
    servicer = LookupServicer(LookupSettings(), store)
    await servicer.resources.ensure_default_namespace()
    server = grpc.aio.server()
    lookup_pb2_grpc.add_LookupServiceServicer_to_server(servicer, server)
    credentials = grpc.ssl_server_credentials([(issued.key_pem, issued.cert_pem)])
    port = server.add_secure_port(f"127.0.0.1:{free_port()}", credentials)
    await server.start()
    return server, port


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedMetadataStore]:
    made = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def ca_signed(tmp_path: Path, store: EmbeddedMetadataStore) -> AsyncIterator[TlsLookup]:
    """A lookup whose certificate names herald.test only (not the 127.0.0.1 dialled), signed by a CA."""
    ca = issue("Herald test CA", ca=True)
    server, port = await serve_lookup(store, issue("herald.test", issuer=ca, dns=("herald.test",)))
    yield TlsLookup(port, ca.write(tmp_path, "ca"))
    await server.stop(None)


async def partitions(url: str, **options: object) -> list[str]:
    async with AsyncClient(url, **options) as client:  # type: ignore[arg-type]
        return await client.get_partitions_for_topic(TOPIC)


async def test_a_trusted_certificate_connects_without_hostname_validation(ca_signed: TlsLookup) -> None:
    assert await partitions(ca_signed.url, tls_trust_certs_file_path=str(ca_signed.ca_file), **FAST) == [TOPIC]


async def test_hostname_validation_refuses_a_certificate_for_another_host(ca_signed: TlsLookup) -> None:
    with pytest.raises(HeraldTimeoutError, match="could not connect"):
        await partitions(ca_signed.url, tls_trust_certs_file_path=str(ca_signed.ca_file),
                         tls_validate_hostname=True, **FAST)


async def test_hostname_validation_accepts_a_certificate_naming_the_host(
    tmp_path: Path, store: EmbeddedMetadataStore,
) -> None:
    ca = issue("Herald test CA", ca=True)
    server, port = await serve_lookup(store, issue("lookup", issuer=ca, dns=("lookup",), ips=("127.0.0.1",)))
    try:
        assert await partitions(f"herald+ssl://127.0.0.1:{port}", tls_trust_certs_file_path=str(
            ca.write(tmp_path, "ca")), tls_validate_hostname=True, **FAST) == [TOPIC]
    finally:
        await server.stop(None)


async def test_a_certificate_from_another_ca_is_refused(ca_signed: TlsLookup, tmp_path: Path) -> None:
    other = issue("Some other CA", ca=True).write(tmp_path, "other")
    with pytest.raises(HeraldTimeoutError, match="could not connect"):
        await partitions(ca_signed.url, tls_trust_certs_file_path=str(other), **FAST)


async def test_without_a_trust_file_an_unknown_ca_is_refused(ca_signed: TlsLookup) -> None:
    with pytest.raises(HeraldTimeoutError, match="could not connect"):
        await partitions(ca_signed.url, **FAST)


async def test_an_insecure_connection_accepts_a_self_signed_certificate(store: EmbeddedMetadataStore) -> None:
    server, port = await serve_lookup(store, issue("anything", dns=("anything",)))
    url = f"herald+ssl://127.0.0.1:{port}"
    try:
        with pytest.raises(HeraldTimeoutError, match="could not connect"):
            await partitions(url, **FAST)  # not trusted unless told to accept it
        assert await partitions(url, tls_allow_insecure_connection=True, **FAST) == [TOPIC]
    finally:
        await server.stop(None)


async def test_plaintext_to_a_tls_server_fails_clearly(ca_signed: TlsLookup) -> None:
    with pytest.raises(HeraldTimeoutError, match="could not connect"):
        await partitions(f"herald://127.0.0.1:{ca_signed.port}", **FAST)


async def test_a_trust_file_that_cannot_be_used_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"tls_trust_certs_file_path .* cannot be read"):
        AsyncClient("herald+ssl://127.0.0.1:1", tls_trust_certs_file_path=str(tmp_path / "missing.pem"))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(InvalidArgumentError, match="holds no PEM certificate"):
        AsyncClient("herald+ssl://127.0.0.1:1", tls_trust_certs_file_path=str(garbage))


async def test_an_insecure_connection_to_nothing_names_the_address() -> None:
    port = free_port()
    # Issue 22 item 4: nothing ever answered there, so the refusal fails at once (no longer a timeout).
    with pytest.raises(ConnectionError_, match=f"could not fetch the TLS certificate of 127.0.0.1:{port}"):
        await partitions(f"herald+ssl://127.0.0.1:{port}", tls_allow_insecure_connection=True, **FAST)
