"""Making HAProxy run a snapshot: the one apply pipeline (`applier.py`), how HAProxy comes
to run the file (`activation.py`), its one error type and result (`outcome.py`), the saved
files (`saved.py`: the applied snapshot, atomic writes) and crash points for fault tests
(`faults.py`)."""
