"""The agent as the agent tests run it: managed HAProxy instances with their appliers on a
private 127.x net, stream clients to a control plane on loopback, readiness and metrics;
one harness per test (the `agents` fixture of tests/agent/conftest.py), every process it
started stopped by PID at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from nodeagent.apply.applier import Applier
from nodeagent.metrics import MetricsServer
from nodeagent.readiness import Readiness, held_state
from nodeagent.stream.client import Client, SnapshotApplier
from nodeagent.stream.protocol import Identity
from tests.helpers.haproxy_env import Instance, free_port, loopback_net, make_instance

NAMESPACE = "haproxy-system"


class SteppedClock:
    """`time.monotonic` plus what the test skipped: a cache that reads this clock expires
    when the test says so (`advance`), not after a sleep."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skipped

    def advance(self, seconds: float) -> None:
        self.skipped += seconds


class AgentHarness:
    """Agents of one test. `instance()` is one pod's managed HAProxy and applier (as
    `nodeagent run --manage-haproxy` wires them), `client()` its stream to the control
    plane at `target`, `readiness()` its `/readyz` on a metrics server."""

    def __init__(self, tmp: Path, binary: str) -> None:
        self.tmp = tmp
        self.binary = binary  # the HAProxy under test (`haproxy_bin.path`)
        self.net = loopback_net()
        self.port = free_port("127.0.0.1")  # where the test serves its control plane
        self._stops: list[Callable[[], None]] = []

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def instance(self, pod: str = "pod-a", host: int = 1, binary: str | None = None) -> Instance:
        """`pod` on `<net>.<host>`, its files under tmp/<pod>; nothing started yet."""
        inst = make_instance(
            self.tmp / pod, f"{self.net}.{host}", pod, binary=binary or self.binary
        )
        self._stops.append(lambda: inst.supervisor.stop())
        return inst

    def client(
        self,
        applier: SnapshotApplier,
        identity: Identity | None = None,
        backoff_max: float = 0.5,
        backoff_multiplier: float = 0.1,
        **kwargs: float,
    ) -> Client:
        """A stream client to `target`, backing off quickly; with a real applier, its
        metrics are the applier's (as the wiring shares them)."""
        pod = applier.options.pod_name if isinstance(applier, Applier) else "pod-a"
        metrics = applier.metrics if isinstance(applier, Applier) else None
        return Client(
            self.target,
            identity or Identity(NAMESPACE, pod),
            applier,
            backoff_max=backoff_max,
            backoff_multiplier=backoff_multiplier,
            metrics=metrics,
            **kwargs,
        )

    def readiness(
        self, inst: Instance, bound: float, clock: Callable[[], float] = time.monotonic
    ) -> tuple[Readiness, int]:
        """`inst`'s readiness, as `nodeagent run --metrics-port` wires it, served on a
        metrics server of its own (stopped at the end): (the readiness, its port)."""
        metrics = inst.applier.metrics
        readiness = Readiness(
            lambda: held_state(inst.applier.applied, inst.pod),
            inst.haproxy.master_socket,
            inst.haproxy.runtime_socket,
            bound=bound,
            metrics=metrics,
            clock=clock,
        )
        server = MetricsServer(metrics, "127.0.0.1", 0, readiness.probe).start()
        self._stops.append(server.stop)
        return readiness, server.port

    def close(self) -> None:
        """Stop everything, the last started first."""
        while self._stops:
            self._stops.pop()()
