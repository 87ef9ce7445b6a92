"""The SourceIPPersistencePolicy converter: every field read, values kept as written
(their parsers are the resolution's), a wrong shape a ManifestError."""

from __future__ import annotations

import pytest

from controlplane.model import PolicyTargetRef, SourceIPPersistencePolicy
from controlplane.source.convert import ManifestError
from controlplane.source.convert_policy import source_ip_persistence_policy_from

MANIFEST = {
    "apiVersion": "peerplane.dev/v1alpha1",
    "kind": "SourceIPPersistencePolicy",
    "metadata": {
        "name": "sticky",
        "namespace": "shop",
        "generation": 3,
        "creationTimestamp": "2026-01-02T03:04:05Z",
    },
    "spec": {
        "targetRefs": [
            {"group": "", "kind": "Service", "name": "web"},
            {"group": "", "kind": "Service", "name": "api", "sectionName": "grpc"},
        ],
        "tableSize": 65536,
        "expire": "10m",
    },
}


def test_every_field_is_read() -> None:
    assert source_ip_persistence_policy_from(MANIFEST) == SourceIPPersistencePolicy(
        namespace="shop",
        name="sticky",
        target_refs=(
            PolicyTargetRef("", "Service", "web"),
            PolicyTargetRef("", "Service", "api", "grpc"),
        ),
        table_size="65536",  # an integer's text: the same parser as the annotation's
        expire="10m",
        generation=3,
        creation_timestamp="2026-01-02T03:04:05Z",
    )


def test_unset_values_and_an_unknown_kind_are_kept_for_the_resolution() -> None:
    manifest = {**MANIFEST, "spec": {"targetRefs": [{"kind": "Deployment", "name": "web"}]}}
    policy = source_ip_persistence_policy_from(manifest)
    assert policy.target_refs == (PolicyTargetRef("", "Deployment", "web"),)
    assert (policy.table_size, policy.expire) == ("", "")


@pytest.mark.parametrize(
    "spec",
    [
        {"targetRefs": "web"},
        {"targetRefs": ["web"]},
        {"targetRefs": [{"kind": "Service"}]},
        {"targetRefs": [{"name": "web"}]},
        {"targetRefs": [{"kind": "Service", "name": "web", "sectionName": 80}]},
        {"targetRefs": [], "expire": {"minutes": 10}},
    ],
)
def test_a_wrong_shape_is_a_manifest_error(spec: dict[str, object]) -> None:
    with pytest.raises(ManifestError):
        source_ip_persistence_policy_from({**MANIFEST, "spec": spec})
