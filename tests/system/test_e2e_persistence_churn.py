"""Persistence under churn, on every installed HAProxy: the whole system, seeded events.

A real control plane (`controlplane serve --source files:DIR`) and two (then, in the full
run, three) real agents (`nodeagent run --manage-haproxy`, each with its own HAProxy on
its own 127.x address) serve an HTTP Service (`balance source`) and a TCP Service
(`leastconn`), both with source-IP persistence and `server-slots: 8`. 200 clients, each on
its own source address, are pinned through the instances. Then seeded scale events
(removals, additions, readiness flips, growth past the slot count, and slot reuse: a pod
removed, checked, then a new one added; 30 events, 15 of them reuse, in the full run, 18
and 10 in `make test`), with the control plane SIGKILLed and restarted on its state file
midway and one HAProxy SIGKILLed at the end. After every step, once every agent
ACKed, every client asks through every instance.

Asserted: no client moves while its pod serves, no slot names different servers on two
instances (runtime `show servers state` and the rendered files), no reload except for
slot growth and peer changes, no failed request. The seed is printed; set
PEERPLANE_CHURN_SEED to replay one.

`make test` runs the shorter variant, without the third instance joining; `make churn`
(PEERPLANE_CHURN=1) the full one. Found by it: a reload in a worker's first seconds lost
the stick tables (3.0/3.2; fixed in the agent); a runtime update that HAProxy 3.0/3.2
shows a few ms late was taken as refused and reloaded (the "unexpected reload"; fixed in
the agent); steps taken while fresh workers were still in their peers resync (6-8 s
after a start) saw re-pinned entries put back on another instance, so the steps start
once every instance's resync is done (docs/design.md, "Persistence under churn"); two
instances reloaded together whose new workers' peer sessions collided ACKed before a
session was back, and clients re-pinned then got the removed pod's slot back on both
(fixed in the agent: a reload waits for its peer sessions). A failure prints what the
instances held for the moved clients, their peer sessions and the agents' warnings.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodeagent.haproxy.driver import HAProxy
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.fleet import HAPROXY_PODS, Fleet, table_entries
from tests.helpers.haproxy_versions import HAProxyBinary, installed
from tests.helpers.persistence import (
    Event,
    Pins,
    Pod,
    Service,
    Tally,
    ask_all,
    config_servers,
    flip_candidates,
    haproxy_manifest,
    kill_haproxy,
    plan_events,
    reloads,
    servers_by_slot,
    settings_manifest,
    slot_mismatches,
    write_atomic,
)
from tests.helpers.waiting import WaitTimeout, wait_until

pytestmark = [pytest.mark.haproxy]

# `make churn` (PEERPLANE_CHURN=1): the full run, with a third instance joining (a peers
# change: a reload everywhere). `make test`: fewer events and no join, about half the
# time, so that the suite stays well inside its budget.
FULL = os.environ.get("PEERPLANE_CHURN") == "1"
OCTET = 34  # + the version's index: 127.34-36.x.y, apart from the other tests
CLIENTS = 200
EVENTS = 30 if FULL else 18
# A 1-in-5 reuse failure passes 15 tries with probability 0.8**15 < 4% (10: 11%; the
# repro test, tests/system/test_slot_reuse_haproxy.py, loops reuse 15 times per version).
REUSE_EVENTS = 15 if FULL else 10
JOIN_AT = 8 if FULL else None  # the third HAProxy pod joins before this event
CONTROL_PLANE_KILL_AT = EVENTS // 2
THIRD_POD = ("haproxy-q5n8z", "127.0.1.3")


@dataclass
class Report:
    seed: int
    steps: int = 0
    events: int = 0
    reuse: int = 0
    tally: Tally = field(default_factory=Tally)
    mismatches: list[str] = field(default_factory=list)
    reloads: int = 0
    expected_reload_steps: list[str] = field(default_factory=list)
    unexpected_reloads: list[str] = field(default_factory=list)
    restart_changed_content: bool = False
    reused_at_once: int = 0  # reuse events whose new pod took the freed slot
    stale_entries: int = 0  # stick entries naming the freed slot when the new pod came
    unreplicated: int = 0  # steps whose re-pinned entries did not reach every instance
    asking_s: float = 0.0  # time spent in client requests (the rest: waits for ACKs)
    diagnostics: list[str] = field(default_factory=list)  # state seen right after moves
    # (service, client) -> every instance's entry when its re-pin was seen replicated
    replicated: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    resync_wait_s: float = 0.0  # waited for fresh workers' peers resync (start, join)


class ChurnRun:
    """The fleet, its two Services, the clients' pins and the report of one run."""

    def __init__(self, fleet: Fleet, seed: int) -> None:
        self.fleet = fleet
        self.rng = random.Random(seed)
        self.report = Report(seed)
        self.services = {
            "shop": Service("shop", "http", fleet.ip("127.0.2")),
            "db": Service("db", "tcp", fleet.ip("127.0.4")),
        }
        self.haproxy_pods = list(HAPROXY_PODS)
        self.clients = [fleet.ip(f"127.0.{9 + i // 250}.{i % 250 + 1}") for i in range(CLIENTS)]
        self.pins = Pins()
        self.dead: set[str] = set()  # instances whose HAProxy was killed
        self.log_marks: dict[str, int] = {}  # agent log sizes when reloads were last counted

    # cluster ---------------------------------------------------------

    def write(self, *names: str) -> None:
        for name in names:
            if name == "haproxy":
                write_atomic(self.fleet.manifests / "haproxy.yaml", haproxy_manifest(self.pods()))
            else:
                service = self.services[name]
                write_atomic(self.fleet.manifests / f"{name}.yaml", service.manifest())

    def pods(self) -> list[tuple[str, str]]:
        return [(name, self.fleet.ip(address)) for name, address in self.haproxy_pods]

    def add_pod(self, service: Service) -> Pod:
        pod = service.new_pod()
        self.fleet.backends.start(pod.name, pod.ip, service.port, service.kind)
        return pod

    def start(self) -> None:
        fleet = self.fleet
        fleet.manifests.mkdir(parents=True)
        write_atomic(fleet.manifests / "settings.yaml", settings_manifest())
        for service, count in ((self.services["shop"], 4), (self.services["db"], 3)):
            for _ in range(count):
                self.add_pod(service)
        self.write("haproxy", "shop", "db")
        fleet.start_control_plane()
        for name, address in self.haproxy_pods:
            fleet.start_agent(name, address)
        fleet.wait_all_acked(60)
        self.wait_resynced()

    def wait_resynced(self) -> None:
        """Until every live instance's peers resync finished (`show peers`: flags & 0x3).
        A fresh worker reports it 6-8 s after its start, while it already serves and its
        agent already ACKed; a client re-pinned inside that window can find its entry put
        back on another instance (seed 521826 on 3.2: converged, then the old server again
        before the next request; docs/design.md, "Persistence under churn"). A live fleet
        is past that window, so the steps start after it."""
        start = time.monotonic()

        def resynced() -> bool:
            try:
                return all(
                    HAProxy("", str(self.fleet.agents[n].runtime_socket)).peers_synced()
                    for n in self.live()
                )
            except OSError:
                return False

        wait_until(resynced, 60, "every instance's peers resync", step=0.1)
        self.report.resync_wait_s += time.monotonic() - start

    # observation -----------------------------------------------------

    def live(self) -> list[str]:
        return [name for name in self.fleet.agents if name not in self.dead]

    def backends(self) -> dict[str, str]:
        """Service name -> HAProxy backend name, from the published snapshot."""
        names = {b.name for b in self.fleet.snapshot().backends}
        return {
            svc: next(n for n in names if n.startswith(f"default_{svc}_")) for svc in self.services
        }

    def reload_counts(self) -> dict[str, int]:
        """Reloads so far per live instance; also marks where each agent's log stands, so
        an unexpected reload can be reported with the agent's own reason."""
        agents = self.fleet.agents
        self.log_marks = {n: agents[n].log.stat().st_size for n in self.live()}
        return {n: reloads(agents[n].master_socket, agents[n].runtime_socket) for n in self.live()}

    def check(self, step: str) -> None:
        """Every client through every live instance, one instance after the other; then
        every slot on every instance."""
        report = self.report
        report.steps += 1
        released = self.pins.release_gone({n: s.serving() for n, s in self.services.items()})
        jobs = [(name, s.kind, c) for name, s in self.services.items() for c in self.clients]
        start = time.monotonic()
        for i, instance in enumerate(self.live()):
            held = self.raw_tables(instance)  # what it held before being asked
            answers = ask_all(self.fleet.agents[instance].address, jobs)
            moved = self.pins.check(f"{step} via {instance}", answers, report.tally)
            if moved and len(report.diagnostics) < 3:
                report.diagnostics.append(self.explain(f"{step} via {instance}", moved, held))
            if i == 0 and step == "initial":
                # Fresh instances replicate once their peer sessions are up (a few seconds
                # after start): every client was just pinned through the first one.
                self.wait_replicated(step, set(self.services), set(self.clients))
            elif i == 0 and released:
                self.wait_replicated(step, {svc for svc, _ in released}, {c for _, c in released})
        report.asking_s += time.monotonic() - start
        backends = self.backends()
        views: dict[str, dict[str, str]] = {}
        for instance in self.live():
            agent = self.fleet.agents[instance]
            view = {
                f"{backend}/{slot}": state
                for backend in backends.values()
                for slot, state in servers_by_slot(agent.runtime_socket, backend).items()
            }
            views[f"{instance} runtime"] = view
            views[f"{instance} config"] = {
                key: value.split(" id ")[0] if value != "disabled" else value
                for key, value in config_servers(agent.config).items()
            }
        report.mismatches += [f"{step}: {line}" for line in slot_mismatches(views)]

    def raw_tables(self, instance: str) -> dict[tuple[str, str], str]:
        """(service, client) -> the instance's raw `show table` line for it."""
        agent = self.fleet.agents[instance]
        lines: dict[tuple[str, str], str] = {}
        for svc, backend in self.backends().items():
            for line in agent.runtime(f"show table {backend}").splitlines():
                found = re.search(r"\bkey=(\S+)", line)
                if found:
                    lines[(svc, found.group(1))] = line.strip()
        return lines

    def explain(
        self, step: str, moved: list[tuple[str, str]], held: dict[tuple[str, str], str]
    ) -> str:
        """What the asked instance held for the first moved clients before it was asked,
        what every live instance holds now, the asked instance's servers and every peer
        session: the evidence a failure report needs."""
        backends = self.backends()
        lines = [f"{step}: {len(moved)} moved"]
        lines += [f"  before: {key}: {held.get(key)}" for key in moved[:3]]
        lines += [
            f"  when replicated: {key}: {self.report.replicated[key]}"
            for key in moved[:3]
            if key in self.report.replicated
        ]
        asked = step.rsplit(" via ", 1)[1]
        for svc in sorted({svc for svc, _ in moved}):
            state = self.fleet.agents[asked].runtime(f"show servers state {backends[svc]}")
            lines += [
                f"  {asked} servers | {' '.join(row.split()[2:7])}"
                for row in state.splitlines()[2:]
                if row.strip()
            ]
        for instance in self.live():
            agent = self.fleet.agents[instance]
            for svc, client in moved[:3]:
                table = agent.runtime(f"show table {backends[svc]} key {client}")
                entry = [line for line in table.splitlines() if "key=" in line]
                lines.append(f"  {instance} {svc} {client}: {entry}")
        lines += self.peer_sessions()
        lines += self.handover_warnings()
        return "\n".join(lines)

    def handover_warnings(self) -> list[str]:
        """The agents' warnings that a reload's wait gave up (tables, lesson or peer
        sessions not back within --sync-wait): a reload ACKed before its peer sessions
        were back is the one cause of a move after a reload that the agent knows of."""
        lines = []
        for instance in self.live():
            text = self.fleet.agents[instance].log.read_text(errors="replace")
            found = [line for line in text.splitlines() if "after the reload" in line]
            lines += [f"  {instance} agent | {line.strip()}" for line in found[-3:]]
        return lines

    def peer_sessions(self) -> list[str]:
        """Every live instance's peers section flags, each peer's status and counters (not
        the per-table dumps) and its master's `show proc` (old workers still alive)."""
        lines = []
        for instance in self.live():
            agent = self.fleet.agents[instance]
            lines += [
                f"  {instance} | {line.strip()}"
                for line in agent.runtime("show peers").splitlines()
                if "disabled=" in line
                or "(local" in line
                or "(remote" in line
                or "new_conn=" in line
            ]
            master = HAProxy(str(agent.master_socket), str(agent.runtime_socket))
            workers = master.master("show proc").splitlines()
            lines += [f"  {instance} proc | {line.strip()}" for line in workers if line.strip()]
        return lines

    def wait_replicated(self, step: str, services: set[str], clients: set[str]) -> None:
        """Clients whose pod went away were just re-pinned through the first instance; the
        peers replicate that asynchronously, so wait (bounded) until every instance's table
        names the same server for them, as a client coming back later would find it."""
        backends = self.backends()
        seen: dict[str, dict[str, dict[str, str]]] = {}  # svc -> instance -> its entries

        def same() -> bool:
            for svc in services:
                command = f"show table {backends[svc]}"
                seen[svc] = {
                    n: table_entries(self.fleet.agents[n].runtime(command)) for n in self.live()
                }
            return all(
                len({t.get(c) for t in tables.values()}) == 1
                for tables in seen.values()
                for c in clients
            )

        try:
            wait_until(same, 10, "the re-pinned clients' entries on every instance")
            first = self.live()[0]
            for svc, tables in seen.items():  # what a later failure report compares against
                for c in clients:
                    if c in tables[first]:
                        self.report.replicated[(svc, c)] = {
                            n: t.get(c, "-") for n, t in tables.items()
                        }
        except WaitTimeout:
            differing = []
            for svc, tables in seen.items():  # as the last look found them
                for c in sorted(clients):
                    found = {n: t.get(c) for n, t in tables.items()}
                    if len(set(found.values())) > 1:
                        differing.append(f"{svc} {c} {found}")
            self.report.tally.note(
                f"{step}: re-pinned entries not replicated within 10s: " + "; ".join(differing[:8])
            )
            if len(self.report.diagnostics) < 3:
                self.report.diagnostics.append(
                    "\n".join([f"{step}: not replicated", *self.peer_sessions()])
                )
            self.report.unreplicated += 1

    # steps -----------------------------------------------------------

    def publish(self, step: str, change: list[str], before: pb.Snapshot | None = None) -> None:
        """Write the changed manifests, wait for every agent's ACK of the new version, count
        reloads (expected only when a slot count or the peers changed), check."""
        fleet = self.fleet
        before = before or fleet.snapshot()
        counts = self.reload_counts()
        self.write(*change)
        wait_until(lambda: fleet.snapshot().content_hash != before.content_hash, 30, step)
        fleet.wait_all_acked(30)
        after = fleet.snapshot()
        self.account_reloads(step, counts, before, after)
        self.check(step)

    def account_reloads(
        self, step: str, counts: dict[str, int], before: pb.Snapshot, after: pb.Snapshot
    ) -> None:
        marks = dict(self.log_marks)  # reload_counts() moves them on
        now = self.reload_counts()
        delta = {name: now[name] - counts[name] for name in counts if name in now}
        self.report.reloads += sum(delta.values())
        shape_before = [(b.name, len(b.slots)) for b in before.backends]
        shape_after = [(b.name, len(b.slots)) for b in after.backends]
        expected = shape_before != shape_after or before.peers != after.peers
        if expected:
            self.report.expected_reload_steps.append(step)
        elif any(delta.values()):
            reasons = []
            for name, mark in marks.items():
                with self.fleet.agents[name].log.open("rb") as f:
                    f.seek(mark)
                    text = f.read().decode(errors="replace")
                reasons += [f"{name}: {line}" for line in text.splitlines() if "nodeagent" in line]
            self.report.unexpected_reloads.append(f"{step}: {delta} " + " | ".join(reasons[-12:]))

    def event(self, index: int, event: Event) -> None:
        service = self.services[event.service]
        step = f"event {index} {event.kind} {event.service}"
        self.report.events += 1
        if event.kind in ("remove", "reuse"):
            freed = self.remove(service, step)
            if event.kind == "reuse":
                self.report.reuse += 1
                self.report.stale_entries += self.entries_naming(service, freed)
                pod = self.add_pod(service)
                self.publish(f"{step}: new pod", [service.name])
                self.report.reused_at_once += self.slot_of(service, pod.ip) == freed
        elif event.kind == "add":
            self.add_pod(service)
            self.publish(step, [service.name])
        elif event.kind == "flip":
            # Keep two serving: flip a not-ready pod back, or add a pod first (never the
            # one flipped: seed 468413 waited 30 s for a change that changed nothing).
            added = None
            if len(service.serving()) <= 2 and all(p.ready for p in service.pods.values()):
                added = self.add_pod(service)
            pod = self.rng.choice(flip_candidates(service, added))
            pod.ready = not pod.ready
            self.publish(f"{step} {pod.name} ready={pod.ready}", [service.name])
        elif event.kind == "grow":
            slots = next(
                len(b.slots)
                for b in self.fleet.snapshot().backends
                if b.name.startswith(f"default_{service.name}_")
            )
            while len(service.serving()) <= slots:
                self.add_pod(service)
            self.publish(f"{step} past {slots} slots", [service.name])

    def remove(self, service: Service, step: str) -> str:
        """Remove a serving pod (keeping two serving: a new pod comes in the same change);
        its server stops once every agent ACKed. The slot it had."""
        candidates = [p for p in service.pods.values() if p.ready]  # published: have a slot
        if len(service.serving()) <= 2:
            self.add_pod(service)
        pod = self.rng.choice(sorted(candidates, key=lambda p: p.name))
        slot = self.slot_of(service, pod.ip)
        del service.pods[pod.name]
        self.publish(f"{step} {pod.name}", [service.name])
        self.fleet.backends.stop(pod.name)
        return slot

    def slot_of(self, service: Service, ip: str) -> str:
        """The server name (SRV_n) the published snapshot gives address `ip`."""
        backend = self.backends()[service.name]
        (found,) = [b for b in self.fleet.snapshot().backends if b.name == backend]
        return next(s.server_name for s in found.slots if s.enabled and s.address == ip)

    def entries_naming(self, service: Service, server: str) -> int:
        """Stick entries on the live instances that still name `server` (a freed slot)."""
        command = f"show table {self.backends()[service.name]}"
        return sum(
            list(table_entries(self.fleet.agents[name].runtime(command)).values()).count(server)
            for name in self.live()
        )

    def join_third_agent(self) -> None:
        """A third HAProxy pod: a peers change (a reload on the others, expected); its
        table fills from the peers before its clients are checked."""
        fleet = self.fleet
        before = fleet.snapshot()
        counts = self.reload_counts()
        self.haproxy_pods.append(THIRD_POD)
        self.write("haproxy")
        wait_until(lambda: fleet.snapshot().content_hash != before.content_hash, 30, "peers")
        fleet.start_agent(*THIRD_POD)
        fleet.wait_all_acked(60)
        self.wait_resynced()
        first, new = fleet.agents[self.haproxy_pods[0][0]], fleet.agents[THIRD_POD[0]]
        for backend in self.backends().values():
            command = f"show table {backend}"

            def synced(c: str = command) -> bool:
                return table_entries(new.runtime(c)) == table_entries(first.runtime(c))

            wait_until(
                synced,
                20,
                f"{THIRD_POD[0]}'s {backend} table to match its peers'",
            )
        self.account_reloads("join", counts, before, fleet.snapshot())
        self.check("join")

    def kill_control_plane(self) -> None:
        """SIGKILL, restart on the same state file and address: same content, no reload."""
        fleet = self.fleet
        before = fleet.snapshot()
        counts = self.reload_counts()
        process = fleet.control_plane
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        fleet.stop_control_plane()  # forgets the dead process and its channel
        fleet.start_control_plane()
        fleet.wait_all_acked(60)
        after = fleet.snapshot()
        self.report.restart_changed_content = after.content_hash != before.content_hash
        self.account_reloads("control-plane restart", counts, before, after)
        self.check("control-plane restart")

    def kill_first_haproxy(self) -> None:
        """SIGKILL the first instance's HAProxy; clients go through the survivors."""
        victim = self.fleet.agents[self.haproxy_pods[0][0]]
        kill_haproxy(victim.master_socket, victim.runtime_socket)
        self.dead.add(victim.pod_name)
        self.check("HAProxy SIGKILL")

    def run(self) -> Report:
        self.start()
        self.check("initial")
        events = plan_events(self.rng, EVENTS, REUSE_EVENTS, sorted(self.services))
        for index, event in enumerate(events, 1):
            if JOIN_AT is not None and index == JOIN_AT:
                self.join_third_agent()
            if index == CONTROL_PLANE_KILL_AT:
                self.kill_control_plane()
            self.event(index, event)
        self.kill_first_haproxy()
        return self.report


def test_a_flip_never_picks_the_pod_added_for_it() -> None:
    """Pure: the event that added a pod to keep two serving flips another one."""
    service = Service("db", "tcp", "127.0.4")
    first, second = service.new_pod(), service.new_pod()
    added = service.new_pod()
    assert flip_candidates(service, added) == [first, second]
    first.ready = False  # two serving: only a not-ready pod may flip (back)
    assert flip_candidates(service, None) == [first]


def _seed() -> int:
    return int(os.environ.get("PEERPLANE_CHURN_SEED") or random.SystemRandom().randrange(10**6))


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    octet = OCTET + [b.series for b in installed()].index(haproxy_bin.series)
    running = Fleet(tmp_path, octet, haproxy_bin=haproxy_bin.path)
    try:
        yield running
    finally:
        running.stop()


def _churn(fleet: Fleet, seed: int, version: str, capsys: pytest.CaptureFixture[str]) -> Report:
    """One churn run on `fleet`, its summary line printed."""
    start = time.monotonic()
    with capsys.disabled():
        print(f"\npersistence churn haproxy {version}: seed {seed}", flush=True)
    report = ChurnRun(fleet, seed).run()
    tally = report.tally
    with capsys.disabled():
        print(
            f"persistence churn haproxy {version}: clients={CLIENTS} "
            f"events={report.events} (reuse={report.reuse}) steps={report.steps} "
            f"moved={tally.moved} mismatches={len(report.mismatches)} "
            f"reloads={report.reloads} (expected at: {', '.join(report.expected_reload_steps)}) "
            f"unexpected_reloads={len(report.unexpected_reloads)} failed={tally.failed} "
            f"reused_at_once={report.reused_at_once} stale_entries={report.stale_entries} "
            f"unreplicated={report.unreplicated} "
            f"seed={seed} {time.monotonic() - start:.0f}s (requests {report.asking_s:.0f}s, "
            f"resync waits {report.resync_wait_s:.1f}s)",
            flush=True,
        )
    return report


