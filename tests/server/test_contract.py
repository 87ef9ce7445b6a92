"""The snapshot contract (`Hello.contract`, `peerplane.parts.CONTRACT`) over gRPC: an
agent from before contract 2 is refused with FAILED_PRECONDITION and words that tell the
operator what to do, logged and counted, and never sent a snapshot it would misread; an
agent of this contract is served as before.

docs/design.md, "Deltas" (contract 2)."""

from __future__ import annotations

import grpc
import pytest

from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, Agent, Harness, run, snapshot

PODS = {f"{NS}/haproxy-a": W1, f"{NS}/haproxy-b": W1}


class OldAgent(Agent):
    """An agent built before contract numbers: its Hello has no `contract` (0)."""

    async def hello(self, applied_hash: str = "", applied_version: int = 0) -> None:
        hello = pb.Hello(pod_namespace=self.namespace, pod_name=self.pod, agent_version="old")
        await self.call.write(pb.AgentMessage(hello=hello))


def test_an_agent_from_before_contract_2_is_refused_with_words_to_upgrade(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, PODS)
            old = OldAgent(h.channel, "haproxy-a")
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await old.hello()
                await old.recv()
            old.close()
            assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            details = failure.value.details() or ""
            assert details.startswith("agent too old: it reads snapshot contract 0")
            assert "upgrade the node agent DaemonSet" in details
            refusals = h.server.metrics.refused_streams
            assert refusals.labels(code="FAILED_PRECONDITION")._value.get() == 1
            assert h.server.registry.sessions() == []
            # An agent of this contract on the same server gets its snapshot.
            current = h.agent("haproxy-b")
            await current.hello()
            message = await current.recv_snapshot()
            assert message.snapshot.content_hash == h.store.get(W1).content_hash

    run(body())
    assert "stream refused (FAILED_PRECONDITION): agent too old" in caplog.text
