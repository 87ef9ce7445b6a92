"""`haproxy -c` before HAProxy or any file it reads sees a config, on staged copies of the
certificates that change; a certificate HAProxy's alert names is set aside and the check
runs again without it (`setaside.py`, docs/design.md, "One part never stops the others").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nodeagent.apply import setaside
from nodeagent.apply.certfiles import CertFiles
from nodeagent.apply.outcome import ApplyError, SetAside
from nodeagent.config import changes
from nodeagent.config.render import Rendered
from nodeagent.haproxy.driver import HAProxy, validate
from nodeagent.held import Held
from nodeagent.metrics import AgentMetrics

Render = Callable[[Mapping[str, SetAside]], Rendered]  # the snapshot, with these aside


class Validation:
    """Runs `haproxy -c` for one HAProxy on the certificates of `certs`."""

    def __init__(
        self, haproxy: HAProxy, certs: CertFiles, certs_dir: str, metrics: AgentMetrics
    ) -> None:
        self.haproxy = haproxy
        self.certs = certs
        self.certs_dir = certs_dir
        self.metrics = metrics

    def validated(
        self,
        cfg: str,
        decision: changes.Decision,
        snapshot: Held,
        rendered: Rendered,
        aside: dict[str, SetAside],
        applied: Held | None,
        render: Render,
    ) -> tuple[str, Rendered, dict[str, SetAside]]:
        """`haproxy -c` on staged copies of the certificates that change: the config, its
        render and the certificates set aside once it passes. A certificate whose file
        HAProxy's alert names is set aside and the check runs again without it; at most
        `setaside.MAX_CHECKS` runs: the last one sets aside, with the named ones, every
        certificate of this version HAProxy has not taken yet. An alert naming no
        certificate of the snapshot NACKs (not a part's fault)."""
        checks = 0
        while True:
            error = self._check(cfg, decision, snapshot, rendered, aside, applied)
            checks += 1
            if not error:
                return cfg, rendered, aside
            candidates = {n: c for n, c in snapshot.certificates.items() if n not in aside}
            named = setaside.refused_by_haproxy(error, self.certs_dir, candidates)
            if not named or checks >= setaside.MAX_CHECKS:
                self.metrics.validation_failures.inc()
                self.metrics.refused("check", error)
                raise ApplyError(error, decision.kind)
            added = dict(named)
            if checks == setaside.MAX_CHECKS - 1:  # the last run: the new ones aside too
                fresh = self.certs.changed(setaside.served(snapshot, {**aside, **named}), applied)
                added.update(setaside.unchecked(fresh, snapshot.certificates))
            setaside.log_set_aside(snapshot, added.values())
            aside = {**aside, **added}
            rendered = render(aside)
            cfg = rendered.data().decode()

    def _check(
        self,
        cfg: str,
        decision: changes.Decision,
        snapshot: Held,
        rendered: Rendered,
        aside: Mapping[str, SetAside],
        applied: Held | None,
    ) -> str | None:
        """One `haproxy -c` on staged copies of the certificates that change: HAProxy's
        words naming the live files, or None when it passed."""
        served = setaside.served(snapshot, aside)
        try:
            with self.certs.staged(served, rendered.crt_lists, applied) as staging:
                checked = staging.config(cfg)
                error = validate(checked, self.haproxy.haproxy_bin, self.haproxy.check_timeout)
                return staging.said(error) if error else None
        except OSError as e:  # its temp dir or pipes: the host's fault, not the config's
            raise ApplyError(f"cannot run haproxy -c: {e}", decision.kind, retryable=True) from e
