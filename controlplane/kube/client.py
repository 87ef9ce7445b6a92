"""The process's one Kubernetes API client, from a kubeconfig or the pod's service account."""

from __future__ import annotations

from kubernetes import client, config


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from `kubeconfig`, or from the pod's service account when None."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
