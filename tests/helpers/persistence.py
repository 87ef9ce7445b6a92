"""Persistence under churn: a manifests cluster that changes, and clients that check it.

The pure part (`Cluster`, `plan_events`, `Pins`) says what the cluster is, what happens to
it and whether a client moved; the I/O part (`ask_all`, `servers_by_slot`, `reloads`,
`kill_haproxy`) talks to real HAProxy instances over loopback. Used by
tests/system/test_e2e_persistence_churn.py (the whole fleet, per HAProxy version) and by
`python -m tests.bench persistence`.

A client "moved" when the pod answering it changed while the pod it was pinned to still
served (present and ready). A client whose pod went away is re-pinned by its next answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.haproxy.driver import HAProxy
from nodeagent.haproxy.parse import parse_servers_state

HOST = "shop.example.com"
HTTP_PORT = 18080
TCP_PORT = 15432
BACKEND_PORT = 8888
TCP_BACKEND_PORT = 15433
SERVER_SLOTS = 8
# Scale events; "reuse" is a removal, a check, then a new pod that may take the freed slot.
KINDS = ("remove", "add", "flip", "grow", "reuse")


# ---------------------------------------------------------------- the cluster (pure)


@dataclass
class Pod:
    name: str
    ip: str
    ready: bool = True


@dataclass
class Service:
    """One backend Service: its pods, and how its manifest and HAProxy backend look."""

    name: str
    kind: str  # "http" or "tcp"
    subnet: str  # "127.<octet>.<n>": pod i lives at <subnet>.<i>
    pods: dict[str, Pod] = field(default_factory=dict)
    created: int = 0

    @property
    def port(self) -> int:
        return BACKEND_PORT if self.kind == "http" else TCP_BACKEND_PORT

    def new_pod(self) -> Pod:
        """A new pod: a new name and a new address (never one used before)."""
        self.created += 1
        pod = Pod(f"{self.name}-{self.created}", f"{self.subnet}.{self.created}")
        self.pods[pod.name] = pod
        return pod

    def serving(self) -> set[str]:
        """Pods a client may be pinned to: present and ready."""
        return {p.name for p in self.pods.values() if p.ready}

    def manifest(self) -> str:
        if self.kind == "http":
            annotations = (
                f"    haproxy.org/hosts: {HOST}\n"
                "    haproxy.org/load-balance: source\n"
                '    haproxy.org/source-ip-persistence: "true"\n'
            )
        else:
            annotations = (
                f'    haproxy.org/tcp-port: "{TCP_PORT}"\n'
                "    haproxy.org/load-balance: leastconn\n"
                '    haproxy.org/source-ip-persistence: "true"\n'
            )
        endpoints = "".join(
            f'  - addresses: ["{p.ip}"]\n'
            f"    conditions: {{ready: {'true' if p.ready else 'false'}}}\n"
            f"    targetRef: {{kind: Pod, name: {p.name}}}\n"
            for p in self.pods.values()
        )
        return (
            "apiVersion: v1\nkind: Service\nmetadata:\n"
            f"  name: {self.name}\n  namespace: default\n"
            '  creationTimestamp: "2026-01-01T00:00:00Z"\n'
            '  annotations:\n    haproxy.org/expose: "true"\n'
            f"{annotations}"
            "spec:\n  ports:\n"
            f"    - name: {self.kind}\n      port: 80\n      targetPort: {self.port}\n"
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n"
            f"  name: {self.name}-slice\n  namespace: default\n"
            f"  labels:\n    kubernetes.io/service-name: {self.name}\n"
            "addressType: IPv4\nports:\n"
            f"  - name: {self.kind}\n    port: {self.port}\n    protocol: TCP\n"
            f"endpoints:\n{endpoints}"
        )


def settings_manifest() -> str:
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        "  name: haproxy-settings\n  namespace: haproxy-system\ndata:\n"
        f'  http-port: "{HTTP_PORT}"\n  peer-port: "10000"\n  load-balance: roundrobin\n'
        "  source-ip-persistence-size: 1m\n  source-ip-persistence-expire: 30m\n"
        f'  server-slots: "{SERVER_SLOTS}"\n'
    )


def haproxy_manifest(pods: Sequence[tuple[str, str]]) -> str:
    """The DaemonSet and its HAProxy pods (name, address): every pod is a peer."""
    members = "".join(
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n"
        f"  name: {name}\n  namespace: haproxy-system\n"
        "  labels:\n    app.kubernetes.io/component: haproxy\n"
        "  ownerReferences:\n    - apiVersion: apps/v1\n      kind: DaemonSet\n"
        "      name: haproxy\n      controller: true\n"
        f"spec:\n  nodeName: node-{name[-5:]}\nstatus:\n  phase: Running\n  podIP: {ip}\n"
        for name, ip in pods
    )
    return (
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n"
        "  name: haproxy\n  namespace: haproxy-system\nspec:\n"
        "  selector:\n    matchLabels:\n      app.kubernetes.io/component: haproxy\n"
        "  template:\n    metadata:\n      labels:\n"
        "        app.kubernetes.io/component: haproxy\n"
        "    spec:\n      containers:\n        - name: haproxy\n          image: haproxy\n"
        f"{members}"
    )


def write_atomic(path: Path, text: str) -> None:
    """The files source never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------- events (pure)


