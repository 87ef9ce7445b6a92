"""Which HAProxy the agent serves with, and what that version lets the renderer write.

The snapshot is version-free: every agent of a workload gets the same one. What differs by
version (`srvkey addr` on stick tables, `hash-key addr-port` on servers) is decided here
from `haproxy -v` of the binary the agent serves with, and passed to the renderer.
"""

from __future__ import annotations

import re
import subprocess

Version = tuple[int, int]  # (major, minor)

OLDEST_SUPPORTED: Version = (2, 6)  # Debian 12's HAProxy, what the tests and the demo run
_VERSION = re.compile(r"HA-?Proxy version (\d{1,3})\.(\d{1,3})")
_ARGUMENT = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.\d{1,4})?")
_RELEASE = re.compile(r"HA-?Proxy version (\d{1,3}\.\d{1,3}(?:\.\d{1,4})?)")


class VersionError(ValueError):
    """The version could not be learned or read."""


def parse_banner(text: str) -> Version:
    """(major, minor) from `haproxy -v` output."""
    match = _VERSION.search(text)
    if match is None:
        raise VersionError(f"no version in haproxy -v output: {text.strip()[:120]!r}")
    return int(match[1]), int(match[2])


def parse_release(text: str) -> str:
    """The release ("3.0.11", a distribution's suffix left out) from `haproxy -v`
    output, for the Hello and the reports; VersionError when there is none."""
    match = _RELEASE.search(text)
    if match is None:
        raise VersionError(f"no version in haproxy -v output: {text.strip()[:120]!r}")
    return match[1]


def parse_argument(text: str) -> Version:
    """(major, minor) from `2.6`, `3.0.11` and the like (a command-line flag)."""
    match = _ARGUMENT.fullmatch(text.strip())
    if match is None:
        raise VersionError(f"expected MAJOR.MINOR[.PATCH], got {text!r}")
    return int(match[1]), int(match[2])


def probe(haproxy_bin: str, timeout: float = 10.0) -> Version:
    """Run `haproxy -v` with the binary the agent serves with."""
    return parse_banner(banner(haproxy_bin, timeout))


def banner(haproxy_bin: str, timeout: float = 10.0) -> str:
    """The output of `haproxy -v` (VersionError when it cannot run)."""
    try:
        done = subprocess.run(
            [haproxy_bin, "-v"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise VersionError(f"cannot run {haproxy_bin} -v: {e}") from None
    return done.stdout + done.stderr


def srvkey_addr(version: Version | None) -> bool:
    """2.4+: a stick-table entry may store the server's ip:port (`srvkey addr`), so an
    instance whose slots disagree still finds the client's pod by address."""
    return version is not None and version >= (2, 4)


def hash_key_addr_port(version: Version | None) -> bool:
    """3.0+: `hash-key addr-port` places a server on the consistent-hash ring by its
    address, not its id, so instances agree whatever slot a pod holds."""
    return version is not None and version >= (3, 0)
