"""Which version of a Gateway API kind the cluster serves, found by asking.

TLSRoute and TCPRoute moved from the experimental channel (v1alpha2) to the standard
channel at v1 in Gateway API v1.5; a v1.5+ standard-channel install serves v1 only
(v1alpha2 is `served: false`), an older experimental install v1alpha2 only. A
`ServedVersion` lists through the version that answered last and, on a 404, tries the
others in order, so the informer and the status writer follow an upgrade of the CRDs
without a restart. A 404 from every version is the informer's "kind not installed".
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.model import GATEWAY_GROUP
from controlplane.source.kinds import L4_ROUTE_VERSIONS


class ServedVersion:
    """A cluster-wide list (and watch) of `plural` through the version the cluster serves."""

    def __init__(
        self,
        custom: client.CustomObjectsApi,
        plural: str,
        versions: Sequence[str] = L4_ROUTE_VERSIONS,
        group: str = GATEWAY_GROUP,
    ) -> None:
        self._custom = custom
        self.plural = plural
        self._versions = tuple(versions)
        self._group = group
        self._lock = threading.Lock()
        self._version = self._versions[0]

    @property
    def version(self) -> str:
        """The version that answered last (the preferred one before any answer)."""
        with self._lock:
            return self._version

    def __call__(self, **kwargs: Any) -> Any:
        current = self.version
        order = (current, *(v for v in self._versions if v != current))
        for index, version in enumerate(order):
            try:
                answer = self._custom.list_cluster_custom_object(
                    self._group, version, self.plural, **kwargs
                )
            except ApiException as error:
                if error.status == 404 and index + 1 < len(order):
                    continue
                raise
            with self._lock:
                self._version = version
            return answer
        raise AssertionError("unreachable: the last version raises or answers")
