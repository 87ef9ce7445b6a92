"""The API server refusing or slowing the control plane's writes for a while: 403, 409
and 422 storms and slow answers on slot ledger writes (a `serve --leader-elect` process
with an agent stream) and on route status writes (the writer against the fake API).

What must hold through each: agents keep their streams and what they were sent, the
control plane says what fails where operators look (log once per cause, metric,
ListWorkloads), it retries with backoff (the requests are counted: no spin), and it
converges once the storm ends. docs/operations.md, "Faults the agent survives".
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from controlplane.kube.route_status import CONFLICT_ATTEMPTS, RouteStatusWriter
from controlplane.metrics import Metrics
from tests.helpers.replicas import StreamAgent as Agent
from tests.helpers.replicas import health, replica_of, replicas, role_of
from tests.helpers.waiting import wait_until
from tests.kube.test_route_status import (
    GATEWAY,
    INGRESS,
    ROUTE,
    Clock,
    documents,
    status_writes,
    stored,
    without_times,
)
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    endpoint_slice,
    gateway,
    gateway_class,
    http_route,
    ingress,
)

SHARD = "peerplane-slots.default.shop.http"


def ledger_puts(api: FakeKubeAPI) -> int:
    return sum(1 for m, p in api.requests if m == "PUT" and "peerplane-slots" in p)


def metric(port: int, name: str, labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    found = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize(
    ("code", "cause", "said"),
    [
        (403, "forbidden", "cannot write slot ledger shard for default_shop_http: HTTP 403"),
        (409, "conflict", f"shard {SHARD} kept changing under us"),
        (422, "invalid", "cannot write slot ledger shard for default_shop_http: HTTP 422"),
    ],
    ids=["403", "409", "422"],
)
def test_a_ledger_write_storm_is_said_retried_with_backoff_and_converges(
    api: FakeKubeAPI, kubeconfig: Path, code: int, cause: str, said: str
) -> None:
    """Every PUT of a ledger shard answered `code` while an endpoint is added: no
    slot is published before it is persisted (the agent keeps what it held, its stream
    up), one log line for the cause, the metric, ListWorkloads says why; the loop retries
    at 1, 2, 4 s (a 409 re-reads and tries 4 times per save): a handful of PUTs, not a
    spin; once the storm ends the new endpoint is published and no slot moved."""
    with replicas(kubeconfig, 1, 2.0, "--metrics-port", "0") as (leader,):
        port = int(leader.wait_for(re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/")).group(1))
        wait_until(lambda: health(leader.address) == "SERVING", 20)
        wait_until(lambda: role_of(leader.address) == "leader", 10)
        wait_until(lambda: api.get("ConfigMap", "haproxy-system", SHARD) is not None, 10)
        agent = Agent(leader.address)
        try:
            wait_until(lambda: len(agent.last().slots) == 2, 10)
            held = agent.last()
            api.storm("ConfigMap", code, match="peerplane-slots", method="PUT")
            before = ledger_puts(api)
            stormed = time.monotonic()
            api.apply(
                endpoint_slice("shop", {"10.0.2.1": True, "10.0.2.2": True, "10.0.2.9": True})
            )
            kind = "failed" if code == 409 else "refused (retrying will not fix it)"
            leader.wait_for(re.compile(re.escape(f"slot ledger write {kind}: {said}")))

            def failures() -> float:
                return metric(
                    port, "peerplane_slot_ledger_write_failures_total", f'cause="{cause}"'
                )

            # Saves at 0, 1 and 3 s: the third failure comes after the backoff's 3 s.
            wait_until(lambda: failures() >= 3, 10, "the save and two retries refused")
            assert time.monotonic() - stormed >= 2.5, "retried without backing off"
            puts = ledger_puts(api) - before
            # Saves at 0, 1 and 3 s (and maybe 7 s's early); a 409 save tries 4 times.
            assert 1 <= puts <= 4 * (4 if code == 409 else 1), puts
            assert agent.last() == held and agent.ended is None  # nothing unpersisted sent
            status = replica_of(leader.address).replica
            assert "cannot persist the slot ledger" in status.not_ready_reason, status
            assert any(said in p for p in status.ledger_problems), status
            refused = failures()
            assert 1 <= refused <= 4, refused

            api.clear_faults()
            wait_until(lambda: "10.0.2.9" in agent.last().slots.values(), 15)
            after = agent.last().slots
            assert {s: a for s, a in after.items() if a != "10.0.2.9"} == held.slots  # no move
            wait_until(lambda: health(leader.address) == "SERVING", 10)
            leader.wait_for(re.compile(r"slot ledger persisted again"))
            # Every line up to "persisted again" is read by now: the whole storm's.
            lines = [line for line in leader.lines if "slot ledger write" in line]
            assert len(lines) == 1, lines  # once per cause, not per retry
            assert not any("Traceback" in line for line in leader.lines)
        finally:
            agent.close()


def test_slow_ledger_writes_delay_only_the_change_that_needs_them(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """Every ledger PUT answered 2 s late: the new endpoint is published once its slot is
    persisted (not before), while the replica answers ListWorkloads at once and the agent
    keeps its stream."""
    with replicas(kubeconfig, 1, 2.0) as (leader,):
        wait_until(lambda: health(leader.address) == "SERVING", 20)
        wait_until(lambda: role_of(leader.address) == "leader", 10)
        agent = Agent(leader.address)
        try:
            wait_until(lambda: len(agent.last().slots) == 2, 10)
            api.slow("ConfigMap", 2.0, match="peerplane-slots", method="PUT")
            before = ledger_puts(api)
            changed = time.monotonic()
            api.apply(
                endpoint_slice("shop", {"10.0.2.1": True, "10.0.2.2": True, "10.0.2.9": True})
            )
            wait_until(lambda: ledger_puts(api) > before, 10, "the ledger write, held 2 s")
            asked = time.monotonic()
            assert replica_of(leader.address).workloads  # answered while the write waits
            assert time.monotonic() - asked < 1.0
            assert "10.0.2.9" not in agent.last().slots.values()
            wait_until(lambda: "10.0.2.9" in agent.last().slots.values(), 10)
            added = agent.first_with(lambda slots: "10.0.2.9" in slots.values())
            assert added is not None and added - changed >= 2.0
            assert agent.ended is None
        finally:
            api.clear_faults()
            agent.close()


# ---------------------------------------------------------------- route status writes


@pytest.fixture
def routes_api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    for obj in (gateway_class(), gateway(), http_route(), ingress()):
        server.apply(obj)
    yield server
    server.stop()


@pytest.mark.parametrize("code", [403, 409, 422])
def test_a_route_status_storm_is_retried_with_backoff_and_blocks_no_other(
    routes_api: FakeKubeAPI, code: int
) -> None:
    """Every status PUT of the HTTPRoute answered `code` for 2 s: the Gateway, the
    GatewayClass and the Ingress get theirs at once; the route's failure is logged once,
    counted (`peerplane_route_status_writes_total{result="failed"}`) and retried with a
    doubling delay (0.2, 0.4, 0.8 s: a few rounds, each a 409 tries 5 times); once the
    storm ends the route gets its status without a new submission."""
    api = routes_api
    metrics = Metrics(CollectorRegistry())
    writer = RouteStatusWriter(
        api_client(api.url),
        clock=Clock(),
        recheck_s=0.05,
        retry_s=0.2,
        retry_max_s=5.0,
        on_result=metrics.route_status,
    )
    try:
        api.storm("HTTPRoute", code, match="/status", method="PUT")
        docs = documents()
        writer.submit(docs)
        assert writer.flush()
        for other in (GATEWAY, INGRESS):
            assert without_times(stored(api, other)) == docs[other]
        assert f"HTTP {code}" in writer.stats.problems["HTTPRoute default/shop"] or (
            code == 409 and "still conflicting" in writer.stats.problems["HTTPRoute default/shop"]
        )
        # Absence over a period (no spin): rounds at 0, 0.2, 0.6, 1.4, 3.0 s; counted in the
        # widest quiet gap, [1.4 s, 3.0 s], so a round is never half counted.
        # On a loaded host the rounds drift later: a round read half done (its count
        # up, its PUTs or its failure not yet) is read again once it ends.
        time.sleep(2.0)
        per_round = CONFLICT_ATTEMPTS if code == 409 else 1

        def counts() -> tuple[int, int, float | None]:
            route_puts = [p for p in status_writes(api) if "/httproutes/shop/" in p]
            failed = metrics.registry.get_sample_value(
                "peerplane_route_status_writes_total", {"result": "failed"}
            )
            return writer.stats.rounds, len(route_puts), failed

        def whole_rounds() -> bool:
            rounds, puts, failed = counts()
            return (puts, failed) == (rounds * per_round, rounds)

        wait_until(whole_rounds, 3)
        rounds, puts, failed = counts()
        assert 2 <= rounds <= 5, rounds  # 0, 0.2, 0.6, 1.4 s: backoff, not a spin
        assert (puts, failed) == (rounds * per_round, rounds), (puts, failed, rounds)
        assert stored(api, ROUTE) == {}

        api.clear_faults()
        wait_until(lambda: without_times(stored(api, ROUTE)) == docs[ROUTE], 10)
        wait_until(lambda: writer.stats.problems == {}, 5)
    finally:
        writer.close()


def test_slow_status_answers_time_out_and_are_retried(routes_api: FakeKubeAPI) -> None:
    """The HTTPRoute's status PUTs answered 1.5 s late, past the writer's 0.5 s request
    timeout: that route is retried later, the other objects are written meanwhile, and
    `submit` never waits (the compute loop does not)."""
    api = routes_api
    writer = RouteStatusWriter(
        api_client(api.url),
        clock=Clock(),
        request_timeout=0.5,
        recheck_s=0.05,
        retry_s=0.2,
        retry_max_s=1.0,
    )
    try:
        api.slow("HTTPRoute", 1.5, match="/status", method="PUT")
        docs = documents()
        started = time.monotonic()
        writer.submit(docs)
        assert time.monotonic() - started < 0.1
        assert writer.flush(10)
        assert without_times(stored(api, GATEWAY)) == docs[GATEWAY]
        assert without_times(stored(api, INGRESS)) == docs[INGRESS]
        assert "HTTPRoute default/shop" in writer.stats.problems
        api.clear_faults()
        wait_until(lambda: writer.stats.problems == {}, 10)
        assert without_times(stored(api, ROUTE)) == docs[ROUTE]
    finally:
        writer.close()
