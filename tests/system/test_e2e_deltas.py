"""End to end with deltas: a mixed fleet converges, and an agent restarted from its saved
snapshot continues on deltas.

Real `controlplane serve --source files:DIR`, two real agents with real HAProxy (one
announcing deltas, one started with `--no-deltas`), real backends, real gRPC on loopback.
docs/design.md, "The agent stream" (Deltas).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fleet import HAPROXY_PODS, Fleet, http_get
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

OCTET = 35
HOST = "shop.example.com"
CLIENT = f"127.{OCTET}.9.1"


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    (name_a, address_a), (name_b, address_b) = HAPROXY_PODS
    with Fleet(tmp_path, OCTET, haproxy_bin=haproxy_bin.path) as running:
        running.write_manifests()
        running.start_backends()
        running.start_control_plane()
        running.start_agent(name_a, address_a)
        running.start_agent(name_b, address_b, extra_args=["--no-deltas"])
        running.wait_all_acked()
        yield running


def add_shop_pod(fleet: Fleet, name: str, address: str) -> str:
    """A new ready shop endpoint (served by a real backend); the new content hash."""
    fleet.backends.start(name, fleet.ip(address), 8888)
    return fleet.edit_manifest(
        "shop.yaml",
        lambda text: text.replace(
            "    targetRef: {kind: Pod, name: shop-2}",
            "    targetRef: {kind: Pod, name: shop-2}\n"
            f'  - addresses: ["{fleet.ip(address)}"]\n'
            "    conditions: {ready: true}\n"
            f"    targetRef: {{kind: Pod, name: {name}}}",
        ),
    )


def deltas_received(fleet: Fleet, pod: str) -> int:
    return fleet.agents[pod].log.read_text().count("delta received")


def instance_neutral(config: str, fleet: Fleet) -> str:
    """The rendered config without what differs by instance (localpeer, runtime socket,
    bind address, the route maps in the agent's own state directory)."""
    text = re.sub(r"(?m)^\s*(localpeer|stats socket) .*$", "", config)
    text = re.sub(r"[^ (]*/maps/(fe_[0-9]+\.)", r"MAPS/\1", text)
    for _, address in HAPROXY_PODS:
        text = text.replace(fleet.ip(address), "BIND")
    return text


def test_a_mixed_fleet_converges_and_a_restarted_agent_continues_on_deltas(
    fleet: Fleet,
) -> None:
    (name_a, address_a), (name_b, _) = HAPROXY_PODS
    status = {a.agent.split("/")[1]: a for a in fleet.agents_status()}
    assert status[name_a].deltas and not status[name_b].deltas

    current = add_shop_pod(fleet, "shop-3", "127.0.2.4")
    status = {a.agent.split("/")[1]: a for a in fleet.agents_status()}
    assert status[name_a].acked_content_hash == status[name_b].acked_content_hash == current
    assert deltas_received(fleet, name_a) >= 1, "the delta agent got the change as a delta"
    assert deltas_received(fleet, name_b) == 0, "the --no-deltas agent got full snapshots"
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    assert instance_neutral(a.config.read_text(), fleet) == instance_neutral(
        b.config.read_text(), fleet
    )
    assert f"server SRV_4 {fleet.ip('127.0.2.4')}:8888" in a.config.read_text()

    # Restart A from its saved snapshot: InSync, then the next change comes as a delta.
    fleet.stop_agent(name_a)
    before = deltas_received(fleet, name_a)
    restarted = fleet.start_agent(name_a, address_a)
    wait_until(lambda: "in sync at version" in restarted.log.read_text(), 30, "A to hear InSync")
    current = add_shop_pod(fleet, "shop-4", "127.0.2.5")
    assert deltas_received(fleet, name_a) > before, "deltas continue after the restart"
    status = {a.agent.split("/")[1]: a for a in fleet.agents_status()}
    assert status[name_a].acked_content_hash == status[name_b].acked_content_hash == current
    assert f"server SRV_5 {fleet.ip('127.0.2.5')}:8888" in restarted.config.read_text()
    wait_until(
        lambda: _serves(restarted.address),
        15,
        "the restarted instance to serve",
    )


def _serves(address: str) -> bool:
    try:
        return http_get(address, HOST, CLIENT, timeout=2).startswith("shop-")
    except OSError:
        return False
