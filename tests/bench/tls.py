"""TLS termination on one HAProxy: full handshakes a second, keep-alive HTTPS requests a
second, and certificate rotation latency through the agent's apply path.

One agent-managed HAProxy (`tests.helpers.haproxy_env.running_instance`: the real
applier, the rendered config and its default settings, octet 58) terminates TLS on an
HTTPS listener (an EC P-256 certificate for bench.example.com and a default one) in front
of one HTTP backend (a Python server). Handshakes: `openssl s_time -new` (one client
process, a full handshake per connection, no SNI: the default certificate) for a fixed
time. Requests: `curl` sending GET after GET on one keep-alive connection (HTTP/1.1, SNI
bench.example.com), once with a Host no rule routes (HAProxy answers 404 itself: its
TLS and HTTP cost) and once with bench.example.com (through the backend), every status
counted. Rotation: a renewed certificate applied through `Applier.apply` (a runtime `set
ssl cert` + `commit ssl cert`), timed from the apply call to the first new handshake that
gets the new serial; the reloads of the master (`show proc`) are counted over the
rotations (0 expected). Quick: 2 s of handshakes, 1,000 requests, 5 rotations; full:
10 s, 10,000 requests, 20 rotations.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Result, log, median, percentile
from tests.helpers.fleet import haproxy_binary
from tests.helpers.haproxy_env import (
    backend,
    free_port,
    identity_server,
    running_instance,
    snapshot,
)
from tests.helpers.tls_agent import certificate, https_listener, served_serial
from tests.helpers.tls_certs import Leaf, make_ca

OCTET = 58  # 127.58.x.y: apart from the other benchmarks
HOST = "bench.example.com"
QUICK: dict[str, float] = {"handshake_s": 2, "requests": 1000, "rotations": 5}
FULL: dict[str, float] = {"handshake_s": 10, "requests": 10_000, "rotations": 20}
TARGETS = {
    "tls.rotation_p99": "< 250 ms",
    "tls.rotation_reloads": "0",
    "tls.requests_failed": "0",
}
_S_TIME = re.compile(r"(\d+) connections in \d+ real seconds")


def handshakes_per_second(ip: str, port: int, seconds: float) -> float:
    """Full handshakes a second of one `openssl s_time -new` client (it sends no SNI: the
    default certificate answers), over the wall time of its run."""
    cmd = ["openssl", "s_time", "-connect", f"{ip}:{port}", "-new", "-time", str(int(seconds))]
    start = time.perf_counter()
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=seconds + 30, check=False
    ).stdout
    elapsed = time.perf_counter() - start
    match = _S_TIME.search(out)
    if match is None:
        raise RuntimeError(f"openssl s_time said: {out[-300:]}")
    return int(match.group(1)) / elapsed


def keepalive_requests(ip: str, port: int, count: int, host: str, want: int) -> tuple[float, int]:
    """`count` GETs with this Host on one keep-alive HTTPS connection (curl, SNI
    bench.example.com): requests a second and how many were not answered `want`."""
    url = f"https://{HOST}:{port}/[1-{count}]"
    resolve = f"{HOST}:{port}:{ip}"
    cmd = ["curl", "-sk", "--http1.1", "--resolve", resolve, "-H", f"Host: {host}"]
    cmd += ["-w", "=status %{http_code}\\n", url]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False).stdout
    seconds = time.perf_counter() - start
    return count / seconds, count - re.findall(r"=status (\d{3})", out).count(str(want))


def run(
    quick: bool = False,
    octet: int = OCTET,
    binary: str | None = None,
    sizes: dict[str, float] | None = None,
) -> list[Result]:
    binary = binary or haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy not found")
    size = {**(QUICK if quick else FULL), **(sizes or {})}
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    ca = make_ca()
    net = f"127.{octet}.1"
    try:
        with (
            identity_server(f"{net}.11", "web") as web_port,
            running_instance(work / "a", f"{net}.1", "pod-a", binary=binary) as inst,
        ):
            port, peer_port = free_port(inst.ip), free_port(inst.ip)
            version = 0

            def snap(leaf: Leaf, default: Leaf) -> pb.Snapshot:
                nonlocal version
                version += 1
                s = snapshot(
                    [("pod-a", inst.ip, peer_port)],
                    [backend("ns_web_80", [(f"{net}.11", web_port)], persistence=False)],
                    version=version,
                )
                s.certificates.extend(
                    [certificate("ns_bench", leaf), certificate("ns_default", default)]
                )
                rule = pb.RouteRule(source="HTTPRoute ns/bench rule 0", hostnames=[HOST])
                rule.backends.add(backend="ns_web_80", weight=1)
                bindings = [("ns_default", []), ("ns_bench", [HOST])]
                listener = https_listener(port, bindings, [rule])
                s.http_listeners.append(listener)
                return s

            default = ca.issue("default.example.com")
            first = inst.applier.apply(snap(ca.issue(HOST), default))
            if not first.ok:
                raise RuntimeError(f"not applied: {first.error}")
            handshakes = handshakes_per_second(inst.ip, port, float(size["handshake_s"]))
            count = int(size["requests"])
            # HAProxy's own answer (a host no rule routes: 404), then through the backend.
            rate, failed = keepalive_requests(inst.ip, port, count, "none.example.org", 404)
            proxied, failed_proxied = keepalive_requests(inst.ip, port, count, HOST, 200)
            failed += failed_proxied
            renewals = [ca.issue(HOST) for _ in range(int(size["rotations"]))]
            reloads_before = inst.haproxy.show_proc().reloads
            samples: list[float] = []
            kinds: set[str] = set()
            for leaf in renewals:
                start = time.perf_counter()
                result = inst.applier.apply(snap(leaf, default))
                if not result.ok:
                    raise RuntimeError(f"rotation not applied: {result.error}")
                kinds.add(result.kind.value if result.kind else "")
                while served_serial(inst.ip, port, HOST) != leaf.serial_hex:
                    if time.perf_counter() - start > 10:
                        raise RuntimeError("the renewed certificate is not served after 10 s")
                samples.append(time.perf_counter() - start)
            reloads = inst.haproxy.show_proc().reloads - reloads_before
    finally:
        shutil.rmtree(work, ignore_errors=True)
    p50, p99 = median(samples) * 1000, percentile(samples, 99) * 1000
    log(
        f"tls: {handshakes:.0f} handshakes/s, {rate:.0f} keep-alive requests/s answered by "
        f"HAProxy, {proxied:.0f} through the backend ({failed} failed), rotation p50 "
        f"{p50:.1f} ms p99 {p99:.1f} ms over {len(samples)} ({'/'.join(sorted(kinds))}), "
        f"{reloads} reloads"
    )
    params = {"haproxy": binary, "key": "EC P-256", "client": "openssl s_time -new"}
    req = {"requests": size["requests"], "client": "curl, one keep-alive connection"}
    rot = {"rotations": len(samples), "applied_by": sorted(kinds)}
    return [
        Result("tls.handshakes_per_s", handshakes, "1/s", {**params, "s": size["handshake_s"]}),
        Result("tls.requests_per_s", rate, "1/s", req),
        Result("tls.requests_per_s_backend", proxied, "1/s", {**req, "backend": "Python"}),
        Result("tls.requests_failed", failed, "", req),
        Result("tls.rotation_p50", p50, "ms", rot),
        Result("tls.rotation_p99", p99, "ms", rot),
        Result("tls.rotation_reloads", reloads, "", rot),
    ]


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["tls"]))
