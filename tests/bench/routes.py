"""Route propagation: a new HTTPRoute to its first 200 through both HAProxies, with
thousands of HTTPRoutes loaded, and a route re-pointed under a request loop.

Runs the real fleet (`tests.helpers.fleet.Fleet`, octet 47): `controlplane serve --source
files:DIR` on the demo's manifests plus one file of N HTTPRoutes (each its own host under
the demo Gateway's `*.demo.example.com`, one path to shop or catalog), and two `nodeagent
run --manage-haproxy` agents. Each trial writes one more file holding one new HTTPRoute
(atomic rename) and polls both HAProxies every 5 ms with that route's host until each
answered 200: the figure includes noticing the file, the debounce (0.1 s of quiet), the
route table, the delta, the agents' runtime map commands. Reloads of both masters are
counted over the trials (a new map rule is a runtime change: 0 expected). Then a route is
re-pointed between shop and catalog while a loop sends about 200 requests a second
through both HAProxies: failed requests and reloads counted. Quick: 300 routes and 5
trials; full: 3,000 routes and 20 trials.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from nodeagent.haproxy.driver import HAProxy
from tests.bench.common import Result, log, median, percentile
from tests.helpers.fleet import HAPROXY_PODS, HTTP_PORT, Fleet, haproxy_binary, wait_for

OCTET = 47  # 127.47.x.y: apart from the tests and the other benchmarks
QUICK_ROUTES, FULL_ROUTES = 300, 3000
QUICK_TRIALS, FULL_TRIALS = 5, 20
POLL_S = 0.005
LOOP_RATE = 200  # requests a second, over both HAProxies
REPOINTS = 6
TARGETS = {
    "route_propagation.new_route_first_200_p50": "< 100 ms",
    "route_propagation.new_route_first_200_p99": "< 250 ms",
    "route_propagation.repoint_failed_requests": "0",
    "route_propagation.reloads": "0",
}


def http_route(name: str, host: str, path: str, service: str) -> str:
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: {name}
  namespace: default
  creationTimestamp: "2026-01-02T00:00:00Z"
spec:
  parentRefs:
    - name: web
  hostnames: ["{host}"]
  rules:
    - matches:
        - path: {{type: PathPrefix, value: {path}}}
      backendRefs:
        - {{name: {service}, port: 80}}
---
"""


def status(haproxy: str, host: str, path: str = "/") -> tuple[int, str]:
    """One GET through `haproxy` on a fresh connection: (status, body); (0, error)."""
    conn = http.client.HTTPConnection(haproxy, HTTP_PORT, timeout=2)
    try:
        conn.request("GET", path, headers={"Host": host, "Connection": "close"})
        reply = conn.getresponse()
        return reply.status, reply.read().decode().strip()
    except OSError as e:
        return 0, repr(e)
    finally:
        conn.close()


class Bench:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.haproxies = [agent.address for agent in fleet.agents.values()]

    def reloads(self) -> int:
        """Reloads of every agent's HAProxy master so far (`show proc`)."""
        return sum(
            HAProxy(str(agent.master_socket), str(agent.runtime_socket)).show_proc().reloads
            for agent in self.fleet.agents.values()
        )

    def write(self, name: str, text: str) -> float:
        """Write one manifest atomically; the moment it appeared."""
        path = self.fleet.manifests / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        start = time.perf_counter()
        os.replace(tmp, path)
        return start

    def applied(self, name: str, text: str, timeout: float = 60) -> None:
        """Write a manifest and wait until a new content is published and every agent
        acknowledged it."""
        before = self.fleet.snapshot().content_hash
        self.write(name, text)
        wait_for(lambda: self.fleet.snapshot().content_hash != before, timeout, "a new snapshot")
        self.fleet.wait_all_acked(timeout)

    def first_200(self, name: str, host: str, timeout: float = 30) -> float:
        """Seconds from a new HTTPRoute's file to a 200 for its host through every HAProxy."""
        start = self.write(name, http_route(name.removesuffix(".yaml"), host, "/", "shop"))
        waiting = set(self.haproxies)
        deadline = start + timeout
        while waiting:
            for haproxy in sorted(waiting):
                if status(haproxy, host)[0] == 200:
                    waiting.discard(haproxy)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{host}: no 200 from {sorted(waiting)} after {timeout}s")
            if waiting:
                time.sleep(POLL_S)
        return time.perf_counter() - start


