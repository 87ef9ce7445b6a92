"""The slot ledger: where the slot assignment persists, so a restarted or failed-over
control plane continues exactly the slots the agents run.

One name for one thing. The assignment itself is computed in `compute/slots.py` (pure);
this package holds its persisted form and every place it persists:

- `codec.py`: the JSON form, per backend and as a whole document (format 1 and 2);
- `store.py`: the one protocol every ledger implements (`SlotLedger`), the in-memory
  ledger, and what changed between two assignments (a save writes only that);
- `sqlite.py`: files mode (`--state FILE`), one row per backend in SQLite;
- the Kubernetes ledger (one ConfigMap shard per backend) lives at the Kubernetes edge,
  `controlplane/kube/ledger_store.py` and `kube/ledger_watch.py`, on `shards.py` here
  (shard names and contents, pure).

Why per backend: docs/design.md, "The slot ledger".
"""
