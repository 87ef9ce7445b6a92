"""A hostile control plane: names that try to leave the agent's directories (`../`, `/`),
NUL, newlines and HAProxy config lines smuggled into every string field of a snapshot.

The agent checks every string again (it does not trust the control plane's checks): each
hostile value is refused with a NACK that names the field, or it stays where it was put
(one token on its own config line, or a display-only field nothing renders). Nothing is
written outside the agent's directories, the running config stays valid, and the next
good snapshot applies (docs/operations.md, "Faults the agent survives").
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.message import Message

from nodeagent.config import certs
from nodeagent.config.filters import RENDERERS
from nodeagent.config.listeners import map_file
from nodeagent.config.render import RenderError, RenderOptions, render_held
from nodeagent.held import DeltaError, Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_client import FakePlane, running, serve, within
from tests.agent.test_routes_haproxy import gateway_listener, rule
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.deltas import delta_between, hashed
from tests.helpers.haproxy_env import backend, free_port, http_get, identity_server, snapshot
from tests.helpers.tls_agent import certificate, https_listener
from tests.helpers.tls_certs import make_ca

CA = make_ca()
LEAF = CA.issue("shop.example.com", "*.shop.example.com")
TOKEN = "pp-evil"  # every hostile value carries it: a file or line holding it is found
HEAD, TAIL = "pp-head", "pp-tail"  # a smuggled line holds TAIL without HEAD before it
PAYLOADS = (
    f"{HEAD}\n  http-request deny # {TAIL} {TOKEN}",  # a config line after a newline
    f"{HEAD}\r\nbackend {TAIL}-{TOKEN}\n  server x 1.2.3.4:80",  # a section, CRLF
    f"../../{TOKEN}",  # out of the certificates or maps directory
    f"/tmp/{TOKEN}",  # an absolute path
    f"{TOKEN}\x00.pem",  # NUL: C sees a shorter name
    f"{HEAD} {TOKEN} # {TAIL}",  # a second token and a comment on the same line
)


def rich_snapshot(ip: str = "127.0.0.1", http_port: int = 8000, version: int = 1) -> pb.Snapshot:
    """Every kind of string the contract carries: peers, backends of each balance with a
    health check and warnings, a host route, a TCP frontend, Gateway and Ingress
    listeners (methods, headers, query params, redirect, header filters, weights), an
    HTTPS listener with two certificates and SNI filters, a TLS passthrough listener."""
    a = backend("ns_a_80", [("10.0.0.1", 80)])
    a.check.CopyFrom(pb.HealthCheck(interval_ms=2000, rise=2, fall=3, http_path="/healthz"))
    a.warnings.add(object="Service ns/a", key="haproxy.org/check", value="x", reason="bad")
    b = backend("ns_b_80", [("10.0.0.2", 80)], balance="hdr", balance_argument="X-Tenant")
    c = backend("ns_c_80", [("10.0.0.3", 80)], balance="url_param", balance_argument="q")
    c.hash_type = "consistent"
    t = backend("ns_t_443", [("10.0.0.4", 443)], mode="tcp")
    s = snapshot(
        [("pod-a", ip, 10000), ("pod-b", "127.0.0.2", 10000)],
        [a, b, c, t],
        http_port=http_port,
        routes=[("shop.example.com", "ns_a_80")],
        tcp=[(http_port + 1, "ns_t_443")],
        version=version,
    )
    s.tcp_frontends[0].source = "TCPRoute ns/pg rule 0"
    s.http_listeners.append(gateway_listener(http_port + 2))
    ingress = pb.HttpListener(
        port=http_port + 3,
        rules=[rule(["i.example.com"], "b", "/bar")],
        default_backend="ns_c_80",
    )
    s.http_listeners.append(ingress)
    https = https_listener(
        http_port + 4,
        [("ns_web", []), ("ns_api", ["api.shop.example.com", "!x.shop.example.com"])],
        rules=[rule(["shop.example.com"], "a", "/")],
    )
    s.http_listeners.append(https)
    s.certificates.extend([certificate("ns_api", LEAF), certificate("ns_web", LEAF)])
    db = pb.SniRoute(source="TLSRoute ns/db rule 0", hostnames=["db.example.com"])
    db.backends.add(backend="ns_t_443", weight=1)
    s.tls_listeners.add(port=http_port + 5, routes=[db])
    s.warnings.add(object="Service ns/x", key="haproxy.org/check", value="zz", reason="bad")
    return s


Path_ = tuple[tuple[str, int | None], ...]  # a string field: (field, index or None) steps


def string_fields(msg: Message, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every string field set or settable in `msg`, recursively (repeated ones by index)."""
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        if f.is_repeated:
            for i in range(len(value)):
                if f.message_type is not None:
                    yield from string_fields(value[i], (*prefix, (f.name, i)))
                elif f.type == f.TYPE_STRING:
                    yield (*prefix, (f.name, i))
        elif f.message_type is not None:
            if msg.HasField(f.name):
                yield from string_fields(value, (*prefix, (f.name, None)))
        elif f.type == f.TYPE_STRING:
            yield (*prefix, (f.name, None))


