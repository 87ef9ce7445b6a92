"""Test deltas, built independently of the server's builder: from two full snapshots, by
the proto's rules (SnapshotDelta), with real content hashes; and sequences of versions
made by the control plane's own computation and encoder."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

from controlplane.compute import Computer
from controlplane.model import ClusterState
from controlplane.publish import Encoder, content_hash
from controlplane.snapshot import HttpListener, RoutePath, RouteRule, WeightedBackend
from nodeagent.config.changes import Decision, classify
from nodeagent.config.render import RenderOptions, render_held
from nodeagent.held import Held, diff
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import cluster, endpoint_slice, haproxy_pod, service, settings

WORKLOAD = "haproxy-system/DaemonSet/haproxy"


def hashed(snapshot: pb.Snapshot, version: int | None = None) -> pb.Snapshot:
    """`snapshot` with its real content hash (and `version` if given), as the server sends."""
    if version is not None:
        snapshot.version = version
    snapshot.content_hash = content_hash(snapshot)
    return snapshot


def _part(snapshot: pb.Snapshot, *names: str) -> bytes:
    only = pb.Snapshot()
    for name in names:
        field = getattr(snapshot, name)
        if name in ("peers", "http_frontend"):
            if snapshot.HasField(name):
                getattr(only, name).CopyFrom(field)
        else:
            getattr(only, name).extend(field)
    return only.SerializeToString(deterministic=True)


def delta_between(old: pb.Snapshot, new: pb.Snapshot) -> pb.SnapshotDelta:
    """The SnapshotDelta from `old` to `new` (both hashed)."""
    before = {b.name: b.SerializeToString(deterministic=True) for b in old.backends}
    d = pb.SnapshotDelta(
        workload=new.workload,
        version=new.version,
        to_content_hash=new.content_hash,
        from_content_hash=old.content_hash,
    )
    after = set()
    for b in sorted(new.backends, key=lambda b: b.name):
        after.add(b.name)
        if before.get(b.name) != b.SerializeToString(deterministic=True):
            d.backends.append(b)
    d.removed_backends.extend(sorted(set(before) - after))
    if _part(old, "peers") != _part(new, "peers"):
        d.peers_changed = True
        if new.HasField("peers"):
            d.peers.CopyFrom(new.peers)
    fronts = ("http_frontend", "tcp_frontends", "http_listeners")
    if _part(old, *fronts) != _part(new, *fronts):
        d.frontends_changed = True
        if new.HasField("http_frontend"):
            d.http_frontend.CopyFrom(new.http_frontend)
        d.tcp_frontends.extend(new.tcp_frontends)
        d.http_listeners.extend(new.http_listeners)
    if _part(old, "warnings") != _part(new, "warnings"):
        d.warnings_changed = True
        d.warnings.extend(new.warnings)
    certs = {c.name: c.SerializeToString(deterministic=True) for c in old.certificates}
    for c in sorted(new.certificates, key=lambda c: c.name):
        if certs.get(c.name) != c.SerializeToString(deterministic=True):
            d.certificates.append(c)
    d.removed_certificates.extend(sorted(certs.keys() - {c.name for c in new.certificates}))

    def key(group: pb.RouteGroup) -> str:
        return f"{group.listener}/{group.host}"

    groups = {key(g): g.SerializeToString(deterministic=True) for g in old.route_groups}
    for g in sorted(new.route_groups, key=key):
        if groups.get(key(g)) != g.SerializeToString(deterministic=True):
            d.route_groups.append(g)
    d.removed_route_groups.extend(sorted(groups.keys() - {key(g) for g in new.route_groups}))
    return d


def flat(snapshot: pb.Snapshot) -> pb.Snapshot:
    """`snapshot` as a contract-1 control plane sent it: each listener's rules its route
    groups' rules in key order, no groups (what the agent renders a listener as)."""
    out = pb.Snapshot()
    out.CopyFrom(snapshot)
    del out.route_groups[:]
    for listener in out.http_listeners:
        name = f"{listener.address}:{listener.port}" if listener.address else str(listener.port)
        for group in sorted(snapshot.route_groups, key=lambda g: f"{g.listener}/{g.host}"):
            if group.listener == name:
                listener.rules.extend(group.rules)
    return out


