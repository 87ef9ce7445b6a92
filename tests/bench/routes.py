"""Route propagation: a new HTTPRoute to its first 200 through both HAProxies, with
thousands of HTTPRoutes loaded, and a route re-pointed under a request loop; from a
folder of manifests and from the Kubernetes API (the fake server and a real one), side by
side.

Runs the real fleet (`tests.helpers.fleet.Fleet`) once per variant, on the demo's manifests plus N
HTTPRoutes (each its own host under the demo Gateway's `*.demo.example.com`, one path to
shop or catalog), with two `nodeagent run --manage-haproxy` agents:
- folder (octet 47): `controlplane serve --source files:DIR`; each route is a file
  written atomically (rename); the figure includes noticing the file and the debounce.
- kube (octet 48, figures `route_propagation.kube.*`): as production runs it,
  `--source kubernetes --leader-elect` with the slot ledger in ConfigMap shards, against
  the fake API server in its own process (`routeskube`) holding the same manifests as
  objects; each route is POSTed to it (a re-point is a GET and a PUT), as kubectl does.
  The trials start once the Lease holder wrote every HTTPRoute's status.
- kube-real (octet 49, figures `route_propagation.kube-real.*`): the same against a real
  API server (`realapi`: tests/cluster/up's cluster, deploy/ installed, `serve` under
  the shipped RBAC with a TokenRequest token of its ServiceAccount). The manifests are
  written as the admin (the bulk HTTPRoutes `realapi.WRITERS` at a time), the demo's
  endpoints moved off loopback to 10.49.x.y, a prefix routed into a network namespace of
  the run's own where the demo's backends answer: requests go through both HAProxies to
  them and never leave the machine. Root only, and the cluster's binaries (built or
  buildable): else left out with a line saying why.
Both kube variants write as a lean production client does, on one kept-alive connection
(TLS with the admin's client certificate for the real server; `api_writer`): the clock
starts when the write starts and the poll as soon as the request is sent; the reply is
read (and checked) after the first 200s. With the Kubernetes Python client, which the
real variant used before, each write opened a new TLS connection (its reply was never
read) and the poll could only start once that reply was back: on a loaded
machine up to 30 ms after the agents had set the route (docs/findings.md, "Route
propagation through a real API server: the writer, the poll, the informer").
Each trial writes one new HTTPRoute and polls both HAProxies with its host, every 2 ms, each
on one kept-alive connection (`KeptAlive`), a round's two requests sent before either
reply is read (in turn, a 200 through the first HAProxy, which goes to a backend, took
1.5 to 9 ms under load before the second HAProxy was asked), until each answered 200: the
figure includes the source's notice, the route table, the delta, the agents' runtime map
commands, and the poll's own granularity (half an interval plus the requests of a round
on average). Before, the poll slept 5 ms between rounds of a new connection per request
(~1.2 ms each under load): from the agents' map commands to the 200 took 5 to 8 ms at the
median, a quarter of the figure (docs/findings.md, "One route change at 10,000 routes:
where the time goes"). Polling each HAProxy from a thread of its own every 1 ms was
tried and dropped: two polling threads took the cores from what they measure.
`new_route_published_p50` splits it: the write to the control plane's "published" event
(its `--log-format json` log, millisecond times); `new_route_published_to_200_*` is the
rest, per trial: delivery and the agents (from that event to the first 200 through both
HAProxies). Reloads of both masters are counted over the trials (a new map rule is a
runtime change: 0 expected). Then a route is re-pointed
between shop and catalog while a loop sends about 200 requests a second through both
HAProxies: failed requests and reloads counted. Quick: 300 routes and 20 trials; full:
3,000 and 10,000 routes, 100 trials each (the p99 is then the 99th of 100, the max is
printed beside it).

The folder variant then adds, per trial, a new Service with its EndpointSlice and its first
HTTPRoute in one file, to its first 200 through both HAProxies, reloads counted: first
with the spare pool on (`spare-backends` = trials, loaded at the agents' start: each new
Service claims a spare, no reload expected), then with it set to 0 (each new Service is a
new backend: a reload, as before spares), side by side in one run
(`route_propagation.new_service_*`; docs/design.md, "Spare backends").
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from nodeagent.haproxy.driver import HAProxy
from tests.bench import realapi
from tests.bench.api_writer import KeptAliveWriter
from tests.bench.common import Result, log, median, percentile
from tests.bench.memory import fleet_pids, rss_now
from tests.bench.routeskube import LEDGER, NAMESPACE, ApiRoutes, RouteCluster, folder_objects
from tests.helpers.fleet import BACKENDS, HAPROXY_PODS, HTTP_PORT, Fleet, haproxy_binary
from tests.helpers.waiting import wait_until
from tests.kubeapi.objects import write_kubeconfig

# 127.47.x.y (folder), 127.48.x.y (kube) and 127.49.x.y (kube-real, its endpoints on
# 10.49.x.y): apart from the tests and benchmarks
OCTET = 47
VARIANTS = ("folder", "kube", "kube-real")
REAL_VETH = ("10.254.242.1", "10.254.242.2")  # kube-real's network namespace's pair
QUICK_ROUTES, FULL_ROUTES = (300,), (3000, 10000)  # routes loaded, one fleet per count
# New routes per fleet: the method adds 100 to 200, one at a time; of 100 the p99
# is the 99th (one trial above it), of 20 it was the slowest.
QUICK_TRIALS, FULL_TRIALS = 20, 100
# New Services per phase (folder variant): each is a reload with the pool off.
QUICK_SERVICE_TRIALS, FULL_SERVICE_TRIALS = 5, 20
POLL_S = 0.002  # between two rounds of polls (one kept-alive request per HAProxy each)
KEEP_ENV = "BENCH_KEEP"  # set: the run's folder (logs, configs) is kept
LOOP_RATE = 200  # requests a second, over both HAProxies
REPOINTS = 6
Obj = dict[str, Any]
# Issue 33's targets, at 3,000 and 10,000 routes (full); quick measures at 300.
TARGETS = {
    "route_propagation.new_service_spares_first_200_*": "< 100 ms",
    "route_propagation.new_service_spares_reloads": "0",
    "route_propagation.new_service_no_spares_*": "reference: spares off, a reload each",
    "route_propagation.*new_route_first_200_p50": "< 30 ms at 3k and 10k",
    "route_propagation.*new_route_first_200_p99": "< 50 ms at 3k and 10k",
    "route_propagation.*new_route_first_200_max": "reference: the slowest trial",
    "route_propagation.*new_route_published_to_200_p50": "< 10 ms (the agents' share)",
    "route_propagation.*repoint_failed_requests": "0",
    "route_propagation.*reloads": "0",
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


def new_service(name: str, host: str, address: str) -> str:
    """A Service (routed only, the default settings), its EndpointSlice on `address` (a
    running demo backend) and its first HTTPRoute."""
    return f"""apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: default
  creationTimestamp: "2026-01-03T00:00:00Z"