def with_value(snap: pb.Snapshot, path: Path_, value: str) -> pb.Snapshot:
    out = pb.Snapshot()
    out.CopyFrom(snap)
    msg: Message = out
    for name, i in path[:-1]:
        msg = getattr(msg, name)[i] if i is not None else getattr(msg, name)
    name, i = path[-1]
    if i is None:
        setattr(msg, name, value)
    else:
        getattr(msg, name)[i] = value
    return out


def field_name(path: Path_) -> str:
    """`http_listeners.rules.headers.value`: the field, whatever the indexes."""
    return ".".join(name for name, _ in path)


# What the NACK says for a refused value of each field: the field named in its words.
REFUSAL = {
    "workload": "invalid workload",
    "content_hash": "invalid hash",
    "peers.name": "invalid peers section name",
    "peers.peers.name": "invalid peer name",
    "peers.peers.address": "invalid peer address",
    "backends.name": "backend",
    "backends.mode": "invalid mode",
    "backends.balance": "invalid balance",
    "backends.balance_argument": "balance",  # "balance source takes no argument", ...
    "backends.hash_type": "invalid hash-type",
    "backends.slots.server_name": "named",
    "backends.slots.address": "invalid server address",
    "backends.check.http_path": "invalid check-http",
    "backends.protocol": "invalid protocol",
    "backends.section": "invalid spare section",
    "http_frontend.routes.host": "invalid host",
    "http_frontend.routes.backend": "invalid backend name",
    "tcp_frontends.backend": "invalid backend name",
    "http_listeners.default_backend": "invalid backend name",
    "http_listeners.address": "invalid address",
    "http_listeners.rules.hostnames": "invalid hostname",
    "http_listeners.rules.method": "invalid method",
    "http_listeners.rules.path.value": "invalid path",
    "http_listeners.rules.headers.name": "invalid header match",
    "http_listeners.rules.headers.value": "invalid header match",
    "http_listeners.rules.query_params.name": "invalid query match",
    "http_listeners.rules.query_params.value": "invalid query match",
    "http_listeners.rules.backends.backend": "invalid backend name",
    # Each route filter's fields, in the words of its renderer (nodeagent/config/filters):
    # a new filter's come with it; those of the first two are written out here too.
    **{
        f"http_listeners.rules.{renderer.field}.{name}": words
        for renderer in RENDERERS
        for name, words in renderer.refusals.items()
    },
    "http_listeners.rules.request_headers.set.name": "invalid header filter",
    "http_listeners.rules.request_headers.set.value": "invalid header filter",
    "http_listeners.rules.request_headers.add.name": "invalid header filter",
    "http_listeners.rules.request_headers.add.value": "invalid header filter",
    "http_listeners.rules.request_headers.remove": "invalid header filter",
    "http_listeners.rules.redirect.scheme": "invalid redirect scheme",
    "http_listeners.rules.redirect.hostname": "invalid redirect hostname",
    "http_listeners.rules.redirect.replace_full_path": "invalid redirect path",
    "http_listeners.tls.certificates.certificate": "invalid certificate name",
    "http_listeners.tls.certificates.hostnames": "invalid SNI",
    "certificates.name": "invalid certificate name",
    "tls_listeners.routes.hostnames": "invalid hostname",
    "tls_listeners.routes.backends.backend": "invalid backend name",
}
# Fields nothing renders (shown by `controlplane status` and logs, escaped there): any
# value is accepted and reaches no file. A free slot's address is not rendered either.
DISPLAY_ONLY = {
    "backends.service",
    "backends.service_port",
    "backends.warnings.object",
    "backends.warnings.key",
    "backends.warnings.value",
    "backends.warnings.reason",
    "warnings.object",
    "warnings.key",
    "warnings.value",
    "warnings.reason",
    "tcp_frontends.source",
    "http_listeners.rules.source",
    "tls_listeners.routes.source",
    "certificates.secret",
    "certificates.fingerprint",
    "certificates.serial",
    "certificates.not_after",
    "certificates.dns_names",
}
OPTS = RenderOptions(
    "pod-a",
    bind_address="127.0.0.1",
    runtime_socket="/run/agent/runtime.sock",
    maps_dir="/etc/agent/maps",
    certs_dir="/etc/agent/certs",
)


