"""The one error of the pure renderer (re-exported by `render.py`)."""

from __future__ import annotations


class RenderError(ValueError):
    """The snapshot holds something that must never reach haproxy.cfg."""