spec:
  ports:
    - name: http
      port: 80
      targetPort: 8888
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-a
  namespace: default
  labels:
    kubernetes.io/service-name: {name}
addressType: IPv4
ports:
  - name: http
    port: 8888
    protocol: TCP
endpoints:
  - addresses: ["{address}"]
    conditions: {{ready: true}}
---
{http_route(name, host, "/", name)}"""


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


class FolderRoutes:
    """HTTPRoutes written as files of the manifests folder, one file each, atomically
    (the folder source never sees half a file)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, name: str, host: str, service: str) -> float:
        """The moment the route's file appeared (`time.perf_counter`)."""
        return self._write(name, http_route(name, host, "/", service))

    def write_service(self, name: str, host: str, address: str) -> float:
        """A new Service, its EndpointSlice and its first route in one file; when it
        appeared."""
        return self._write(name, new_service(name, host, address))

    def settle(self) -> None:
        """A file is written once renamed: nothing to wait for."""

    def _write(self, name: str, text: str) -> float:
        path = self.folder / f"{name}.yaml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        start = time.perf_counter()
        os.replace(tmp, path)
        return start


class KubeRoutes:
    """HTTPRoutes written through the Kubernetes API on one kept-alive connection: a POST
    for a new one, a GET and a PUT for one written before (`kubectl create`, `kubectl
    replace`); `prepare` makes the object what the server accepts (a real one sets
    creationTimestamp itself)."""

    def __init__(self, writer: KeptAliveWriter, prepare: Callable[[Obj], Obj] = dict) -> None:
        self.api = ApiRoutes(writer)
        self.prepare = prepare
        self.written: set[str] = set()

    def write(self, name: str, host: str, service: str) -> float:
        """The moment the POST's or PUT's write started (`time.perf_counter`); its reply
        is read by `settle`."""
        route = yaml.safe_load(http_route(name, host, "/", service).removesuffix("---\n"))
        route = self.prepare(route)
        if name in self.written:
            return self.api.replace(route)
        start = self.api.create(route)
        self.written.add(name)
        return start

    def settle(self) -> None:
        self.api.settle()


