"""Soak: the memory (RSS) of the control plane and of each agent over a steady stream of
endpoint and route changes, as production runs them: is it flat?

One real fleet (`scale.ScaleFleet`, octet 44, the scale benchmark's folder cluster):
`controlplane serve --source files:DIR --state FILE` and two `nodeagent run
--manage-haproxy` with real HAProxy (the one on PATH), health checks on (the agents'
open-files limit raised to what HAProxy needs for them; when the hard limit cannot hold
that, checks off, said in the output: 8,000 checked Services need about 576,000
descriptors), N Services of 20 endpoints and R
HTTPRoutes under one Gateway, each route its own file and host, to Service `r mod N`.
Once both agents ACKed every endpoint, a change is written every `interval_s` for the
duration, without waiting for ACKs (a steady stream, not a benchmark of latency), in
turn: one endpoint of the next Service moved to an address of its own (and back on the
Service's next turn), then the next route re-pointed to the following Service (and back),
each file replaced atomically. RSS (VmRSS) of the control plane and of each agent is
sampled every `sample_s` (`tests/bench/memory.py`), HAProxy not counted.

The warm-up: structures bounded by the cluster's size fill one distinct Service or route
at a time (a cache entry, a slot's history per Service changed), and at one change a
second the stream reaches each of 8,000 Services only every 4.4 hours: over the hour they
grow as a leak would. So the stream first makes one full turn (every Service and route
changed once, `warm_up_changes`) at `warm_up_interval_s`, waits for both agents' ACK,
and only then measures `minutes` at `interval_s`. At the end both agents must ACK the
last content (converged); the figures are, per process, the RSS at the start and end of
the measured part, its least-squares slope in MiB per hour (target: flat,
`memory.flat_limit`) and the peak over the whole run (warm-up included).

Sizes: quick 200 Services, 300 routes, about 1 minute measured; full 8,000 Services,
10,000 routes, 60 minutes measured after a warm-up of 20,000 changes (about 7 minutes).
`SOAK_MINUTES` (or `--minutes`) sets the measured duration, `SOAK_SERVICES` /
`SOAK_ROUTES` the sizes, `SOAK_INTERVAL_S` the time between two changes (amplified: 0.05
is twenty a second; the warm-up goes at least as fast), `SOAK_OCTET` the loopback octet
(another than 44 to run two soaks at once), `SOAK_MAX_CONNECTION_AGE_S` the control plane's
`--max-connection-age` (default 30 minutes: one reconnect per agent in an hour; shorter,
many, to see what a reconnect leaves) (`python -m tests.bench.soak --help`).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.bench.common import Result, log, loopback_ip
from tests.bench.memory import RssSampler, Trend, flat_limit, fleet_pids, settled, trend
from tests.bench.scale import HTTP_PORT, MODES, ScaleFleet
from tests.bench.scalefolder import endpoint_address, service_name
from tests.helpers.fleet import haproxy_binary

OCTET = 44  # 127.44.x.y: apart from the tests and the other benchmarks
MOVED_BASE = 0x7F_5B_00_00  # 127.91.0.0 + Service index: where an endpoint moves to
HOSTS = "soak.example.com"
MINUTES_ENV, SERVICES_ENV, ROUTES_ENV = "SOAK_MINUTES", "SOAK_SERVICES", "SOAK_ROUTES"
INTERVAL_ENV, OCTET_ENV = "SOAK_INTERVAL_S", "SOAK_OCTET"
AGE_ENV = "SOAK_MAX_CONNECTION_AGE_S"
# The warm-up's pace: fifty changes a second, which the control plane batches (20,000
# changes at the full size in under 7 minutes).
WARM_UP_INTERVAL_S = 0.02
SETTLE_S = 2.0  # after the last change: past the debounce, before the convergence check
# Descriptors HAProxy asks for per checked Service (42 slots, its share of 2 x maxconn):
# the scale benchmark meets a limit of 20,000 past about 280 Services.
FDS_PER_SERVICE = 72


@dataclass(frozen=True, slots=True)
class SoakSize:
    services: int
    routes: int
    minutes: float  # measured, after the warm-up
    interval_s: float  # between two changes
    sample_s: float  # between two RSS samples
    warm_up_interval_s: float = WARM_UP_INTERVAL_S  # between two changes of the warm-up

    @property
    def warm_up_changes(self) -> int:
        """One full turn of the stream: change `n` touches Service `n // 2` (even) or
        route `n // 2` (odd), so `2 x max` changes touch every Service and route once."""
        return 2 * max(self.services, self.routes)


QUICK = SoakSize(services=200, routes=300, minutes=1.0, interval_s=0.5, sample_s=3.0)
FULL = SoakSize(services=8000, routes=10000, minutes=60.0, interval_s=1.0, sample_s=30.0)


def size_from(base: SoakSize, environ: dict[str, str] | os._Environ[str]) -> SoakSize:
    """`base` with the environment's overrides (`SOAK_MINUTES`, `SOAK_SERVICES`,
    `SOAK_ROUTES`, `SOAK_INTERVAL_S`: an amplified stream, many changes a second); a
    duration under 20 samples samples more often."""
    size = base
    if environ.get(MINUTES_ENV):
        size = replace(size, minutes=float(environ[MINUTES_ENV]))
    if environ.get(SERVICES_ENV):
        size = replace(size, services=int(environ[SERVICES_ENV]))
    if environ.get(ROUTES_ENV):
        size = replace(size, routes=int(environ[ROUTES_ENV]))
    if environ.get(INTERVAL_ENV):
        size = replace(size, interval_s=float(environ[INTERVAL_ENV]))
    size = replace(size, warm_up_interval_s=min(size.warm_up_interval_s, size.interval_s))
    return replace(size, sample_s=min(size.sample_s, max(1.0, size.minutes * 60 / 20)))


def route_file(index: int, service: int) -> str:
    """HTTPRoute `soak-INDEX`: host rINDEX.soak.example.com, / to `service`."""
    return (
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n"
        f"  name: soak-{index:05d}\n  namespace: default\n"
        '  creationTimestamp: "2026-01-02T00:00:00Z"\n'
        "spec:\n  parentRefs:\n    - name: web\n"
        f'  hostnames: ["r{index}.{HOSTS}"]\n'
        "  rules:\n    - matches:\n        - path: {type: PathPrefix, value: /}\n"
        f"      backendRefs:\n        - {{name: {service_name(service)}, port: 80}}\n"
    )


def gateway_file() -> str:
    """The GatewayClass and the Gateway the routes attach to (on the HTTP port)."""
    return (
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata:\n"
        '  name: peerplane\n  creationTimestamp: "2026-01-01T00:00:00Z"\n'
        "spec:\n  controllerName: peerplane.dev/gateway-controller\n---\n"
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n"
        '  name: web\n  namespace: default\n  creationTimestamp: "2026-01-01T00:00:00Z"\n'
        "spec:\n  gatewayClassName: peerplane\n  listeners:\n"
        f"    - name: http\n      port: {HTTP_PORT}\n      protocol: HTTP\n"
        f'      hostname: "*.{HOSTS}"\n'
    )


def write_routes(folder: Path, routes: int, services: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gateway.yaml").write_text(gateway_file())
    for index in range(routes):
        (folder / f"route-{index:05d}.yaml").write_text(route_file(index, index % services))


def replace_file(path: Path, text: str) -> None:
    """Atomically: the folder source never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass
