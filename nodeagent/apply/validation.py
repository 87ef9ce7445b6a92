"""`haproxy -c` before HAProxy or any file it reads sees a config, on staged copies of the
certificates that change; a certificate or a backend HAProxy's alert names is set aside and
the check runs again without it (`setaside.py`, `attribution.py`, docs/design.md, "One part
never stops the others").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nodeagent.apply import attribution, setaside
from nodeagent.apply.certfiles import CertFiles
from nodeagent.apply.outcome import ApplyError, SetAside
from nodeagent.config import changes
from nodeagent.config.render import Rendered
from nodeagent.haproxy.driver import HAProxy, validate
from nodeagent.held import Held
from nodeagent.metrics import AgentMetrics

# The snapshot rendered with these certificates and these other parts aside.
Render = Callable[[Mapping[str, SetAside], Mapping[str, SetAside]], Rendered]


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
        parts: dict[str, SetAside],
    ) -> tuple[str, Rendered, dict[str, SetAside], dict[str, SetAside]]:
        """`haproxy -c` on staged copies of the certificates that change: the config, its
        render, the certificates and the other parts (`parts`, by `attribution.key`) set
        aside once it passes. A certificate whose file HAProxy's alert names, or a backend
        or route rule whose lines it names (`attribution.py`), is set aside and the check
        runs again without it; at most `setaside.MAX_CHECKS` runs:
        the last one sets aside, with the named ones, every certificate of this version
        HAProxy has not taken yet. An alert naming no certificate or backend of the
        snapshot NACKs (not a part's fault)."""
        checks = 0
        while True:
            error = self._check(cfg, decision, snapshot, rendered, aside, applied)
            checks += 1
            if not error:
                return cfg, rendered, aside, parts
            candidates = {n: c for n, c in snapshot.certificates.items() if n not in aside}
            named = setaside.refused_by_haproxy(error, self.certs_dir, candidates)
            refused = attribution.refused_parts(
                error, cfg, snapshot.backends.keys(), rendered.routed.config_rules, parts.keys()
            )
            if not (named or refused) or checks >= setaside.MAX_CHECKS:
                self.metrics.validation_failures.inc()
                self.metrics.refused("check", error)
                raise ApplyError(error, decision.kind)
            added = dict(named)
            if named and checks == setaside.MAX_CHECKS - 1:  # the last run: new ones aside
                fresh = self.certs.changed(setaside.served(snapshot, {**aside, **named}), applied)
                added.update(setaside.unchecked(fresh, snapshot.certificates))
            setaside.log_set_aside(snapshot, [*added.values(), *refused.values()])
            aside = {**aside, **added}
            parts = {**parts, **refused}
            rendered = render(aside, parts)
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
        except TimeoutError as e:  # no verdict: a loaded host may finish it on a retry
            self.metrics.validation_failures.inc()
            raise ApplyError(str(e), decision.kind, retryable=True) from e
        except OSError as e:  # its temp dir or pipes: the host's fault, not the config's
            raise ApplyError(f"cannot run haproxy -c: {e}", decision.kind, retryable=True) from e
