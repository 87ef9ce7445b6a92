"""Concurrent streams per peer address: one misbehaving host cannot hold every stream."""

from __future__ import annotations

from collections import Counter


def peer_address(peer: str) -> str:
    """'ipv4:127.0.0.1:5000' -> '127.0.0.1:5000' (gRPC's peer strings, for display)."""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix) :]
    return peer


def peer_host(peer: str) -> str:
    """The host part of a gRPC peer string: 'ipv6:[::1]:5000' -> '::1'."""
    address = peer_address(peer)
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class PeerStreams:
    """Counts open streams per host; `limit` 0 means unlimited."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()

    def acquire(self, host: str) -> bool:
        """Count one more stream from `host`; False (and nothing counted) over the limit."""
        if self.limit and self._open[host] >= self.limit:
            return False
        self._open[host] += 1
        return True

    def release(self, host: str) -> None:
        self._open[host] -= 1
        if self._open[host] <= 0:
            del self._open[host]

    def count(self, host: str) -> int:
        return self._open[host]