@dataclass(frozen=True)
class Event:
    kind: str
    service: str


def plan_events(
    rng: random.Random, events: int, reuse: int, services: Sequence[str]
) -> list[Event]:
    """`events` scale events, `reuse` of them slot-reuse events, at least one growth per
    Service, the rest random; shuffled by `rng` (the printed seed replays it)."""
    fixed = [Event("reuse", rng.choice(services)) for _ in range(reuse)]
    fixed += [Event("grow", name) for name in services]
    others = ("remove", "add", "flip")
    rest = [Event(rng.choice(others), rng.choice(services)) for _ in range(events - len(fixed))]
    planned = fixed + rest
    rng.shuffle(planned)
    return planned


def flip_candidates(service: Service, added: Pod | None) -> list[Pod]:
    """The pods a readiness flip may pick, keeping two serving: a not-ready one while two
    or fewer serve, else any but `added`, the pod added for this flip (added and made not
    ready in one change it never had a slot, so the snapshot would not change at all)."""
    if len(service.serving()) <= 2:
        candidates = [p for p in service.pods.values() if not p.ready]
    else:
        candidates = [p for p in service.pods.values() if p is not added]
    return sorted(candidates, key=lambda p: p.name)


# ---------------------------------------------------------------- pins (pure)


@dataclass
class Tally:
    moved: int = 0
    split: int = 0
    failed: int = 0
    details: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.details) < 20:
            self.details.append(text)


class Pins:
    """Each (service, client)'s pod, kept until that pod stops serving."""

    def __init__(self) -> None:
        self.pod: dict[tuple[str, str], str] = {}

    def release_gone(self, serving: Mapping[str, set[str]]) -> list[tuple[str, str]]:
        """Forget pins to pods no longer serving; the (service, client) keys forgotten."""
        gone = [key for key, pod in self.pod.items() if pod not in serving[key[0]]]
        for key in gone:
            del self.pod[key]
        return gone

    def check(
        self, step: str, answers: Mapping[tuple[str, str], str], tally: Tally
    ) -> list[tuple[str, str]]:
        """One instance's answers; a pinned client answered by another pod moved; an
        unpinned one is pinned by this answer (instances are checked one after another).
        The (service, client) keys that moved."""
        moved: list[tuple[str, str]] = []
        for key, answer in answers.items():
            if answer.startswith("!"):
                tally.failed += 1
                tally.note(f"{step}: {key} failed: {answer[1:]}")
                continue
            pinned = self.pod.get(key)
            if pinned is None:
                self.pod[key] = answer
            elif answer != pinned:
                tally.moved += 1
                tally.note(f"{step}: {key[0]} client {key[1]} moved {pinned} -> {answer}")
                self.pod[key] = answer
                moved.append(key)
        return moved


