"""The stream client against a fake control plane (grpc.aio) and a real HAProxy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

import grpc
import grpc.aio
import pytest

from nodeagent import __version__
from nodeagent.apply.outcome import Result
from nodeagent.config.changes import ApplyPath
from nodeagent.heap import Heap
from nodeagent.held import ChangeSet, Held
from nodeagent.stream.client import Client
from nodeagent.stream.protocol import Identity
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.deltas import delta_between, hashed
from tests.helpers.haproxy_env import (
    backend,
    free_port,
    http_get,
    identity_server,
    make_instance,
    snapshot,
)
from tests.helpers.stream_client import RecordingApplier, running
from tests.helpers.waiting import wait_until_async

T = TypeVar("T")


class FakePlane(peerplane_pb2_grpc.PeerPlaneServicer):  # type: ignore[misc]
    """Answers each Hello with the scripted snapshots, one nonce each, and records replies."""

    def __init__(self, script: list[pb.Snapshot]) -> None:
        self.script = script
        self.hellos: asyncio.Queue[pb.Hello] = asyncio.Queue()
        self.answers: asyncio.Queue[pb.AgentMessage] = asyncio.Queue()

    async def Stream(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[pb.ServerMessage]:
        first = await anext(requests)
        await self.hellos.put(first.hello)
        if first.hello.applied_content_hash and all(
            s.content_hash == first.hello.applied_content_hash for s in self.script[-1:]
        ):
            yield pb.ServerMessage(
                in_sync=pb.InSync(version=1, content_hash=self.script[-1].content_hash)
            )
        else:
            for i, snap in enumerate(self.script):
                yield pb.ServerMessage(nonce=f"nonce-{i}", snapshot=snap)
                await self.answers.put(await anext(requests))
        async for msg in requests:
            await self.answers.put(msg)


@contextlib.asynccontextmanager
async def serve(plane: FakePlane, port: int) -> AsyncIterator[grpc.aio.Server]:
    server = grpc.aio.server()
    peerplane_pb2_grpc.add_PeerPlaneServicer_to_server(plane, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield server
    finally:
        await server.stop(0)


async def within(aw: Awaitable[T], seconds: float = 15.0) -> T:
    return await asyncio.wait_for(aw, seconds)


def demo_snapshot(
    ip: str, backend_addr: tuple[str, int], http_port: int, version: int
) -> pb.Snapshot:
    return snapshot(
        [("pod-a", ip, free_port(ip))],
        [backend("default_shop_http", [backend_addr])],
        http_port=http_port,
        routes=[("shop.example.com", "default_shop_http")],
        version=version,
    )


@pytest.mark.haproxy
def test_hello_ack_nack_then_reconnect(agents: AgentHarness) -> None:
    net, port = agents.net, agents.port
    inst = agents.instance()
    ip = inst.ip
    client = agents.client(inst.applier, Identity("haproxy-system", "pod-a", "node-1"))

    async def scenario() -> None:
        with identity_server(f"{net}.11", "pod-11") as bport:
            http_port = free_port(ip)
            snap = demo_snapshot(ip, (f"{net}.11", bport), http_port, 3)
            bad = pb.Snapshot()
            bad.CopyFrom(snap)
            bad.version, bad.content_hash = 4, "4" * 64
            bad.http_frontend.routes.add(host="ghost.example.com", backend="default_ghost_80")
            plane = FakePlane([snap, bad])
            async with running(client):
                async with serve(plane, port):
                    hello = await within(plane.hellos.get())
                    assert (hello.pod_namespace, hello.pod_name, hello.node_name) == (
                        "haproxy-system",
                        "pod-a",
                        "node-1",
                    )
                    assert (hello.applied_content_hash, hello.applied_version) == ("", 0)
                    assert hello.agent_version == __version__
                    answer = await within(plane.answers.get())
                    assert answer.WhichOneof("message") == "ack"
                    assert answer.ack == pb.Ack(  # the first config starts HAProxy
                        nonce="nonce-0",
                        version=3,
                        content_hash=snap.content_hash,
                        applied_by="start",
                    )
                    body = await asyncio.to_thread(http_get, ip, http_port, "shop.example.com")
                    assert body == "pod-11"
                    nack = (await within(plane.answers.get())).nack
                    assert (nack.nonce, nack.version) == ("nonce-1", 4)
                    assert nack.content_hash == bad.content_hash
                    assert "unable to find required use_backend" in nack.error
                # The control plane restarts on the same port: the agent comes back and
                # reports what it runs (the NACKed version is not it); HAProxy served all along.
                assert (
                    await asyncio.to_thread(http_get, ip, http_port, "shop.example.com") == "pod-11"
                )
                again = FakePlane([snap])
                async with serve(again, port):
                    hello = await within(again.hellos.get())
                    assert hello.applied_content_hash == snap.content_hash
                    assert hello.applied_version == 3
                    await wait_until_async(client.connected.is_set, 15)
                    assert again.answers.empty()

    asyncio.run(within(scenario(), 60))


def test_render_error_is_nacked_with_nonce(tmp_path: Path) -> None:
    inst = make_instance(tmp_path / "a", "127.0.0.1", "pod-a")
    port = free_port("127.0.0.1")
    bad = demo_snapshot("127.0.0.1", ("127.0.0.2", 8080), 8080, 4)
    bad.backends[0].name = "evil\n  server x 1.2.3.4:80"
    client = Client(f"127.0.0.1:{port}", Identity("ns", "pod-a"), inst.applier)

    async def scenario() -> None:
        plane = FakePlane([bad])
        async with serve(plane, port), running(client):
            answer = await within(plane.answers.get())
            assert answer.WhichOneof("message") == "nack"
            assert answer.nack.nonce == "nonce-0"
            assert answer.nack.version == 4
            assert answer.nack.content_hash == bad.content_hash
            assert "invalid backend name" in answer.nack.error

    asyncio.run(within(scenario(), 30))
    assert inst.applier.applied is None
    assert not Path(inst.config_path).exists()


class SlowApplier(RecordingApplier):
    """Applies nothing, and, when `gated`, only once the test lets it (`release`): snapshots
    pile up behind the one being applied for as long as the test needs."""

    def __init__(self, gated: bool = False) -> None:
        super().__init__()
        self.applying = threading.Event()  # an apply has started
        self.release = threading.Event()  # applies may finish
        if not gated:
            self.release.set()

    def apply(self, snapshot: Held, change: ChangeSet | None = None) -> Result:
        self.applying.set()
        self.release.wait(15)
        return super().apply(snapshot, change)


class BurstPlane(FakePlane):
    """Sends the first snapshot, then the rest at once while the agent applies it."""

    def __init__(self, script: list[pb.Snapshot], applying: threading.Event) -> None:
        super().__init__(script)
        self.applying = applying

    async def Stream(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[pb.ServerMessage]:
        first = await anext(requests)
        await self.hellos.put(first.hello)
        for i, snap in enumerate(self.script):
            yield pb.ServerMessage(nonce=f"nonce-{i}", snapshot=snap)
            if i == 0:  # the agent is busy applying the first one
                assert await asyncio.to_thread(self.applying.wait, 15)
        async for msg in requests:
            await self.answers.put(msg)


def test_snapshots_arriving_during_an_apply_are_coalesced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port("127.0.0.1")
    applier = SlowApplier(gated=True)
    client = Client(f"127.0.0.1:{port}", Identity("ns", "pod-a"), applier)
    script = [snapshot([], [], version=v) for v in (1, 2, 3)]
    caplog.set_level(logging.INFO, logger="nodeagent.stream.client")

    def coalesced() -> bool:
        return any(r.getMessage() == "coalesced: version 2 superseded by 3" for r in caplog.records)

    async def scenario() -> list[str]:
        plane = BurstPlane(script, applier.applying)
        async with serve(plane, port), running(client):
            await wait_until_async(coalesced, 15)  # 2 and 3 arrived while 1 is being applied
            applier.release.set()
            first = await within(plane.answers.get())
            second = await within(plane.answers.get())
            await asyncio.sleep(0.7)  # absence over a period: no answer for the coalesced 2
            assert plane.answers.empty()
            return [first.ack.nonce, second.ack.nonce]

    assert asyncio.run(within(scenario(), 30)) == ["nonce-0", "nonce-2"]
    assert applier.applied == [1, 3]


def test_a_snapshot_above_grpcs_default_4_mib_is_received() -> None:
    """Regression (found by the scale benchmark, docs/findings.md "Measuring what a change
    costs"): the agent's channel kept gRPC's 4 MiB receive limit, so the full snapshot of
    an 8,000-Service workload (~8.3 MB) was refused with RESOURCE_EXHAUSTED, every time."""
    port = free_port("127.0.0.1")
    applier = SlowApplier()
    client = Client(f"127.0.0.1:{port}", Identity("ns", "pod-a"), applier)
    big = snapshot([], [], version=7)
    big.warnings.add(object="ConfigMap x", key="k", value="v" * (5 * 1024 * 1024), reason="r")

    async def scenario() -> pb.AgentMessage:
        plane = FakePlane([big])
        server = grpc.aio.server(options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        peerplane_pb2_grpc.add_PeerPlaneServicer_to_server(plane, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        try:
            async with running(client):
                return await within(plane.answers.get(), 10)
        finally:
            await server.stop(0)

    answer = asyncio.run(within(scenario(), 30))
    assert answer.ack.version == 7
    assert applier.applied == [7]


class FlakyApplier(SlowApplier):
    """Raises what the production applier once let escape (no descriptors left), `fails`
    times, then applies."""

    def __init__(self, fails: int) -> None:
        super().__init__()
        self.fails = fails

    def apply(self, snapshot: Held, change: ChangeSet | None = None) -> Result:
        if self.fails > 0:
            self.fails -= 1
            raise OSError(24, "Too many open files")
        self.applied.append(snapshot.version)
        return Result(True, ApplyPath.NOTHING)


def test_an_apply_that_raises_is_a_retryable_nack_and_heals_without_a_new_change() -> None:
    """Incident: an exception that was not an ApplyError (a broken temp dir, haproxy.cfg
    replaced by a directory, no descriptors left) ended the apply loop silently:
    ListAgents showed the snapshot pending, no NACK, and only an unrelated later change
    recovered. Now it is a NACK at once, retried with backoff, and ACKed (same nonce) as
    soon as the fault is gone."""
    port = free_port("127.0.0.1")
    applier = FlakyApplier(fails=2)
    client = Client(f"127.0.0.1:{port}", Identity("ns", "pod-a"), applier, retry_initial=0.05)

    async def scenario() -> tuple[pb.AgentMessage, pb.AgentMessage]:
        plane = FakePlane([snapshot([], [], version=3)])
        async with serve(plane, port), running(client):
            return await within(plane.answers.get()), await within(plane.answers.get())

    nack, ack = asyncio.run(within(scenario(), 30))
    assert nack.WhichOneof("message") == "nack" and nack.nack.nonce == "nonce-0"
    assert "Too many open files" in nack.nack.error
    assert ack.WhichOneof("message") == "ack" and ack.ack.nonce == "nonce-0"
    assert applier.applied == [3]


def test_an_apply_loop_that_dies_is_noticed_at_once_and_the_stream_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Incident (same as above): a dead apply loop was only noticed when the next server
    message arrived, so the snapshot it held stayed pending. The session now ends as soon
    as the loop does; the new stream's Hello does not claim the snapshot, the control
    plane sends it again, and it is ACKed."""
    port = free_port("127.0.0.1")
    applier = SlowApplier()
    client = Client(f"127.0.0.1:{port}", Identity("ns", "pod-a"), applier, backoff_max=0.2)
    answer = client._answer
    broken = [True]

    def answer_once_broken(nonce: str, snap: Held, result: Result, attempt: int) -> pb.AgentMessage:
        if broken.pop() if broken else False:
            raise RuntimeError("a bug in the apply loop")
        return answer(nonce, snap, result, attempt)

    monkeypatch.setattr(client, "_answer", answer_once_broken)

    async def scenario() -> pb.AgentMessage:
        plane = FakePlane([snapshot([], [], version=5)])
        async with serve(plane, port), running(client):
            await within(plane.hellos.get())
            await within(plane.hellos.get())  # the stream was started again
            return await within(plane.answers.get())

    ack = asyncio.run(within(scenario(), 30))
    assert ack.WhichOneof("message") == "ack" and ack.ack.version == 5


class KeepingApplier(RecordingApplier):
    """Keeps only the last snapshot it applied, as the production applier does."""

    def __init__(self) -> None:
        super().__init__()
        self.last: Held | None = None

    @property
    def applied_hash(self) -> str:
        return self.last.content_hash if self.last is not None else ""

    @property
    def applied_held(self) -> Held | None:
        return self.last

    def apply(self, snapshot: Held, change: ChangeSet | None = None) -> Result:
        self.last = snapshot
        return super().apply(snapshot, change)


class ReconnectingPlane(peerplane_pb2_grpc.PeerPlaneServicer):  # type: ignore[misc]
    """Sends `snapshots[i]` on its i-th stream and records the answer; ends every stream
    but the last one then (as the server does at its maximum connection age), with
    UNAVAILABLE when `aborting` (gRPC's GOAWAY at that age), else with an end of stream.
    With `deltas` (hashed snapshots), each later stream sends a delta from the one before,
    as the control plane does to an agent whose Hello names a content it retains."""

    def __init__(
        self, snapshots: list[pb.Snapshot], aborting: bool = False, deltas: bool = False
    ) -> None:
        self.snapshots = snapshots
        self.aborting = aborting
        self.deltas = deltas
        self.streams = 0
        self.answers: asyncio.Queue[pb.AgentMessage] = asyncio.Queue()

    async def Stream(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[pb.ServerMessage]:
        await anext(requests)  # the Hello
        at = min(self.streams, len(self.snapshots) - 1)
        snap = self.snapshots[at]
        self.streams += 1
        if self.deltas and at > 0:
            delta = delta_between(self.snapshots[at - 1], snap)
            yield pb.ServerMessage(nonce=f"nonce-{self.streams}", delta=delta)
        else:
            yield pb.ServerMessage(nonce=f"nonce-{self.streams}", snapshot=snap)
        await self.answers.put(await anext(requests))
        if self.streams < len(self.snapshots):
            if self.aborting:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "max connection age")
            return
        async for msg in requests:
            await self.answers.put(msg)


def test_a_stream_keeps_no_snapshot_applied_before_it_opened() -> None:
    """Found in the hour at 8,000 Services (docs/findings.md, "Agent memory: the config
    joined for its write"): a stream held the snapshot applied when it opened for its whole
    life, so after the first reconnect (the control plane's maximum connection age, about
    30 minutes) every change left what it replaced alive, ~3.6 KB a change until the next
    reconnect. Only the protocol state may hold a delta base, and it moves on."""
    port = free_port("127.0.0.1")
    applier = KeepingApplier()
    client = Client(f"127.0.0.1:{port}", Identity("ns", "pod-a"), applier, backoff_max=0.2)

    async def scenario() -> tuple[pb.AgentMessage, bool]:
        plane = ReconnectingPlane([snapshot([], [], version=1), snapshot([], [], version=2)])
        async with serve(plane, port), running(client):
            await within(plane.answers.get())  # v1 ACKed; the first stream ends
            assert applier.last is not None
            opened_with = weakref.ref(applier.last)  # the second stream's base at its Hello
            second = await within(plane.answers.get())  # v2 ACKed, the stream stays open
            gc.collect()
            return second, opened_with() is None

    second, freed = asyncio.run(within(scenario(), 30))
    assert second.WhichOneof("message") == "ack" and second.ack.version == 2
    assert applier.applied == [1, 2]
    assert freed, "the open stream still holds the snapshot applied before it opened"


def test_a_stream_lost_with_the_heap_frozen_leaves_nothing_of_it_alive() -> None:
    """Found in the soak at 8,000 Services (docs/findings.md, "Agent memory: the lost
    stream's frames"): a stream lost to the control plane's maximum connection age ends
    with UNAVAILABLE, which the reader task keeps, its traceback holding the stream's
    frames, whose locals hold that task: a reference cycle. Its tasks and frames were
    frozen by the heap's settle long before (`nodeagent/heap.py`), so the collector never
    looked at it: the apply loop's last snapshot, the next stream's delta base, stayed
    alive with every part a later change replaced (~3.6 KB a change, up to the next
    reconnect, which pinned one more). The stream's objects must be freed when it ends."""
    port = free_port("127.0.0.1")
    applier = KeepingApplier()
    heap = Heap(trim=lambda: None)
    client = Client(
        f"127.0.0.1:{port}", Identity("ns", "pod-a"), applier, backoff_max=0.2, heap=heap
    )

    async def scenario() -> tuple[pb.AgentMessage, bool]:
        versions = [
            hashed(snapshot([], [backend("default_svc_http", [(f"10.0.0.{v}", 80)])]), v)
            for v in (1, 2)
        ]
        plane = ReconnectingPlane(versions, aborting=True, deltas=True)
        async with serve(plane, port), running(client):
            await within(plane.answers.get())  # v1 ACKed, settled (frozen); the stream lost
            assert applier.last is not None and heap.frozen
            lost_with = weakref.ref(applier.last)  # the last apply of the lost stream
            second = await within(plane.answers.get())  # the delta to v2 ACKed, settled
            gc.collect()
            return second, lost_with() is None

    try:
        second, freed = asyncio.run(within(scenario(), 30))
    finally:
        gc.unfreeze()
    assert second.WhichOneof("message") == "ack" and second.ack.version == 2
    assert applier.applied == [1, 2]
    assert freed, "the lost stream's frames still hold the snapshot it applied last"