class RouteWriter(Protocol):
    def write(self, name: str, host: str, service: str) -> float:
        """Write HTTPRoute `name`; the moment the write started (`time.perf_counter`)."""
        ...

    def settle(self) -> None:
        """The last write is done: its reply read (raises when it was refused)."""
        ...


class Bench:
    def __init__(self, fleet: Fleet, routes: RouteWriter) -> None:
        self.fleet = fleet
        self.routes = routes
        self.haproxies = [agent.address for agent in fleet.agents.values()]
        self.written_at: list[float] = []  # wall clock (`time.time`) of each trial's write

    def reloads(self) -> int:
        """Reloads of every agent's HAProxy master so far (`show proc`)."""
        return sum(
            HAProxy(str(agent.master_socket), str(agent.runtime_socket)).show_proc().reloads
            for agent in self.fleet.agents.values()
        )

    def applied(self, name: str, host: str, service: str, timeout: float = 60) -> None:
        """Write an HTTPRoute and wait until a new content is published and every agent
        acknowledged it."""
        before = self.fleet.snapshot().content_hash
        self.routes.write(name, host, service)
        self.routes.settle()
        wait_until(lambda: self.fleet.snapshot().content_hash != before, timeout, "a new snapshot")
        self.fleet.wait_all_acked(timeout)

    def first_200(self, name: str, host: str, timeout: float = 30) -> float:
        """Seconds from a new HTTPRoute's write to a 200 for its host through every HAProxy:
        the poll starts once the write is sent, its reply is read after (a write the API
        server refused raises, even when the poll timed out)."""
        wall, perf = time.time(), time.perf_counter()
        start = self.routes.write(name, host, "shop")
        self.written_at.append(wall + (start - perf))
        try:
            served = self._until_200(host, start, timeout)
        finally:
            self.routes.settle()
        return served

    def first_200_of_service(
        self, name: str, host: str, address: str, written_at: list[float]
    ) -> float:
        """Seconds from a new Service's and its first route's write to a 200 for its host
        through every HAProxy (the folder source only); the write's wall clock is added
        to `written_at`."""
        assert isinstance(self.routes, FolderRoutes)
        wall, perf = time.time(), time.perf_counter()
        start = self.routes.write_service(name, host, address)
        written_at.append(wall + (start - perf))
        return self._until_200(host, start, 60)

    def _until_200(self, host: str, start: float, timeout: float) -> float:
        """Seconds from `start` to the last HAProxy's first 200 for `host`: every `POLL_S`
        a round of polls, one kept-alive connection per HAProxy, each round's requests
        all sent before any reply is read (one HAProxy's answer, which goes to a backend
        once the route is set, does not delay the other's request)."""
        polls = {haproxy: KeptAlive(haproxy) for haproxy in self.haproxies}
        waiting = dict(polls)
        deadline = start + timeout
        try:
            while waiting:
                for poll in waiting.values():
                    poll.send(host)
                for haproxy, poll in sorted(waiting.items()):
                    if poll.status() == 200:
                        del waiting[haproxy]
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{host}: no 200 from {sorted(waiting)} after {timeout}s")
                if waiting:
                    time.sleep(POLL_S)
            return time.perf_counter() - start
        finally:
            for poll in polls.values():
                poll.close()