# ---------------------------------------------------------------- clients (I/O)


async def _ask_one(instance: str, client: str, kind: str, timeout: float) -> str:
    """One request on a new connection from `client`: the answering pod, or "!error"."""
    port = HTTP_PORT if kind == "http" else TCP_PORT
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(instance, port, local_addr=(client, 0)), timeout
        )
        try:
            if kind == "http":
                request = f"GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
                writer.write(request.encode())
            data = await asyncio.wait_for(reader.read(), timeout)
        finally:
            writer.close()
    except (OSError, TimeoutError) as e:
        return f"!{type(e).__name__}: {e}"
    text = data.decode(errors="replace")
    if kind == "http":
        head, _, body = text.partition("\r\n\r\n")
        if not head.startswith("HTTP/1.") or " 200 " not in head.split("\r\n")[0] + " ":
            return f"!{head.splitlines()[0] if head else 'empty reply'}"
        text = body
    return text.strip() or "!empty reply"


async def _ask_many(
    jobs: Sequence[tuple[str, str, str]], concurrency: int, timeout: float
) -> list[str]:
    limit = asyncio.Semaphore(concurrency)

    async def one(instance: str, client: str, kind: str) -> str:
        async with limit:
            return await _ask_one(instance, client, kind, timeout)

    return await asyncio.gather(*(one(*job) for job in jobs))


def ask_all(
    instance: str,
    clients: Iterable[tuple[str, str, str]],
    concurrency: int = 32,
    timeout: float = 5.0,
) -> dict[tuple[str, str], str]:
    """Every (service, kind, client) asks through HAProxy `instance`:
    {(service, client): pod or "!error"}."""
    jobs = list(clients)
    answers = asyncio.run(
        _ask_many([(instance, client, kind) for _, kind, client in jobs], concurrency, timeout)
    )
    return {(svc, client): answer for (svc, _, client), answer in zip(jobs, answers, strict=True)}


# ---------------------------------------------------------------- HAProxy state (I/O)


def servers_by_slot(runtime_socket: Path, backend: str) -> dict[str, str]:
    """`show servers state` of one backend: SRV_n -> "addr:port" or "disabled"."""
    text = HAProxy("", str(runtime_socket)).runtime(f"show servers state {backend}")
    return {
        name: f"{s.address}:{s.port}" if s.enabled else "disabled"
        for name, s in parse_servers_state(text).items()
    }


def config_servers(config: Path) -> dict[str, str]:
    """The rendered config's server lines: "backend/SRV_n" -> the rest of the line."""
    found: dict[str, str] = {}
    backend = ""
    for line in config.read_text().splitlines():
        words = line.split()
        if words[:1] == ["backend"]:
            backend = words[1]
        elif words[:1] == ["server"] and backend:
            rest = " ".join(words[2:]) if "enabled" in words else "disabled"
            found[f"{backend}/{words[1]}"] = rest
    return found


def slot_mismatches(views: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Slots (keys) on which the instances' views disagree, one line each."""
    keys = set().union(*(set(v) for v in views.values())) if views else set()
    return [
        f"{key}: " + ", ".join(f"{name}={view.get(key)}" for name, view in views.items())
        for key in sorted(keys)
        if len({view.get(key) for view in views.values()}) > 1
    ]


def reloads(master_socket: Path, runtime_socket: Path) -> int:
    """Reloads of one HAProxy master so far (`show proc`)."""
    return HAProxy(str(master_socket), str(runtime_socket)).show_proc().reloads


def kill_haproxy(master_socket: Path, runtime_socket: Path) -> list[int]:
    """SIGKILL one HAProxy instance (its master and workers, by PID); the PIDs."""
    info = HAProxy(str(master_socket), str(runtime_socket)).show_proc()
    pids = [info.master_pid, *(pid for pid, _ in info.workers)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids
