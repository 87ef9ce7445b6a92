"""Who may present a certificate for an SNI name on a port: one namespace per name (pure).

For a client's SNI, HAProxy presents the certificate of the crt-list line holding that
exact name, else of the line holding the `*.` wildcard one label above it. So a binding
that names what another namespace already presents - the same name, or an exact name
under its wildcard - would take that name's clients (and their TLS sessions) from it.
Each name goes to the oldest binder (creationTimestamp, then namespace, name, kind and
position): a younger binder of another namespace is refused that name alone; its other
names still serve. Bindings of one namespace never refuse each other (one owner: the
crt-list order decides, as before). A wildcard is never refused for the exact names of
other namespaces under it: HAProxy gives an exact name its own line first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from peerplane import patterns

Age = tuple[str, str, str, str, int]  # creationTimestamp ("~": none), namespace, name, kind, index


@dataclass(frozen=True, slots=True)
class Source:
    """What binds certificates on a port: a Gateway HTTPS listener or an Ingress `spec.tls`
    entry, with where its owner reads about it."""

    kind: str  # "Gateway" or "Ingress"
    namespace: str
    name: str
    where: str  # "spec.listeners[https]", "spec.tls[0]"
    created: str = ""  # creationTimestamp, RFC 3339 ("" : unknown, the youngest)
    index: int = 0  # the listener's or the entry's position in its object
    listener: str = ""  # a Gateway listener's name

    @property
    def age(self) -> Age:
        return (self.created or "~", self.namespace, self.name, self.kind, self.index)

    def __str__(self) -> str:
        if self.listener:
            return f"Gateway {self.namespace}/{self.name} listener {self.listener}"
        return f"{self.kind} {self.namespace}/{self.name} {self.where}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """`name` is not presented for `source`: `owner` holds `held` (the same name, or the
    wildcard one label above it)."""

    source: Source
    name: str
    owner: Source
    held: str

    def reason(self, port: int) -> str:
        under = "" if self.held == self.name else f" (under its {self.held})"
        return (
            f"port {port}: {self.name} is served{under} by the older {self.owner} of another "
            "namespace; this certificate is not presented for it"
        )


def covering_wildcard(name: str) -> str:
    """The `*.` wildcard that takes `name` in HAProxy's SNI lookup ("" for a wildcard or a
    one-label name)."""
    if patterns.is_wildcard_host(name):
        return ""
    _, dot, parent = name.partition(".")
    return f"{patterns.WILDCARD_PREFIX}{parent}" if dot and parent else ""


def refusals(claims: Iterable[tuple[Source, tuple[str, ...]]]) -> dict[tuple[Source, str], Refusal]:
    """The (source, name) pairs refused among `claims` (each a source and the SNI names it
    would present), deciding oldest first; refused names hold nothing."""
    ordered = sorted(enumerate(claims), key=lambda item: (item[1][0].age, item[0]))
    held: dict[str, dict[str, Source]] = {}  # name -> namespace -> its oldest holder
    refused: dict[tuple[Source, str], Refusal] = {}
    for _, (source, names) in ordered:
        for name in names:
            if (source, name) in refused:
                continue
            found = _owner(held, source.namespace, name)
            if found is not None:
                refused[source, name] = Refusal(source, name, *found)
                continue
            held.setdefault(name, {}).setdefault(source.namespace, source)
    return refused


def _owner(
    held: dict[str, dict[str, Source]], namespace: str, name: str
) -> tuple[Source, str] | None:
    """The oldest holder of another namespace of `name`, else of its covering wildcard."""
    for key in (name, covering_wildcard(name)):
        for owner_namespace, owner in held.get(key, {}).items():
            if owner_namespace != namespace:
                return owner, key
    return None
