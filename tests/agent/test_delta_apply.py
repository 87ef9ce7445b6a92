"""Deltas end to end on the agent side, against a real HAProxy (each installed version) and
a scripted control plane over real gRPC: a runtime-only delta is `set server` of the
changed slots and no reload; a settings change reloads; a bad delta is NACKed with resync
at once and nothing is applied; after a restart, deltas continue from the saved snapshot.

docs/design.md, "The agent stream" (deltas on the agent side, the render cache)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from nodeagent.apply import activation
from nodeagent.apply.applier import Applier
from nodeagent.apply.outcome import Result
from nodeagent.cli.flags import build_parser
from nodeagent.config import render as render_module
from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import render
from nodeagent.haproxy.commands import ServerUpdate
from nodeagent.haproxy.driver import HAProxy
from nodeagent.held import ChangeSet, Held
from nodeagent.stream.client import Client
from nodeagent.stream.protocol import Identity
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.agent.test_client import running, serve, within
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.deltas import delta_between, hashed
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    http_get,
    identity_server,
    snapshot,
)

HOST = "shop.example.com"


class RecordingHAProxy(HAProxy):
    """The real driver, remembering every `set server` batch it sent."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sent: list[list[ServerUpdate]] = []

    def set_servers(self, updates: Iterable[ServerUpdate]) -> None:
        batch = list(updates)
        self.sent.append(batch)
        super().set_servers(batch)


def _instance(agents: AgentHarness) -> Instance:
    """Pod a of the harness, its driver replaced by the recording one."""
    inst = agents.instance()
    hx = inst.haproxy
    spy = RecordingHAProxy(hx.master_socket, hx.runtime_socket, hx.haproxy_bin, sync_wait=1.0)
    inst.applier.haproxy = spy
    inst.applier.activation = activation.for_mode(spy, inst.supervisor)
    inst.haproxy = spy
    return inst


class Shop:
    """Two backends (shop: routed by host; other) and two identity servers."""

    def __init__(self, ip: str, ports: dict[str, tuple[str, int]]) -> None:
        self.ip, self.ports = ip, ports
        self.peer_port, self.http_port = free_port(ip), free_port(ip)

    def snap(self, shop_pod: str, version: int, balance: str = "source") -> pb.Snapshot:
        shop = backend("default_shop_http", [self.ports[shop_pod]], balance=balance)
        other = backend("default_other_http", [self.ports["pod-11"]])
        s = snapshot(
            [("pod-a", self.ip, self.peer_port)],
            [other, shop],
            http_port=self.http_port,
            routes=[(HOST, "default_shop_http")],
        )
        return hashed(s, version=version)

    def get(self) -> str:
        return http_get(self.ip, self.http_port, HOST)


@pytest.mark.haproxy
def test_runtime_only_delta_sets_only_the_changed_slot_and_a_settings_delta_reloads(
    agents: AgentHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once a snapshot is applied, every render comes from a change set (no loop over all
    # backends) and reuses the frontends section while the frontends do not change.
    compared: list[str] = []  # renders that compared each backend with a previous one
    compare = render_module._compared_backends

    def spy(held: Held, opts: Any, previous: Any, *rest: Any) -> Any:
        if previous is not None:
            compared.append(held.content_hash)
        return compare(held, opts, previous, *rest)

    monkeypatch.setattr(render_module, "_compared_backends", spy)
    net = agents.net
    inst = _instance(agents)
    spy = inst.haproxy
    assert isinstance(spy, RecordingHAProxy)
    applier = inst.applier
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
    ):
        shop = Shop(inst.ip, {"pod-11": (f"{net}.11", p11), "pod-12": (f"{net}.12", p12)})
        v1, v2 = shop.snap("pod-11", 1), shop.snap("pod-12", 2)
        v3 = shop.snap("pod-12", 3, balance="roundrobin")
        first = applier.apply(v1)
        assert first.ok, first.error
        assert shop.get() == "pod-11"
        worker = first.worker_pid
        base = applier.applied_held
        assert base is not None

        cfg1 = applier._applied_cfg
        assert cfg1 is not None

        held2, change = base.apply(delta_between(v1, v2))
        assert change.backends == {"default_shop_http"}
        runtime = applier.apply(held2, change)
        assert (runtime.ok, runtime.kind) == (True, ApplyPath.RUNTIME), runtime.error
        assert spy.sent == [[ServerUpdate("default_shop_http", "SRV_1", f"{net}.12", p12, True)]]
        assert shop.get() == "pod-12"
        assert runtime.worker_pid == worker  # no reload
        assert applier.metrics.reloads._value.get() == 1
        assert Path(inst.config_path).read_text() == render(v2, applier.options)
        assert inst.applier.store.load() == v2  # saved from the held bytes
        cfg2 = applier._applied_cfg
        assert cfg2 is not None and cfg2.frontends_section is cfg1.frontends_section
        assert cfg2.encoded["default_other_http"] is cfg1.encoded["default_other_http"]

        held3, change3 = held2.apply(delta_between(v2, v3))
        reload = applier.apply(held3, change3)
        assert (reload.ok, reload.kind) == (True, ApplyPath.RELOAD), reload.error
        assert reload.worker_pid != worker
        assert len(spy.sent) == 1
        assert Path(inst.config_path).read_text() == render(v3, applier.options)
        assert "balance roundrobin" in Path(inst.config_path).read_text()
        assert shop.get() == "pod-12"
        assert compared == []


@pytest.mark.haproxy
def test_a_change_haproxy_does_not_see_writes_the_file_without_reading_it_first(
    agents: AgentHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warnings-only delta is no change to HAProxy, but the file's header names the new
    content hash: it is written at once (reading 27 MB at 8,000 Services to see that it
    differs would be O(all)). The same content again is read and compared, and the file
    rewritten only if it differs."""
    net = agents.net
    inst = _instance(agents)
    applier = inst.applier
    reads: list[int] = []
    read = applier._read_config_bytes

    def counted() -> bytes | None:
        reads.append(1)
        return read()

    monkeypatch.setattr(applier, "_read_config_bytes", counted)
    with identity_server(f"{net}.11", "pod-11") as p11:
        shop = Shop(inst.ip, {"pod-11": (f"{net}.11", p11)})
        v1 = shop.snap("pod-11", 1)
        v2 = pb.Snapshot()
        v2.CopyFrom(v1)
        v2.warnings.add(object="ConfigMap x", key="k", value="v", reason="r")
        v2 = hashed(v2, version=2)
        first = applier.apply(v1)
        assert first.ok, first.error
        base = applier.applied_held
        assert base is not None
        held2, change = base.apply(delta_between(v1, v2))
        assert change.warnings and not (change.backends or change.frontends)
        quiet = applier.apply(held2, change)
        assert (quiet.ok, quiet.kind) == (True, ApplyPath.NOTHING), quiet.error
        assert Path(inst.config_path).read_text() == render(v2, applier.options)
        assert reads == []
        assert applier.store.load() == v2
        Path(inst.config_path).write_text("damaged")
        again = applier.apply(v2)  # the same content, as a full snapshot
        assert (again.ok, again.kind) == (True, ApplyPath.NOTHING), again.error
        assert reads == [1]
        assert Path(inst.config_path).read_text() == render(v2, applier.options)
        assert shop.get() == "pod-11"
        assert applier.metrics.reloads._value.get() == 1


class ScriptedPlane(peerplane_pb2_grpc.PeerPlaneServicer):  # type: ignore[misc]
    """Sends each scripted message (nonce-0, nonce-1, ...) after the previous one's answer
    and, when `gated`, after the test let it go on (`go`)."""

    def __init__(self, script: list[pb.ServerMessage], gated: bool = False) -> None:
        self.script, self.gated = script, gated
        self.go: asyncio.Queue[None] = asyncio.Queue()
        self.hellos: asyncio.Queue[pb.Hello] = asyncio.Queue()
        self.answers: asyncio.Queue[pb.AgentMessage] = asyncio.Queue()

    async def Stream(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[pb.ServerMessage]:
        first = await anext(requests)
        await self.hellos.put(first.hello)
        for i, msg in enumerate(self.script):
            if self.gated and i > 0:
                await self.go.get()
            out = pb.ServerMessage()
            out.CopyFrom(msg)
            out.nonce = f"nonce-{i}"
            yield out
            await self.answers.put(await anext(requests))
        async for answer in requests:
            await self.answers.put(answer)


def _full(s: pb.Snapshot) -> pb.ServerMessage:
    return pb.ServerMessage(snapshot=s)


def _delta(d: pb.SnapshotDelta) -> pb.ServerMessage:
    return pb.ServerMessage(delta=d)


@pytest.mark.haproxy
def test_bad_deltas_are_nacked_with_resync_and_nothing_is_applied_then_a_restart_continues(
    agents: AgentHarness,
) -> None:
    net, port = agents.net, agents.port
    inst = _instance(agents)
    client = agents.client

    async def scenario() -> None:
        with (
            identity_server(f"{net}.11", "pod-11") as p11,
            identity_server(f"{net}.12", "pod-12") as p12,
        ):
            shop = Shop(inst.ip, {"pod-11": (f"{net}.11", p11), "pod-12": (f"{net}.12", p12)})
            v1, v2, v3 = (
                shop.snap(pod, v) for pod, v in (("pod-11", 1), ("pod-12", 2), ("pod-11", 3))
            )
            wrong_to = delta_between(v1, v2)
            wrong_to.to_content_hash = "f" * 64
            behind = delta_between(v1, v2)
            behind.backends[0].slots[0].port = p11  # not what the hash names
            unknown_from = delta_between(v1, v2)
            unknown_from.from_content_hash = "e" * 64
            script = [
                _full(v1),  # ack
                _delta(wrong_to),  # resync
                _full(v1),  # the full snapshot after a resync: ack (same content)
                _delta(behind),  # resync
                _full(v1),
                _delta(unknown_from),  # resync
                _full(v1),
                _delta(delta_between(v1, v2)),  # ack, runtime
            ]
            plane = ScriptedPlane(script, gated=True)
            c = client(inst.applier)
            async with serve(plane, port), running(c):
                hello = await within(plane.hellos.get())
                assert hello.accepts_deltas
                answers = []
                for _ in script[:-1]:  # until the good delta: HAProxy runs v1 throughout
                    answers.append(await within(plane.answers.get()))
                    assert inst.applier.applied_hash == v1.content_hash
                    assert await asyncio.to_thread(shop.get) == "pod-11"
                    assert inst.applier.store.load() == v1
                    assert inst.applier.metrics.reloads._value.get() == 1
                    plane.go.put_nowait(None)
                answers.append(await within(plane.answers.get()))
                for i in (1, 3, 5):
                    nack = answers[i].nack
                    assert answers[i].WhichOneof("message") == "nack", i
                    assert (nack.nonce, nack.resync, nack.version) == (f"nonce-{i}", True, 2)
                    assert nack.error.startswith(
                        f"delta from {script[i].delta.from_content_hash[:12]}"
                    )
                for i in (0, 2, 4, 6, 7):
                    assert answers[i].WhichOneof("message") == "ack", i
                assert "content hash" in answers[1].nack.error
                assert "content hash" in answers[3].nack.error
                assert "applies to eeeeeeeeeeee" in answers[5].nack.error
                assert answers[7].ack.content_hash == v2.content_hash
                assert inst.applier.metrics.delta_resyncs._value.get() == 3
                assert await asyncio.to_thread(shop.get) == "pod-12"
            # The agent restarts: a new applier restores the saved v2, its Hello names it,
            # and the next delta applies to it.
            again = Applier(
                inst.applier.options,
                inst.config_path,
                inst.applier.store,
                inst.haproxy,
                inst.supervisor,
                start_timeout=5.0,
            )
            assert again.restore()
            assert again.applied_hash == v2.content_hash
            plane2 = ScriptedPlane([_delta(delta_between(v2, v3))])
            async with serve(plane2, port), running(client(again)):
                hello = await within(plane2.hellos.get())
                assert hello.applied_content_hash == v2.content_hash
                answer = await within(plane2.answers.get())
                assert answer.WhichOneof("message") == "ack", answer
                assert answer.ack.content_hash == v3.content_hash
                assert await asyncio.to_thread(shop.get) == "pod-11"
            again.files.config.flush()  # its own deferred write (inst's flushes inst's)
            assert Path(again.config_path).read_text() == render(v3, again.options)
            assert again.store.load() == v3

    asyncio.run(within(scenario(), 90))


class NoApplier:
    """Nothing applied; never asked to apply."""

    @property
    def applied_hash(self) -> str:
        return ""

    @property
    def applied_version(self) -> int:
        return 0

    @property
    def applied_held(self) -> Held | None:
        return None

    def apply(self, snapshot: Held, change: ChangeSet | None = None) -> Result:
        raise AssertionError("not called")


def test_no_deltas_flag_is_said_in_the_hello() -> None:
    """`nodeagent run --no-deltas` (mixed fleets, escape hatch): full snapshots only."""
    flags = ["run", "--control-plane", "127.0.0.1:9", "--config", "c", "--state-dir", "s"]
    assert build_parser().parse_args(flags).deltas is True
    assert build_parser().parse_args([*flags, "--no-deltas"]).deltas is False
    on = Client("127.0.0.1:9", Identity("ns", "pod-a"), NoApplier())
    off = Client("127.0.0.1:9", Identity("ns", "pod-a"), NoApplier(), deltas=False)
    assert on.hello().hello.accepts_deltas and not off.hello().hello.accepts_deltas
