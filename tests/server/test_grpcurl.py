"""The server as operators see it: the real grpcurl binary against a loopback server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.helpers.server_harness import NS, W1, Harness, run, snapshot

GRPCURL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "grpcurl"
GRPCURL_TIMEOUT_S = 15.0


async def grpcurl(address: str, *command: str, data: str | None = None) -> str:
    """`grpcurl -plaintext [-d DATA] ADDRESS COMMAND...`; stdout, failing on a non-zero exit."""
    options = ["-plaintext", *(["-d", data] if data is not None else [])]
    process = await asyncio.create_subprocess_exec(
        str(GRPCURL),
        *options,
        address,
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), GRPCURL_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def grpcurl_json(address: str, *command: str, data: str | None = None) -> Any:
    return json.loads(await grpcurl(address, *command, data=data))


def test_list_and_describe_through_reflection() -> None:
    async def body() -> None:
        async with Harness() as h:
            services = (await grpcurl(h.address, "list")).split()
            assert "peerplane.v1.PeerPlane" in services
            assert "grpc.health.v1.Health" in services
            described = await grpcurl(h.address, "describe", "peerplane.v1.PeerPlane")
            assert "rpc Stream ( stream .peerplane.v1.AgentMessage )" in described
            assert "returns ( stream .peerplane.v1.ServerMessage )" in described
            assert "rpc GetSnapshot" in described

    run(body())


def test_get_snapshot_list_agents_and_health_as_json() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1", "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            message = await agent.recv_snapshot()
            await agent.ack(message)
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]

            request = json.dumps({"workload": W1})
            snap = await grpcurl_json(h.address, "peerplane.v1.PeerPlane/GetSnapshot", data=request)
            assert snap["workload"] == W1
            assert snap["version"] == "1"
            assert snap["content_hash"] == message.snapshot.content_hash
            slots = snap["backends"][0]["slots"]
            assert [s["address"] for s in slots] == ["10.0.0.1", "10.0.0.2"]

            agents = await grpcurl_json(h.address, "peerplane.v1.PeerPlane/ListAgents")
            (status,) = agents["agents"]
            assert status["agent"] == f"{NS}/haproxy-a"
            assert status["acked_version"] == "1"

            health = await grpcurl_json(h.address, "grpc.health.v1.Health/Check")
            assert health == {"status": "SERVING"}

    run(body())
