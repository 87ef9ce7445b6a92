"""`controlplane status`: one row per agent (SYNCED, STALE, NACKED, NOT SENT) and per
workload from the inspection API, and `--diff` between two versions of a snapshot.
`rows`, `render` and `diff` are pure; `client` speaks gRPC; `command` runs it."""