def grouped(snapshot: pb.Snapshot) -> pb.Snapshot:
    """`snapshot` as contract 2 carries it: each listener's inline rules moved into route
    groups (one per listener and host, each host's rules in the listener's order, sorted
    by key), as the control plane's encoder groups them; the content hash is kept."""
    out = pb.Snapshot()
    out.CopyFrom(snapshot)
    groups: dict[str, pb.RouteGroup] = {}
    for listener in out.http_listeners:
        name = f"{listener.address}:{listener.port}" if listener.address else str(listener.port)
        for rule in listener.rules:
            host = rule.hostnames[0] if rule.hostnames else ""
            assert len(rule.hostnames) <= 1, "contract 2: one hostname per rule"
            key = f"{name}/{host}"
            groups.setdefault(key, pb.RouteGroup(listener=name, host=host)).rules.append(rule)
        del listener.rules[:]
    out.route_groups.extend(groups[key] for key in sorted(groups))
    return out


def classify_snapshots(old: pb.Snapshot, new: pb.Snapshot, opts: RenderOptions) -> Decision:
    """changes.classify() as the applier calls it: held parts, sections, the change set."""
    old_h, new_h = Held.from_snapshot(old), Held.from_snapshot(new)
    old_r = render_held(old_h, opts)
    return classify(old_h, old_r, new_h, render_held(new_h, opts, old_r), diff(old_h, new_h))


def ip(index: int, base: int) -> str:
    value = base + index
    return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"


@dataclasses.dataclass
class Cluster:
    """A mutable little cluster: Services with endpoints, annotations, HAProxy pods."""

    endpoints: dict[str, list[str]]
    annotations: dict[str, dict[str, str]]
    pods: list[str]
    config: dict[str, str] = dataclasses.field(default_factory=dict)

    def state(self) -> ClusterState:
        svcs = [service(n, annotations=self.annotations.get(n)) for n in sorted(self.endpoints)]
        slices = [endpoint_slice(n, a) for n, a in sorted(self.endpoints.items())]
        pods = [haproxy_pod(p, ip(i, 0x7F_01_00_00)) for i, p in enumerate(self.pods)]
        return cluster(svcs, slices, pods, config=settings(**self.config))


def random_versions(seed: int, steps: int, services: int = 12) -> Iterator[pb.Snapshot]:
    """Hashed, versioned snapshots of one workload through random changes (endpoints
    moved, added, removed; Services added and removed; settings; peers), as the control
    plane computes and encodes them."""
    rng = random.Random(seed)
    c = Cluster(
        endpoints={
            f"svc-{s:03d}": [ip(s * 8 + e, 0x7F_10_00_00) for e in range(rng.randint(1, 5))]
            for s in range(services)
        },
        annotations={},
        pods=["haproxy-a", "haproxy-b"],
    )
    computer, encoder = Computer(), Encoder()
    assignment = None
    counter = 1000
    version = 0
    last = ""
    for _ in range(steps * 3):
        result = computer.compute(c.state(), assignment if assignment is not None else {})
        assignment = result.assignment
        content = encoder.encode(result.workloads)[WORKLOAD]
        if content.content_hash != last:
            version += 1
            last = content.content_hash
            yield content.message(version)
            if version >= steps:
                return
        counter += 1
        name = rng.choice(sorted(c.endpoints))
        roll = rng.random()
        if roll < 0.45:  # move one endpoint
            eps = c.endpoints[name]
            if eps:
                eps[rng.randrange(len(eps))] = ip(counter, 0x7F_20_00_00)
        elif roll < 0.6:
            c.endpoints[name].append(ip(counter, 0x7F_20_00_00))
        elif roll < 0.7:
            if c.endpoints[name]:
                c.endpoints[name].pop()
        elif roll < 0.78:
            c.endpoints[f"svc-new-{counter}"] = [ip(counter, 0x7F_30_00_00)]
        elif roll < 0.84 and len(c.endpoints) > 2:
            del c.endpoints[name]
            c.annotations.pop(name, None)
        elif roll < 0.88:
            c.annotations[name] = {
                "haproxy.org/source-ip-persistence": rng.choice(["true", "false"]),
                "haproxy.org/load-balance": rng.choice(["source", "roundrobin", "bogus!"]),
                "haproxy.org/hosts": rng.choice(["", f"{name}.example.com"]),
            }
        elif roll < 0.92:  # a bad ConfigMap value is a snapshot warning; spares claimed
            configs = [{}, {"check-rise": "x"}, {"check-rise": "5"}, {"spare-backends": "2"}]
            c.config = rng.choice(configs)
        elif len(c.pods) < 4:
            c.pods.append(f"haproxy-{counter}")
        else:
            c.pods.pop()


