"""Certificate rotation end to end: a renewed kubernetes.io/tls Secret file to the new
serial served by both HAProxy instances, under an HTTPS request loop.

Runs the real fleet (`tests.helpers.fleet.Fleet`, octet 68): `controlplane serve --source
files:DIR` on the demo's manifests plus its HTTPS part (deploy/examples/demo-https/: a
Gateway HTTPS listener and an Ingress spec.tls on port 18443, the Secret default/demo-tls
made here), and two `nodeagent run --manage-haproxy` agents. Each rotation rewrites the
Secret's file atomically with a renewed certificate (new serial, same names) and polls
both HAProxies every 5 ms with a handshake for the Gateway host until each serves the new
serial: the figure includes noticing the file, parsing the Secret, the route table, the
delta carrying the certificate alone, the agents' check and `set ssl cert` / `commit ssl
cert`. All the while a loop sends HTTPS GETs (each its own connection and full handshake,
verified against the CA) round-robin through both HAProxies: failed requests counted.
Reloads of both masters are counted over the rotations (0 expected: the runtime API).
Quick: 5 rotations; full: 20. TLS handshakes and requests a second through one instance
are the `tls` benchmark's (tests/bench/tls.py).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from tests.bench.common import Result, log, median, percentile
from tests.helpers.fleet import HAPROXY_PODS, Fleet, haproxy_binary
from tests.helpers.https_fleet import (
    GATEWAY_HOST,
    RequestLoop,
    issue,
    reloads,
    verifying_context,
    wait_served,
    write_https,
    write_secret,
)
from tests.helpers.tls_certs import make_ca

OCTET = 68  # 127.68.x.y: apart from the tests and the other benchmarks
QUICK_ROTATIONS, FULL_ROTATIONS = 5, 20
POLL_S = 0.005
LOOP_GAP_S = 0.01  # between the loop's requests (each a full handshake)
SETTLE_S = 0.3  # between rotations: the loop runs on the certificate just served
TARGETS = {
    "tls_rotation.latency_p99": "< 1 s",
    "tls_rotation.failed_requests": "0",
    "tls_rotation.reloads": "0",
}


def run(
    quick: bool = False,
    octet: int = OCTET,
    binary: str | None = None,
    rotations: int | None = None,
) -> list[Result]:
    if binary is None and haproxy_binary() is None:
        raise RuntimeError("haproxy not found")
    count = rotations or (QUICK_ROTATIONS if quick else FULL_ROTATIONS)
    work = Path(tempfile.mkdtemp(prefix="bench-tls-rotation-"))
    fleet = Fleet(work, octet, haproxy_bin=binary)
    ca = make_ca()
    ctx = verifying_context(ca)
    samples: list[float] = []
    try:
        first = issue(ca)
        write_https(fleet.manifests, first)
        fleet.start()
        agents = [fleet.agents[name] for name, _ in HAPROXY_PODS]
        haproxies = [a.address for a in agents]
        wait_served(ctx, haproxies, GATEWAY_HOST, first.serial_hex, time.perf_counter())
        renewals = [issue(ca) for _ in range(count)]
        before = reloads(agents)
        with RequestLoop(ctx, haproxies, GATEWAY_HOST, gap=LOOP_GAP_S) as loop:
            for leaf in renewals:
                changed = write_secret(fleet.manifests, leaf)
                samples.append(
                    wait_served(ctx, haproxies, GATEWAY_HOST, leaf.serial_hex, changed, poll=POLL_S)
                )
                fleet.wait_all_acked()
                time.sleep(SETTLE_S)
        reloaded = reloads(agents) - before
        sent, failed, failures = loop.sent, len(loop.failures), loop.failures[:5]
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    p50, p99 = median(samples) * 1000, percentile(samples, 99) * 1000
    log(
        f"tls_rotation: Secret file -> new serial served by both HAProxies p50 {p50:.0f} ms "
        f"p99 {p99:.0f} ms over {count} rotations, {reloaded} reloads; {sent} HTTPS requests "
        f"through both: {failed} failed {failures}"
    )
    params = {"rotations": count, "agents": 2, "poll_ms": POLL_S * 1000, "key": "EC P-256"}
    loop_params = {"rotations": count, "requests": sent, "client": "a handshake per request"}
    return [
        Result("tls_rotation.latency_p50", p50, "ms", params),
        Result("tls_rotation.latency_p99", p99, "ms", params),
        Result("tls_rotation.reloads", reloaded, "", params),
        Result("tls_rotation.failed_requests", failed, "", loop_params),
    ]


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["tls_rotation"]))
