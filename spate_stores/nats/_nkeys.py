"""NKeys: NATS's text form of Ed25519 keys, decoded with every check, signed with ``cryptography``.

An NKey is base32 (RFC 4648 alphabet, no padding) of a type prefix, the raw key and a CRC-16
(XMODEM: polynomial 0x1021, initial value 0, appended little-endian) of what precedes it:

* a public key is one prefix byte (``U`` user, ``A`` account, ``O`` operator ... after
  encoding) and the 32-byte Ed25519 public key: 56 characters;
* a seed is two prefix bytes that spell ``S`` and then the key type (``SU`` for a user seed)
  and the 32-byte Ed25519 private seed: 58 characters.

This module decodes a user seed (checking its characters, length, checksum and both prefix
bytes, so a mistyped, truncated or wrong kind of key is refused before any server sees it) and
signs the server's nonce with it. The signing itself is ``cryptography``'s Ed25519, imported
only when a key is used, so a store without NKey credentials does not need it installed.

No error here quotes the seed or any part of it: a seed is the user's private key.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from spate import ConfigError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "PREFIX_ACCOUNT",
    "PREFIX_OPERATOR",
    "PREFIX_SEED",
    "PREFIX_USER",
    "InvalidNKey",
    "UserKey",
    "crc16",
    "decode_seed",
    "encode_public_key",
]

PREFIX_SEED = 18 << 3
"""First prefix byte of every seed (base32 ``S``)."""
PREFIX_OPERATOR = 14 << 3
"""Prefix byte of an operator key (base32 ``O``)."""
PREFIX_ACCOUNT = 0
"""Prefix byte of an account key (base32 ``A``)."""
PREFIX_USER = 20 << 3
"""Prefix byte of a user key (base32 ``U``)."""

_KINDS = {
    PREFIX_USER: "a user",
    PREFIX_ACCOUNT: "an account",
    PREFIX_OPERATOR: "an operator",
    13 << 3: "a server",
    2 << 3: "a cluster",
    23 << 3: "a curve (xkey)",
}
_SEED_LENGTH = 32
_ENCODED_SEED_LENGTH = 58
_ENCODED_PUBLIC_LENGTH = 56


class InvalidNKey(ConfigError):
    """Text that is not a valid NKey of the kind wanted (the message never quotes it)."""


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM of ``data`` (the checksum NKeys carry)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _b32encode(raw: bytes) -> str:
    return base64.b32encode(raw).decode().rstrip("=")


def _b32decode(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 8)
    try:
        return base64.b32decode(padded)
    except (binascii.Error, ValueError):
        raise InvalidNKey("it is not base32 text (A-Z and 2-7)") from None


def _with_checksum(raw: bytes) -> str:
    return _b32encode(raw + crc16(raw).to_bytes(2, "little"))


def encode_public_key(prefix: int, public: bytes) -> str:
    """The NKey text of a 32-byte Ed25519 public key of type ``prefix`` (``U...`` for users)."""
    if prefix not in _KINDS or len(public) != _SEED_LENGTH:
        raise ValueError(f"not an NKey public key: prefix {prefix}, {len(public)} bytes")
    return _with_checksum(bytes([prefix]) + public)


def decode_seed(text: str) -> tuple[int, bytes]:
    """The key type prefix and the 32-byte Ed25519 seed of an encoded seed.

    Raises :class:`InvalidNKey` (saying what is wrong, never quoting the text) when it is not
    base32, has the wrong length, fails its checksum, or is not a seed.
    """
    text = text.strip()
    if len(text) == _ENCODED_PUBLIC_LENGTH and _is_public_key(text):
        raise InvalidNKey(
            "it is a public key, not a seed (the public key goes in the server's config; the "
            "client needs the seed, which begins with S)"
        )
    if len(text) != _ENCODED_SEED_LENGTH:
        raise InvalidNKey(
            f"it has {len(text)} characters where an NKey seed has {_ENCODED_SEED_LENGTH}"
        )
    raw = _b32decode(text)
    body, checksum = raw[:-2], int.from_bytes(raw[-2:], "little")
    if crc16(body) != checksum:
        raise InvalidNKey("its checksum does not match (a character is wrong or missing)")
    if body[0] & 0xF8 != PREFIX_SEED:
        raise InvalidNKey("it is not a seed (seeds begin with S)")
    kind = ((body[0] & 0x07) << 5) | ((body[1] & 0xF8) >> 3)
    if kind not in _KINDS:
        raise InvalidNKey("its key type is not one NATS defines")
    return kind, body[2:]


def _is_public_key(text: str) -> bool:
    try:
        raw = _b32decode(text)
    except InvalidNKey:
        return False
    return crc16(raw[:-2]) == int.from_bytes(raw[-2:], "little") and raw[0] in _KINDS


class UserKey:
    """A NATS user's key pair, from its seed: it names itself and signs server nonces.

    Its ``repr`` shows only the public key.
    """

    def __init__(self, private: Ed25519PrivateKey, public_key: str) -> None:
        self._private = private
        self.public_key = public_key
        """The public NKey (``U...``): what a server's ``nkey:`` user entry names."""

    @classmethod
    def from_seed(cls, text: str) -> UserKey:
        """The key of an encoded user seed (``SU...``).

        Raises :class:`InvalidNKey` when it is no valid seed, or the seed of another kind of
        key (an account's or operator's seed cannot log in as a user), and ConfigError when
        ``cryptography`` is not installed.
        """
        kind, seed = decode_seed(text)
        if kind != PREFIX_USER:
            raise InvalidNKey(
                f"it is the seed of {_KINDS[kind]} key, not of a user (user seeds begin with SU)"
            )
        try:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
        except ImportError:
            raise ConfigError(
                "NKey and .creds credentials sign with the cryptography package, which is not "
                "installed: pip install 'spate[nats]'"
            ) from None
        private = Ed25519PrivateKey.from_private_bytes(seed)
        public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return cls(private, encode_public_key(PREFIX_USER, public))

    def sign(self, data: bytes) -> bytes:
        """The raw 64-byte Ed25519 signature of ``data``."""
        return self._private.sign(data)

    def sign_nonce(self, nonce: str) -> str:
        """The ``sig`` of a CONNECT answering ``nonce``: base64url, no padding."""
        return base64.urlsafe_b64encode(self.sign(nonce.encode())).decode().rstrip("=")

    def __repr__(self) -> str:
        return f"UserKey({self.public_key})"
