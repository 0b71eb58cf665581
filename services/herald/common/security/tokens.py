"""JWT tokens, as Pulsar's token authentication uses them: the role is the token's `sub` claim,
signed with HS256 (one secret key shared by whoever makes and checks tokens) or RS256 (a private
key makes them, the services hold only the public key). Keys, tokens and their checking live here;
the gRPC side is herald.common.security.authentication, the `herald admin tokens` commands in herald.cli.admin.tokens.
"""

from __future__ import annotations

import base64
import re
import secrets
import time
from collections import OrderedDict
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from herald.common.errors import AuthenticationError, InvalidArgumentError

_EXPIRY = re.compile(r"^(\d+)\s*([smhdwy])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_CACHE_SIZE = 4096  # verified tokens remembered (a token is checked once per call or stream)


def parse_expiry(text: str) -> int:
    """Seconds in `30s`, `15m`, `1h`, `30d`, `1w`, `1y`."""
    match = _EXPIRY.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise InvalidArgumentError(f"expiry {text!r} is invalid: expected a positive number and a unit "
                                   "s, m, h, d, w or y (e.g. 1h, 30d)")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def new_secret_key() -> bytes:
    """A random 256-bit HS256 key, base64-encoded (the form key files hold)."""
    return base64.b64encode(secrets.token_bytes(32))


def new_key_pair() -> tuple[bytes, bytes]:
    """An RSA 2048 key pair for RS256: (private key PEM, public key PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def read_key_file(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes().strip()
    except OSError as exc:
        raise InvalidArgumentError(f"{what} {path!r} cannot be read: {exc.strerror}") from None
    if not data:
        raise InvalidArgumentError(f"{what} {path!r} is empty")
    return data


def _secret(data: bytes) -> bytes:
    """A secret key file's key: base64 text (what create-secret-key writes), else the raw bytes."""
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        return data


def create_token(subject: str, *, secret_key: bytes | None = None, private_key: bytes | None = None,
                 expiry_seconds: int | None = None, audience: str | None = None) -> str:
    """A token for role `subject`, signed with a secret key file's contents (HS256) or a private
    key PEM (RS256); it expires after expiry_seconds (None: never)."""
    if not subject:
        raise InvalidArgumentError("a token needs a subject (the role)")
    if (secret_key is None) == (private_key is None):
        raise InvalidArgumentError("sign a token with either a secret key or a private key")
    claims: dict[str, object] = {"sub": subject}
    if expiry_seconds is not None:
        claims["exp"] = int(time.time()) + expiry_seconds
    if audience:
        claims["aud"] = audience
    if secret_key is not None:
        return jwt.encode(claims, _secret(secret_key), algorithm="HS256")
    assert private_key is not None
    try:
        return jwt.encode(claims, private_key, algorithm="RS256")
    except (ValueError, TypeError, jwt.PyJWTError) as exc:
        raise InvalidArgumentError(f"the private key is not an RSA private key in PEM: {exc}") from None


def unverified_subject(token: str) -> str:
    """The role a token names, without checking it (for a service's own token, which the others check)."""
    try:
        subject = jwt.decode(token, options={"verify_signature": False}).get("sub")
    except jwt.InvalidTokenError as exc:
        raise InvalidArgumentError(f"the token is not a JWT: {exc}") from None
    if not isinstance(subject, str) or not subject:
        raise InvalidArgumentError("the token names no subject (role)")
    return subject


class TokenVerifier:
    """Checks tokens with the service's key: the secret key (HS256) or the public key (RS256).
    Verified tokens are remembered (their role and expiry), so a client's token costs one signature
    check however many calls carry it."""

    def __init__(self, *, secret_key: bytes | None = None, public_key: bytes | None = None,
                 audience: str | None = None) -> None:
        if (secret_key is None) == (public_key is None):
            raise InvalidArgumentError(
                "token authentication needs one key: token_secret_key_file (HS256) or token_public_key_file (RS256)")
        self._key: bytes = _secret(secret_key) if secret_key is not None else public_key  # type: ignore[assignment]
        self._algorithm = "HS256" if secret_key is not None else "RS256"
        self._audience = audience or None
        self._verified: OrderedDict[str, tuple[str, float | None]] = OrderedDict()
        if public_key is not None:
            try:
                serialization.load_pem_public_key(public_key)
            except ValueError as exc:
                raise InvalidArgumentError(f"token_public_key_file holds no PEM public key: {exc}") from None

    @classmethod
    def from_files(cls, secret_key_file: str = "", public_key_file: str = "", audience: str = "") -> TokenVerifier:
        return cls(
            secret_key=read_key_file(secret_key_file, "token_secret_key_file") if secret_key_file else None,
            public_key=read_key_file(public_key_file, "token_public_key_file") if public_key_file else None,
            audience=audience,
        )

    def expiry(self, token: str) -> float | None:
        """When a token role() verified expires (unix seconds; None: never, or not verified here)."""
        known = self._verified.get(token)
        return None if known is None else known[1]

    def role(self, token: str) -> str:
        """The role a token names; AuthenticationError saying why it is refused."""
        known = self._verified.get(token)
        if known is not None:
            role, expires = known
            if expires is None or expires > time.time():
                return role
            del self._verified[token]
        try:
            claims = jwt.decode(token, self._key, algorithms=[self._algorithm], audience=self._audience,
                                options={"require": ["sub"]})
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("the token has expired: get a new one") from None
        except jwt.InvalidSignatureError:
            raise AuthenticationError("the token's signature does not verify: it was tampered with or "
                                      "signed with another key") from None
        except jwt.InvalidAudienceError:
            raise AuthenticationError(f"the token is not for this cluster (audience {self._audience!r})") from None
        except jwt.InvalidAlgorithmError:
            raise AuthenticationError(f"the token is not signed with {self._algorithm}, which this "
                                      "service expects") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthenticationError(f"the token has no {exc.claim!r} claim (the role)") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"the token is invalid: {exc}") from None
        role = claims["sub"]
        if not isinstance(role, str) or not role:
            raise AuthenticationError("the token's subject (the role) is empty")
        expires = claims.get("exp")
        self._verified[token] = (role, float(expires) if expires is not None else None)
        if len(self._verified) > _CACHE_SIZE:
            self._verified.popitem(last=False)
        return role