class Changes:
    """The steady stream: change `n` moves an endpoint (even) or re-points a route (odd),
    each Service and route in turn, and back on its next turn."""

    folder: Path
    services: int
    routes: int
    moved: set[int] = field(default_factory=set)
    repointed: set[int] = field(default_factory=set)
    applied: int = 0

    def apply(self, n: int) -> None:
        turn = n // 2
        if n % 2 == 0:
            self._move(turn % self.services)
        elif self.routes:
            self._repoint(turn % self.routes)
        self.applied += 1

    def _move(self, service: int) -> None:
        path = self.folder / f"{service_name(service)}.yaml"
        home, away = endpoint_address(service, 0), loopback_ip(service, base=MOVED_BASE)
        old, new = (away, home) if service in self.moved else (home, away)
        self.moved ^= {service}
        text = path.read_text()
        changed = text.replace(f'"{old}"', f'"{new}"')
        if changed == text:
            raise RuntimeError(f"{path.name}: {old} not found")
        replace_file(path, changed)

    def _repoint(self, route: int) -> None:
        home = route % self.services
        target = home if route in self.repointed else (home + 1) % self.services
        self.repointed ^= {route}
        replace_file(self.folder / f"route-{route:05d}.yaml", route_file(route, target))


@dataclass
class Soaked:
    size: SoakSize
    startup_s: float = float("nan")
    warm_up_s: float = float("nan")  # the warm-up's turn, its ACK included
    measured_from: float | None = None  # the sampler's clock when the warm-up ended
    changes: int = 0  # measured, after the warm-up
    converged: bool = False
    checks: bool = True
    note: str = ""  # why checks are off, when they are
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    trends: dict[str, Trend] = field(default_factory=dict)


