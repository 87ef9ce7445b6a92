"""The control loop: source changes -> debounced computation -> persist the slot ledger ->
publish (`reconcile.py`), and this replica's role and readiness (`replica.py`)."""
