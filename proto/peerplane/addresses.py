"""The one IP address canonicaliser, shared by the control plane and the agent.

An address becomes a slot key, a state-file entry, a `server`/`peer` line and a runtime
`set server ... addr` argument. Each of those must see the same text for the same
address, and none may see anything but an address:

- Accepted: IPv4 in dotted decimal (no leading zeros) and IPv6 in any RFC 4291 spelling,
  including a dotted IPv4 tail. Nothing else: no zone suffix (`fe80::1%eth0` -- the
  zone is free text: spaces, `;` and newlines reach a config line or an admin socket
  command), no whitespace, no control characters, no brackets, no prefix length.
- Canonical text: IPv4 as dotted decimal; IPv6 as RFC 5952 section 4 (lowercase hex,
  no leading zeros, the longest run of two or more zero groups as `::`, the first on a
  tie) in hex only, for every address. IPv4-mapped (`::ffff:a.b.c.d`) and
  IPv4-compatible (`::a.b.c.d`) addresses are kept as the IPv6 addresses they are and
  written in hex (`::ffff:a00:1`, `::a00:1`): they are valid IPv6 endpoints, and a
  state file written by an older version holds them in both spellings, so rejecting
  them would drop a backend's whole slot history. The text is built here, from the
  16 bytes, because every other printer disagrees on exactly these addresses: Python's
  `str()` writes mapped ones in dotted form in newer releases (gh-87799, 3.13 and some
  backports), and glibc's `inet_ntop` (what `show servers state` prints) writes both
  dotted.

Pure, with a small cache: the agent's render cache already parses each address once,
and a cache the size of the cluster (160,000 endpoints at 8,000 Services) held 36 MiB in
every agent for nothing. Compute keeps its own large cache (`endpoints.parse_ip`).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
from dataclasses import dataclass
from functools import lru_cache

MAX_ADDRESS_CHARS = 45  # INET6_ADDRSTRLEN - 1: the longest IPv6 spelling with an IPv4 tail

# Only the characters an address can hold; everything else is rejected before parsing.
_ADDRESS_CHARS = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
# IPv4 already in canonical text (dotted decimal, no leading zeros), the common case: an
# endpoint as Kubernetes writes it. Its bytes come from inet_aton and its text is itself,
# without `ipaddress` (60% of an agent's render at 160,000 endpoints); anything else takes
# the strict path below.
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_IPV4 = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}")


class AddressError(ValueError):
    """Not an IPv4 or IPv6 address without zone; the message says why."""


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed address: `version` 4 or 6, the network-order bytes, the canonical text."""

    version: int
    packed: bytes
    text: str


def _shown(text: str) -> str:
    """The rejected input for an error message: bounded, quoted, control chars escaped."""
    return repr(text[:64]) + (f"...[{len(text) - 64} more chars]" if len(text) > 64 else "")


def format_address(packed: bytes) -> str:
    """Canonical text of a 4- or 16-byte network-order address (see the module doc)."""
    if len(packed) == 4:
        return ".".join(str(b) for b in packed)
    if len(packed) != 16:
        raise AddressError(f"an address is 4 or 16 bytes, not {len(packed)}")
    groups = struct.unpack("!8H", packed)
    best_start, best_len, start = 0, 0, -1
    for i, group in enumerate((*groups, 1)):  # the sentinel closes a trailing run
        if group == 0:
            if start < 0:
                start = i
        elif start >= 0:
            if i - start > best_len:
                best_start, best_len = start, i - start
            start = -1
    hexes = [f"{group:x}" for group in groups]
    if best_len < 2:
        return ":".join(hexes)
    head = ":".join(hexes[:best_start])
    tail = ":".join(hexes[best_start + best_len :])
    return f"{head}::{tail}"


@lru_cache(maxsize=1 << 12)
def _parse(text: str) -> Address:
    if _CANONICAL_IPV4.fullmatch(text):
        return Address(4, socket.inet_aton(text), text)
    if not _ADDRESS_CHARS.fullmatch(text):
        if "%" in text:
            raise AddressError(f"zone suffix not allowed in address {_shown(text)}")
        if _SPACE_OR_CONTROL.search(text):
            raise AddressError(f"whitespace or control character in address {_shown(text)}")
        raise AddressError(f"not an IPv4 or IPv6 address: {_shown(text)}")
    try:
        if ":" in text:
            packed = ipaddress.IPv6Address(text).packed
        else:
            packed = ipaddress.IPv4Address(text).packed
    except ValueError:
        raise AddressError(f"not an IPv4 or IPv6 address: {_shown(text)}") from None
    return Address(4 if len(packed) == 4 else 6, packed, format_address(packed))


def is_canonical_ipv4(text: str) -> bool:
    """`text` is an IPv4 address in its canonical text (dotted decimal, no leading zeros):
    `canonical_address(text) == text` without building an `Address` (a renderer writes
    160,000 of them at 8,000 Services)."""
    return _CANONICAL_IPV4.fullmatch(text) is not None


def parse_address(text: object) -> Address:
    """Parse `text` strictly; AddressError for anything but an IPv4/IPv6 address."""
    if not isinstance(text, str):
        raise AddressError(f"an address is text, not {type(text).__name__}")
    return _parse(text)


def canonical_address(text: object) -> str:
    """The one text form of the address `text`; AddressError when it is not one.

    Callers write this result, never their input, to a config, a socket or a state file.
    """
    return parse_address(text).text