def _manifest(count: int) -> str:
    services = ("shop", "catalog")
    return "".join(
        http_route(f"bulk-{i}", f"b{i}.demo.example.com", f"/p{i}", services[i % 2])
        for i in range(count)
    )


def repoint_under_load(bench: Bench, host: str) -> tuple[int, int, int, list[str]]:
    """Re-point `host` between shop and catalog REPOINTS times under the request loop:
    (requests, failed, reloads, the first failures)."""
    stop = threading.Event()
    sent, failed = 0, 0
    failures: list[str] = []

    def loop() -> None:
        nonlocal sent, failed
        gap = 1 / LOOP_RATE
        while not stop.is_set():
            haproxy = bench.haproxies[sent % len(bench.haproxies)]
            code, body = status(haproxy, host)
            sent += 1
            if code != 200:
                failed += 1
                failures.append(f"{haproxy}: {code} {body[:80]}")
            time.sleep(gap)

    before = bench.reloads()
    thread = threading.Thread(target=loop)
    thread.start()
    try:
        for i in range(REPOINTS):
            service = ("catalog", "shop")[i % 2]
            bench.applied("repoint.yaml", http_route("repoint", host, "/", service))
            time.sleep(0.5)
    finally:
        stop.set()
        thread.join(10)
    return sent, failed, bench.reloads() - before, failures[:5]


def run(quick: bool = False, octet: int = OCTET, binary: str | None = None) -> list[Result]:
    if binary is None and haproxy_binary() is None:
        raise RuntimeError("haproxy not found")
    routes = QUICK_ROUTES if quick else FULL_ROUTES
    trials = QUICK_TRIALS if quick else FULL_TRIALS
    work = Path(tempfile.mkdtemp(prefix="bench-routes-"))
    fleet = Fleet(work, octet, haproxy_bin=binary)
    samples: list[float] = []
    try:
        fleet.write_manifests()
        (fleet.manifests / "bulk-routes.yaml").write_text(_manifest(routes))
        fleet.start_backends()
        fleet.start_control_plane()
        for name, address in HAPROXY_PODS:
            fleet.start_agent(name, address)
        fleet.wait_all_acked(120)
        bench = Bench(fleet)
        # Every HAProxy serves a bulk route before the trials start.
        for haproxy in bench.haproxies:
            code, body = status(haproxy, "b1.demo.example.com", "/p1")
            if code != 200:
                raise RuntimeError(f"bulk route not served by {haproxy}: {code} {body[:200]}")
        bench.applied("repoint.yaml", http_route("repoint", "moving.demo.example.com", "/", "shop"))
        reloads_before = bench.reloads()
        for trial in range(trials):
            samples.append(bench.first_200(f"new-{trial}.yaml", f"n{trial}.demo.example.com"))
            time.sleep(0.3)
        reloads = bench.reloads() - reloads_before
        sent, failed, repoint_reloads, failures = repoint_under_load(
            bench, "moving.demo.example.com"
        )
        p50, p99 = median(samples) * 1000, percentile(samples, 99) * 1000
        log(
            f"route_propagation: {routes} HTTPRoutes, first 200 p50 {p50:.0f} ms p99 "
            f"{p99:.0f} ms, reloads {reloads}; re-pointed {REPOINTS}x under {sent} requests: "
            f"{failed} failed {failures}, {repoint_reloads} reloads"
        )
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    params = {"routes": routes, "trials": trials, "agents": 2, "poll_ms": POLL_S * 1000}
    loop = {"routes": routes, "repoints": REPOINTS, "requests": sent, "rate": LOOP_RATE}
    return [
        Result("route_propagation.new_route_first_200_p50", median(samples) * 1000, "ms", params),
        Result(
            "route_propagation.new_route_first_200_p99",
            percentile(samples, 99) * 1000,
            "ms",
            params,
        ),
        Result("route_propagation.reloads", reloads, "", params),
        Result("route_propagation.repoint_failed_requests", failed, "", loop),
        Result("route_propagation.repoint_reloads", repoint_reloads, "", loop),
    ]


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["route_propagation"]))