class KeptAlive:
    """GETs to one HAProxy on one kept-alive connection (a new one after HAProxy closed
    it or an error): a poll costs the client a fraction of a new connection's (no
    connect, no socket set up on either side), so polling often leaves the machine's two
    cores to what is measured. A request is sent (`send`) apart from reading its reply
    (`status`), so one thread polls several HAProxies at once."""

    def __init__(self, haproxy: str) -> None:
        self.haproxy = haproxy
        self.conn: http.client.HTTPConnection | None = None
        self.sent = False

    def send(self, host: str) -> None:
        """Send one GET / for `host` (a failure is read as status 0)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.haproxy, HTTP_PORT, timeout=2)
        try:
            self.conn.request("GET", "/", headers={"Host": host})
            self.sent = True
        except (OSError, http.client.HTTPException):
            self.close()

    def status(self) -> int:
        """The status of the GET sent last; 0 when it failed."""
        if self.conn is None or not self.sent:
            return 0
        self.sent = False
        try:
            reply = self.conn.getresponse()
            reply.read()
        except (OSError, http.client.HTTPException):
            self.close()
            return 0
        if reply.will_close:
            self.close()
        return reply.status

    def close(self) -> None:
        self.sent = False
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def published_at(log: Path) -> list[float]:
    """Wall clock of every "published" event in a `--log-format json` serve log."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "published":
            stamp = str(record["time"]).replace("Z", "+00:00")
            found.append(datetime.fromisoformat(stamp).timestamp())
    return sorted(found)


def publish_lags(written: Sequence[float], published: Sequence[float]) -> list[float]:
    """Per write: seconds to the first publication at or after it (log times are cut to
    milliseconds: 1 ms of slack); writes never published are left out."""
    lags = []
    for at in written:
        later = [p for p in published if p >= at - 0.001]
        if later:
            lags.append(max(0.0, later[0] - at))
    return lags


def after_publish(
    written: Sequence[float], samples: Sequence[float], published: Sequence[float]
) -> list[float]:
    """Per trial: seconds from the first publication at or after its write to its first
    200 through every HAProxy (`samples`: write to first 200): the delivery and the
    agents' share. Trials never published are left out."""
    shares = []
    for at, sample in zip(written, samples, strict=True):
        later = [p for p in published if p >= at - 0.001]
        if later:
            shares.append(max(0.0, at + sample - later[0]))
    return shares


def _manifest(count: int) -> str:
    services = ("shop", "catalog")
    return "".join(
        http_route(f"bulk-{i}", f"b{i}.demo.example.com", f"/p{i}", services[i % 2])
        for i in range(count)
    )


def repoint_under_load(
    bench: Bench, host: str, repoints: int = REPOINTS
) -> tuple[int, int, int, list[str]]:
    """Re-point `host` between shop and catalog `repoints` times under the request loop:
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
        for i in range(repoints):
            bench.applied("repoint", host, ("catalog", "shop")[i % 2])
            time.sleep(0.5)
    finally:
        stop.set()
        thread.join(10)
    return sent, failed, bench.reloads() - before, failures[:5]


@dataclass
class Measured:
    """One variant's figures."""

    samples: list[float] = field(default_factory=list)  # seconds, write to first 200
    lags: list[float] = field(default_factory=list)  # seconds, write to "published"
    shares: list[float] = field(default_factory=list)  # seconds, "published" to first 200
    reloads: int = 0
    repoints: int = REPOINTS
    sent: int = 0
    failed: int = 0
    repoint_reloads: int = 0
    failures: list[str] = field(default_factory=list)
    # A new Service and its first route, with the spare pool on and off.
    services: dict[str, list[float]] = field(default_factory=dict)
    service_reloads: dict[str, int] = field(default_factory=dict)
    service_lags: dict[str, list[float]] = field(default_factory=dict)  # write to published
    refused_calls: int | None = None  # kube-real: serve's calls the shipped RBAC refused
    # RSS at the end of the run, MiB: "controlplane" and each agent by pod name
    rss: dict[str, float] = field(default_factory=dict)


def kube_server_args(workdir: Path, real: bool = False) -> list[str]:
    """`controlplane serve` as production runs it: the Kubernetes source, leader election,
    the slot ledger in ConfigMap shards; `real`: with the kubeconfig `realapi.RealApi`
    writes (the shipped ServiceAccount's token)."""
    kubeconfig = workdir / ("controlplane.kubeconfig" if real else "kubeconfig")
    return [
        f"--kubeconfig={kubeconfig}",
        "--leader-elect",
        f"--lease-namespace={NAMESPACE}",
        f"--configmap={NAMESPACE}/haproxy-settings",
        f"--slots-configmap={NAMESPACE}/{LEDGER}",
    ]


