"""The process's one Kubernetes API client, from a kubeconfig or the pod's service account."""

from __future__ import annotations

from kubernetes import client, config

# Connections kept per host: one per informer's watch (twelve collections), the slot
# ledger's watches, its concurrent shard writes (`ledger_store.PARALLEL_WRITES`), the
# Lease, Events and route status writes. The client's default (5 per CPU) is 10 on two
# CPUs: past it, every request opened a new connection (a TLS handshake each).
CONNECTION_POOL_SIZE = 64


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from `kubeconfig`, or from the pod's service account when None."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize, CONNECTION_POOL_SIZE
    )
    return client.ApiClient(configuration)
