"""`make demo`: the whole system on one machine, on loopback.

A control plane on `deploy/examples/demo/` (a copy, so you can edit it while it runs),
two agents each supervising its own HAProxy on its pod's address (127.0.1.1, 127.0.1.2),
the demo backends (shop, catalog, db), requests through the routes of `routes.yaml` (an
HTTPRoute and an Ingress) on both HAProxy instances, the same over HTTPS (`demo-https/`: a
Gateway HTTPS listener and an Ingress with spec.tls, their certificate made here at start),
then a failover run: clients from fixed source addresses pinned through HAProxy A, by a
Service annotation, by the HTTPRoute and over HTTPS, keep their backend pod through
HAProxy B after A is lost, and so do browsers holding the session cookie HAProxy A set
(`sessions.yaml`: cookie persistence, GEP-1619, whose value names the slot, the same pod
on every instance). Before it, the Secret is renewed in its file: both instances serve the
new certificate without a reload.
No key is kept in the repository: the demo makes a CA and a certificate for the HTTPS
hosts when it starts (cryptography), writes the kubernetes.io/tls Secret into its runtime
manifests folder and the CA (no key) beside it for `curl --cacert`.
Clients send nothing to an HAProxy before its agent's `/readyz` answers 200 (its stick
tables synced from the peers): traffic that arrives earlier may be pinned differently on
two instances, which is why a load balancer must health-check `/readyz` (docs/operations.md,
"Readiness where traffic is decided").
Runs until Ctrl-C (or `--once`), then stops everything it started.

`--kube real` (`make demo KUBE=real`, as root) runs the same on a real API server instead
of the folder: `tests/cluster/up`'s etcd, kube-apiserver and controller manager, deploy/
applied as users apply it, the demo's objects applied (its EndpointSlices' 127.0.x.y pod
addresses become 10.0.x.y, since a real API server refuses loopback endpoints; the backend
pods serve them in a network namespace of the demo's own, tests/helpers/netns.py), two
control-plane replicas with leader election on a Lease, authenticated with a TokenRequest
token of the shipped ServiceAccount, and the renewed certificate applied as a Secret.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers.cluster_demo import DemoCluster, off_loopback  # noqa: E402
from tests.helpers.fleet import (  # noqa: E402
    BACKENDS,
    HAPROXY_PODS,
    HTTP_PORT,
    TCP_PORT,
    WORKLOAD,
    AgentHandle,
    Fleet,
    free_port,
    haproxy_binary,
    http_get,
    table_entries,
    tcp_get,
)
from tests.helpers.https_fleet import (  # noqa: E402
    GATEWAY_HOST,
    HTTPS_PORT,
    INGRESS_HOST,
    SECRET_FILE,
    https_get,
    issue,
    reloads,
    verifying_context,
    wait_served,
    write_https,
    write_secret,
)
from tests.helpers.tls_certs import Leaf, TestCA, make_ca  # noqa: E402
from tests.helpers.waiting import wait_until  # noqa: E402

GRPCURL = str(Path(sys.executable).parent / "grpcurl")
CLIENT = "127.0.9.1"
ROUTE_CLIENTS = ("127.0.9.11", "127.0.9.12", "127.0.9.13")  # pinned through the HTTPRoute
STORE = "store.demo.example.com"  # the HTTPRoute's hostname (routes.yaml)
HTTPS_CLIENTS = ("127.0.9.21", "127.0.9.22", "127.0.9.23")  # pinned over HTTPS
SESSIONS = "sessions.demo.example.com"  # cookie persistence on catalog (sessions.yaml)
SESSION_COOKIE = "catalog-session"
BROWSERS = 3  # clients holding a session cookie through the failover
# (what demo-https/https.yaml says, the host: SNI and Host)
HTTPS_ROUTES = (
    ("HTTPS Gateway listener, HTTPRoute secure-store -> shop", GATEWAY_HOST),
    ("HTTPS Ingress secure-shop (spec.tls) -> shop", INGRESS_HOST),
)
# (what routes.yaml says, host, path, headers, what must answer: a pod name prefix or a status)
ROUTES: tuple[tuple[str, str, str, dict[str, str], str], ...] = (
    ("HTTPRoute store, PathPrefix /cart -> shop", STORE, "/cart/items", {}, "shop-"),
    (
        "HTTPRoute store, /api + header x-canary: always -> shop",
        STORE,
        "/api/books",
        {"x-canary": "always"},
        "shop-",
    ),
    ("HTTPRoute store, Exact /old-catalog -> redirect", STORE, "/old-catalog", {}, "301"),
    (
        "Ingress catalog, Prefix /catalog -> catalog",
        "ingress.example.com",
        "/catalog/1",
        {},
        "catalog-",
    ),
    ("Ingress catalog, Prefix / -> shop", "ingress.example.com", "/", {}, "shop-"),
)


def heading(text: str) -> None:
    print(f"\n=== {text}\n", flush=True)


def grpcurl(address: str, *args: str) -> str:
    done = subprocess.run(
        [GRPCURL, "-plaintext", *args[:-1], address, args[-1]],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return done.stdout if done.returncode == 0 else done.stderr


def request(haproxy: str, host: str, path: str, source: str, headers: dict[str, str]) -> str:
    """GET `path` through `haproxy` on a fresh connection from `source`: the answering pod
    (a 200's body), or the status and its Location (a redirect is not followed)."""
    conn = http.client.HTTPConnection(haproxy, HTTP_PORT, timeout=5, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Host": host, "Connection": "close", **headers})
        reply = conn.getresponse()
        body = reply.read().decode().strip()
        if reply.status == 200:
            return body
        return f"{reply.status} Location: {reply.getheader('Location')}"
    finally:
        conn.close()


def routes(fleet: Fleet) -> bool:
    """Each route of routes.yaml through both HAProxy instances; True when every answer
    comes from the Service (or with the status) the route names."""
    ok = True
    for what, host, path, headers, expected in ROUTES:
        shown = " ".join(f"-H '{k}: {v}'" for k, v in headers.items())
        print(f"{what}: GET http://{host}{path} {shown}".rstrip())
        for label, agent in zip("AB", fleet.agents.values(), strict=True):
            answer = request(agent.address, host, path, ROUTE_CLIENTS[0], headers)
            good = answer.startswith(expected)
            ok = ok and good
            print(
                f"  HAProxy {label} ({agent.address}) -> {answer}{'' if good else '  UNEXPECTED'}"
            )
    first = next(iter(fleet.agents.values()))
    answers = [request(first.address, STORE, "/api", ROUTE_CLIENTS[0], {}) for _ in range(20)]
    services = [a.split("-")[0] for a in answers]
    counts = ", ".join(f"{s} {services.count(s)}" for s in ("catalog", "shop"))
    print(f"HTTPRoute store, /api weights catalog 90 shop 10: 20 requests via A -> {counts}")
    return ok and set(services) <= {"catalog", "shop"}


def https_routes(fleet: Fleet, ctx: ssl.SSLContext, serial: str) -> bool:
    """Each HTTPS host through both HAProxy instances, verified against the demo CA: True
    when shop answers with the Secret's certificate."""
    ok = True
    for what, host in HTTPS_ROUTES:
        print(f"{what}: GET https://{host}:{HTTPS_PORT}/")
        for label, agent in zip("AB", fleet.agents.values(), strict=True):
            answer = https_get(ctx, agent.address, host, HTTPS_CLIENTS[0])
            good = answer.body.startswith("shop-") and answer.serial == serial
            ok = ok and good
            print(
                f"  HAProxy {label} ({agent.address}) -> {answer.body}, certificate serial "
                f"{answer.serial} (verified){'' if good else '  UNEXPECTED'}"
            )
    return ok


def rotation(
    fleet: Fleet,
    ctx: ssl.SSLContext,
    ca: TestCA,
    renew: Callable[[Leaf], float],
    where: str,
    kube: bool = False,
) -> bool:
    """Renew the Secret (new serial, same names) `where` (`renew` writes it and says when;
    `kube`: applied to the API server):
    both HAProxy instances serve it without a reload (the runtime API's `set ssl cert` +
    `commit ssl cert`)."""
    agents = list(fleet.agents.values())
    haproxies = [a.address for a in agents]
    renewed = issue(ca)
    before = reloads(agents)
    print(f"{'applying' if kube else 'rewriting'} {where}: serial {renewed.serial_hex}")
    changed = renew(renewed)
    took = wait_served(ctx, haproxies, GATEWAY_HOST, renewed.serial_hex, changed, timeout=30)
    fleet.wait_all_acked()
    reloaded = reloads(agents) - before
    changed_what = "the API server took the Secret" if kube else "the file changed"
    print(f"served by both HAProxy instances {took * 1000:.0f} ms after {changed_what}")
    print(f"HAProxy reloads: {reloaded} (the runtime API: set ssl cert, commit ssl cert)")
    return reloaded == 0


def ready(agent: AgentHandle, label: str) -> None:
    """What a load balancer does: no traffic to this HAProxy before its `/readyz` is 200."""
    print(f"waiting for HAProxy {label}'s {agent.readyz_url} ...", flush=True)
    print(f"HAProxy {label} ready: GET {agent.readyz_url} -> 200 {agent.wait_ready(60)}")


def cookie_request(haproxy: str, cookie: str = "") -> tuple[str, str]:
    """GET / of the sessions host through `haproxy`, with `cookie` as catalog-session's
    value when given: the answering pod and the Set-Cookie header ("" when none)."""
    conn = http.client.HTTPConnection(haproxy, HTTP_PORT, timeout=5)
    headers = {"Host": SESSIONS, "Connection": "close"}
    if cookie:
        headers["Cookie"] = f"{SESSION_COOKIE}={cookie}"
    try:
        conn.request("GET", "/", headers=headers)
        reply = conn.getresponse()
        return reply.read().decode().strip(), reply.getheader("Set-Cookie") or ""
    finally:
        conn.close()


def session_cookies(a: AgentHandle) -> dict[int, tuple[str, str]]:
    """Each browser's cookie value and pod, set by HAProxy A."""
    held = {}
    for browser in range(1, BROWSERS + 1):
        pod, set_cookie = cookie_request(a.address)
        value = set_cookie.partition("=")[2].split(";", 1)[0]
        kind = "max-age" not in set_cookie.lower() and "expires" not in set_cookie.lower()
        said = "a session cookie: no Expires, no Max-Age" if kind else "UNEXPECTED lifetime"
        print(f"browser {browser} -> HAProxy A -> http://{SESSIONS}/ -> {pod}, ", end="")
        print(f"Set-Cookie: {set_cookie}  ({said})")
        held[browser] = (value, pod)
    return held


def cookies_kept(b: AgentHandle, held: dict[int, tuple[str, str]]) -> bool:
    ok = True
    for browser, (value, pod) in held.items():
        now, _ = cookie_request(b.address, value)
        kept = now == pod
        ok = ok and kept
        slot = value.split("|", 1)[0]
        print(f"browser {browser} -> HAProxy B, Cookie {SESSION_COOKIE}={value} -> {now}", end="  ")
        print(f"(the same pod: {slot} names it on every instance)" if kept else "MOVED: failure")
    return ok


def failover(fleet: Fleet, ctx: ssl.SSLContext, cookies: bool = True) -> bool:
    (name_a, address_a), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    pod = http_get(a.address, "shop.example.com", CLIENT)
    again = http_get(a.address, "shop.example.com", CLIENT)
    print(f"client {CLIENT} -> HAProxy A ({a.address}:{HTTP_PORT}) -> {pod}, and again -> {again}")
    pinned = {c: request(a.address, STORE, "/cart", c, {}) for c in ROUTE_CLIENTS}
    for client, routed in pinned.items():
        print(f"client {client} -> HAProxy A -> HTTPRoute {STORE}/cart -> {routed}")
    secure = {c: https_get(ctx, a.address, GATEWAY_HOST, c).body for c in HTTPS_CLIENTS}
    for client, routed in secure.items():
        print(f"client {client} -> HAProxy A -> HTTPS {GATEWAY_HOST} -> {routed}")
    held = session_cookies(a) if cookies else {}
    if not cookies:
        print("session cookies: not shown (KUBE=real installs the Gateway API standard ")
        print("  channel, which has no sessionPersistence; demo/sessions.yaml is folder mode's)")

    def replicated() -> bool:
        table = table_entries(b.runtime("show table default_shop_http"))
        return all(c in table for c in (CLIENT, *ROUTE_CLIENTS, *HTTPS_CLIENTS))

    wait_until(replicated, 10, "the stick-table entry to reach B")
    server = table_entries(b.runtime("show table default_shop_http"))[CLIENT]
    print(f"HAProxy B's stick table (runtime API `show table`): {CLIENT} -> {server}")
    print(f"stopping agent A and its HAProxy ({a.address}) ...")
    fleet.stop_agent(name_a)
    through_b = http_get(b.address, "shop.example.com", CLIENT)
    print(f"client {CLIENT} -> HAProxy B ({b.address}:{HTTP_PORT}) -> {through_b}")
    ok = through_b == pod
    print("the same backend pod answered: persistence survived" if ok else "MOVED: failure")
    for client, routed in pinned.items():
        now = request(b.address, STORE, "/cart", client, {})
        kept = now == routed
        ok = ok and kept
        print(f"client {client} -> HAProxy B -> HTTPRoute {STORE}/cart -> {now}", end="  ")
        print("(the same pod: pinned through the route)" if kept else "MOVED: failure")
    for client, routed in secure.items():
        now = https_get(ctx, b.address, GATEWAY_HOST, client).body
        kept = now == routed
        ok = ok and kept
        print(f"client {client} -> HAProxy B -> HTTPS {GATEWAY_HOST} -> {now}", end="  ")
        print("(the same pod: pinned over HTTPS)" if kept else "MOVED: failure")
    ok = cookies_kept(b, held) and ok
    print("restarting agent A ...")
    fleet.start_agent(name_a, address_a)
    fleet.wait_all_acked()
    ready(fleet.agents[name_a], "A")
    return ok


def start_on(real: DemoCluster, fleet: Fleet) -> None:
    """`Fleet.start` for a real cluster: the backend pods in their network namespace on
    their 10.0.x.y addresses, two control-plane replicas on one Lease (the agents stream
    from the first), the agents."""
    with real.pod_network():
        for name, address, port, kind in BACKENDS:
            fleet.backends.start(name, off_loopback(address), port, kind)
    fleet.start_control_plane()
    second = free_port()
    fleet._spawn(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "serve",
            "--source",
            "kubernetes",
            "--listen",
            f"127.0.0.1:{second}",
            "--insecure",
            *fleet.server_args,
        ],
        fleet.workdir / "controlplane-2.log",
    )
    print(f"second control-plane replica: 127.0.0.1:{second} (log controlplane-2.log)")
    for name, address in HAPROXY_PODS:
        fleet.start_agent(name, address)
    fleet.wait_all_acked(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--once", action="store_true", help="exit after the failover run")
    parser.add_argument("--workdir", type=Path, help="where logs, configs and state go")
    parser.add_argument(
        "--kube",
        choices=("folder", "real"),
        default="folder",
        help="the cluster: a manifests folder (default), or a real API server (root)",
    )
    args = parser.parse_args()
    if haproxy_binary() is None:
        print("HAProxy is not installed: apt-get install haproxy (2.6)", file=sys.stderr)
        return 1
    if args.kube == "real" and os.geteuid() != 0:
        print("--kube real needs root (a network namespace for the pods)", file=sys.stderr)
        return 1
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="peerplane-demo-"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ca = make_ca("peerplane demo CA")
    leaf = issue(ca)
    real: DemoCluster | None = None
    if args.kube == "real":
        heading("starting a real cluster: etcd, kube-apiserver, kube-controller-manager")
        real = DemoCluster(workdir, leaf, HAPROXY_PODS, BACKENDS)
        print(f"kubectl --kubeconfig {real.cluster.kubeconfig} get gateways,httproutes,ingress -A")
        fleet = Fleet(
            workdir,
            octet=0,
            readiness=True,
            source="kubernetes",
            server_args=real.serve_args(),
            state_file=False,
        )
    else:
        fleet = Fleet(workdir, octet=0, readiness=True)
    try:
        heading("starting: control plane, 2 agents + HAProxy, backends")
        ca_file = workdir / "demo-ca.pem"
        ca_file.write_bytes(ca.pem)  # the CA's certificate only: what clients trust
        ctx = verifying_context(ca)
        if real is None:
            write_https(fleet.manifests, leaf)
            fleet.start()
        else:
            start_on(real, fleet)
        address = fleet.control_plane_address
        print(f"control plane: {address} (log {workdir / 'controlplane.log'})")
        for name, agent in fleet.agents.items():
            print(f"agent {name}: HAProxy on {agent.address} (log {agent.log})")
            print(f"  readiness (what a load balancer health-checks): {agent.readyz_url}")
        if real is None:
            print(f"manifests (edit them, the control plane follows): {fleet.manifests}")
        else:
            print(f"cluster (kubectl apply, the control plane follows): {real.cluster.kubeconfig}")
        secret = fleet.manifests / SECRET_FILE if real is None else "applied to the cluster"
        print(
            f"HTTPS: Secret default/demo-tls ({secret}) made at start, "
            f"certificate serial {leaf.serial_hex} for {GATEWAY_HOST} and {INGRESS_HOST}, "
            f"signed by the demo CA {ca_file}"
        )

        heading("workloads (grpcurl ListWorkloads)")
        print(grpcurl(address, "peerplane.v1.PeerPlane/ListWorkloads"))

        first = next(iter(fleet.agents.values()))
        heading(f"rendered haproxy.cfg of {first.pod_name} ({first.config})")
        print(first.config.read_text())

        heading("inspect it yourself")
        print(f"{GRPCURL} -plaintext {address} list")
        print(f"{GRPCURL} -plaintext {address} describe peerplane.v1.PeerPlane")
        print(f"{GRPCURL} -plaintext {address} peerplane.v1.PeerPlane/ListWorkloads")
        print(
            f'{GRPCURL} -plaintext -d \'{{"workload": "{WORKLOAD}"}}\' {address} '
            "peerplane.v1.PeerPlane/GetSnapshot"
        )
        print(f"{GRPCURL} -plaintext {address} peerplane.v1.PeerPlane/ListAgents")
        print(f"{GRPCURL} -plaintext {address} grpc.health.v1.Health/Check")
        print(
            f"curl --interface {CLIENT} -H 'Host: shop.example.com' http://{first.address}:{HTTP_PORT}/"
        )
        print(
            f"curl --interface {CLIENT} -H 'Host: {STORE}' http://{first.address}:{HTTP_PORT}/cart"
            "   # through the HTTPRoute"
        )
        print(f"echo | nc -s {CLIENT} {first.address} {TCP_PORT}   # the db TCP service")
        for host in (GATEWAY_HOST, INGRESS_HOST):
            print(
                f"curl --cacert {ca_file} --resolve {host}:{HTTPS_PORT}:{first.address} "
                f"https://{host}:{HTTPS_PORT}/   # HTTPS, the certificate checked"
            )
        print(f"echo 'show table default_shop_http' | socat - UNIX:{first.runtime_socket}")

        heading("routes (demo/routes.yaml)")
        for label, agent in zip("AB", fleet.agents.values(), strict=True):
            ready(agent, label)
        routed = routes(fleet)

        heading("HTTPS routes (demo-https/https.yaml)")
        routed = https_routes(fleet, ctx, leaf.serial_hex) and routed

        heading("certificate rotation: a renewed Secret, no reload")
        if real is None:
            where = str(fleet.manifests / SECRET_FILE)
            routed = rotation(fleet, ctx, ca, lambda r: write_secret(fleet.manifests, r), where)
        else:
            renew = real.renew
            routed = rotation(fleet, ctx, ca, renew, "Secret default/demo-tls", True) and routed

        heading("failover run")
        ok = failover(fleet, ctx, cookies=real is None) and routed
        print(f"db over TCP through {first.address}:{TCP_PORT}: {tcp_get(first.address, CLIENT)}")
        if args.once:
            return 0 if ok else 1
        heading("running: Ctrl-C stops everything")
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        return 0 if ok else 1
    finally:
        print("\nstopping ...", flush=True)
        fleet.stop()
        if real is not None:
            real.close()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        print("stopped.")


if __name__ == "__main__":
    sys.exit(main())