def load_real(fleet: Fleet, work: Path) -> realapi.RealApi:
    """A real cluster holding the fleet's manifests (as `routeskube.folder_objects`, the
    demo's HAProxy pods made under the installed DaemonSet instead), the endpoints off
    loopback, the demo's backends serving in the network namespace on those addresses."""
    pods = tuple((name, fleet.ip(address)) for name, address in HAPROXY_PODS)
    prefix = f"10.{fleet.octet}.0.0/16"
    real = realapi.RealApi(work, pods, f"ppbr{os.getpid()}", [prefix], *REAL_VETH)
    try:
        objects = [o for o in folder_objects(fleet.manifests) if o["kind"] != "Pod"]
        routes = [o for o in objects if o["kind"] == "HTTPRoute"]
        rest = (o for o in objects if o["kind"] != "HTTPRoute")
        real.apply(realapi.endpoints_off_loopback(o) for o in rest)
        seconds = real.create_all(routes)
        log(f"route_propagation kube-real: {len(routes)} HTTPRoutes written in {seconds:.1f} s")
        assert real.network is not None
        with real.network.inside():
            for name, address, port, kind in BACKENDS:
                fleet.backends.start(name, realapi.off_loopback(fleet.ip(address)), port, kind)
    except BaseException:
        real.close()
        raise
    return real


def measure(
    variant: str,
    routes: int,
    trials: int,
    octet: int,
    binary: str | None,
    repoints: int = REPOINTS,
    services: int | None = None,
) -> Measured:
    """One fleet with `routes` HTTPRoutes loaded from the folder, the fake API server
    (kube) or a real one (kube-real): `trials` new routes to their first 200, then the
    re-points under the request loop; the folder's then `services` new Services per phase
    (default `trials`)."""
    services = trials if services is None else services
    work = Path(tempfile.mkdtemp(prefix=f"bench-routes-{variant}-"))
    logs = ["--log-format", "json"]
    cluster: RouteCluster | None = None
    real: realapi.RealApi | None = None
    if variant == "kube-real":
        fleet = Fleet(
            work,
            octet,
            haproxy_bin=binary,
            server_args=[*kube_server_args(work, real=True), *logs],
            state_file=False,
            serve_timeout=60 + routes * 0.05,
            source="kubernetes",
        )
    elif variant == "kube":
        fleet = Fleet(
            work,
            octet,
            haproxy_bin=binary,
            server_args=[*kube_server_args(work), *logs],
            state_file=False,
            serve_timeout=60 + routes * 0.02,
            source="kubernetes",
        )
    else:
        fleet = Fleet(
            work, octet, haproxy_bin=binary, server_args=logs, serve_timeout=20 + routes * 0.01
        )
    found = Measured(repoints=repoints)
    try:
        fleet.write_manifests()
        (fleet.manifests / "bulk-routes.yaml").write_text(_manifest(routes))
        if variant == "folder":  # the pool the new-Service trials claim, loaded at start
            settings = fleet.manifests / "settings.yaml"
            pool = f'  spare-backends: "{services}"\n'
            settings.write_text(settings.read_text() + pool)
        writer: RouteWriter = FolderRoutes(fleet.manifests)
        if variant == "kube":
            cluster = RouteCluster(work / "kubeapi.log")
            cluster.load(fleet.manifests)
            write_kubeconfig(cluster.url, work / "kubeconfig")
            writer = KubeRoutes(KeptAliveWriter(cluster.url))
        if variant == "kube-real":
            real = load_real(fleet, work)
            admin = KeptAliveWriter.from_configuration(real.api.configuration)
            writer = KubeRoutes(admin, realapi.without_server_fields)
        else:
            fleet.start_backends()
        fleet.start_control_plane()
        for name, address in HAPROXY_PODS:
            fleet.start_agent(name, address)
        fleet.wait_all_acked(120 + routes * 0.02)
        bench = Bench(fleet, writer)
        # Every HAProxy serves a bulk route before the trials start.
        for haproxy in bench.haproxies:
            code, body = status(haproxy, "b1.demo.example.com", "/p1")
            if code != 200:
                raise RuntimeError(f"bulk route not served by {haproxy}: {code} {body[:200]}")
        bench.applied("repoint", "moving.demo.example.com", "shop")
        counts: Callable[[], dict[str, int]] | None = (
            cluster.routes if cluster is not None else real.route_counts if real else None
        )
        if counts is not None:
            # The Lease holder writes every route's status once; the trials start after.
            routes_now = counts
            wait_until(
                lambda: (c := routes_now())["with_status"] == c["routes"],
                60 + routes * 0.05,
                "the status of every HTTPRoute",
                step=0.5,
            )
        reloads_before = bench.reloads()
        for trial in range(trials):
            found.samples.append(bench.first_200(f"new-{trial}", f"n{trial}.demo.example.com"))
            time.sleep(0.3)
        found.reloads = bench.reloads() - reloads_before
        published = published_at(work / "controlplane.log")
        found.lags = publish_lags(bench.written_at, published)
        found.shares = after_publish(bench.written_at, found.samples, published)
        found.sent, found.failed, found.repoint_reloads, found.failures = repoint_under_load(
            bench, "moving.demo.example.com", repoints
        )
        if variant == "folder":
            new_services(fleet, bench, services, found, work / "controlplane.log")
        if real is not None:
            found.refused_calls = realapi.refused_calls(work / "controlplane.log")
        assert fleet.control_plane is not None
        agents = {a.pod_name: a.process.pid for a in fleet.agents.values()}
        found.rss = rss_now(fleet_pids(fleet.control_plane.pid, agents))
    finally:
        fleet.stop()
        if cluster is not None:
            cluster.stop()
        if real is not None:
            real.close()
        if not os.environ.get(KEEP_ENV):
            shutil.rmtree(work, ignore_errors=True)
    return found


