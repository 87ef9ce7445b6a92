"""Which backend of a snapshot a `haproxy -c` refusal names, so that one refused backend
never stops the rest of the snapshot (docs/design.md, "One part never stops the others").

Pure. HAProxy names a refused line by its place in the file, the same on 2.6, 3.0 and 3.2
(`[ALERT] (pid) : config : parsing [haproxy.cfg:22]: stick-table: timer overflow ...`,
`... : parsing [haproxy.cfg:28] : 'bind ...' ...`, `Parsing [...]` in some messages): the
line is mapped to the section that holds it, and a `backend <name>` section of the snapshot
is that backend's part. Post-parse checks name a proxy instead (`config : backend 'x' ...`,
`Proxy 'x': ...`): a backend of the snapshot named so is its part too. A line in any other
section (global, defaults, peers, a frontend) is no backend's: it attributes nothing, and
the applier NACKs the version when nothing else is named.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection

from nodeagent.apply.outcome import SetAside

BACKEND = "backend"
MAX_REASON_CHARS = 400

_ALERT = re.compile(r"\[ALERT\][^:]*:\s*config\s*:\s*(.*)")
_PLACE = re.compile(r"[Pp]arsing \[[^\]\n]*?:(\d{1,9})\]\s*:?\s*")
_PROXY = re.compile(r"\b(?:[Bb]ackend|[Pp]roxy) '([A-Za-z0-9_.:-]{1,253})'")
# HAProxy's closing lines, which name no part.
_SUMMARY = ("Error(s) found in configuration file", "Fatal errors found in configuration")


def refused_backends(error: str, cfg: str, candidates: Collection[str]) -> dict[str, SetAside]:
    """The backends among `candidates` that `haproxy -c`'s alert lines (`error`, on the
    config text `cfg`) name by line or by name, each with the alert (HAProxy's words,
    bounded, past the place) as the reason."""
    found: dict[str, SetAside] = {}
    sections: _Sections | None = None
    for line in error.splitlines():
        alert = _ALERT.search(line)
        if alert is None or alert.group(1).startswith(_SUMMARY):
            continue
        said = alert.group(1)
        name = None
        place = _PLACE.match(said)
        if place is not None:
            if sections is None:
                sections = _Sections(cfg)
            name = sections.backend_at(int(place.group(1)))
            said = said[place.end() :]
        else:
            proxy = _PROXY.search(said)
            name = proxy.group(1) if proxy is not None else None
        if name is None or name not in candidates or name in found:
            continue
        found[name] = SetAside(BACKEND, name, "", f"haproxy -c: {said[:MAX_REASON_CHARS]}")
    return found


class _Sections:
    """The sections of a config text by first line: which one holds a line number."""

    def __init__(self, cfg: str) -> None:
        self.starts: list[int] = []
        self.headers: list[str] = []
        for number, text in enumerate(cfg.split("\n"), start=1):
            if text and not text[0].isspace() and not text.startswith("#"):
                self.starts.append(number)
                self.headers.append(text)

    def backend_at(self, line: int) -> str | None:
        """The backend whose section holds `line` (1-based), None for any other section."""
        at = bisect.bisect_right(self.starts, line) - 1
        if at < 0:
            return None
        words = self.headers[at].split()
        if len(words) == 2 and words[0] == BACKEND:
            return words[1]
        return None
