"""NATS identities for tests: NKey pairs, operator/account/user JWTs, ``.creds`` files.

What ``nk`` and ``nsc`` would make for an operator, made here so tests need neither tool and
no key material is checked in:

* :func:`make_key` mints an Ed25519 key pair and encodes it as NKeys (seed ``S?...``, public
  key ``U...``/``A...``/``O...``);
* :func:`issue_jwt` signs a JWT v2 (header ``{"typ":"JWT","alg":"ed25519-nkey"}``, base64url
  parts without padding, ``jti`` the base32 SHA-512/256 of the claims);
* :func:`make_operator` builds an operator, one account with JetStream enabled and one user,
  with the server config lines (``operator``, ``resolver: MEMORY``, ``resolver_preload``)
  that trust them, and writes the user's ``.creds`` file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import attrs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from spate_stores.nats._nkeys import (
    PREFIX_ACCOUNT,
    PREFIX_OPERATOR,
    PREFIX_SEED,
    PREFIX_USER,
    crc16,
    encode_public_key,
)

__all__ = [
    "NKeyPair",
    "OperatorSetup",
    "encode_seed",
    "issue_jwt",
    "make_key",
    "make_operator",
    "user_claims_jwt",
    "write_creds",
]


def encode_seed(prefix: int, seed: bytes) -> str:
    """The NKey text of a 32-byte Ed25519 seed for a key of type ``prefix`` (``SU...``)."""
    raw = bytes([PREFIX_SEED | (prefix >> 5), (prefix & 0x1F) << 3]) + seed
    raw += crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("=")


@attrs.frozen(repr=False)
class NKeyPair:
    """An Ed25519 key pair with its NKey texts."""

    private: Ed25519PrivateKey
    seed: str
    """The encoded seed (secret)."""
    public_key: str
    """The encoded public key."""

    def __repr__(self) -> str:
        return f"NKeyPair({self.public_key})"


def make_key(prefix: int = PREFIX_USER) -> NKeyPair:
    """A fresh key pair of type ``prefix`` (user by default)."""
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return NKeyPair(private, encode_seed(prefix, seed), encode_public_key(prefix, public))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def issue_jwt(issuer: NKeyPair, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A JWT v2 about ``subject`` signed by ``issuer`` with ``nats`` as its NATS claims."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public_key,
        "name": name,
        "sub": subject,
    }
    digest = hashlib.new("sha512_256", json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    claims["nats"] = {**nats, "version": 2}
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = issuer.private.sign(f"{header}.{body}".encode())
    return f"{header}.{body}.{_b64(signature)}"


def write_creds(path: Path, jwt: str, seed: str) -> Path:
    """Write a ``.creds`` file as ``nsc generate creds`` lays it out (mode 0600)."""
    path.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )
    path.chmod(0o600)
    return path


_UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def user_claims_jwt(account: NKeyPair, user: NKeyPair, name: str) -> str:
    """A user JWT for ``user`` issued by ``account`` (no limits, no permission restrictions)."""
    return issue_jwt(
        account, user.public_key, name, {"type": "user", "pub": {}, "sub": {}, **_UNLIMITED}
    )


@attrs.frozen
class OperatorSetup:
    """An operator, an account with JetStream and a user of it, and what trusts them."""

    operator: NKeyPair
    account: NKeyPair
    user: NKeyPair
    user_jwt: str
    creds: Path
    """The user's ``.creds`` file."""
    config: str
    """nats-server config lines: operator mode with a memory resolver preloaded."""


def make_operator(directory: Path, *, user_name: str = "spate") -> OperatorSetup:
    """Mint an operator → account → user chain and write the user's creds into ``directory``."""
    operator = make_key(PREFIX_OPERATOR)
    account = make_key(PREFIX_ACCOUNT)
    user = make_key(PREFIX_USER)
    operator_jwt = issue_jwt(
        operator, operator.public_key, "spate-test-operator", {"type": "operator"}
    )
    account_jwt = issue_jwt(
        operator,
        account.public_key,
        "spate-test-account",
        {
            "type": "account",
            "limits": {
                **_UNLIMITED,
                "imports": -1,
                "exports": -1,
                "wildcards": True,
                "conn": -1,
                "leaf": -1,
                # JetStream is off for an account unless its limits give it storage.
                "mem_storage": -1,
                "disk_storage": -1,
                "streams": -1,
                "consumer": -1,
            },
            "default_permissions": {"pub": {}, "sub": {}},
        },
    )
    # JetStream needs a system account in operator mode (the server will not start without).
    system = make_key(PREFIX_ACCOUNT)
    system_jwt = issue_jwt(
        operator,
        system.public_key,
        "SYS",
        {"type": "account", "limits": {**_UNLIMITED, "conn": -1, "imports": -1, "exports": -1}},
    )
    user_jwt = user_claims_jwt(account, user, user_name)
    directory.mkdir(parents=True, exist_ok=True)
    creds = write_creds(directory / f"{user_name}.creds", user_jwt, user.seed)
    config = "\n".join(
        [
            f"operator: {json.dumps(operator_jwt)}",
            f"system_account: {system.public_key}",
            "resolver: MEMORY",
            "resolver_preload: {",
            f"  {account.public_key}: {json.dumps(account_jwt)}",
            f"  {system.public_key}: {json.dumps(system_jwt)}",
            "}",
        ]
    )
    return OperatorSetup(operator, account, user, user_jwt, creds, config)
