"""NKey seeds, .creds files and the credential parameters of NATS URLs (no server needed)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from spate import ConfigError, StoreError
from spate_stores import redact_url
from spate_stores._redact import url_secrets
from spate_stores.nats import parse_url
from spate_stores.nats._creds import load_credentials, parse_creds
from spate_stores.nats._nkeys import (
    PREFIX_ACCOUNT,
    PREFIX_OPERATOR,
    PREFIX_USER,
    InvalidNKey,
    UserKey,
    crc16,
    decode_seed,
)
from spate_testing.servers._nats_auth import encode_seed, make_key, write_creds

# A seed and the user JWT issued for it, published as example data with the NATS tools: the
# JWT's subject is the seed's public key as NATS derives it, independently of this code.
PUBLISHED_SEED = "SUAOTBNEUHZDFJT3EUMELT7MQTP24JF3XVCXQNDSCU74G5IU6VAJBKH5LI"
PUBLISHED_PUBLIC = "UDE6WTGLTTPCRJRJCKBJRGVNZTLIVR7LEEELR4CYWWWBKJS7XYIKXDUU"


def _raw_public(public_key: str) -> bytes:
    raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    return raw[1:-2]


def test_crc16_is_xmodem() -> None:
    # The standard check value of CRC-16/XMODEM.
    assert crc16(b"123456789") == 0x31C3


def test_a_published_user_seed_gives_its_published_public_key() -> None:
    key = UserKey.from_seed(PUBLISHED_SEED)
    assert key.public_key == PUBLISHED_PUBLIC
    assert repr(key) == f"UserKey({PUBLISHED_PUBLIC})"


def test_the_nonce_signature_verifies_with_the_public_key() -> None:
    pair = make_key()
    key = UserKey.from_seed(pair.seed)
    assert key.public_key == pair.public_key
    sig = key.sign_nonce("aGVsbG8tbm9uY2U")
    assert "=" not in sig
    assert "+" not in sig
    assert "/" not in sig
    public = Ed25519PublicKey.from_public_bytes(_raw_public(pair.public_key))
    public.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), b"aGVsbG8tbm9uY2U")
    with pytest.raises(InvalidSignature):
        public.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), b"another nonce")


def _flip(seed: str, index: int) -> str:
    replacement = "B" if seed[index] != "B" else "C"
    return seed[:index] + replacement + seed[index + 1 :]


def _checksummed(raw: bytes) -> str:
    return base64.b32encode(raw + crc16(raw).to_bytes(2, "little")).decode().rstrip("=")


def _bad_seeds() -> dict[str, tuple[str, str]]:
    user = make_key().seed
    return {
        "checksum": (_flip(user, 30), "checksum does not match"),
        "truncated": (user[:-1], "57 characters where an NKey seed has 58"),
        "not base32": (user[:10] + "1" + user[11:], "not base32"),
        "lower case": (user.lower(), "not base32"),
        "account seed": (make_key(PREFIX_ACCOUNT).seed, "seed of an account key, not of a user"),
        "operator seed": (make_key(PREFIX_OPERATOR).seed, "seed of an operator key"),
        "public key": (make_key().public_key, "it is a public key, not a seed"),
        "not a seed": (_checksummed(bytes([PREFIX_USER, 0, *range(32)])), "not a seed"),
    }


@pytest.mark.parametrize("case", sorted(_bad_seeds()))
def test_a_bad_seed_is_refused_saying_why_without_quoting_it(case: str) -> None:
    seed, reason = _bad_seeds()[case]
    with pytest.raises(InvalidNKey, match=reason) as caught:
        UserKey.from_seed(seed)
    assert seed not in str(caught.value)
    assert seed[2:20] not in str(caught.value)


def test_seeds_round_trip_through_encoding() -> None:
    raw = bytes(range(32))
    assert decode_seed(encode_seed(PREFIX_USER, raw)) == (PREFIX_USER, raw)
    assert encode_seed(PREFIX_USER, raw).startswith("SU")
    assert encode_seed(PREFIX_ACCOUNT, raw).startswith("SA")


# -- files ----------------------------------------------------------------------------------


def test_a_seed_file_with_a_trailing_newline_loads(tmp_path: Path) -> None:
    pair = make_key()
    path = tmp_path / "user.nk"
    path.write_text(pair.seed + "\n")
    credentials = load_credentials(str(path), None)
    assert credentials is not None
    assert credentials.key.public_key == pair.public_key
    fields = credentials.connect_fields("nonce")
    assert fields["nkey"] == pair.public_key
    assert "jwt" not in fields
    assert fields["sig"]
    assert pair.seed not in repr(credentials)
    # Without a nonce (the server wants no signature) no sig is sent.
    assert "sig" not in credentials.connect_fields(None)


@pytest.mark.parametrize("case", sorted(_bad_seeds()))
def test_a_seed_file_without_a_user_seed_is_a_store_error_naming_the_file(
    case: str, tmp_path: Path
) -> None:
    seed, reason = _bad_seeds()[case]
    path = tmp_path / "user.nk"
    path.write_text(seed + "\n")
    with pytest.raises(StoreError, match="does not hold a valid NATS user seed") as caught:
        load_credentials(str(path), None)
    message = str(caught.value)
    assert str(path) in message
    assert reason in message
    assert seed not in message


def test_a_creds_file_as_nsc_writes_it_loads(tmp_path: Path) -> None:
    pair = make_key()
    path = write_creds(tmp_path / "user.creds", "aaa.bbb.ccc", pair.seed)
    credentials = load_credentials(None, str(path))
    assert credentials is not None
    assert credentials.jwt == "aaa.bbb.ccc"
    fields = credentials.connect_fields("nonce")
    assert fields["jwt"] == "aaa.bbb.ccc"
    assert "nkey" not in fields
    assert fields["sig"]
    assert "aaa.bbb.ccc" not in repr(credentials)
    assert pair.seed not in repr(credentials)


def test_the_published_creds_layout_parses() -> None:
    text = (
        "-----BEGIN NATS USER JWT-----\r\n"
        "eyJh.eyJi.c2ln\r\n"
        "------END NATS USER JWT------\r\n\r\n"
        "************************* IMPORTANT *************************\r\n\r\n"
        "-----BEGIN USER NKEY SEED-----\r\n"
        f"{PUBLISHED_SEED}\r\n"
        "------END USER NKEY SEED------\r\n"
    )
    credentials = parse_creds(text, "/x.creds")
    assert credentials.jwt == "eyJh.eyJi.c2ln"
    assert credentials.key.public_key == PUBLISHED_PUBLIC


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is not a NATS .creds file"),
        (PUBLISHED_SEED + "\n", "is not a NATS .creds file"),
        (
            "-----BEGIN NATS USER JWT-----\nnot-a-jwt\n------END NATS USER JWT------\n"
            f"-----BEGIN USER NKEY SEED-----\n{PUBLISHED_SEED}\n------END USER NKEY SEED------\n",
            "does not hold a JWT",
        ),
        (
            "-----BEGIN NATS USER JWT-----\na.b.c\n------END NATS USER JWT------\n"
            f"-----BEGIN USER NKEY SEED-----\n{_flip(PUBLISHED_SEED, 9)}\n"
            "------END USER NKEY SEED------\n",
            "does not hold a valid NATS user seed: its checksum does not match",
        ),
    ],
    ids=["empty", "bare seed", "no jwt", "bad seed"],
)
def test_a_malformed_creds_file_is_a_store_error_naming_it(text: str, reason: str) -> None:
    with pytest.raises(StoreError, match=reason) as caught:
        parse_creds(text, "/etc/nats/user.creds")
    assert "/etc/nats/user.creds" in str(caught.value)
    assert PUBLISHED_SEED not in str(caught.value)


def test_a_missing_credentials_file_is_a_store_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"the creds file .*missing\.creds does not exist"):
        load_credentials(None, str(tmp_path / "missing.creds"))
    with pytest.raises(StoreError, match=r"the NKey seed file .*missing\.nk does not exist"):
        load_credentials(str(tmp_path / "missing.nk"), None)


# -- URLs -----------------------------------------------------------------------------------


def test_credential_files_are_url_parameters() -> None:
    options = parse_url("nats://h:4222/ns?nkey=/etc/nats/user.nk").connect
    assert options.nkey_file == "/etc/nats/user.nk"
    assert not options.tls
    options = parse_url("nats://h/ns?creds=/etc/nats/user.creds").connect
    assert options.creds_file == "/etc/nats/user.creds"
    options = parse_url("nats://h/ns?cert=/c.pem&key=/k.pem&ca=/ca.pem").connect
    assert (options.cert_file, options.key_file, options.ca_file) == ("/c.pem", "/k.pem", "/ca.pem")
    assert options.tls  # a client certificate means TLS
    # Paths are no secret: the URL shows as given, and nothing is scrubbed from output.
    url = "nats://h/ns?creds=/etc/nats/user.creds&cert=/c.pem&key=/k.pem"
    assert redact_url(url) == url
    assert url_secrets(url) == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("nkey=/a.nk&creds=/b.creds", "give nkey= or creds=, not both"),
        ("cert=/c.pem", "needs both cert= and key="),
        ("key=/k.pem", "needs both cert= and key="),
    ],
)
def test_credentials_that_do_not_go_together_are_refused(query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_url(f"nats://h/ns?{query}")


@pytest.mark.parametrize("userinfo", ["Tok3nXYZ@", "user:Pa55wXYZ@"])
def test_nkey_or_creds_with_a_password_or_token_is_refused(userinfo: str) -> None:
    with pytest.raises(ConfigError, match="authenticates as one user") as caught:
        parse_url(f"nats://{userinfo}h/ns?creds=/b.creds")
    assert "XYZ" not in str(caught.value)


def test_a_seed_or_jwt_given_inline_is_refused_unechoed_and_redacted() -> None:
    seed = make_key().seed
    jwt = "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJVQUJDIn0.c2lnbmF0dXJl"
    for name, secret in (("nkey", seed), ("creds", jwt)):
        url = f"nats://h/ns?{name}={secret}"
        with pytest.raises(ConfigError, match="takes the path of a file") as caught:
            parse_url(url)
        assert secret not in str(caught.value)
        assert secret not in redact_url(url)
        assert secret in url_secrets(url)  # the command line scrubs it from its output
