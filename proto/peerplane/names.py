"""Names both sides write into haproxy.cfg: the peers section, server slots, hosts, pods.

Compute builds names from these patterns and the agent re-checks every name against the
same ones before it writes it (docs/design.md, "The shared contract: the `peerplane` package"),
so the two can never disagree about what is a valid name. Every pattern is meant for a
whole-string match (`fullmatch`).
"""

from __future__ import annotations

import re

# The one `peers` section of every haproxy.cfg; stick tables replicate through it.
PEERS_SECTION = "localinstance"

# Backend modes a snapshot may name.
MODES = ("http", "tcp")
BACKEND_PROTOCOLS = ("", "h2", "ws", "wss")
"""`Backend.protocol`: HTTP/1.1, cleartext HTTP/2, WebSocket, WebSocket over TLS (the
control plane's `compute/protocol.py` says which a Service port's backend speaks)."""

# A server slot is `SRV_<n>` with `id <n>`; n has no leading zero (see limits.MAX_SLOTS).
SERVER_NAME = re.compile(r"SRV_([1-9][0-9]{0,5})")

# Kubernetes names: a DNS label (namespace, Service, port name) and a DNS subdomain (pod).
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
MAX_HOST_NAME = 253


# A spare backend of the pool: `spare.<n>` (no `_`, so never a `backend_name`; the
# section a new Service's backend claims and keeps for its life: docs/design.md,
# "Spare backends"). n has no leading zero and is at most `MAX_SPARE_INDEX`.
SPARE_NAME = re.compile(r"spare\.([1-9][0-9]{0,5})")


MAX_SPARE_INDEX = 999_999


def spare_name(index: int) -> str:
    """The section name of spare `index`."""
    return f"spare.{index}"


def spare_index(name: str) -> int | None:
    """The spare a section name stands for, None when it is not `spare.<n>`."""
    match = SPARE_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def server_name(index: int) -> str:
    """The server name of slot `index`."""
    return f"SRV_{index}"


def server_index(name: str) -> int | None:
    """The slot a server name stands for, None when it is not `SRV_<n>`."""
    match = SERVER_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def is_dns_label(text: str) -> bool:
    return DNS_LABEL.fullmatch(text) is not None


def is_dns_subdomain(text: str) -> bool:
    return DNS_SUBDOMAIN.fullmatch(text) is not None


def is_host_name(text: str) -> bool:
    """A lower-case DNS host name routed by the HTTP frontend: labels joined by dots."""
    return 0 < len(text) <= MAX_HOST_NAME and all(is_dns_label(label) for label in text.split("."))


def backend_name(namespace: str, service: str, port_name: str, port: int) -> str:
    """The backend of one Service port: `<namespace>_<service>_<port name, else number>`.

    Compute builds every backend name here; a name is written only when
    `limits.is_proxy_name` holds, which the control plane checks before it serves the
    Service and the agent checks again before it renders it."""
    return f"{namespace}_{service}_{port_name or port}"
