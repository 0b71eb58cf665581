"""Security fixtures: a CA with a server certificate for 127.0.0.1 / localhost and client
certificates (made with `cryptography`), token keys, and `herald standalone` with TLS,
authentication and authorization turned on."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from herald.common.security.tokens import create_token, new_key_pair, new_secret_key

from tests.conftest import StandaloneProcess, service_env


@dataclass
class Pki:
    directory: Path
    ca_cert: Path
    ca_key: ec.EllipticCurvePrivateKey
    ca: x509.Certificate
    server_cert: Path
    server_key: Path

    def client(self, common_name: str) -> tuple[Path, Path]:
        """A client certificate for `common_name` signed by this CA: (cert file, key file)."""
        return issue(self.directory, common_name, self.ca, self.ca_key, server=False)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_ca(directory: Path, name: str = "Herald Test CA") -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path = directory / f"{name.replace(' ', '-').lower()}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def issue(directory: Path, common_name: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          *, server: bool) -> tuple[Path, Path]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = directory / f"{common_name}.crt", directory / f"{common_name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


def new_pki(directory: Path) -> Pki:
    """A CA in `directory` and a server certificate for 127.0.0.1 / localhost signed by it."""
    ca_path, ca_key, ca = make_ca(directory)
    server_cert, server_key = issue(directory, "herald-server", ca, ca_key, server=True)
    return Pki(directory, ca_path, ca_key, ca, server_cert, server_key)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return new_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that signed none of the services' certificates."""
    return make_ca(tmp_path_factory.mktemp("other-pki"), "Other CA")[0]


@dataclass
class Keys:
    directory: Path
    secret_key: Path

    def token(self, role: str, expiry_seconds: int | None = None) -> str:
        return create_token(role, secret_key=self.secret_key.read_bytes(), expiry_seconds=expiry_seconds)

    def token_file(self, role: str) -> Path:
        path = self.directory / f"{role}.token"
        path.write_text(self.token(role))
        return path


def new_keys(directory: Path) -> Keys:
    """A token secret key (HS256) in `directory`."""
    secret = directory / "secret.key"
    secret.write_bytes(new_secret_key())
    return Keys(directory, secret)


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return new_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def rsa_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("rsa")
    private, public = new_key_pair()
    (directory / "private.pem").write_bytes(private)
    (directory / "public.pem").write_bytes(public)
    return directory / "private.pem", directory / "public.pem"


ADMIN = "admin"


def secure_process(data_dir: Path, pki: Pki, keys: Keys, env: dict[str, str] | None = None, *,
                   dlq_worker: bool = False, authorization: bool = True) -> StandaloneProcess:
    """`herald standalone` (not started) with TLS on every port, token authentication (HS256) and,
    unless `authorization` is False, authorization with super-user `admin`; `env` adds settings
    (HERALD_BROKER_..., HERALD_PROXY_...)."""
    server = StandaloneProcess(data_dir, {**service_env(), **(env or {})}, dlq_worker=dlq_worker)
    server.scheme = "herald+ssl"
    server.extra_args = secure_args(pki, keys, authorization=authorization)
    return server


def secure_args(pki: Pki, keys: Keys, *, authorization: bool = True) -> list[str]:
    return [
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-file", str(pki.ca_cert),
        "--authentication", "--token-secret-key-file", str(keys.secret_key),
        *(["--authorization", "--superuser-roles", ADMIN] if authorization else []),
    ]


@contextlib.contextmanager
def running_secure_standalone(
    data_dir: Path, pki: Pki, keys: Keys, settings: dict[str, str] | None = None,
) -> Iterator[StandaloneProcess]:
    """`herald standalone` with TLS on every port, token authentication (HS256) and authorization
    with super-user `admin`, started; `settings` are HERALD_* variables (a module's own limits)."""
    server = secure_process(data_dir, pki, keys, settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secure_standalone(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    """`herald standalone` with TLS on every port, token authentication (HS256) and authorization
    with super-user `admin`."""
    with running_secure_standalone(tmp_path_factory.mktemp("secure") / "data", pki, keys) as server:
        yield server


TokenFor = Callable[[str], str]
