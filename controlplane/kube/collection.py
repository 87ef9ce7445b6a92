"""The list (and watch) of one collection, named by API group, version and plural.

What the official client's typed `list_*` methods send, for any kind: the same path
(`/api/v1/...` for the core group, `/apis/<group>/<version>/...` otherwise), the same
query parameters in the same order, `Accept: application/json` and the bearer token. So
the informers are built from the table of input kinds (`source.kinds`) instead of one
typed method per kind.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

QUERY_PARAMETERS = (
    ("allow_watch_bookmarks", "allowWatchBookmarks"),
    ("_continue", "continue"),
    ("field_selector", "fieldSelector"),
    ("label_selector", "labelSelector"),
    ("limit", "limit"),
    ("resource_version", "resourceVersion"),
    ("resource_version_match", "resourceVersionMatch"),
    ("timeout_seconds", "timeoutSeconds"),
    ("watch", "watch"),
)
"""The typed methods' keyword arguments and the query parameters they become, in the
typed methods' order."""
CALL_OPTIONS = ("_preload_content", "_request_timeout")


def collection_path(group: str, version: str, plural: str, namespaced_in: str = "") -> str:
    """The path of a collection (`namespaced_in`: of one namespace, "" every namespace);
    `{namespace}` is filled in by the client, quoted as it quotes path parameters."""
    prefix = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return f"{prefix}/namespaces/{{namespace}}/{plural}" if namespaced_in else f"{prefix}/{plural}"


class CollectionLister:
    """A lister for `Informer`: called with a typed `list_*` method's keyword arguments
    (`bound` ones first: a fixed selector), it lists or watches the collection."""

    def __init__(
        self,
        api: client.ApiClient,
        group: str,
        version: str,
        plural: str,
        *,
        namespace: str = "",
        **bound: Any,
    ) -> None:
        self._api = api
        self._path = collection_path(group, version, plural, namespace)
        self._path_params = {"namespace": namespace} if namespace else {}
        self._bound = bound
        self.plural = plural

    def __call__(self, **kwargs: Any) -> Any:
        given = {**self._bound, **kwargs}
        unknown = set(given) - {name for name, _ in QUERY_PARAMETERS} - set(CALL_OPTIONS)
        if unknown:
            raise TypeError(f"unexpected arguments {sorted(unknown)} listing {self.plural}")
        query = [
            (param, given[name]) for name, param in QUERY_PARAMETERS if given.get(name) is not None
        ]
        return self._api.call_api(
            self._path,
            "GET",
            dict(self._path_params),
            query,
            {"Accept": "application/json"},
            body=None,
            post_params=[],
            files={},
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=given.get("_preload_content", True),
            _request_timeout=given.get("_request_timeout"),
            collection_formats={},
        )
