"""`nodeagent run`, the process: build the agent (`wiring`), restore the saved snapshot,
stream from the control plane until SIGTERM/SIGINT, then stop the HAProxy it supervises
and the metrics server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from nodeagent.cli import wiring
from peerplane.runtime import allocator, heap

log = logging.getLogger("nodeagent")


def run_agent(args: argparse.Namespace) -> int:
    """Exit code: 2 when the flags cannot make an agent, 1 when the client fails, else 0."""
    allocator.tune()  # before any thread allocates
    heap.tune_collector()
    try:
        agent = wiring.build_agent(args)
    except wiring.WiringError as e:
        log.error("%s", e)
        return 2
    return asyncio.run(_serve(agent))


async def _serve(agent: wiring.Agent) -> int:
    if agent.metrics_server is not None:
        agent.metrics_server.start()
    if agent.readiness_server is not None:
        agent.readiness_server.start()
        where = agent.readiness_server
        log.info("readiness on http://%s:%d/readyz", where.host, where.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if await asyncio.to_thread(agent.applier.restore) and agent.client.heap is not None:
            agent.client.heap.settle(rebuilt=True)  # not on the first change that follows
        client_task = asyncio.create_task(agent.client.run())
        stop_task = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({client_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        client_task.cancel()
        stop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await client_task
        for task in done:
            if task is client_task and not task.cancelled() and task.exception():
                log.error("client stopped: %s", task.exception())
                return 1
        log.info("stopping")
        return 0
    finally:
        await asyncio.to_thread(agent.applier.close)  # haproxy.cfg current for the next start
        if agent.supervisor is not None:
            await asyncio.to_thread(agent.supervisor.stop)
        if agent.metrics_server is not None:
            agent.metrics_server.stop()
        if agent.readiness_server is not None:
            agent.readiness_server.stop()
