"""Values of the snapshot checked before they are written: a pattern's whole match, host
names, and addresses and ports in canonical form. A value that fails is a `RenderError`
naming what it is, never written.
"""

from __future__ import annotations

import re

from nodeagent.config.errors import RenderError
from peerplane import names
from peerplane.addresses import Address, AddressError, parse_address

# The directories the agent writes beside haproxy.cfg (route maps, certificates): an
# absolute path of plain characters, so a config line names it unquoted.
DIRECTORY = re.compile(r"/[A-Za-z0-9_./-]{1,200}")


def check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not pattern.fullmatch(value):  # fullmatch: `$` would accept a trailing newline
        raise RenderError(f"invalid {what}: {value!r}")
    return value


def host(value: str) -> str:
    if not names.is_host_name(value):
        raise RenderError(f"invalid host: {value!r}")
    return value


def _ip(value: str, what: str) -> Address:
    try:
        return parse_address(value)
    except AddressError as e:
        raise RenderError(f"invalid {what} address: {e}") from None


def _port(value: int, what: str) -> int:
    if not 1 <= value <= 65535:
        raise RenderError(f"invalid {what} port: {value}")
    return value


def endpoint(address: str, port: int, what: str = "server") -> str:
    """`addr:port`, IPv6 in brackets, after checking both; the address in canonical text
    (the canonicaliser's output, never the input string)."""
    ip = _ip(address, what)
    _port(port, what)
    if ip.version == 6:
        return f"[{ip.text}]:{port}"
    return f"{ip.text}:{port}"
