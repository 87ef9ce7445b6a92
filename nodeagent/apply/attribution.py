"""Which part of a snapshot a `haproxy -c` refusal names, so that one refused backend or
route rule never stops the rest of the snapshot (docs/design.md, "One part never stops the
others").

Pure. HAProxy names a refused line by its place in the file, the same on 2.6, 3.0 and 3.2
(`[ALERT] (pid) : config : parsing [haproxy.cfg:22]: stick-table: timer overflow ...`,
`... : parsing [haproxy.cfg:28] : error detected in frontend ...`): the line is mapped to
the section that holds it. A `backend <name>` section of the snapshot is that backend's
part; a line of a listener frontend that names a config rule (`set-var(txn.r) str(c3)`,
`{ var(txn.r) -m str c3 }`) is that route rule's part. Post-parse checks name the proxy
first instead (`config : Proxy 'x': unable to find stick-table ...`; 3.2 drops the
`config :`): a backend of the snapshot named so is its part too. Any other line (global,
defaults, peers, a frontend's own lines, a bind) is no part's: it attributes nothing, and
the applier NACKs the version when nothing else is named. A route rule rendered as a map
entry is never named: HAProxy takes any string in a map file.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection, Mapping

from nodeagent.apply.outcome import BACKEND, ROUTE_RULE, SetAside
from nodeagent.config.listeners import rule_fingerprint
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb

MAX_REASON_CHARS = 400
MAX_NAME_CHARS = 200

# 3.2 leaves out "config :" in the checks after parsing.
_ALERT = re.compile(r"\[ALERT\][^:]*:\s*(?:config\s*:\s*)?(.*)")
_PLACE = re.compile(r"[Pp]arsing \[[^\]\n]*?:(\d{1,9})\]\s*:?\s*")
_PROXY = re.compile(r"(?:[Bb]ackend|[Pp]roxy) '([A-Za-z0-9_.:-]{1,253})'")
# A config rule's name in its lines: fixed text no route value holds (values admit no space).
_RULE_ID = re.compile(r"var\(txn\.r\) -m str (c\d{1,9}) \}|set-var\(txn\.r\) str\((c\d{1,9})\) if ")
# HAProxy's closing lines, which name no part.
_SUMMARY = ("Error(s) found in configuration file", "Fatal errors found in configuration")

ConfigRules = Mapping[str, Mapping[str, pb.RouteRule]]  # frontend -> rule name -> rule


def key(part: SetAside) -> str:
    """A part's key among the parts set aside: its kind and name (a rule: its fingerprint)."""
    return f"{part.kind}/{part.fingerprint if part.kind == ROUTE_RULE else part.name}"


def carried(
    previous: Mapping[str, SetAside], held: Held, changed: Collection[str]
) -> dict[str, SetAside]:
    """The parts set aside in the applied version that stay aside without a check: a
    backend still in the snapshot and not `changed` since, a route rule whose very bytes
    are still held (a changed one is another rule, checked again)."""
    rules: frozenset[str] = frozenset()
    if any(p.kind == ROUTE_RULE for p in previous.values()):
        rules = frozenset(rule_fingerprint(r) for r in held.route_rules())

    def stays(part: SetAside) -> bool:
        if part.kind == BACKEND:
            return part.name in held.backends and part.name not in changed
        return part.kind == ROUTE_RULE and part.fingerprint in rules

    return {name: part for name, part in previous.items() if stays(part)}


def backends_of(parts: Mapping[str, SetAside]) -> frozenset[str]:
    """The names of the backends among `parts`, as the renderer stubs them."""
    return frozenset(p.name for p in parts.values() if p.kind == BACKEND)


def rules_of(parts: Mapping[str, SetAside]) -> frozenset[str]:
    """The fingerprints of the route rules among `parts`, as the renderer leaves them out."""
    return frozenset(p.fingerprint for p in parts.values() if p.kind == ROUTE_RULE)


def refused_parts(
    error: str,
    cfg: str,
    backends: Collection[str],
    config_rules: ConfigRules,
    aside: Collection[str],
) -> dict[str, SetAside]:
    """The backends among `backends` and the route rules among `config_rules` that
    `haproxy -c`'s alert lines (`error`, on the config text `cfg`) name by line or by name,
    by `key`, leaving out the keys already `aside`; each with the alert (HAProxy's words,
    bounded, past the place) as the reason."""
    found: dict[str, SetAside] = {}
    sections: _Sections | None = None
    for line in error.splitlines():
        alert = _ALERT.search(line)
        if alert is None or alert.group(1).startswith(_SUMMARY):
            continue
        said = alert.group(1)
        place = _PLACE.match(said)
        part: SetAside | None = None
        if place is not None:
            if sections is None:
                sections = _Sections(cfg)
            said = said[place.end() :]
            part = sections.part_at(int(place.group(1)), backends, config_rules, said)
        else:
            proxy = _PROXY.match(said)
            if proxy is not None and proxy.group(1) in backends:
                part = _backend(proxy.group(1), said)
        if part is not None and key(part) not in aside:
            found.setdefault(key(part), part)
    return found


def _backend(name: str, said: str) -> SetAside:
    return SetAside(BACKEND, name, "", _reason(said))


def _reason(said: str) -> str:
    return f"haproxy -c: {said[:MAX_REASON_CHARS]}"


class _Sections:
    """The sections of a config text by first line: which one holds a line number."""

    def __init__(self, cfg: str) -> None:
        self.lines = cfg.split("\n")
        self.starts: list[int] = []
        self.headers: list[list[str]] = []
        for number, text in enumerate(self.lines, start=1):
            if text and not text[0].isspace() and not text.startswith("#"):
                self.starts.append(number)
                self.headers.append(text.split())

    def part_at(
        self, line: int, backends: Collection[str], config_rules: ConfigRules, said: str
    ) -> SetAside | None:
        """The part whose lines hold `line` (1-based): a backend's section, or a config
        rule's line in a listener frontend; None for any other line."""
        at = bisect.bisect_right(self.starts, line) - 1
        if at < 0 or line > len(self.lines) or len(self.headers[at]) != 2:
            return None
        what, name = self.headers[at]
        if what == BACKEND and name in backends:
            return _backend(name, said)
        if what != "frontend" or name not in config_rules:
            return None
        found = _RULE_ID.search(self.lines[line - 1])
        rid = (found.group(1) or found.group(2)) if found is not None else ""
        rule = config_rules[name].get(rid)
        if rule is None:
            return None
        title = rule.source[:MAX_NAME_CHARS] or f"{name} rule {rid}"
        return SetAside(ROUTE_RULE, title, rule_fingerprint(rule), _reason(said))
