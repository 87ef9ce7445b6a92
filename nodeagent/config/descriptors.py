"""How many file descriptors HAProxy asks for a rendered config, and the NACK text when
the open-files limit cannot give them. Pure: the limit and the thread count come in.

HAProxy sizes its descriptors (`maxsock`) from the config before it binds anything:
2 per connection of `maxconn` (the client's side and the server's), 1 per server with
`check` (free slots too: every slot of a checked backend carries it), 1 per listener
(each `bind`, the stats socket, the local peer's), 3 per peer line, 3 per thread (its
poller and its wake-up pipe), and a few of its own that differ by version (the master
CLI, the master-worker pipes). It then raises RLIMIT_NOFILE to that figure and, when the
hard limit is lower, refuses to start: `Cannot raise FD limit to N, limit is L` (fatal
since 2.3, `strict-limits`). `haproxy -c` stops before that step: only a start tells.
tests/agent/test_descriptors.py checks that `needs(...).total` equals the N HAProxy prints
for rendered configs on every installed version (docs/design.md, "Open files").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.haproxy.version import Version

# HAProxy's own descriptors in master-worker mode (`-W -S <socket>`), measured as its N
# minus the rest of the rule: 2.6.12, 3.0.11, 3.2.26. Another version is estimated with
# the smallest: an estimate too low only leaves the refusal to HAProxy (in its words),
# one too high would refuse a config that fits.
OWN: dict[Version, int] = {(2, 6): 32, (3, 0): 43, (3, 2): 21}
# ... and what a reload asks beyond a start of the same config (3.0 and 3.2 measured 3 more:
# 8,670 and 8,648 where a start asks 8,667 and 8,645). The agent counts for a reload: a
# config that starts but cannot be reloaded to would fail at the next change.
RELOAD_EXTRA: dict[Version, int] = {(2, 6): 0, (3, 0): 3, (3, 2): 3}
PER_PEER = 3
PER_THREAD = 3

_MAXCONN = re.compile(rb"^  maxconn (\d{1,9})$", re.MULTILINE)


@dataclass(frozen=True)
class Needs:
    """What one config asks for, by cause (the NACK names the largest ones)."""

    maxconn: int
    checks: int  # servers with `check`
    listeners: int
    peers: int  # peer lines, the local one included
    threads: int
    own: int

    @property
    def total(self) -> int:
        """HAProxy's `maxsock` for this config: what it raises RLIMIT_NOFILE to."""
        return (
            2 * self.maxconn
            + self.checks
            + self.listeners
            + PER_PEER * self.peers
            + PER_THREAD * self.threads
            + self.own
        )


def needs(data: bytes, threads: int, version: Version | None, reload: bool = True) -> Needs:
    """Count the rendered config's lines (C-speed scans of its bytes).
    The renderer writes every line counted here in one spelling, and no checked string
    can spell one (render.py re-checks every string against a strict pattern). `reload`:
    what a reload to it asks, else what a start on it asks."""
    # Listeners and peers live in the sections the renderer writes before the backends
    # (global, peers, frontends: `Rendered.data`); scanning only those keeps the count at
    # a few ms for a 27 MB file, whose every line starts with "\n  ".
    first_backend = data.find(b"\nbackend ")
    head = data if first_backend < 0 else data[:first_backend]
    found = _MAXCONN.search(head)
    peers = head.count(b"\n  peer ")
    local_peer = 1 if peers else 0  # the peers section listens on the local peer's address
    return Needs(
        maxconn=int(found.group(1)) if found else 0,
        checks=data.count(b" check inter "),
        listeners=head.count(b"\n  bind ") + head.count(b"\n  stats socket ") + local_peer,
        peers=peers,
        threads=max(threads, 1),
        own=_own(version, reload),
    )


def _own(version: Version | None, reload: bool) -> int:
    """HAProxy's own descriptors; the smallest measured for a version not measured."""
    if version is None or version not in OWN:
        return min(OWN.values())
    return OWN[version] + (RELOAD_EXTRA[version] if reload else 0)


@dataclass(frozen=True)
class Budget:
    """What the HAProxy this agent drives may open: the hard open-files limit it gets
    (None: unknown or unlimited, nothing is refused here), its thread count and version."""

    limit: int | None
    threads: int
    version: Version | None

    def check(self, data: bytes) -> tuple[Needs, str | None]:
        """What the config needs, and the NACK text when the limit is below it."""
        need = needs(data, self.threads, self.version)
        return need, shortfall(need, self.limit)


def shortfall(need: Needs, limit: int | None) -> str | None:
    """The NACK text when `limit` (the hard RLIMIT_NOFILE HAProxy gets) is below what the
    config needs, with the figures and the three ways out; None when it fits or the limit
    is unknown (None) or unlimited."""
    if limit is None or need.total <= limit:
        return None
    return (
        f"HAProxy would need {need.total:,} open files for this config but the limit is "
        f"{limit:,}: 2 per connection of maxconn {need.maxconn:,} = {2 * need.maxconn:,}, "
        f"+ {need.checks:,} servers with health checks, + {need.listeners:,} listeners, "
        f"+ 3 per peer = {PER_PEER * need.peers:,}, + 3 per thread = "
        f"{PER_THREAD * need.threads:,}, + HAProxy's own {need.own:,}. Lower `server-slots` "
        f"(every slot of a checked backend takes one), raise the open-files limit of the "
        f'HAProxy container (RLIMIT_NOFILE; docs/operations.md, "Open files"), or turn '
        f'health checks off (`check: "false"`); HAProxy keeps running the previous config'
    )