_HOSTS = ("", "a.example.com", "b.example.com", "*.example.com", "c.example.org")


def _random_rule(rng: random.Random, n: int, backends: list[str]) -> RouteRule:
    """A rule for one random host: mostly a map rule (host and path, one backend),
    sometimes a config rule (a method, a header, weights)."""
    host = rng.choice(_HOSTS)
    path = RoutePath(rng.choice(("Exact", "PathPrefix")), rng.choice(("/", "/a", "/b", "/a/b")))
    roll = rng.random()
    chosen = (WeightedBackend(rng.choice(backends), 1),)
    method, headers = "", ()
    if roll < 0.15:
        method = "GET"
    elif roll < 0.25:
        headers = (("x-t", str(rng.randrange(3))),)
    elif roll < 0.3 and len(backends) > 1:
        chosen = (WeightedBackend(backends[0], 1), WeightedBackend(backends[1], 3))
    return RouteRule(
        f"HTTPRoute ns/r{n} rule 0 match 0",
        (host,) if host else (),
        path,
        method=method,
        headers=headers,
        backends=chosen,
        single_label_wildcards=host.startswith("*.") and rng.random() < 0.3,
    )


def random_route_versions(seed: int, steps: int) -> Iterator[pb.Snapshot]:
    """Hashed, versioned snapshots of one workload with HTTP listeners (one every-address,
    one with its own address) through random route changes (a rule added, removed,
    re-pointed, moved in its listener's order; a listener's default backend), encoded by
    one incremental `Encoder` as the control plane does."""
    rng = random.Random(seed)
    c = Cluster(
        endpoints={f"svc-{s:03d}": [ip(s, 0x7F_10_00_00)] for s in range(4)},
        annotations={},
        pods=["haproxy-a", "haproxy-b"],
    )
    base = Computer().compute(c.state(), {}).workloads[WORKLOAD]
    backends = sorted(b.name for b in base.backends)
    lists: dict[tuple[int, str], list[RouteRule]] = {
        (80, ""): [_random_rule(rng, n, backends) for n in range(8)],
        (8080, "127.0.0.9"): [_random_rule(rng, 100 + n, backends) for n in range(4)],
    }
    defaults = {(80, ""): "", (8080, "127.0.0.9"): backends[0]}
    encoder = Encoder()
    counter = 1000
    last = ""
    version = 0
    while version < steps:
        listeners = tuple(
            HttpListener(port, tuple(rules), defaults[(port, address)], address=address)
            for (port, address), rules in sorted(lists.items())
        )
        snapshot = dataclasses.replace(base, http_listeners=listeners)
        content = encoder.encode({WORKLOAD: snapshot})[WORKLOAD]
        if content.content_hash != last:
            version += 1
            last = content.content_hash
            yield content.message(version)
        counter += 1
        rules = lists[rng.choice(sorted(lists))]
        roll = rng.random()
        if roll < 0.35 or not rules:
            rules.insert(rng.randrange(len(rules) + 1), _random_rule(rng, counter, backends))
        elif roll < 0.55:
            del rules[rng.randrange(len(rules))]
        elif roll < 0.8:
            i = rng.randrange(len(rules))
            rules[i] = dataclasses.replace(
                rules[i], backends=(WeightedBackend(rng.choice(backends), 1),)
            )
        elif roll < 0.92:
            rules.insert(rng.randrange(len(rules)), rules.pop(rng.randrange(len(rules))))
        else:
            key = rng.choice(sorted(defaults))
            defaults[key] = rng.choice(["", *backends])
