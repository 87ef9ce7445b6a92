"""Found by the control-plane SIGKILL fault test: an agent that reconnects before the
restarted control plane has computed anything is told to wait; once the same content is
published it must hear InSync (and be counted at that version), not silence."""

from __future__ import annotations

from tests.helpers.server_harness import NS, W1, Harness, run, snapshot


def test_waiting_agent_that_runs_the_published_content_gets_in_sync() -> None:
    content = snapshot(W1, "127.0.2.1")

    async def body() -> None:
        async with Harness() as h:
            agent = h.agent("haproxy-a")
            await agent.hello(applied_hash=content.content_hash, applied_version=7)
            assert (await agent.recv()).WhichOneof("message") == "waiting"
            h.publish({W1: content}, {f"{NS}/haproxy-a": W1})
            answer = await agent.recv()
            assert answer.WhichOneof("message") == "in_sync"
            assert answer.in_sync.content_hash == content.content_hash
            session = h.session("haproxy-a")
            assert session is not None and session.acked_version == answer.in_sync.version

    run(body())
