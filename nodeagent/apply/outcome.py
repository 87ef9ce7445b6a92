"""What one apply reports: the ACK (`Result.ok`) or the NACK reason, and whether to retry.

Every failure of the apply pipeline is one `ApplyError`, raised where it is found and
turned into a `Result` in one place (`Applier.apply`), so the NACK text and the retry
decision (docs/design.md, "Master CLI, runtime API, reload failures": a failed reload is
retried with backoff, a render or `haproxy -c` error is not) are decided where the
failure is understood, not re-derived from exception types elsewhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nodeagent.config.changes import ApplyPath
from nodeagent.logformat import fields

log = logging.getLogger(__name__)


# The kinds of part set aside, one name each for the ACK, the metric and the log.
CERTIFICATE = "certificate"
BACKEND = "backend"
# A route rule HAProxy refused (not rendered), or one that carries fields this agent does
# not know (kept with its match, answered with a 500: `nodeagent/config/rules.py`).
ROUTE_RULE = "route-rule"


@dataclass(frozen=True)
class SetAside:
    """A part of a snapshot left out while the rest applied (docs/design.md, "One part
    never stops the others"): a certificate the agent's check or HAProxy refused, whose
    crt-list lines and file are not written, a backend or route rule HAProxy refused.
    `unchecked`: set aside with the others of its version once the bound on `haproxy -c`
    runs was reached, not because it was named; it is checked again with the next
    version."""

    kind: str  # CERTIFICATE, BACKEND or ROUTE_RULE
    name: str
    fingerprint: str
    reason: str  # the agent's or HAProxy's words, never PEM
    unchecked: bool = False


@dataclass(frozen=True)
class Result:
    """Outcome of one apply: `error` is empty on success and is the NACK text otherwise."""

    ok: bool
    kind: ApplyPath | None = None
    error: str = ""
    worker_pid: int | None = None
    # The failure may pass without a new snapshot (a reload that failed on a port still
    # held): the client re-applies the same snapshot with backoff.
    retryable: bool = False
    started: bool = False  # HAProxy was started on it (its first config), not reloaded
    set_aside: tuple[SetAside, ...] = ()  # what the ACK reports left out, by name

    @property
    def applied_by(self) -> str:
        """How HAProxy took it, as the Ack says: runtime, reload, nothing or start."""
        if not self.ok or self.kind is None:
            return ""
        return "start" if self.started else self.kind.value


class ApplyError(Exception):
    """The snapshot is not applied: `reason` is the NACK text; HAProxy keeps serving what
    it ran. `retryable` when the same snapshot may apply later without a new one."""

    def __init__(self, reason: str, kind: ApplyPath | None = None, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.retryable = retryable

    def result(self) -> Result:
        """The NACK this failure is reported as."""
        return Result(False, self.kind, error=self.reason, retryable=self.retryable)


def unexpected(error: Exception, workload: str, version: int) -> Result:
    """The NACK for an exception that is no ApplyError (a broken temp dir, no descriptors
    left, a bug): logged with its traceback, and retryable, since the fault may be
    repaired and the agent cannot tell; the retries back off up to 30 s."""
    log.error(
        "workload=%s version=%d: not applied, unexpected error: %r",
        workload,
        version,
        error,
        exc_info=error,
        extra=fields(workload=workload, version=version),
    )
    return Result(False, error=f"unexpected error: {error!r}", retryable=True)
