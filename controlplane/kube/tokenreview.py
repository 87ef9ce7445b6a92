"""TokenReview (authentication.k8s.io/v1) through the API: the `TokenReviewer` that
`controlplane.server.auth.Authenticator` asks about a caller's bearer token."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from kubernetes import client

from controlplane.server.auth import Denied, Identity, identity_from_user


class KubeTokenReviewer:
    """TokenReview through the kubernetes client (blocking: call it from a worker thread)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = client.AuthenticationV1Api(api_client)

    def review(self, token: str, audiences: Sequence[str]) -> Identity:
        body = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=list(audiences))
        )
        status = self._api.create_token_review(body).status
        if status is None or not status.authenticated:
            error = (status.error if status is not None else "") or "token not authenticated"
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, f"invalid token: {error}")
        granted = set(status.audiences or ())
        if audiences and not granted & set(audiences):
            raise Denied(
                grpc.StatusCode.PERMISSION_DENIED,
                f"token audiences {sorted(granted)} do not include {list(audiences)}",
            )
        user = status.user
        return identity_from_user(user.username or "", user.extra)
