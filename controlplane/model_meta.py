"""What every object of the model carries: its name and metadata, and the read-only maps.

`ObjectMeta` is written once and every input kind derives `NamespacedObject` or
`ClusterObject` (controlplane/model.py), so a kind's name, `ref` and metadata
are the same fields everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType

ANNOTATION_PREFIX = "haproxy.org/"


def frozen_map(data: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only copy of `data` (annotations, labels, ConfigMap data)."""
    return MappingProxyType(dict(data or {}))


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """namespace/name of a namespaced object."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ObjectRef:
        """Parse "namespace/name"; raises ValueError on anything else."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"expected NAMESPACE/NAME, got {text!r}")
        return cls(namespace, name)


EMPTY_MAP: Mapping[str, str] = MappingProxyType({})


def _empty_map() -> Mapping[str, str]:
    """The one shared empty map: most objects have no annotations, and 16,000 of them
    should not each keep an empty dict."""
    return EMPTY_MAP


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """The metadata every input object carries, written once for every kind.

    Keyword-only, so that each kind's own fields stay positional after its name. A source
    fills what the computation reads of a kind: `generation` for the objects whose status
    we write (observedGeneration), `creation_timestamp` where age decides a contest (the
    oldest Service or route keeps a host), `annotations` where they configure serving;
    the rest stay at their defaults, so a change there is no change of the state.
    """

    _: KW_ONLY
    generation: int = 0
    creation_timestamp: str = ""  # RFC 3339, as written
    annotations: Mapping[str, str] = field(default_factory=_empty_map)


@dataclass(frozen=True, slots=True)
class ClusterObject(ObjectMeta):
    """A cluster-scoped object: GatewayClass, IngressClass, Namespace."""

    name: str


@dataclass(frozen=True, slots=True)
class NamespacedObject(ObjectMeta):
    """A namespaced object: the other kinds."""

    namespace: str
    name: str

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The controller owner of an object (ownerReferences entry with controller=true)."""

    kind: str
    name: str
