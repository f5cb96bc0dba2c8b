"""NKey seed files and ``.creds`` files: read at each handshake, answered in CONNECT.

Operators hand a NATS client its identity in one of two files:

* an NKey seed file (``nkey=``): the user's seed (``SU...``) alone on a line, as ``nk -gen
  user`` or ``nsc`` write it; the server lists the matching public key (``U...``) in an
  ``authorization { users: [ { nkey: ... } ] }`` entry;
* a ``.creds`` file (``creds=``), as ``nsc`` writes it and the NATS CLI and clients take it: the
  user JWT between ``-----BEGIN NATS USER JWT-----`` and ``------END NATS USER JWT------``,
  then the seed between ``-----BEGIN USER NKEY SEED-----`` and ``------END USER NKEY
  SEED------`` (decentralized auth: a server in operator mode trusts the JWT's account).

Either way the server's INFO carries a nonce, and CONNECT answers it with the public key
(``nkey``) or the JWT (``jwt``) and ``sig``, the Ed25519 signature of the nonce (see
``_nkeys.py``). The file is read again at every connection, so a file replaced by a rotation
(a new JWT before the old one expires) is picked up at the next reconnection without a
restart.

Errors name the file and what is wrong with it, never its contents: the seed is the user's
private key, and a bearer JWT is a password.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from spate import StoreError
from spate_stores.nats._nkeys import InvalidNKey, UserKey

__all__ = ["Credentials", "load_credentials", "parse_creds", "parse_seed_file"]

# A decorated block: a line of three or more dashes around a title, the item, another such
# line (the layout the NATS tools write and read; the closing lines have six dashes).
_BLOCK = re.compile(r"-{3,}[^\n]*-{3,}\r?\n\s*([\w\-.=]+)\s*\r?\n-{3,}[^\n]*-{3,}")
_JWT = re.compile(r"[\w-]+\.[\w-]+\.[\w-]+")


@attrs.frozen(repr=False)
class Credentials:
    """What CONNECT carries for NKey or JWT auth: the key that signs, and the JWT if any."""

    key: UserKey
    jwt: str | None = None
    """The user JWT of a ``.creds`` file (None for a bare NKey)."""

    def connect_fields(self, nonce: str | None) -> dict[str, Any]:
        """The CONNECT fields: ``jwt`` or ``nkey``, and ``sig`` over ``nonce`` when given."""
        fields: dict[str, Any] = {"jwt": self.jwt} if self.jwt else {"nkey": self.key.public_key}
        if nonce is not None:
            fields["sig"] = self.key.sign_nonce(nonce)
        return fields

    def __repr__(self) -> str:
        return f"Credentials({self.key.public_key}{', with a JWT' if self.jwt else ''})"


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        raise StoreError(
            f"the {what} {path} does not exist; fix the path in the store URL"
        ) from None
    except PermissionError:
        raise StoreError(
            f"the {what} {path} cannot be read by this process (permission denied); it should "
            "be readable by the user running spate (and by nobody else: it holds a secret)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise StoreError(f"the {what} {path} cannot be read ({reason})") from None


def _user_key(text: str, path: str, what: str) -> UserKey:
    try:
        return UserKey.from_seed(text)
    except InvalidNKey as exc:
        raise StoreError(
            f"the {what} {path} does not hold a valid NATS user seed: {exc}. It should hold a "
            "user seed (SU..., 58 characters), as `nk -gen user` or `nsc` write it."
        ) from None


def parse_creds(text: str, path: str) -> Credentials:
    """The JWT and key of a ``.creds`` file's text; StoreError (naming ``path``) if malformed."""
    blocks = _BLOCK.findall(text)
    what = "creds file"
    if len(blocks) < 2:
        raise StoreError(
            f"the {what} {path} is not a NATS .creds file: it needs the user JWT between "
            "-----BEGIN NATS USER JWT----- lines and the seed between -----BEGIN USER NKEY "
            "SEED----- lines, as `nsc generate creds` writes them"
        )
    jwt, seed = blocks[0], blocks[1]
    if not _JWT.fullmatch(jwt):
        raise StoreError(
            f"the {what} {path} does not hold a JWT in its first block (a JWT is three "
            "base64url parts separated by dots); regenerate it with `nsc generate creds`"
        )
    return Credentials(_user_key(seed, path, what), jwt)


def parse_seed_file(text: str, path: str) -> Credentials:
    """The key of an NKey seed file's text (a bare seed, or a decorated block holding one)."""
    blocks = _BLOCK.findall(text)
    if blocks:
        seed = blocks[-1]
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        seeds = [line for line in lines if line.startswith("S")]
        seed = seeds[0] if seeds else (lines[0] if lines else "")
    return Credentials(_user_key(seed, path, "NKey seed file"))


def load_credentials(nkey_file: str | None, creds_file: str | None) -> Credentials | None:
    """Read the configured credentials file (StoreError naming it if it is unusable)."""
    if creds_file is not None:
        return parse_creds(_read(creds_file, "creds file"), creds_file)
    if nkey_file is not None:
        return parse_seed_file(_read(nkey_file, "NKey seed file"), nkey_file)
    return None
