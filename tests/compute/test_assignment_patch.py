"""The assignment a continuing computation returns is the last one patched for the
backends it touched, not the plans and retired backends merged again (8,000 names rehashed
per endpoint change): the same mapping as a fresh computation's at every step, a new
object whenever a backend's slots changed, and the last one left as it was."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.compute import Computer, compute
from controlplane.compute import computer as computer_module
from controlplane.model import ClusterState
from tests.helpers.builders import DEFAULT_PODS, cluster, endpoint_slice, service

T0 = 1_700_000_000.0
HOUR = 3600.0


def state(step: int, names: tuple[str, ...]) -> ClusterState:
    """Services `names`, each with three endpoints, the third moving every step."""
    moved = f"10.0.0.{3 + step % 2}"
    return cluster(
        services=[service(name) for name in names],
        slices=[
            endpoint_slice(name, [f"10.{i}.0.1", f"10.{i}.0.2", moved.replace("10.0", f"10.{i}")])
            for i, name in enumerate(names)
        ],
        pods=DEFAULT_PODS,
    )


# (services, clock): endpoint moves, a Service removed (its backend retired), brought
# back (its retired slots claimed again), removed for good and forgotten past the
# quarantine, a new Service.
STEPS = [
    (("shop", "cart", "db"), T0),
    (("shop", "cart", "db"), T0 + 1),
    (("shop", "db"), T0 + 2),
    (("shop", "db"), T0 + 3),
    (("shop", "cart", "db"), T0 + 4),
    (("shop", "db"), T0 + 5),
    (("shop", "db"), T0 + 5 + 2 * HOUR),
    (("shop", "db", "new"), T0 + 6 + 2 * HOUR),
]


def test_a_continuing_assignment_is_the_last_patched_and_equals_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    patched = 0
    patch = computer_module._patched

    def counted(*args: Any) -> dict[str, Any]:
        nonlocal patched
        patched += 1
        return patch(*args)

    monkeypatch.setattr(computer_module, "_patched", counted)
    computer = Computer()
    previous = computer.compute(state(0, STEPS[0][0]), {}, now=STEPS[0][1]).assignment
    touching = 0
    for step, (names, now) in enumerate(STEPS[1:], start=1):
        cluster_state = state(step, names)
        kept = {name: slots for name, slots in previous.items()}
        result = computer.compute(cluster_state, previous, now=now)
        fresh = compute(cluster_state, dict(previous), now=now)
        assert dict(result.assignment) == dict(fresh.assignment), step
        assert dict(previous) == kept, step  # the last one is not edited in place
        if result.touched:
            touching += 1
            assert result.assignment is not previous, step
        previous = result.assignment
        # cart retired (steps 2, 3 and 5) is held, then forgotten past the quarantine
        assert ("default_cart_http" in previous) == (step <= 5), step
    assert patched == touching == len(STEPS) - 1  # each step patched the last one
    assert set(previous) == {"default_shop_http", "default_db_http", "default_new_http"}