def written(held: Held) -> dict[str, str]:
    """What the agent would write for `held`: path -> text (haproxy.cfg, map files,
    crt-lists, certificate files); RenderError or DeltaError when it refuses it."""
    out = render_held(held, OPTS)
    files = {"/etc/agent/haproxy.cfg": out.text()}
    files.update({path: map_file(entries).decode() for path, entries in out.maps.items()})
    for port, lines in out.crt_lists.items():
        files[certs.crtlist_path(OPTS.certs_dir, port)] = certs.crtlist_file(
            OPTS.certs_dir, lines
        ).decode()
    for name in held.certificates:
        files[certs.cert_path(OPTS.certs_dir, name)] = "(pem)"
    return files


def smuggled(files: dict[str, str]) -> list[str]:
    """Lines a payload added: TAIL without HEAD before it on the line, or a NUL."""
    return [
        f"{path}: {line!r}"
        for path, text in files.items()
        for line in text.splitlines()
        if (TAIL in line and HEAD not in line.split(TAIL)[0]) or "\x00" in line
    ]


def _paths_inside(files: dict[str, str]) -> list[str]:
    return [
        p
        for p in files
        if os.path.normpath(p) != p or not p.startswith(("/etc/agent/", OPTS.certs_dir))
    ]


@pytest.mark.unit  # pure
@pytest.mark.parametrize(
    "payload", PAYLOADS, ids=["newline", "crlf", "dotdot", "abs", "nul", "tok"]
)
def test_every_string_field_is_refused_by_name_or_stays_on_its_line(payload: str) -> None:
    base = rich_snapshot()
    clean = written(Held.from_snapshot(base))
    outcomes: dict[str, str] = {}
    for path in string_fields(base):
        field = field_name(path)
        try:
            files = written(Held.from_snapshot(with_value(base, path, payload)))
        except (RenderError, DeltaError) as e:
            assert field in REFUSAL, f"{field} refused but not in REFUSAL: {e}"
            assert REFUSAL[field] in str(e), f"{field}: {e}"
            if field.startswith("backends.") and field != "backends.name":
                assert f"backend {base.backends[path[0][1] or 0].name}:" in str(e), e
            assert "\n" not in str(e) and "\x00" not in str(e)  # repr'd: one line
            outcomes[field] = "refused"
            continue
        outcomes.setdefault(field, "accepted")
        assert not smuggled(files), (field, smuggled(files))
        assert not _paths_inside(files), (field, _paths_inside(files))
        assert set(files) == set(clean), field  # no file added, named or moved by a value
        if field in DISPLAY_ONLY or (field == "backends.slots.address" and path[1][1] != 0):
            assert files == clean, f"{field} is display-only but changed a file"
    # Every field was tried, and every field that names a file is refused.
    assert {field_name(p) for p in string_fields(base)} <= REFUSAL.keys() | DISPLAY_ONLY
    for field in ("certificates.name", "http_listeners.tls.certificates.certificate"):
        assert outcomes[field] == "refused"


