"""Which certificates of a snapshot are set aside, so that one refused certificate never
stops the rest of the snapshot (docs/design.md, "One part never stops the others").

Pure. Two sources: the agent's own check (`certcheck.problem`, before render), and
`haproxy -c`, whose alert names the refused certificate's file (`... unable to load SSL
certificate into SSL Context '<certs dir>/<name>.pem': ee key too small.` on 2.6, 3.0 and
3.2). HAProxy stops reading a crt-list at its first refused line, so one run names at most
one certificate per HTTPS port: the applier checks again without the named ones, at most
`MAX_CHECKS` runs in all, the last with every new certificate not yet taken set aside
(`unchecked`). An error that names no certificate of the
snapshot (a broken global section, a bad bind option) is not a part's fault: it NACKs.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Collection, Iterable, Mapping

from nodeagent.apply.outcome import CERTIFICATE, ROUTE_RULE, SetAside
from nodeagent.held import Held
from nodeagent.logformat import fields
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)

# `haproxy -c` runs per apply at most: 3 that each name refused certificates, and a last
# one with every certificate new in the version and not yet taken set aside.
MAX_CHECKS = 4
MAX_REASON_CHARS = 400


def refused_by_agent(
    problems: Mapping[str, str], certificates: Mapping[str, pb.Certificate]
) -> dict[str, SetAside]:
    """The certificates the agent's check refused, set aside with its reason."""
    return {
        name: SetAside(CERTIFICATE, name, certificates[name].fingerprint, why)
        for name, why in problems.items()
    }


def carried(
    previous: Mapping[str, SetAside],
    certificates: Mapping[str, pb.Certificate],
    checked: Collection[str] | None,
) -> dict[str, SetAside]:
    """The certificates set aside in the applied version that stay aside without a check:
    still in the snapshot with the same bytes (fingerprint), not among those `checked`
    again (None: all are), and named by a refusal (an `unchecked` one is checked again)."""
    if checked is None:
        return {}
    kept: dict[str, SetAside] = {}
    for name, part in previous.items():
        cert = certificates.get(name)
        if cert is None or cert.fingerprint != part.fingerprint:
            continue
        if name not in checked and not part.unchecked:
            kept[name] = part
    return kept


def refused_by_haproxy(
    error: str, certs_dir: str, certificates: Mapping[str, pb.Certificate]
) -> dict[str, SetAside]:
    """The certificates of `certificates` whose file `haproxy -c`'s alert lines name, each
    with its line (HAProxy's words, bounded) as the reason."""
    path = re.compile(re.escape(certs_dir.rstrip("/")) + r"/([A-Za-z0-9_.-]{1,253})\.pem\b")
    found: dict[str, SetAside] = {}
    for line in error.splitlines():
        for match in path.finditer(line):
            name = match.group(1)
            cert = certificates.get(name)
            if cert is None or name in found:
                continue
            said = line.strip().rsplit(" : ", 1)[-1][:MAX_REASON_CHARS]  # past "parsing [..]"
            found[name] = SetAside(CERTIFICATE, name, cert.fingerprint, f"haproxy -c: {said}")
    return found


def unchecked(
    names: Collection[str], certificates: Mapping[str, pb.Certificate]
) -> dict[str, SetAside]:
    """The certificates set aside without being named, once `MAX_CHECKS` is reached."""
    reason = (
        f"not checked: haproxy -c refused more certificates of this version than"
        f" {MAX_CHECKS} runs name; checked again with the next version"
    )
    return {
        name: SetAside(CERTIFICATE, name, certificates[name].fingerprint, reason, unchecked=True)
        for name in names
    }


def served(held: Held, aside: Mapping[str, SetAside]) -> Held:
    """`held` as its files are written: without the certificates set aside."""
    if not aside:
        return held
    kept = {n: c for n, c in held.certificates.items() if n not in aside}
    return dataclasses.replace(held, certificates=kept)


def listed(*asides: Mapping[str, SetAside]) -> tuple[SetAside, ...]:
    """The parts set aside as the ACK names them: by kind (in the order given), then name."""
    return tuple(aside[name] for aside in asides for name in sorted(aside))


def unknown_rules(rules: Iterable[tuple[str, str]]) -> dict[str, SetAside]:
    """The route rules the render set aside for fields this agent does not know (source,
    reason), as the ACK names them (no fingerprint: the rule is rendered, as a 500)."""
    return {source: SetAside(ROUTE_RULE, source, "", reason) for source, reason in rules}


def log_set_aside(snapshot: Held, parts: Iterable[SetAside]) -> None:
    for part in parts:
        sha = f" (sha256 {part.fingerprint:.16s})" if part.fingerprint else ""
        log.warning(
            "workload=%s version=%d: %s %s%s set aside: %s",
            snapshot.workload,
            snapshot.version,
            part.kind,
            part.name,
            sha,
            part.reason,
            extra=fields(workload=snapshot.workload, version=snapshot.version),
        )