SPARES, NO_SPARES = "spares", "no_spares"


def new_services(fleet: Fleet, bench: Bench, trials: int, found: Measured, log: Path) -> None:
    """`trials` new Services with their first route, the spare pool on, then off."""
    address = fleet.ip("127.0.2.1")  # shop-0, running
    written: dict[str, list[float]] = {}
    for phase in (SPARES, NO_SPARES):
        if phase == NO_SPARES:
            fleet.edit_manifest(
                "settings.yaml",
                lambda text: text.replace(f'spare-backends: "{trials}"', 'spare-backends: "0"'),
            )
        before = bench.reloads()
        samples = found.services.setdefault(phase, [])
        for trial in range(trials):
            name = f"svc-{phase.replace('_', '-')}-{trial}"
            host = f"{name}.demo.example.com"
            at = written.setdefault(phase, [])
            samples.append(bench.first_200_of_service(name, host, address, at))
            fleet.wait_all_acked(60)  # a reload's ACK, before the next trial
            time.sleep(0.3)
        found.service_reloads[phase] = bench.reloads() - before
    published = published_at(log)
    found.service_lags = {phase: publish_lags(at, published) for phase, at in written.items()}


def results(prefix: str, found: Measured, routes: int, trials: int) -> list[Result]:
    """One variant's figures under `prefix` ("route_propagation" or its ".kube")."""
    params = {"routes": routes, "trials": trials, "agents": 2, "poll_ms": POLL_S * 1000}
    loop = {"routes": routes, "repoints": found.repoints, "requests": found.sent, "rate": LOOP_RATE}
    lags = found.lags or [float("nan")]
    shares = found.shares or [float("nan")]
    return [
        Result(f"{prefix}.new_route_first_200_p50", median(found.samples) * 1000, "ms", params),
        Result(
            f"{prefix}.new_route_first_200_p99",
            percentile(found.samples, 99) * 1000,
            "ms",
            params,
        ),
        Result(
            f"{prefix}.new_route_first_200_p90",
            percentile(found.samples, 90) * 1000,
            "ms",
            params,
        ),
        Result(f"{prefix}.new_route_first_200_max", max(found.samples) * 1000, "ms", params),
        Result(f"{prefix}.new_route_published_p50", median(lags) * 1000, "ms", params),
        Result(f"{prefix}.new_route_published_to_200_p50", median(shares) * 1000, "ms", params),
        Result(
            f"{prefix}.new_route_published_to_200_p99",
            percentile(shares, 99) * 1000,
            "ms",
            params,
        ),
        Result(f"{prefix}.reloads", found.reloads, "", params),
        Result(f"{prefix}.repoint_failed_requests", found.failed, "", loop),
        Result(f"{prefix}.repoint_reloads", found.repoint_reloads, "", loop),
        *(
            Result(
                f"{prefix}.{'cp_rss' if name == 'controlplane' else f'agent_rss.{name}'}",
                rss,
                "MiB",
                {"routes": routes, "when": "end of the run"},
            )
            for name, rss in sorted(found.rss.items())
        ),
        *(
            result
            for phase, samples in found.services.items()
            for result in _service_results(
                f"{prefix}.new_service_{phase}",
                samples,
                found.service_reloads[phase],
                params | {"trials": len(samples)},
            )
        ),
    ]


