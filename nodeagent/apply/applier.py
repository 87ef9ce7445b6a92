"""Apply a snapshot to HAProxy in the cheapest correct way, and only then say so.

One pipeline, for a snapshot from the control plane (`apply`) and for the saved one on
agent start (`restore`): check the local peer, render, classify, then either the runtime
API (slot changes only) or `haproxy -c` before anything is touched (a NACK must leave the
running config and the file as they were) and an atomic write + activation (start or
hitless reload, by the strategy of `activation.py`); a first start with no HAProxy running
skips the check and falls back to it only when the start fails (`_start_unchecked`). The
snapshot is recorded as applied only once HAProxy confirmed it runs it. Every failure is
one `ApplyError` carrying the NACK text (docs/design.md, "Architecture": NACK keeps the
old config serving). A certificate the agent's check or `haproxy -c` refuses, or a backend
or route rule `haproxy -c` refuses, is no failure: it is set aside (`setaside.py`,
`attribution.py`), the rest applies, and the ACK names it ("One part never stops the
others").
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

from nodeagent.apply import activation, attribution, checked_render, peers, saved, setaside
from nodeagent.apply.certfiles import CertFiles
from nodeagent.apply.faults import crash_point
from nodeagent.apply.files import HAProxyFiles
from nodeagent.apply.outcome import (
    BACKEND,
    CERTIFICATE,
    ROUTE_RULE,
    ApplyError,
    Result,
    SetAside,
    unexpected,
)
from nodeagent.apply.validation import Validation
from nodeagent.config import changes
from nodeagent.config.descriptors import Budget
from nodeagent.config.render import Rendered, RenderOptions
from nodeagent.haproxy import HAProxyError, sockrepair, sslcerts
from nodeagent.haproxy.driver import HAProxy, Unanswered
from nodeagent.haproxy.supervisor import Supervisor
from nodeagent.held import ChangeSet, DeltaError, Held, diff
from nodeagent.logformat import fields
from nodeagent.metrics import AgentMetrics
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)


class Applier:
    """Owns haproxy.cfg and the applied snapshot of one HAProxy instance.

    `supervisor` given: the agent runs HAProxy (`activation.Managed`); else HAProxy is
    started by someone else and reached through its sockets (`activation.External`).
    """

    def __init__(
        self,
        options: RenderOptions,
        config_path: str,
        store: saved.StateStore,
        haproxy: HAProxy,
        supervisor: Supervisor | None = None,
        start_timeout: float = 15.0,
        metrics: AgentMetrics | None = None,
        budget: Budget | None = None,
    ) -> None:
        # The route model's map files live beside haproxy.cfg: HAProxy reads both.
        # So do the certificates and the HTTPS listeners' crt-lists.
        here = os.path.dirname(os.path.abspath(config_path))
        maps_dir, certs_dir = os.path.join(here, "maps"), os.path.join(here, "certs")
        self.options = dataclasses.replace(options, maps_dir=maps_dir, certs_dir=certs_dir)
        self.certs = CertFiles(certs_dir)
        self.config_path = config_path
        self.metrics = metrics if metrics is not None else AgentMetrics()
        self.files = HAProxyFiles(config_path, maps_dir, self.metrics.config_write_failures.inc)
        self.store = store
        self.haproxy = haproxy
        self.activation = activation.for_mode(haproxy, supervisor)
        if supervisor is not None:  # a (re)start of HAProxy reads the file: current first
            supervisor.before_spawn = self._config_for_start
        self.start_timeout = start_timeout
        self.applied: Held | None = None
        self._applied_cfg: Rendered | None = None  # the render cache: applied sections
        # While nothing is applied, the latest render: the cache of the retry of a first
        # start that failed (8 s to render 8,000 backends again on a loaded host).
        self._unapplied_cfg: Rendered | None = None
        self._set_aside: dict[str, SetAside] = {}  # what `applied` runs without, by name
        # Its backends rendered as stubs and route rules left out, by `attribution.key`.
        self._parts_aside: dict[str, SetAside] = {}
        self._unsaved = False  # HAProxy runs `applied` but the state dir lacks it
        # Unclaimed spare sections in the file that HAProxy has not loaded: added by a
        # version applied without a reload (docs/design.md, "Spare backends").
        self._pending: frozenset[str] = frozenset()
        # This apply found the runtime socket silent: its repair does not wait on it again.
        self._socket_silent = False
        self._lock = threading.Lock()
        self.validation = Validation(haproxy, self.certs, certs_dir, self.metrics)
        # The open files HAProxy may use: a config that needs more is NACKed before
        # `haproxy -c` (None: not counted; HAProxy's own refusal is quoted instead).
        self.budget = budget

    @property
    def applied_hash(self) -> str:
        """Said in Hello. Empty while the snapshot is not saved, so that the control plane
        sends it again and the save is retried."""
        if self.applied is None or self._unsaved:
            return ""
        return self.applied.content_hash

    @property
    def applied_version(self) -> int:
        return self.applied.version if self.applied is not None else 0

    @property
    def applied_held(self) -> Held | None:
        """What the Hello reports, in parts: the base a new stream's deltas apply to."""
        return None if self._unsaved else self.applied

    def close(self) -> None:
        """At stop: haproxy.cfg written if its write was still deferred."""
        self.files.config.close()

    def _config_for_start(self) -> None:
        """Before the supervisor starts HAProxy on the file: the deferred content written
        (a failure is logged; HAProxy then starts on the older file, as it would have
        before the write was deferred, and the next apply writes it first or NACKs)."""
        try:
            self.files.config.flush()
        except ApplyError as e:
            log.error("HAProxy (re)starts on an older haproxy.cfg: %s", e.reason)

    def restore(self) -> bool:
        """On agent start: run the saved snapshot at once, before the control plane answers.

        The apply pipeline, with three differences: the snapshot is not saved again, no
        crash point fires (a restarted agent must get past it), and an external HAProxy
        that is not up yet is only given the file (it starts on it; the agent does not wait).
        """
        with self._lock:
            snapshot = self.store.load_held()
            if snapshot is None:
                log.info(
                    "no saved snapshot in %s; waiting for the control plane", self.store.state_dir
                )
                return False
            try:
                result = self._run(snapshot, None, restoring=True)
            except ApplyError as e:
                log.error("saved snapshot not restored: %s", e.reason)
                return False
            self.metrics.applied_version.set(snapshot.version)
            log.info(
                "restored saved snapshot workload=%s version=%d hash=%.12s worker=%s",
                snapshot.workload,
                snapshot.version,
                snapshot.content_hash,
                result.worker_pid,
            )
            return True

    def apply(self, snapshot: Held | pb.Snapshot, change: ChangeSet | None = None) -> Result:
        """Apply a snapshot from the control plane: the ACK or the NACK to send. `change`
        (from a delta) says what differs from the snapshot whose hash is its base; without
        it, or on another base, the held parts are compared (cheap: shared bytes)."""
        with self._lock:
            start = time.monotonic()
            try:
                if isinstance(snapshot, pb.Snapshot):  # a private copy: callers may mutate theirs
                    snapshot = _hold(pb.Snapshot.FromString(snapshot.SerializeToString()))
                result = self._run(snapshot, change)
            except ApplyError as e:  # HAProxy keeps running what it ran
                path = e.kind.value if e.kind is not None else None
                log.warning(
                    "workload=%s version=%d: not applied: %s",
                    snapshot.workload,
                    snapshot.version,
                    e.reason,
                    extra=fields(workload=snapshot.workload, version=snapshot.version, path=path),
                )
                result = e.result()
            except Exception as e:  # a fault nobody foresaw must still be a NACK
                result = unexpected(e, snapshot.workload, snapshot.version)
            self._count(result, time.monotonic() - start)
            return result

    def _count(self, result: Result, seconds: float) -> None:
        m = self.metrics
        if not result.ok or result.kind is None:
            return
        m.apply_seconds.labels(result.kind.value).observe(seconds)
        if result.kind is changes.ApplyPath.RELOAD:
            m.reloads.inc()
        elif result.kind is changes.ApplyPath.RUNTIME:
            m.runtime_updates.inc()
        m.applied_version.set(self.applied_version)

    def _run(self, snapshot: Held, change: ChangeSet | None, restoring: bool = False) -> Result:
        """The pipeline; raises ApplyError, after which HAProxy and the file are as they were.

        O(changed backends) but for the joins of the file and the saved bytes and their
        writes (and, for a full snapshot, `held.diff`): unchanged sections come from the
        render cache, only changed backends are rendered and classified."""
        ident = f"workload={snapshot.workload} version={snapshot.version}"
        self._socket_silent = False

        def extra(path: changes.ApplyPath | None) -> dict[str, object]:
            name = path.value if path is not None else None
            return fields(workload=snapshot.workload, version=snapshot.version, path=name)

        missing = peers.missing_local_peer(snapshot.peers, self.options.pod_name)
        if missing is not None:
            raise ApplyError(missing)
        if self.files.config.failed is not None:  # a write after the last ACK failed
            self.files.config.flush()  # the file a restart reads, before anything else
        old = self.applied
        if old is not None and (change is None or change.base != old.content_hash):
            change = diff(old, snapshot)
        # Before HAProxy or any file it reads sees them: a certificate that cannot be served
        # is set aside, and the rest applies (the old certificates keep serving).
        aside = self._checked_certificates(snapshot, change if old is not None else None)
        if change is not None and aside.keys() != self._set_aside.keys():
            # Other crt-list lines than the applied ones, whatever the parts say.
            change = dataclasses.replace(change, frontends=True)
        parts = self._carried_parts(snapshot, change)
        if change is not None and parts.keys() != self._parts_aside.keys():
            change = dataclasses.replace(change, frontends=True)  # route rules aside or back
        rendered, parts = checked_render.render_checked(
            snapshot, self.options, self._render_cache(), change, aside, parts
        )
        if self._applied_cfg is None:
            self._unapplied_cfg = rendered
        decision = changes.Decision(changes.ApplyPath.RELOAD, reason="nothing applied yet")
        if old is not None and change is not None:
            decision = changes.classify(
                old, self._applied_cfg, snapshot, rendered, change, self._pending
            )
        started = self.activation.started
        if decision.kind is changes.ApplyPath.NOTHING and started:
            log.info(
                "%s: no change to HAProxy (%s)", ident, decision.reason, extra=extra(decision.kind)
            )
            # The header names the content hash: another hash is another file, written
            # (after the ACK) without reading the old one (27 MB at 8,000 Services) to see
            # that it differs.
            if old is None or old.content_hash != snapshot.content_hash:
                self.files.config.defer(rendered.pieces)
            elif self._read_config_bytes() != (data := rendered.data()):
                self.files.write_config(data)
            self._record(snapshot, rendered, aside, parts, old, change, pending=decision.pending)
            listed = setaside.listed(
                aside, parts, setaside.unknown_rules(rendered.routed.unknown_aside)
            )
            return Result(True, decision.kind, set_aside=listed)
        kind = decision.kind if started else changes.ApplyPath.RELOAD
        # Map commands only: their first connection is the probe (`HAProxy.set_maps`).
        maps_only = not decision.updates and not decision.certs
        runtime = kind is changes.ApplyPath.RUNTIME
        if runtime and not maps_only and not sockrepair.answers(self.haproxy.runtime_socket):
            self._unanswered(ident, extra)
            kind = changes.ApplyPath.RELOAD
        if kind is changes.ApplyPath.RUNTIME:
            done = self._runtime(
                snapshot, change, rendered, decision, ident, extra(kind), aside, parts
            )
            if isinstance(done, Result):
                return done
            if isinstance(done, Unanswered):
                self._unanswered(ident, extra)
                done = str(done)
            # The reload's reason says why the runtime API did not do.
            kind = changes.ApplyPath.RELOAD
            decision = dataclasses.replace(
                decision, reason=f"runtime update failed, reloading: {done} ({decision.reason})"
            )
        data = rendered.data()  # the file; its text only on this path
        self._check_descriptors(data, decision.kind)
        cfg = data.decode()
        before = self._applied_cfg.maps if self._applied_cfg is not None else {}
        self.files.write_maps(rendered.maps, before)  # `haproxy -c` and the reload read them
        render_aside = functools.partial(self._render, snapshot, change)
        said = extra(changes.ApplyPath.RELOAD)
        try:
            up = self._start_unchecked(
                cfg, data, decision, ident, restoring, said, snapshot, rendered, aside
            )
            if up is None:
                cfg, rendered, aside, parts = self.validation.validated(
                    cfg, decision, snapshot, rendered, aside, self.applied, render_aside, parts
                )
                up = self._activate_checked(
                    cfg, decision, ident, restoring, said, snapshot, rendered, aside
                )
            pid, fresh = up
        except ApplyError:
            if self._applied_cfg is not None:  # the running HAProxy's maps, for a restart
                self.files.write_maps(before, rendered.maps)
                self._restore_certs(snapshot, rendered)
            raise
        self._record(snapshot, rendered, aside, parts, old, change, save=not restoring)
        self.certs.prune(setaside.served(snapshot, aside), rendered.crt_lists)
        peers.check_peers(self.haproxy, snapshot, ident)
        listed = setaside.listed(
            aside, parts, setaside.unknown_rules(rendered.routed.unknown_aside)
        )
        return Result(True, kind, worker_pid=pid, started=fresh, set_aside=listed)

    def _unanswered(
        self, ident: str, extra: Callable[[changes.ApplyPath], dict[str, object]]
    ) -> None:
        self._socket_silent = True
        log.warning(
            "%s: runtime socket %s does not answer; reloading to repair it",
            ident,
            self.haproxy.runtime_socket,
            extra=extra(changes.ApplyPath.RELOAD),
        )

    def _carried_parts(self, snapshot: Held, change: ChangeSet | None) -> dict[str, SetAside]:
        """The backends and route rules set aside in the applied version and unchanged
        since: they stay aside without a check; a changed one is rendered and checked again."""
        if change is None or self.applied is None:
            return {}
        return attribution.carried(self._parts_aside, snapshot, change.backends)

    def _checked_certificates(
        self, snapshot: Held, change: ChangeSet | None
    ) -> dict[str, SetAside]:
        """The certificates set aside before render: those the agent's check refuses among
        the new or changed ones (all, without `change`), and those the applied version set
        aside that are unchanged."""
        names = change.certificates if change is not None else None
        aside = setaside.carried(self._set_aside, snapshot.certificates, names)
        problems = self.certs.problems(snapshot, names)
        refused = setaside.refused_by_agent(problems, snapshot.certificates)
        setaside.log_set_aside(snapshot, refused.values())
        return {**aside, **refused}

    def _render(
        self,
        snapshot: Held,
        change: ChangeSet | None,
        aside: Mapping[str, SetAside],
        parts: Mapping[str, SetAside],
    ) -> Rendered:
        """`checked_render.render` from the render cache (`_applied_cfg`, else the
        latest render while nothing is applied)."""
        return checked_render.render(
            snapshot, self.options, self._render_cache(), change, aside, parts
        )

    def _render_cache(self) -> Rendered | None:
        return self._applied_cfg if self._applied_cfg is not None else self._unapplied_cfg

    def _start_unchecked(
        self,
        cfg: str,
        data: bytes,
        decision: changes.Decision,
        ident: str,
        restoring: bool,
        said: dict[str, object],
        snapshot: Held,
        rendered: Rendered,
        aside: Mapping[str, SetAside],
    ) -> tuple[int | None, bool] | None:
        """A first start, no HAProxy running or adopted: started without `haproxy -c`.
        HAProxy's start parses the file as the check does and refuses what it refuses,
        and each of the two loads took seconds at 8,000 Services (docs/findings.md, "First
        start at 8,000 Services"); the one thing 2.6 only warns of, a peers section without
        the local peer, was refused before render (`peers.missing_local_peer`). None when
        no such start applies, or when it failed and its master is gone: the caller then
        runs the check, which names what to set aside or NACKs in its words, and starts
        the checked config. A start still loading after the timeout stays a retryable
        NACK, waited for by the retry (`activation.Managed`), which runs no check either
        while the file is the one that master loads."""
        if not self.activation.fresh(data):
            return None
        try:
            return self._activate_checked(
                cfg, decision, ident, restoring, said, snapshot, rendered, aside
            )
        except ApplyError as e:
            if not self.activation.failed_start_ended():
                raise
            log.warning(
                "%s: HAProxy did not start on the config (%s); checking it with haproxy -c",
                ident,
                e.reason,
                extra=said,
            )
            return None

    def _activate_checked(
        self,
        cfg: str,
        decision: changes.Decision,
        ident: str,
        restoring: bool,
        said: dict[str, object],
        snapshot: Held,
        rendered: Rendered,
        aside: Mapping[str, SetAside],
    ) -> tuple[int | None, bool]:
        """The certificate files `haproxy -c` passed, then the start or reload (or,
        restoring for an external HAProxy not up yet, only the files): the worker's PID
        and whether HAProxy was started."""
        before_lists = self._applied_cfg.crt_lists if self._applied_cfg is not None else {}
        self.certs.write(
            setaside.served(snapshot, aside),
            rendered.crt_lists,
            self._applied_served(),
            before_lists,
        )  # checked: now live
        if restoring and not self.activation.present():
            self.files.write_config(cfg)  # an external HAProxy not up yet starts on this file
            return None, False
        log.info("%s: reload (%s)", ident, decision.reason, extra=said)
        return self._activate(cfg, crash_at=None if restoring else "after-config-write")

    def _applied_served(self) -> Held | None:
        """The applied snapshot as its files are: without the certificates set aside."""
        return None if self.applied is None else setaside.served(self.applied, self._set_aside)

    def _runtime(
        self,
        snapshot: Held,
        change: ChangeSet | None,
        rendered: Rendered,
        decision: changes.Decision,
        ident: str,
        extra: dict[str, object],
        aside: Mapping[str, SetAside],
        parts: Mapping[str, SetAside],
    ) -> Result | str | Unanswered:
        """Slot and route map changes through the runtime API; the failure's words when
        HAProxy refused them (the caller reloads, with the map files written), or
        `Unanswered` when the socket did not answer the map commands (the caller's
        reload repairs it).

        No `haproxy -c` on this path: classify() proved the new file differs from the
        running, validated one only in server lines and map entries (the frontends' text is
        unchanged), which render() wrote from strictly checked addresses, ports and route
        strings, and HAProxy checks each address again. Validation
        would be ~90% of the path (about 100 ms of 115 ms measured)."""
        try:
            log.info("%s: runtime update (%s)", ident, decision.reason, extra=extra)
            if decision.updates:
                self.haproxy.set_servers(decision.updates)
            if decision.maps:
                self.haproxy.set_maps(decision.maps)
            if decision.certs:
                sslcerts.update_certificates(self.haproxy.runtime, decision.certs)
        except Unanswered as e:
            return e
        except (OSError, HAProxyError) as e:
            log.warning("%s: runtime update failed (%s); reloading instead", ident, e)
            return str(e) or type(e).__name__
        before = self._applied_cfg.maps if self._applied_cfg is not None else {}
        # After the commands, which HAProxy serves at once: a later reload or restart
        # reads the same (the changed files' lines patched by the commands' entries).
        self.files.write_maps(rendered.maps, before, decision.maps)
        before_lists = self._applied_cfg.crt_lists if self._applied_cfg is not None else {}
        served = setaside.served(snapshot, aside)
        self.certs.write(served, rendered.crt_lists, self._applied_served(), before_lists)
        # 27 MB at 8,000 Services, which HAProxy need not wait for: joined and written
        # after the ACK, and before anything reads the file ("What an ACK promises").
        self.files.config.defer(rendered.pieces)
        old = self.applied
        self._record(snapshot, rendered, aside, parts, old, change, pending=decision.pending)
        self.certs.prune(served, rendered.crt_lists)
        return Result(
            True,
            changes.ApplyPath.RUNTIME,
            worker_pid=self._worker_pid(),
            set_aside=setaside.listed(
                aside, parts, setaside.unknown_rules(rendered.routed.unknown_aside)
            ),
        )

    def _restore_certs(self, snapshot: Held, rendered: Rendered) -> None:
        """After a failed reload: the files of the certificates HAProxy runs, for a restart
        (best effort: the NACK already says what failed)."""
        before_lists = self._applied_cfg.crt_lists if self._applied_cfg is not None else {}
        try:
            self.certs.write(self._applied_served(), before_lists, snapshot, rendered.crt_lists)
        except ApplyError as e:
            log.error("certificates of the running config not put back: %s", e.reason)

    def _activate(self, cfg: str, crash_at: str | None = None) -> tuple[int | None, bool]:
        """Write the file and make HAProxy run it: first start or hitless reload; the new
        worker and whether HAProxy was started (not reloaded). A failure puts the previous
        file back (the next start must use the running config) and is a retryable
        ApplyError."""
        previous = self.files.read_text()
        started = self.activation.started
        silent = self._socket_silent
        rebind = activation.socket_rebinding(self.haproxy, cfg, silent) if started else None
        self.files.write_config(rebind or cfg)
        if crash_at is not None:
            crash_point(crash_at)
        try:
            if rebind is not None:
                pid = self.haproxy.reload(repairing=True).current_worker
                self.files.write_config(cfg)  # same meaning, usual spelling
                self.metrics.socket_repairs.inc()
                return pid, False
            info = self.activation.bring_up(self.start_timeout)
            if info is not None:
                return info.current_worker, True
            return self.haproxy.reload().current_worker, False
        except (OSError, HAProxyError) as e:
            if previous is not None:
                self.files.write_config(previous)
            self.metrics.refused("reload", str(e))
            raise ApplyError(f"reload failed: {e}", changes.ApplyPath.RELOAD, retryable=True) from e

    def _check_descriptors(self, data: bytes, kind: changes.ApplyPath) -> None:
        """Before `haproxy -c` and any write: a config needing more open files than HAProxy
        may have is NACKed with the figures and the remedies, as HAProxy would refuse to
        start or reload on it (docs/design.md, "Open files")."""
        if self.budget is None:
            return
        need, short = self.budget.check(data)
        self.metrics.descriptors_needed.set(need.total)
        if short is not None:
            self.metrics.refused("descriptors", short)
            raise ApplyError(short, kind)

    def _read_config_bytes(self) -> bytes | None:
        """The file as HAProxy would read it, to compare with what a change renders."""
        return self.files.read_bytes()

    def _worker_pid(self) -> int | None:
        """For the result only: HAProxy already runs the update, so a master CLI that does
        not answer must not turn it into a reload (and a NACK of what runs)."""
        try:
            return self.haproxy.show_proc().current_worker
        except (OSError, HAProxyError) as e:
            log.warning("cannot read show proc after a runtime update: %s", e)
            return None

    def _record(
        self,
        snapshot: Held,
        rendered: Rendered,
        aside: Mapping[str, SetAside],
        parts: Mapping[str, SetAside],
        previous: Held | None,
        change: ChangeSet | None,
        save: bool = True,
        pending: frozenset[str] = frozenset(),
    ) -> None:
        """HAProxy runs `snapshot` now: remember it and its sections (the render cache),
        then save it (unless it is the saved one) from the bytes in hand: a journal record
        of `change`, which leads from `previous` (the applied snapshot until now), or a new
        base (`saved.StateStore.save_held`). A failed save is an ApplyError: the Hello then
        names no hash, so the control plane sends the snapshot again and the save is
        retried. `pending`: the spares it has not loaded (none after a reload or a start)."""
        before = self._applied_cfg.routed.unknown_aside if self._applied_cfg is not None else ()
        rules_aside = rendered.routed.unknown_aside
        if rules_aside != before:
            fresh = [rule for rule in rules_aside if rule not in before]
            setaside.log_set_aside(snapshot, setaside.unknown_rules(fresh).values())
        self.applied, self._applied_cfg, self._unapplied_cfg = snapshot, rendered, None
        self._pending = pending
        self._set_aside, self._parts_aside = dict(aside), dict(parts)
        # the rules of unknown fields are rendered (as 500s): `parts` holds the others
        kinds = Counter(p.kind for p in (*aside.values(), *parts.values()))
        kinds[ROUTE_RULE] += len(rules_aside)
        for kind in (CERTIFICATE, BACKEND, ROUTE_RULE):
            self.metrics.set_aside.labels(kind).set(kinds[kind])
        if not save:
            return
        try:
            self.store.save_held(snapshot, previous, change)
        except OSError as e:
            self._unsaved = True
            raise ApplyError(
                f"HAProxy runs it but the snapshot cannot be saved in {self.store.state_dir}: "
                f"{e.strerror or e}",
                retryable=True,
            ) from e
        self._unsaved = False


def _hold(snapshot: pb.Snapshot) -> Held:
    """A full snapshot in parts; a duplicate backend is a render error, as before."""
    try:
        return Held.from_snapshot(snapshot)
    except DeltaError as e:
        raise ApplyError(f"render: {e}") from None
