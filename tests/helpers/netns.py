"""A network namespace of our own for pod addresses a real API server accepts.

A real EndpointSlice may not carry a loopback address, so pods on a real cluster need
addresses off 127.0.0.0/8. `PodNetwork` makes a namespace, a veth pair into it, gives the
namespace's end every pod address asked for, and routes exactly those addresses (one /32
route each) from the host into it: traffic to them never leaves the machine, and nothing
else is routed. Listening sockets are made inside it with `inside()` (setns(2) on the
calling thread), so the demo's in-process backends serve there. Root only; `close()`
removes the namespace, the pair and the routes.

For thousands of addresses (the benchmarks' endpoints) a /32 each would not scale:
`prefixes` routes whole blocks (say 10.80.0.0/14) from the host into the namespace, where
each block is local on its loopback (`ip route add local PREFIX dev lo`): a socket bound
there to any address of the block, or to 0.0.0.0, answers it, and a connection to an
address nothing listens on is refused inside the namespace, never sent on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
HOST_SIDE = "10.254.254.1"
POD_SIDE = "10.254.254.2"


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


class PodNetwork:
    """`addresses` reachable from the host through a veth into namespace `name`."""

    def __init__(
        self,
        name: str,
        addresses: list[str],
        host_side: str = HOST_SIDE,
        pod_side: str = POD_SIDE,
        prefixes: list[str] | None = None,
    ) -> None:
        """`host_side`/`pod_side`: the veth pair's own two addresses (distinct for each
        namespace when several live at once, as one per pod does); `prefixes`: blocks
        (CIDR) routed in whole and local inside the namespace."""
        self.name = name
        self.addresses = sorted(set(addresses))
        self.prefixes = sorted(set(prefixes or []))
        self._host = f"{name[:10]}h"
        self._pod = f"{name[:10]}p"
        self._routed: list[str] = []
        _ip("netns", "add", name)
        try:
            _ip("link", "add", self._host, "type", "veth", "peer", "name", self._pod)
            _ip("link", "set", self._pod, "netns", name)
            _ip("addr", "add", f"{host_side}/32", "peer", f"{pod_side}/32", "dev", self._host)
            _ip("link", "set", self._host, "up")
            _ip("link", "set", "lo", "up", netns=name)
            _ip(
                "addr",
                "add",
                f"{pod_side}/32",
                "peer",
                f"{host_side}/32",
                "dev",
                self._pod,
                netns=name,
            )
            _ip("link", "set", self._pod, "up", netns=name)
            for address in self.addresses:
                _ip("addr", "add", f"{address}/32", "dev", self._pod, netns=name)
                _ip("route", "add", f"{address}/32", "via", pod_side, "dev", self._host)
                self._routed.append(address)
            for prefix in self.prefixes:
                _ip("route", "add", "local", prefix, "dev", "lo", netns=name)
                _ip("route", "add", prefix, "via", pod_side, "dev", self._host)
                self._routed.append(prefix)
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Sockets made in this block (on this thread) live in the namespace."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/var/run/netns/{self.name}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(target)
            os.close(home)

    def close(self) -> None:
        for address in self._routed:
            route = address if "/" in address else f"{address}/32"
            subprocess.run(["ip", "route", "del", route], check=False, capture_output=True)
        self._routed.clear()
        subprocess.run(["ip", "link", "del", self._host], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)
