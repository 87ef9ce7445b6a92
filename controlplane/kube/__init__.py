"""The Kubernetes edge: every module that talks to the API server, and the only package
that imports `kubernetes`.

`client.load_api_client` builds the one ApiClient of a process (the CLI wiring creates it
once, only when a flag needs the API, and passes it to each user); `source` and
`informer` watch the cluster state, `slots` keeps the slot ledger in a ConfigMap,
`leader` holds the Lease, `events` reports rejections as Events, and `tokenreview` checks
agents' tokens. Files mode (`--source files:DIR`) imports none of them.

Nothing is imported here, so importing one submodule loads only what it needs.
"""