@pytest.mark.unit  # pure
@pytest.mark.parametrize("field", ["removed_backends", "removed_certificates"])
@pytest.mark.parametrize("payload", PAYLOADS[:5], ids=["newline", "crlf", "dotdot", "abs", "nul"])
def test_a_delta_removing_a_hostile_name_is_refused_with_resync(field: str, payload: str) -> None:
    """Removals name what the agent holds, never a file: a name it does not hold is a
    delta it cannot apply (NACK with resync: the full snapshot follows)."""
    base = hashed(rich_snapshot(), version=1)
    delta = delta_between(base, hashed(rich_snapshot(), version=2))
    getattr(delta, field).append(payload)
    with pytest.raises(DeltaError, match="is not held"):
        Held.from_snapshot(base).apply(delta)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _outside(root: Path, inside: Path) -> set[str]:
    """Everything under `root` but `inside` and what it holds."""
    mine = inside.relative_to(root)
    return {p for p in _tree(root) if not Path(p).is_relative_to(mine)}


@pytest.mark.haproxy
def test_a_hostile_control_plane_is_refused_and_writes_nothing_outside_the_agent(
    agents: AgentHarness, tmp_path: Path
) -> None:
    inst = agents.instance()
    client = agents.client(inst.applier)
    net, ip = agents.net, inst.ip
    http_port = free_port(ip)
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
    ):

        def good(version: int, shop: tuple[str, int]) -> pb.Snapshot:
            s = rich_snapshot(ip, http_port, version)
            del s.peers.peers[1:]  # pod-b does not run here
            s.peers.peers[0].port = free_port(ip)
            s.backends[0].slots[0].address, s.backends[0].slots[0].port = shop
            return s

        v1 = good(1, (f"{net}.11", p11))
        hostile: list[tuple[str, pb.Snapshot]] = []
        version = 1
        for path in string_fields(v1):
            field = field_name(path)
            if field in DISPLAY_ONLY or field in ("content_hash", "workload"):
                continue  # display-only: the unit test above; the hash: one per version
            version += 1
            payload = PAYLOADS[version % len(PAYLOADS)]
            snap = with_value(v1, path, payload)
            snap.version, snap.content_hash = version, f"{version:064x}"
            hostile.append((field, snap))
        last = good(version + 1, (f"{net}.12", p12))
        plane = FakePlane([v1, *(s for _, s in hostile), last])
        outside_before = _outside(tmp_path, inst.dir)

        async def scenario() -> list[pb.AgentMessage]:
            async with serve(plane, agents.port), running(client):
                return [await within(plane.answers.get()) for _ in range(len(hostile) + 2)]

        answers = asyncio.run(within(scenario(), 120))
        assert answers[0].WhichOneof("message") == "ack", answers[0]
        for (field, _snap), answer in zip(hostile, answers[1:-1], strict=True):
            kind = answer.WhichOneof("message")
            if kind == "nack":  # refused by name; HAProxy keeps what it ran
                said = "lacks this pod" if field == "peers.peers.name" else REFUSAL[field]
                assert said in answer.nack.error, (field, answer.nack.error)
                assert not answer.nack.resync
            else:  # accepted only as one token on its own line (`haproxy -c` passed)
                assert field in ("backends.check.http_path", "backends.slots.address") or (
                    "value" in field or "path" in field or field.endswith("prefix_match")
                ), (field, answer)
        assert answers[-1].WhichOneof("message") == "ack", answers[-1]
        assert http_get(ip, http_port, "shop.example.com") == "pod-12"

    # Nothing named by a payload anywhere, nothing new outside the agent's directory.
    assert not [p for p in _tree(tmp_path) if TOKEN in p or HEAD in p]
    assert not Path("/tmp", TOKEN).exists()
    assert _outside(tmp_path, inst.dir) == outside_before
    assert not [p for p in (inst.dir / "certs").iterdir() if TOKEN in p.name]
    config = Path(inst.config_path).read_text()
    assert TOKEN not in config and not smuggled({"cfg": config})
    check = subprocess.run(
        [agents.binary, "-c", "-f", inst.config_path], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert re.search(r"^# workload \S+ content 0+[0-9a-f]+$", config, re.M)