def _service_results(
    name: str, samples: list[float], reloads: int, params: dict[str, Any]
) -> list[Result]:
    """One phase of new Services (spares on or off): its first 200's p50 and max, its
    reloads; `params` carry the phase's own count of trials."""
    return [
        Result(f"{name}_first_200_p50", median(samples) * 1000, "ms", params),
        Result(f"{name}_first_200_max", max(samples) * 1000, "ms", params),
        Result(f"{name}_reloads", reloads, "", params),
    ]


def describe(variant: str, routes: int, found: Measured) -> str:
    p50, p99 = median(found.samples) * 1000, percentile(found.samples, 99) * 1000
    lags = found.lags or [float("nan")]
    shares = found.shares or [float("nan")]
    return (
        f"route_propagation {variant}: {routes} HTTPRoutes, {len(found.samples)} new, first 200"
        f" p50 {p50:.0f} ms p99 {p99:.0f} ms max {max(found.samples) * 1000:.0f} ms (write"
        f" to published p50 {median(lags) * 1000:.0f} ms max "
        f"{max(lags) * 1000:.0f} ms; published to first 200 p50 {median(shares) * 1000:.0f} ms"
        f" p99 {percentile(shares, 99) * 1000:.0f} ms), reloads {found.reloads}; re-pointed "
        f"{found.repoints}x under "
        f"{found.sent} requests: {found.failed} failed {found.failures}, "
        f"{found.repoint_reloads} reloads"
        + "; RSS at the end "
        + ", ".join(f"{name} {rss:,.0f} MiB" for name, rss in sorted(found.rss.items()))
        + (
            f"; {found.refused_calls} calls refused by the shipped RBAC"
            if found.refused_calls is not None
            else ""
        )
        + "".join(
            f"; new Service plus its first route ({phase}): first 200 p50 "
            f"{median(samples) * 1000:.0f} ms max {max(samples) * 1000:.0f} ms (write to "
            f"published p50 {median(found.service_lags.get(phase) or [float('nan')]) * 1000:.0f}"
            f" ms), reloads {found.service_reloads[phase]}"
            for phase, samples in found.services.items()
        )
    )


def run(
    quick: bool = False,
    octet: int = OCTET,
    binary: str | None = None,
    sizes: tuple[int, int, int] | None = None,
    variants: Sequence[str] = VARIANTS,
) -> list[Result]:
    """Every variant in `variants` in turn (folder on `octet`, kube on `octet` + 1), at
    each count of routes loaded (quick 300; full 3,000 then 10,000); `sizes` (routes,
    trials, re-points) replaces the quick or full ones (the smoke test's)."""
    if binary is None and haproxy_binary() is None:
        raise RuntimeError("haproxy not found")
    counts = QUICK_ROUTES if quick else FULL_ROUTES
    trials = QUICK_TRIALS if quick else FULL_TRIALS
    services = QUICK_SERVICE_TRIALS if quick else FULL_SERVICE_TRIALS
    repoints = REPOINTS
    if sizes is not None:
        routes, trials, repoints = sizes
        counts, services = (routes,), trials
    found: list[Result] = []
    lines = []
    if "kube-real" in variants and (why := realapi.unavailable()):
        variants = [v for v in variants if v != "kube-real"]
        lines.append(f"route_propagation kube-real (a real API server) skipped: {why}")
        log(lines[-1])
    for routes in counts:
        for i, variant in enumerate(VARIANTS):
            if variant not in variants:
                continue
            measured = measure(variant, routes, trials, octet + i, binary, repoints, services)
            lines.append(describe(variant, routes, measured))
            log(lines[-1])
            prefix = "route_propagation" + ("" if variant == "folder" else f".{variant}")
            found += results(prefix, measured, routes, trials)
    for line in lines:  # side by side at the end
        log(line)
    return found


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["route_propagation"]))
