"""peerplane's own policy kinds (peerplane.dev/v1alpha1) to model types.

The contract of `convert`: a document of the wrong shape raises `ManifestError` with a
one-line reason, never another exception (tests/source/test_manifests_fuzz.py). Values
are kept as written: a table size or an expiry the parsers refuse, a target of another
kind, is the policy's own status to say (controlplane/settings/policies.py), so the
folder and the API server without the CRD's schema answer as the schema would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.model import PolicyTargetRef, SourceIPPersistencePolicy
from controlplane.source.convert import (
    Manifest,
    _generation,
    _items,
    _metadata,
    _namespace,
    _required,
    _spec,
    _str,
    _text,
    _timestamp,
)


def _target_ref(item: Mapping[str, Any], where: str) -> PolicyTargetRef:
    return PolicyTargetRef(
        group=_str(item.get("group"), f"{where}.group"),
        kind=_required(item.get("kind"), f"{where}.kind"),
        name=_required(item.get("name"), f"{where}.name"),
        section_name=_str(item.get("sectionName"), f"{where}.sectionName"),
    )


def source_ip_persistence_policy_from(obj: Manifest) -> SourceIPPersistencePolicy:
    meta = _metadata(obj)
    spec = _spec(obj)
    return SourceIPPersistencePolicy(
        namespace=_namespace(meta),
        name=meta["name"],
        target_refs=_items(spec.get("targetRefs"), "spec.targetRefs", _target_ref),
        table_size=_text(spec.get("tableSize"), "spec.tableSize"),
        expire=_text(spec.get("expire"), "spec.expire"),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
    )
