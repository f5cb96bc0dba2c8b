"""Host lists in store URLs: ``h1:2379,h2:2379,[::1]:2380`` as ``(host, port)`` pairs."""

from __future__ import annotations

import re

from spate import ConfigError
from spate._quote import quote

__all__ = ["parse_host_list"]

_HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def _parse_one(item: str, default_port: int, kind: str) -> tuple[str, int]:
    if item.startswith("["):
        host, sep, rest = item[1:].partition("]")
        if not sep or not host or ":" not in host:
            raise ConfigError(
                f"malformed {kind} URL: endpoint {quote(item)}: write [v6-address]:port"
            )
        host = f"[{host}]"
        if rest and not rest.startswith(":"):
            raise ConfigError(
                f"malformed {kind} URL: endpoint {quote(item)}: expected ':port' after ']'"
            )
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = item.partition(":")
        if not _HOST_RE.fullmatch(host):
            raise ConfigError(
                f"malformed {kind} URL: endpoint {quote(item)}: expected host[:port] (names or "
                "addresses; separate endpoints with commas)"
            )
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"malformed {kind} URL: endpoint {quote(item)}: the port must be 1-65535")
    return host, int(port_text)


def parse_host_list(hosts: str, default_port: int, kind: str) -> tuple[tuple[str, int], ...]:
    """``h1:2379,h2,[::1]:2380`` as ``(host, port)`` pairs (IPv6 hosts keep their brackets).

    ``hosts`` is the part of a URL's authority after any credentials. Raises
    :class:`~spate.ConfigError` naming the malformed entry (never credentials): an
    empty entry, a bad host, a bad port, or the same endpoint twice.
    """
    if not hosts:
        raise ConfigError(f"the {kind} URL names no host; write {kind}://host:port[,host:port]")
    parsed: list[tuple[str, int]] = []
    for item in hosts.split(","):
        if not item:
            raise ConfigError(
                f"the {kind} endpoint list {quote(hosts)} has an empty entry; separate endpoints "
                "with single commas"
            )
        endpoint = _parse_one(item, default_port, kind)
        if endpoint in parsed:
            raise ConfigError(f"the {kind} endpoint list {quote(hosts)} names {quote(item)} twice")
        parsed.append(endpoint)
    return tuple(parsed)
