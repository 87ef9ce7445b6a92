"""Decide the cheapest correct way to go from the applied snapshot to a new one.

Pure, and O(changed parts): only the backends and sections a `ChangeSet` names are
looked at. A reload costs a new worker and risks stick-table resync, so it is used only when
the change cannot be expressed as runtime API commands: `set server` on pre-declared server
slots, and `add map`/`set map`/`del map` on the route model's map files when the frontends'
text is unchanged (docs/design.md, "Route rendering and runtime updates").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.config import certs, passthrough
from nodeagent.config.listeners import MapEntries
from nodeagent.config.render import Rendered
from nodeagent.haproxy.commands import CertUpdate, MapUpdate, ServerUpdate
from nodeagent.held import ChangeSet, Held
from peerplane.v1 import peerplane_pb2 as pb


class ApplyPath(enum.Enum):
    """How a change reaches HAProxy: not at all, runtime API commands, or a reload."""

    NOTHING = "nothing"
    RUNTIME = "runtime"
    RELOAD = "reload"


@dataclass(frozen=True)
class Decision:
    kind: ApplyPath
    updates: tuple[ServerUpdate, ...] = ()
    reason: str = ""
    maps: tuple[MapUpdate, ...] = ()
    # Certificate and crt-list steps (nodeagent/config/certs.py), and whether certificate
    # files change without HAProxy being told (a certificate no crt-list names).
    certs: tuple[CertUpdate, ...] = ()
    cert_files: bool = False
    # Unclaimed spare sections in the file that HAProxy has not loaded (added without a
    # reload; the next reload loads them): a claim of one reloads.
    pending: frozenset[str] = frozenset()


def map_updates(
    old: Mapping[str, MapEntries], new: Mapping[str, MapEntries]
) -> tuple[MapUpdate, ...] | None:
    """The entries to add, set and delete (in that order, each by key) to turn the `old`
    map files into the `new` ones; None when the files themselves differ (the config
    names them). The entries that differ are found with set operations on the dicts'
    views (C speed), so a file of 20,000 entries with one change costs no Python step
    per entry."""
    if old.keys() != new.keys():
        return None
    out: list[MapUpdate] = []
    for path, after in new.items():
        before = old[path]
        if before is after or before == after:
            continue
        was, now = _dict(before), _dict(after)  # persistent maps: their views have no sets
        differ = sorted(now.items() - was.items())  # added or set, by key
        out += [MapUpdate(path, "add", k, v) for k, v in differ if k not in was]
        out += [MapUpdate(path, "set", k, v) for k, v in differ if k in was]
        out += [MapUpdate(path, "del", k) for k in sorted(was.keys() - now.keys())]
    return tuple(out)


def _dict(entries: MapEntries) -> dict[str, str]:
    return entries if isinstance(entries, dict) else dict(entries)


def group_map_updates(
    old: Held, old_cfg: Rendered, new: Held, new_cfg: Rendered, change: ChangeSet
) -> tuple[MapUpdate, ...] | None:
    """`map_updates` in O(changed groups) when only route groups changed (not the
    frontends or listeners) and both renders joined every listener from its groups'
    layers: a group's entries are its layers' (kept by its bytes), no two groups share a
    key, so what differs is what differs between the changed groups' old and new entries.
    None when that does not hold (compare the files)."""
    old_paths, new_paths = old_cfg.routed.group_maps, new_cfg.routed.group_maps
    if change.frontends or old_paths is None or new_paths is None or old_paths != new_paths:
        return None
    caches = (new_cfg.routed.route_cache.group_layers, old_cfg.routed.route_cache.group_layers)
    before: dict[str, dict[str, str]] = {}
    after: dict[str, dict[str, str]] = {}
    for key in change.route_groups | change.removed_route_groups:
        group = new.route_groups.get(key) or old.route_groups.get(key)
        paths = new_paths.get(group.listener) if group is not None else None
        if paths is None:
            return None
        for held, into in ((old, before), (new, after)):
            data = held.parts.route_groups.get(key)
            if data is None:
                continue
            layers = caches[0].get(data) or caches[1].get(data)
            if layers is None:
                return None
            into.setdefault(paths[0], {}).update(layers.exact)
            into.setdefault(paths[1], {}).update(layers.prefix)
    out: list[MapUpdate] = []
    for path in new_cfg.maps:  # the files' order, as `map_updates`
        was, now = before.get(path, {}), after.get(path, {})
        if was == now:
            continue
        differ = sorted(now.items() - was.items())
        out += [MapUpdate(path, "add", k, v) for k, v in differ if k not in was]
        out += [MapUpdate(path, "set", k, v) for k, v in differ if k in was]
        out += [MapUpdate(path, "del", k) for k in sorted(was.keys() - now.keys())]
    return tuple(out)


_HTTP_RULES = (
    "rules rendered into the config changed (method, header or query matches, filters,"
    " weights, unresolved backends, a new wildcard depth, the default backend or annotation"
    " routes)"
)
_CHANGED = {
    passthrough.TLS_LISTENER: (
        "routes rendered into the config changed (weights, a new wildcard depth)"
    ),
    passthrough.TCP_FRONTEND: "backend changed",
}


def _frontends_reason(old_cfg: Rendered, new_cfg: Rendered) -> str:
    """Why changed frontends reload, in words an operator can act on."""
    old_l4, new_l4 = old_cfg.routed.layer4, new_cfg.routed.layer4
    before = {port: ("HTTP listener", text) for port, text in old_cfg.routed.texts.items()}
    after = {port: ("HTTP listener", text) for port, text in new_cfg.routed.texts.items()}
    for layer4, into in ((old_l4, before), (new_l4, after)):
        if layer4 is not None:
            into.update(
                (str(port), (layer4.kinds[port], text)) for port, text in layer4.texts.items()
            )
    added = sorted(after.keys() - before.keys())
    if added:
        return f"{after[added[0]][0]} port {added[0]} added (a new port needs a reload)"
    removed = sorted(before.keys() - after.keys())
    if removed:
        return f"{before[removed[0]][0]} port {removed[0]} removed"
    for port in sorted(after):
        (was, old_text), (what, text) = before[port], after[port]
        if was != what:
            return f"port {port}: {was} replaced by a {what}"
        if old_text == text:
            continue
        if _without_proxy(old_text) == _without_proxy(text):
            on = "on" if passthrough.ACCEPT_PROXY + "\n" in text + "\n" else "off"
            return f"{what} {port}: PROXY protocol (accept-proxy) turned {on}, a bind option"
        return f"{what} {port}: {_CHANGED.get(what, _HTTP_RULES)}"
    return "frontends changed"


def _without_proxy(text: str) -> str:
    return text.replace(passthrough.ACCEPT_PROXY + "\n", "\n")


def _shape(backend: pb.Backend) -> pb.Backend:
    """The backend without what the runtime API changes (slot address, port, enabled)
    and what is never rendered (warnings, the Service it serves, whether it is a spare),
    its name the section it runs in."""
    shape = pb.Backend()
    shape.CopyFrom(backend)
    shape.name = backend.section or backend.name
    for unrendered in ("warnings", "service", "service_port", "section", "spare"):
        shape.ClearField(unrendered)
    for slot in shape.slots:
        slot.ClearField("address")
        slot.ClearField("port")
        slot.ClearField("enabled")
    return shape


def _slot_updates(old_b: pb.Backend, new_b: pb.Backend) -> list[ServerUpdate]:
    updates: list[ServerUpdate] = []
    for old_s, new_s in zip(old_b.slots, new_b.slots, strict=True):
        before = (old_s.enabled, old_s.address, old_s.port) if old_s.enabled else (False,)
        after = (new_s.enabled, new_s.address, new_s.port) if new_s.enabled else (False,)
        if before != after:
            updates.append(
                ServerUpdate(
                    new_b.section or new_b.name,
                    new_s.server_name,
                    new_s.address,
                    new_s.port,
                    new_s.enabled,
                )
            )
    return updates


def _claimed_spare(
    old: Held, new_b: pb.Backend, change: ChangeSet, pending: frozenset[str]
) -> pb.Backend | str:
    """The loaded, unclaimed spare a new backend claims (`section`, docs/design.md,
    "Spare backends"), or why it reloads."""
    section = new_b.section
    spare = old.backends.get(section) if section else None
    if spare is None or not spare.spare or section not in change.removed:
        return f"backend {new_b.name} added"
    if section in pending:
        return f"backend {new_b.name} claims spare {section}, not loaded since its refill"
    return spare


def classify(
    old: Held | None,
    old_cfg: Rendered | None,
    new: Held,
    new_cfg: Rendered,
    change: ChangeSet,
    pending: frozenset[str] = frozenset(),
) -> Decision:
    """From the applied snapshot and its rendering to the new ones, looking only at the
    parts in `change` (what differs between the two): O(changed backends). `pending`:
    the unclaimed spares HAProxy has not loaded (added since its last reload)."""
    if old is None or old_cfg is None:
        return Decision(ApplyPath.RELOAD, reason="nothing applied yet")
    if change.peers and old_cfg.peers != new_cfg.peers:
        return Decision(ApplyPath.RELOAD, reason="peers changed")
    if change.routes and old_cfg.frontends != new_cfg.frontends:
        return Decision(ApplyPath.RELOAD, reason=_frontends_reason(old_cfg, new_cfg))
    maps: tuple[MapUpdate, ...] = ()
    if change.routes:
        found_maps = group_map_updates(old, old_cfg, new, new_cfg, change)
        if found_maps is None:
            found_maps = map_updates(old_cfg.maps, new_cfg.maps)
        if found_maps is None:
            return Decision(ApplyPath.RELOAD, reason="route map files changed")
        maps = found_maps
    steps: tuple[CertUpdate, ...] = ()
    cert_files = bool(change.certificates or change.removed_certificates)
    if change.frontends or cert_files:
        found_steps = certs.cert_updates(
            new_cfg.options.certs_dir,
            old_cfg.crt_lists,
            new_cfg.crt_lists,
            new.certificates,
            change.certificates,
        )
        if isinstance(found_steps, str):
            return Decision(ApplyPath.RELOAD, reason=found_steps)
        steps = found_steps
    # An unclaimed spare leaving the pool stays in HAProxy, unused, until the next reload.
    removed = [name for name in change.removed if not old.backends[name].spare]
    if removed:
        return Decision(ApplyPath.RELOAD, reason=f"{len(removed)} backend(s) removed")
    updates: list[ServerUpdate] = []
    added: set[str] = set()
    for name in sorted(change.backends):
        new_b = new.backends[name]
        old_b = old.backends.get(name)
        if old_b is None and new_b.spare:
            added.add(name)  # loaded by the next reload: the pool's refill
            continue
        if old_b is None:
            found_spare = _claimed_spare(old, new_b, change, pending)
            if isinstance(found_spare, str):
                return Decision(ApplyPath.RELOAD, reason=found_spare)
            old_b = found_spare
        elif old_b.section != new_b.section:
            return Decision(ApplyPath.RELOAD, reason=f"backend {name} moved to another section")
        elif old_cfg.encoded[name] == new_cfg.encoded[name]:
            continue  # a change nothing renders (warnings, a free slot's address)
        if name in old_cfg.stubbed or name in new_cfg.stubbed:  # no servers to set
            return Decision(ApplyPath.RELOAD, reason=f"backend {name} set aside or back")
        if _shape(old_b) != _shape(new_b):
            return Decision(ApplyPath.RELOAD, reason=f"backend {name} settings or slots changed")
        found = _slot_updates(old_b, new_b)
        if not found and old_b.name == name:
            return Decision(ApplyPath.RELOAD, reason=f"backend {name} changed outside the slots")
        updates += found
    pending = (pending | added) - change.removed
    if not updates and not maps and not steps and not cert_files:
        return Decision(ApplyPath.NOTHING, reason="rendered config identical", pending=pending)
    said = [f"{len(updates)} slot(s)"] if updates else []
    said += [f"{len(maps)} route map entr{'y' if len(maps) == 1 else 'ies'}"] if maps else []
    said += [certs.describe(steps)] if steps else []
    said += ["certificate files"] if cert_files and not steps else []
    reason = f"{' and '.join(said)} changed"
    return Decision(ApplyPath.RUNTIME, tuple(updates), reason, maps, steps, cert_files, pending)