def checks_fit(services: int) -> tuple[bool, int | None, str]:
    """Whether HAProxy can run health checks on `services` Services under this process's
    open-files limit (the agents and their HAProxy inherit it; raised up to the hard
    limit when needed): (checks on, the agents' limit to set or None, why not)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = services * FDS_PER_SERVICE
    if needed <= soft:
        return True, None, ""
    if hard == resource.RLIM_INFINITY or needed <= hard:
        return True, needed, ""
    return False, None, f"checks off: about {needed:,} descriptors needed, hard limit {hard:,}"


def soak(size: SoakSize, binary: str, octet: int = OCTET) -> Soaked:
    """One fleet through the stream of changes; every process stopped at the end."""
    found = Soaked(size)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    checks, nofile, found.note = checks_fit(size.services)
    found.checks = checks
    fleet = ScaleFleet(work, size.services, MODES["state"], binary, octet, checks, nofile)
    fleet.timeout += size.routes * 0.01
    if os.environ.get(AGE_ENV):  # reconnects more often than the default's one an hour
        fleet.fleet.server_args += ["--max-connection-age", os.environ[AGE_ENV]]
    try:
        folder = fleet.fleet.manifests
        write_routes(folder, size.routes, size.services)
        found.startup_s = fleet.start()
        cp, agents = fleet.pids()
        names = [a.pod_name for a in fleet.fleet.agents.values()]
        sampler = RssSampler(
            lambda: fleet_pids(cp, dict(zip(names, agents, strict=True))), size.sample_s
        )
        stream = Changes(folder, size.services, size.routes)
        sampler.start()
        try:
            began = time.monotonic()
            warm = size.warm_up_changes
            n = pace(fleet, stream, 0, warm, size.warm_up_interval_s, "warm-up")
            time.sleep(SETTLE_S)
            fleet.wait_acked(lambda s: True, fleet.timeout)  # the turn computed and ACKed
            found.warm_up_s = time.monotonic() - began
            found.measured_from = time.monotonic() - sampler.t0
            log(f"soak: warm-up of {warm} changes done in {found.warm_up_s:.0f} s, measuring")
            count = int(size.minutes * 60 / size.interval_s)
            n = pace(fleet, stream, n, count, size.interval_s, "soak")
            found.changes = n - warm
            time.sleep(SETTLE_S)  # the last change computed and published
            fleet.wait_acked(lambda s: True, fleet.timeout)  # one content, nothing pending
            found.converged = True
        finally:
            sampler.stop()
        found.series = sampler.series
        found.trends = {
            name: trend(samples, since=found.measured_from)
            for name, samples in sampler.series.items()
        }
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return found


def pace(fleet: ScaleFleet, stream: Changes, n: int, count: int, every_s: float, what: str) -> int:
    """Changes `n` to `n + count` of the stream, one every `every_s` (not waiting for
    ACKs), the agents checked every 200; the next change's number."""
    start = time.monotonic()
    for done in range(1, count + 1):
        stream.apply(n)
        n += 1
        if done % 200 == 0:
            fleet.check_agents()
            log(f"{what}: {done} of {count} changes, {(time.monotonic() - start) / 60:.1f} min")
        time.sleep(max(0.0, start + done * every_s - time.monotonic()))
    return n


def series_lines(found: Soaked, points: int = 9) -> list[str]:
    """Each process's RSS at `points` evenly spaced moments of the measured part (the
    sample nearest each): the shape a slope alone hides, a step at one moment (a
    reconnect, a compaction) or a steady rise."""
    lines = []
    for name, samples in sorted(found.series.items()):
        kept = settled(samples, since=found.measured_from)
        start, end = kept[0][0], kept[-1][0]
        marks = [start + (end - start) * i / (points - 1) for i in range(points)]
        nearest = [min(kept, key=lambda s, m=m: abs(s[0] - m)) for m in marks]
        shown = ", ".join(f"{(t - start) / 60:.0f} min {v:.1f}" for t, v in nearest)
        lines.append(f"{name} RSS (MiB) by minute of the measured part: {shown}")
    return lines