def _only_unreplicated(report: Report) -> bool:
    """Every client stayed, every slot agreed, only re-pinned entries did not converge
    between the instances in time: the open finding of docs/findings.md (crossing peer
    updates; a replay of the same seed passed each time it was tried)."""
    return (
        report.unreplicated > 0
        and report.tally.moved == 0
        and report.tally.failed == 0
        and not report.mismatches
        and not report.unexpected_reloads
        and not report.restart_changed_content
    )


def test_no_client_moves_and_no_slot_differs_under_churn(
    fleet: Fleet, haproxy_bin: HAProxyBinary, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seed = _seed()
    report = _churn(fleet, seed, str(haproxy_bin.version), capsys)
    if _only_unreplicated(report):
        # Said in full, then the same seed once more on a fresh fleet: a regression of
        # ours replays, the open finding has not; anything else fails at once.
        with capsys.disabled():
            print(
                "persistence churn: re-pinned entries did not converge (open finding, "
                "docs/findings.md); replaying the seed on a fresh fleet once:\n"
                + "\n".join(report.tally.details + report.diagnostics),
                flush=True,
            )
        fleet.stop()
        octet = OCTET + [b.series for b in installed()].index(haproxy_bin.series)
        with Fleet(tmp_path / "replay", octet, haproxy_bin=haproxy_bin.path) as again:
            report = _churn(again, seed, str(haproxy_bin.version), capsys)
    tally = report.tally
    replay = f"(replay: PEERPLANE_CHURN_SEED={seed})"
    assert report.reuse >= REUSE_EVENTS
    assert tally.moved == 0, f"{tally.moved} client moves {replay}:\n" + "\n".join(
        tally.details + report.diagnostics
    )
    assert tally.failed == 0, f"{tally.failed} failed requests {replay}:\n" + "\n".join(
        tally.details
    )
    assert report.unreplicated == 0, f"{replay}:\n" + "\n".join(tally.details + report.diagnostics)
    assert report.mismatches == [], f"slots differ {replay}:\n" + "\n".join(report.mismatches[:20])
    assert report.unexpected_reloads == [], f"{replay} {report.unexpected_reloads}"
    assert not report.restart_changed_content, f"restart changed the content {replay}"
