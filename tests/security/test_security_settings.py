"""Tokens, keys and the security settings, without a cluster: every refusal says what was wrong,
and a storage node (in-process, over real gRPC) lets only broker roles in."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
from pathlib import Path

import grpc
import grpc.aio
import jwt
import pytest
from herald.api.v1 import storage_pb2, storage_pb2_grpc
from herald.common.errors import AuthenticationError, AuthorizationError, InvalidArgumentError
from herald.common.security.authentication import Authenticator
from herald.common.security.credentials import AuthenticationToken
from herald.common.security.service import ServiceSecurity
from herald.common.security.tokens import TokenVerifier, create_token, parse_expiry, unverified_subject
from herald.common.transport.rpc import error_from_rpc
from herald.lookup.settings import LookupSettings
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

from tests.conftest import VENV_BIN, service_env
from tests.security.conftest import Keys, Pki


def test_expiries_are_parsed_and_bad_ones_refused() -> None:
    assert parse_expiry("30s") == 30 and parse_expiry("1h") == 3600 and parse_expiry("30d") == 30 * 86400
    for bad in ("", "1", "h", "0h", "1 fortnight", "-1h"):
        with pytest.raises(InvalidArgumentError, match="expiry"):
            parse_expiry(bad)


def test_rs256_tokens_verify_with_the_public_key_only(rsa_keys: tuple[Path, Path]) -> None:
    private, public = rsa_keys
    token = create_token("app", private_key=private.read_bytes(), expiry_seconds=60, audience="prod")
    verifier = TokenVerifier(public_key=public.read_bytes(), audience="prod")
    assert verifier.role(token) == "app"
    assert verifier.role(token) == "app"  # remembered
    with pytest.raises(AuthenticationError, match="audience"):
        TokenVerifier(public_key=public.read_bytes(), audience="staging").role(token)
    with pytest.raises(AuthenticationError, match="RS256"):
        verifier.role(create_token("app", secret_key=base64.b64encode(b"k" * 32)))


def test_tokens_without_a_subject_or_a_key_are_refused(keys: Keys, rsa_keys: tuple[Path, Path]) -> None:
    with pytest.raises(InvalidArgumentError, match="subject"):
        create_token("", secret_key=b"k" * 32)
    with pytest.raises(InvalidArgumentError, match="either"):
        create_token("a")
    with pytest.raises(InvalidArgumentError, match="private key"):
        create_token("a", private_key=b"not a pem")
    with pytest.raises(InvalidArgumentError, match="one key"):
        TokenVerifier()
    with pytest.raises(InvalidArgumentError, match="PEM public key"):
        TokenVerifier(public_key=b"junk")
    with pytest.raises(InvalidArgumentError, match="cannot be read"):
        TokenVerifier.from_files(secret_key_file="/nonexistent/key")
    no_subject = jwt.encode({"x": 1}, base64.b64decode(keys.secret_key.read_bytes()), algorithm="HS256")
    with pytest.raises(AuthenticationError, match="'sub'"):
        TokenVerifier(secret_key=keys.secret_key.read_bytes()).role(no_subject)
    with pytest.raises(InvalidArgumentError, match="not a JWT"):
        unverified_subject("junk")


def test_token_sources_refuse_what_they_cannot_use(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        AuthenticationToken("  ")
    with pytest.raises(InvalidArgumentError):
        AuthenticationToken(42)  # type: ignore[arg-type]
    with pytest.raises(AuthenticationError, match="cannot be read"):
        AuthenticationToken.from_file(tmp_path / "missing")
    (tmp_path / "empty").write_text("")
    with pytest.raises(AuthenticationError, match="empty"):
        AuthenticationToken.from_file(tmp_path / "empty")
    with pytest.raises(AuthenticationError, match="no token"):
        AuthenticationToken(lambda: "").token()


def test_security_settings_that_cannot_work_are_refused(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="a way to authenticate"):
        ServiceSecurity(LookupSettings(authentication_enabled=True))
    with pytest.raises(InvalidArgumentError, match="tls_key_file"):
        ServiceSecurity(LookupSettings(tls_cert_file=str(pki.server_cert)))
    with pytest.raises(InvalidArgumentError, match="tls_ca_file"):
        ServiceSecurity(LookupSettings(tls_cert_file=str(pki.server_cert), tls_key_file=str(pki.server_key),
                                       tls_require_client_cert=True))
    with pytest.raises(InvalidArgumentError, match="tls_require_client_cert"):
        ServiceSecurity(LookupSettings(tls_client_auth=True, authentication_enabled=True))
    (tmp_path / "no.pem").write_text("hello")
    with pytest.raises(InvalidArgumentError, match="no PEM"):
        ServiceSecurity(LookupSettings(tls_cert_file=str(tmp_path / "no.pem"), tls_key_file=str(pki.server_key)))
    with pytest.raises(InvalidArgumentError, match="cannot be read"):
        ServiceSecurity(LookupSettings(tls_cert_file="/nonexistent.pem", tls_key_file=str(pki.server_key)))


def test_a_certificate_role_needs_a_certificate() -> None:
    authenticator = Authenticator(None, tls_client_auth=True)
    assert authenticator.authenticate([], {"x509_common_name": [b"svc"]}).role == "svc"
    with pytest.raises(AuthenticationError, match="no client certificate"):
        authenticator.authenticate([], {})
    with pytest.raises(AuthenticationError, match="takes no tokens"):
        authenticator.authenticate([("authorization", "Bearer abc")], {})


async def test_a_storage_node_lets_only_broker_roles_in(tmp_path: Path, keys: Keys) -> None:
    settings = StorageSettings(data_dir=str(tmp_path / "storage"), port=0, metrics_port=-1,
                               authentication_enabled=True, token_secret_key_file=str(keys.secret_key),
                               authorization_enabled=True, broker_roles=["broker"])
    server = StorageServer(settings)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = storage_pb2_grpc.StorageServiceStub(channel)
            request = storage_pb2.LacRequest(ledger_id=1)
            for metadata, refusal in (([], AuthenticationError),
                                      ([("authorization", f"Bearer {keys.token('client')}")], AuthorizationError)):
                with pytest.raises(grpc.aio.AioRpcError) as failure:
                    await stub.ReadLastAddConfirmed(request, metadata=metadata, timeout=5)
                assert isinstance(error_from_rpc(failure.value), refusal)
            reply = await stub.ReadLastAddConfirmed(request, timeout=5,
                                                    metadata=[("authorization", f"Bearer {keys.token('broker')}")])
            assert reply.ledger_id == 1
    finally:
        await server.stop()


def test_the_key_pair_command_makes_keys_tokens_verify_with(tmp_path: Path) -> None:
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    made = subprocess.run([str(VENV_BIN / "herald"), "admin", "tokens", "create-key-pair", "--private-key",
                           str(private), "--public-key", str(public)], capture_output=True, text=True,
                          env=service_env(), timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    assert private.stat().st_mode & 0o777 == 0o600
    token = subprocess.run([str(VENV_BIN / "herald"), "admin", "tokens", "create", "--subject", "svc",
                            "--private-key", str(private), "--expiry", "1d"], capture_output=True, text=True,
                           env=service_env(), timeout=60, check=False)
    assert token.returncode == 0, token.stderr
    assert TokenVerifier.from_files(public_key_file=str(public)).role(token.stdout.strip()) == "svc"
    printed = subprocess.run([str(VENV_BIN / "herald"), "admin", "tokens", "create-secret-key"], capture_output=True,
                             text=True, env=service_env(), timeout=60, check=False)
    assert printed.returncode == 0 and len(printed.stdout.strip()) == 44  # 32 bytes, base64


def _unsigned_token(claims: dict[str, object], header: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part(header)}.{part(claims)}."


def test_alg_none_and_key_confusion_tokens_are_refused(keys: Keys, rsa_keys: tuple[Path, Path]) -> None:
    """The classic JWT forgeries: an unsigned token (`alg: none`) naming a super-user, and, against a
    cluster checking RS256, an HS256 token whose HMAC key is the cluster's own public key."""
    unsigned = _unsigned_token({"sub": "admin"}, {"alg": "none", "typ": "JWT"})
    with pytest.raises(AuthenticationError):
        TokenVerifier(secret_key=keys.secret_key.read_bytes()).role(unsigned)
    _, public = rsa_keys
    verifier = TokenVerifier(public_key=public.read_bytes())
    with pytest.raises(AuthenticationError):
        verifier.role(unsigned)
    header = {"alg": "HS256", "typ": "JWT"}
    signing_input = _unsigned_token({"sub": "admin"}, header).rstrip(".")
    signature = hmac.new(public.read_bytes(), signing_input.encode(), hashlib.sha256).digest()
    confused = f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
    with pytest.raises(AuthenticationError, match="RS256"):
        verifier.role(confused)