def table(found: Soaked) -> str:
    head = ("process", "RSS start", "RSS end", "slope", "flat below", "peak", "samples", "flat")
    rows = [
        (
            name,
            f"{t.start:,.1f} MiB",
            f"{t.end:,.1f} MiB",
            f"{t.slope:+,.1f} MiB/h",
            f"{flat_limit(t.start):,.1f} MiB/h",
            f"{t.peak:,.1f} MiB",
            str(t.samples),
            ("yes" if t.flat else "NO") if t.judged else "(too short to tell)",
        )
        for name, t in sorted(found.trends.items())
    ]
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in (head, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    s = found.size
    lines.append(
        f"soak: {s.services:,} Services, {s.routes:,} HTTPRoutes; startup {found.startup_s:.1f} s; "
        f"warm-up {s.warm_up_changes:,} changes (every Service and route once, one per "
        f"{s.warm_up_interval_s:g} s) and their ACK in {found.warm_up_s:.0f} s; then "
        f"{found.changes:,} changes over {s.minutes:g} min (one per {s.interval_s:g} s), RSS every "
        f"{s.sample_s:g} s; converged at the end: {'yes' if found.converged else 'no'}; "
        f"health checks {'on' if found.checks else 'off'}{f' ({found.note})' if found.note else ''}"
        "; start/end/slope over the measured part (after the warm-up), peak over the whole run"
    )
    return "\n".join(lines)


def results(found: Soaked) -> list[Result]:
    s = found.size
    params = {
        "services": s.services,
        "routes": s.routes,
        "minutes": s.minutes,
        "changes": found.changes,
        "interval_s": s.interval_s,
        "warm_up_changes": s.warm_up_changes,
        "warm_up_s": round(found.warm_up_s, 1),
        "sample_s": s.sample_s,
        "converged": found.converged,
        "health_checks": found.checks,
        **({"note": found.note} if found.note else {}),
    }
    out = [Result("soak.converged", 1 if found.converged else 0, "", params)]
    for name, t in sorted(found.trends.items()):
        label = "cp" if name == "controlplane" else f"agent.{name}"
        extra = {**params, "flat_below_mib_per_hour": round(flat_limit(t.start), 1)}
        out += [
            Result(f"soak.{label}.rss_start", t.start, "MiB", params),
            Result(f"soak.{label}.rss_end", t.end, "MiB", params),
            Result(f"soak.{label}.rss_peak", t.peak, "MiB", params),
            Result(f"soak.{label}.rss_slope", t.slope, "MiB/h", extra),
        ]
        if t.judged:  # a slope over less than 10 minutes says nothing per hour
            out.append(Result(f"soak.{label}.rss_flat", 1 if t.flat else 0, "", extra))
    return out


TARGETS = {
    "soak.*.rss_slope": "flat (< 5 MiB/h or 1% of the start per hour)",
    "soak.*.rss_flat": "1",
    "soak.converged": "1",
}


def run(quick: bool = False, binary: str | None = None, octet: int = OCTET) -> list[Result]:
    binary = binary or haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy not found")
    size = size_from(QUICK if quick else FULL, os.environ)
    octet = int(os.environ.get(OCTET_ENV) or octet)  # two soaks side by side
    log(f"soak: {size}, octet {octet}")
    found = soak(size, binary, octet)
    print(table(found))
    print("\n".join(series_lines(found)))
    return results(found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--full", action="store_true", help="the full sizes (default quick)")
    parser.add_argument("--minutes", type=float, help=f"duration (or {MINUTES_ENV})")
    parser.add_argument("--services", type=int, help=f"Services (or {SERVICES_ENV})")
    parser.add_argument("--routes", type=int, help=f"HTTPRoutes (or {ROUTES_ENV})")
    args = parser.parse_args(argv)
    for env, value in ((MINUTES_ENV, args.minutes), (SERVICES_ENV, args.services)):
        if value is not None:
            os.environ[env] = str(value)
    if args.routes is not None:
        os.environ[ROUTES_ENV] = str(args.routes)
    from tests.bench.__main__ import main as bench_main

    raise SystemExit(bench_main(["soak", "--full" if args.full else "--quick"]))


if __name__ == "__main__":
    main(sys.argv[1:])
