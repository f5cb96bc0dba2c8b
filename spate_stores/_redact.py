"""Store URLs as they may be shown: passwords and tokens replaced by ``***``.

Every message, log line, span attribute or repr that names a store URL shows it through
:func:`redact_url`. It parses nothing it could fail on (a malformed URL is exactly what an
error message quotes), so it works on the raw text:

* ``user:password@`` becomes ``user:***@`` (the user name helps tell credentials apart and
  is no secret); ``token@`` (NATS token auth: user information without a colon) becomes
  ``***@``;
* the value of a query parameter whose name says it holds a secret (``password``,
  ``token``, ``secret``, ``user_password``, ``auth_token``...) becomes ``***``, and so does
  any value that looks like an NKey seed (``S`` and 57 base32 characters) or a JWT, whatever
  its parameter (someone pasted the secret where its file's path belongs). File paths
  (``ca=``, ``cert=``, ``key=``, ``creds=`` and ``nkey=`` files) stay: a path is no secret,
  and their contents are never read into a message.

:func:`url_secrets` lists the secret strings themselves, for the command line's last line of
defence (it scrubs them from whatever it prints).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "looks_like_secret", "redact_url", "scrub", "url_secrets"]

MASK = "***"
"""What a secret is replaced by."""

# Parameter names that carry secrets: matched anywhere in the (lower-cased) name, so that
# ``user_password``, ``auth_token`` and ``nkey_seed`` are caught as well as ``password``.
_SECRET_PARAM = re.compile(r"pass|pwd|token|secret|seed|credential|api_?key|auth")


# A value that is a secret whatever its name: an NKey seed, or a JWT (header ``{"...``).
_SECRET_VALUE = re.compile(r"S[A-Z2-7]{57}|eyJ[\w-]*\.[\w-]+\.[\w-]*")


def looks_like_secret(value: str) -> bool:
    """Whether ``value`` (percent-encoded or not) looks like an NKey seed or a JWT."""
    return bool(_SECRET_VALUE.fullmatch(unquote(value).strip()))


def _is_secret_param(name: str, value: str = "") -> bool:
    return looks_like_secret(value) or bool(_SECRET_PARAM.search(unquote(name).lower()))


def _split(url: str) -> tuple[str, str, str, str]:
    """``url`` in four parts, none parsed further.

    The scheme with its ``://``, the user information (without its ``@``), the hosts and
    path, and the query and fragment with their ``?`` or ``#``.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    end = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    head, query_part = rest[:end], rest[end:]
    # The user information ends at the last '@' before the query: a password holding an
    # unescaped '/' or '@' is then hidden whole rather than shown in part.
    userinfo, at, location = head.rpartition("@")
    if not at:
        return scheme + sep, "", head, query_part
    return scheme + sep, userinfo, location, query_part


def redact_url(url: object) -> str:
    """``url`` with its password, token and secret query parameters replaced by ``***``.

    ``etcd://root:s3cret@h:2379/ns?ttl=5`` shows as ``etcd://root:***@h:2379/ns?ttl=5``,
    ``nats://tok@h:4222`` as ``nats://***@h:4222``, ``nats://h?token=tok`` as
    ``nats://h?token=***``. Never raises; anything that is not a string shows as
    ``<not a store URL>``.
    """
    if not isinstance(url, str):
        return "<not a store URL>"
    scheme, userinfo, location, query = _split(url)
    shown = f"{scheme}{location}"
    if userinfo:
        user, colon, _ = userinfo.partition(":")
        masked = f"{user}:{MASK}" if colon and user else MASK
        shown = f"{scheme}{masked}@{location}"
    if query:
        shown += _redact_query(query)
    return shown


def _redact_query(query: str) -> str:
    """``?a=1&password=x#frag`` with secret values masked (the separators kept as written)."""
    if not query.startswith("?"):
        return query
    body, hash_, fragment = query[1:].partition("#")
    pieces = re.split(r"([&;])", body)
    for i in range(0, len(pieces), 2):
        name, eq, value = pieces[i].partition("=")
        if eq and value and _is_secret_param(name, value):
            pieces[i] = f"{name}={MASK}"
    return "?" + "".join(pieces) + (f"#{fragment}" if hash_ else "")


def url_secrets(url: object) -> list[str]:
    """The secrets ``url`` carries: its password or token, and secret query values.

    Each as written and percent-decoded, the longest first, so that scrubbing one never
    leaves part of another.
    """
    if not isinstance(url, str):
        return []
    _, userinfo, _, query = _split(url)
    found: set[str] = set()
    if userinfo:
        user, colon, password = userinfo.partition(":")
        found.add(password if colon and user else userinfo)
    if query.startswith("?"):
        for piece in re.split(r"[&;]", query[1:].partition("#")[0]):
            name, eq, value = piece.partition("=")
            if eq and value and _is_secret_param(name, value):
                found.add(value)
    decoded = {unquote(s) for s in found} | {unquote(s.replace("+", " ")) for s in found}
    return sorted((s for s in found | decoded if s), key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text
