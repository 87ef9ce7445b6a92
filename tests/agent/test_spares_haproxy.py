"""Spare backends on a real HAProxy (each installed version), end to end from the model:
the control plane's claim, the agent's runtime apply, the refill at a later reload with
the pinned clients kept, and a Service no spare holds reloading.

docs/design.md, "Spare backends"."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.compute import Computer
from controlplane.model import ClusterState
from controlplane.publish import encode_one
from controlplane.snapshot import SlotAssignment
from nodeagent.config.changes import ApplyPath
from nodeagent.held import Held
from tests.helpers.builders import WORKLOAD, endpoint_slice, haproxy_pod, service, settings
from tests.helpers.fleet import http_get
from tests.helpers.haproxy_env import (
    Instance,
    free_port,
    identity_server,
    loopback_net,
    running_instance,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to

pytestmark = pytest.mark.haproxy

CLIENTS = 6  # source addresses .101..106, pinned by `stick on src`


@dataclasses.dataclass
class Site:
    """A cluster the test edits, its control plane, and one agent-managed HAProxy."""

    inst: Instance
    net: str
    port: int  # the Gateway listener's
    ends: dict[str, int]  # echo server name -> port (all on net.11)
    computer: Computer = dataclasses.field(default_factory=Computer)
    assignment: SlotAssignment = dataclasses.field(default_factory=dict)
    version: int = 0
    services: list[tuple[str, dict[str, str], tuple[str, ...]]] = dataclasses.field(
        default_factory=list
    )

    def cluster(self) -> ClusterState:
        svcs = tuple(service(name, annotations=notes) for name, notes, _ in self.services)
        routes = [
            route(name, [prefix_rule("/", [to(name)])], hostnames=(f"{name}.example",))
            for name, _, _ in self.services
        ]
        slices = tuple(
            endpoint_slice(name, [f"{self.net}.11"], port=self.ends[end])
            for name, _, ends in self.services
            for end in ends[:1]
        )
        base = state(gateway(port=self.port), *routes, services=svcs or (service("none"),))
        config = settings(
            **{
                "spare-backends": "2",
                "server-slots": "4",
                "source-ip-persistence": "true",
            }
        )
        pods = (haproxy_pod(self.inst.pod, self.inst.ip),)
        return dataclasses.replace(base, endpoint_slices=slices, settings=config, haproxy_pods=pods)

    def step(self) -> tuple[ApplyPath | None, dict[str, str], dict[str, str]]:
        """Compute, apply; how it was applied, the claims and the refusals."""
        result = self.computer.compute(self.cluster(), self.assignment)
        self.assignment = result.assignment
        self.version += 1
        content = encode_one(result.workloads[WORKLOAD])
        applied = self.inst.applier.apply(Held.from_snapshot(content.message(self.version)))
        assert applied.ok, applied.error
        return applied.kind, dict(result.spares_claimed), dict(result.spares_refused)

    def ask(self, name: str, client: int) -> str:
        return http_get(self.inst.ip, f"{name}.example", f"{self.net}.{101 + client}", self.port)

    def worker(self) -> int | None:
        return self.inst.haproxy.show_proc().current_worker

    def table(self, section: str) -> str:
        return self.inst.haproxy.runtime(f"show table {section}")


@contextlib.contextmanager
def site(tmp: Path, binary: str) -> Iterator[Site]:
    net = loopback_net()
    with contextlib.ExitStack() as stack:
        ends = {n: stack.enter_context(identity_server(f"{net}.11", n)) for n in ("s1", "s2", "o")}
        # The agent's own wait for the stick-table handover at a reload (15 s, as deployed):
        # a fresh worker's resync takes about 5 s (docs/design.md, "Stick tables across a
        # reload"), and the refill reload comes sooner than that here.
        inst = stack.enter_context(
            running_instance(tmp, f"{net}.1", "haproxy-a", sync_wait=15.0, binary=binary)
        )
        yield Site(inst, net, free_port(inst.ip), ends)


def test_a_new_service_is_served_from_a_spare_without_a_reload_and_kept_at_the_refill(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    with site(tmp_path, haproxy_bin.path) as s:
        s.services = [("other", {}, ("o",))]
        kind, claimed, _ = s.step()
        assert kind is ApplyPath.RELOAD  # the first start (its backend claimed spare.1)
        assert claimed == {"default_other_http": "spare.1"}
        assert s.ask("other", 0) == "o"
        first_worker = s.worker()

        # A new Service and its first route: a spare's slots and one map entry.
        s.services.append(("shop", {}, ("s1",)))
        kind, claimed, _ = s.step()
        assert claimed == {"default_shop_http": "spare.2"}
        assert kind is ApplyPath.RUNTIME
        assert s.worker() == first_worker  # no reload
        pinned = {client: s.ask("shop", client) for client in range(CLIENTS)}
        assert set(pinned.values()) == {"s1"}
        entries = s.table("spare.2")
        assert entries.count("server_id=1") == CLIENTS, entries

        # A second endpoint: new clients may go there, pinned ones stay.
        s.services[-1] = ("shop", {}, ("s1", "s2"))
        slices_before = s.cluster().endpoint_slices
        assert len(slices_before) == 2  # one slice per Service, first endpoint only
        # A Service no spare holds (balance source): it reloads, as before, and the pool
        # is refilled by that reload.
        s.services.append(("odd", {"haproxy.org/load-balance": "source"}, ("o",)))
        kind, claimed, refused = s.step()
        assert kind is ApplyPath.RELOAD
        assert claimed == {} and "balance source" in refused["default_odd_http"]
        assert s.worker() != first_worker
        assert s.ask("odd", 0) == "o"
        # The pinned clients kept their entries and their server through the refill reload.
        assert s.table("spare.2").count("server_id=1") == CLIENTS
        assert {client: s.ask("shop", client) for client in range(CLIENTS)} == pinned
        cfg = Path(s.inst.config_path).read_text()
        assert "backend spare.3" in cfg and "backend spare.4" in cfg  # the refilled pool
        assert "backend default_shop_http" not in cfg  # it keeps its spare's name

        # The refilled pool serves the next new Service without a reload.
        refilled_worker = s.worker()
        s.services.append(("next", {}, ("s2",)))
        kind, claimed, _ = s.step()
        assert (kind, claimed) == (ApplyPath.RUNTIME, {"default_next_http": "spare.3"})
        assert s.worker() == refilled_worker
        assert s.ask("next", 0) == "s2"


def test_a_claim_of_a_spare_not_loaded_since_its_refill_reloads(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """Two new Services one after the other: the first takes a loaded spare (runtime), the
    second the one added to the pool since (not in HAProxy yet), which needs a reload."""
    with site(tmp_path, haproxy_bin.path) as s:
        s.services = [("other", {"haproxy.org/load-balance": "source"}, ("o",))]
        assert s.step()[0] is ApplyPath.RELOAD  # spare.1 and spare.2 loaded
        s.services.append(("a", {}, ("s1",)))
        assert s.step()[:2] == (ApplyPath.RUNTIME, {"default_a_http": "spare.1"})
        s.services.append(("b", {}, ("s2",)))
        assert s.step()[:2] == (ApplyPath.RUNTIME, {"default_b_http": "spare.2"})
        s.services.append(("c", {}, ("s2",)))
        assert s.step()[:2] == (ApplyPath.RELOAD, {"default_c_http": "spare.3"})
        assert (s.ask("a", 0), s.ask("b", 0), s.ask("c", 0)) == ("s1", "s2", "s2")
