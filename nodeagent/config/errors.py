"""The errors of the pure renderer (re-exported by `render.py`)."""

from __future__ import annotations

import re

# A value with nothing but a word's characters: it can carry no config text.
_WORD = re.compile(r"[A-Za-z0-9_.-]{0,64}")


class RenderError(ValueError):
    """The snapshot holds something that must never reach haproxy.cfg."""


class BackendRefused(RenderError):
    """One backend holds a value this agent does not take, where no config text is at
    stake: a number out of its range, or a plain word it does not know (a balance
    algorithm, a hash-type, a mode of a newer control plane). The applier sets that backend
    aside and renders the rest ("One part never stops the others"). A string that could
    carry config text (a newline, a space, a path) stays a RenderError: a protocol
    violation, and the whole version is NACKed."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(reason)
        self.backend = backend


def refused(backend: str, value: object, reason: str) -> RenderError:
    """`reason` as a BackendRefused when `value` is a number or a plain word, else as a
    RenderError (a protocol violation)."""
    if isinstance(value, int) or (isinstance(value, str) and _WORD.fullmatch(value)):
        return BackendRefused(backend, reason)
    return RenderError(reason)
