"""A snapshot rendered with its set-aside parts left out, and with each backend the
agent's own checks refuse (`BackendRefused`) set aside in turn, one render per refused
backend (docs/design.md, "One part never stops the others").

Apart from the applier because it is the pure step of the pipeline: what it renders
depends only on its arguments (the render cache included), not on HAProxy or the files.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.apply import attribution, setaside
from nodeagent.apply.outcome import BACKEND, ApplyError, SetAside
from nodeagent.config.errors import BackendRefused
from nodeagent.config.render import Rendered, RenderError, RenderOptions, render_held
from nodeagent.held import ChangeSet, Held


def render_checked(
    snapshot: Held,
    options: RenderOptions,
    cache: Rendered | None,
    change: ChangeSet | None,
    aside: Mapping[str, SetAside],
    parts: dict[str, SetAside],
) -> tuple[Rendered, dict[str, SetAside]]:
    """The render, with every backend the agent's own checks refuse set aside (a
    number out of range, a word it does not know: `BackendRefused`), one render per
    refused backend; a value that could carry config text still NACKs (RenderError)."""
    while True:
        try:
            return render(snapshot, options, cache, change, aside, parts), parts
        except Refused as e:
            refused = e.refused
            why = f"the agent's check: {refused}"
            part = SetAside(BACKEND, refused.backend, "", why)
            if attribution.key(part) in parts:  # cannot be: a stub is not checked
                raise ApplyError(f"render: {refused}") from None
            setaside.log_set_aside(snapshot, [part])
            parts = {**parts, attribution.key(part): part}


def render(
    snapshot: Held,
    options: RenderOptions,
    cache: Rendered | None,
    change: ChangeSet | None,
    aside: Mapping[str, SetAside],
    parts: Mapping[str, SetAside],
) -> Rendered:
    """`change` leads from the applied snapshot, which `cache` renders: O(changed
    backends). The certificates `aside` are left out, and the `parts`: its backends
    stubbed, its route rules not rendered."""
    try:
        return render_held(
            snapshot,
            options,
            cache,
            change,
            frozenset(aside),
            attribution.backends_of(parts),
            attribution.rules_of(parts),
        )
    except BackendRefused as e:
        raise Refused(e) from None
    except RenderError as e:
        raise ApplyError(f"render: {e}") from None


class Refused(ApplyError):
    """A render the agent's checks refused for one backend (`BackendRefused`):
    `render_checked` sets the backend aside; anywhere else it NACKs like any render error."""

    def __init__(self, refused: BackendRefused) -> None:
        super().__init__(f"render: {refused}")
        self.refused = refused
