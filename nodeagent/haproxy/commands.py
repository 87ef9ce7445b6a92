"""The runtime API commands the agent sends HAProxy, as data: a server slot's state, a map
file entry, a certificate or crt-list step.

`nodeagent/config/` decides them (pure), `driver.py` and `sslcerts.py` send them; they
live here, at the HAProxy edge, so the edge imports nothing of the config it is told to
apply (docs/design.md, "Layers").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerUpdate:
    """Target state of one server slot, applied with `set server`."""

    backend: str
    server: str
    address: str
    port: int
    enabled: bool


@dataclass(frozen=True)
class MapUpdate:
    """One entry of a route map file, changed with `add map` / `set map` / `del map`."""

    path: str
    op: str  # "add", "set" or "del"
    key: str
    value: str = ""


@dataclass(frozen=True)
class CertUpdate:
    """One runtime API step on certificates. `op`: "load" (a certificate no crt-list named:
    `new ssl cert`, `set ssl cert`, `commit ssl cert`), "set" (a renewed one: `set` and
    `commit`), "add" / "del" (a crt-list line: `add ssl crt-list` / `del ssl crt-list`),
    "unload" (`del ssl cert`, once no crt-list names it)."""

    op: str
    name: str
    path: str  # the certificate's file
    crtlist: str = ""  # add / del: the crt-list's file
    line: str = ""  # add: the crt-list line
    fingerprint: str = ""  # what logs and errors name instead of the certificate
    pem: bytes = field(default=b"", repr=False)
