"""Corrupted or hostile slot state: reported, bounded, never a crash.

Each case goes through both stores, the JSON file (files mode, `compute --state`) and the
ConfigMap ledger against the fake API server; one bad backend never drops the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from controlplane import cli
from controlplane.compute import compute
from controlplane.ledger import codec
from controlplane.ledger.codec import STATE_FORMAT
from controlplane.ledger.shards import SLOTS_KEY
from controlplane.ledger.sqlite import FileLedger, LedgerReadError
from controlplane.model import ObjectRef
from controlplane.publish import encode_one
from controlplane.snapshot import BackendSlots, SlotAssignment
from nodeagent.config.render import RenderError, render_backend
from peerplane import limits
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service
from tests.helpers.ledger import kube_ledger
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import config_map

REF = ObjectRef("haproxy-system", "peerplane-slots")
DEMO = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "demo"
NOW = 1_800_000_000.0
GOOD = {"count": 8, "slots": [["127.0.1.1", 8888, 1]], "freed": [[2, NOW - 5]]}

Loader = Callable[[str], tuple[SlotAssignment, list[str]]]


@pytest.fixture(params=["file", "configmap"])
def load(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Loader]:
    """Writes a document into one store and loads it back (clock fixed at NOW)."""
    if request.param == "file":
        path = tmp_path / "slots.json"

        def from_file(text: str) -> tuple[SlotAssignment, list[str]]:
            path.write_text(text)
            return FileLedger(path, clock=lambda: NOW).load()

        yield from_file
        return
    server = FakeKubeAPI().start()
    try:

        def from_configmap(text: str) -> tuple[SlotAssignment, list[str]]:
            obj = config_map(REF.name, REF.namespace)
            obj["data"] = {SLOTS_KEY: text}
            server.apply(obj)
            with kube_ledger(server.url, REF, clock=lambda: NOW) as (ledger, _):
                return ledger.load()

        yield from_configmap
    finally:
        server.stop()


def document(bad: object) -> str:
    return json.dumps({"format": STATE_FORMAT, "backends": {"good": GOOD, "bad": bad}})


def test_deeply_nested_json_is_reported_not_a_recursion_error(load: Loader) -> None:
    assignment, problems = load("[" * 100_000 + "]" * 100_000)
    assert assignment == {}
    assert len(problems) == 1 and "nested too deeply" in problems[0]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"count": 8, "slots": [["127.0.1.2", 8888, True]]}, "bad slot entry"),
        ({"count": 8, "slots": [["127.0.1.2", True, 1]]}, "bad slot entry"),
        ({"count": 8, "slots": [["127.0.1.2", 70000, 1]]}, "bad slot entry"),
        ({"count": True, "slots": []}, "bad count"),
        ({"count": 1_000_000, "slots": []}, f"1..{limits.MAX_SLOTS} slots"),
        ({"count": limits.MAX_SLOTS + 1, "slots": []}, "bad count"),
        ({"count": 8, "slots": {"127.0.1.2": 1}}, "slots is not a list"),
        ({"count": 8, "slots": [], "freed": [[9, NOW]]}, "bad freed entry"),
        ({"count": 8, "slots": [], "freed": [[1, -1]]}, "bad freed entry"),
        ({"count": 8, "slots": [], "freed": [[1, True]]}, "bad freed entry"),
        ({"count": 8, "slots": [], "freed": [[1, NOW], [1, NOW]]}, "freed twice"),
        ({"count": 8, "slots": [["127.0.1.2", 8888, 1]], "freed": [[1, NOW]]}, "used and freed"),
        ({"count": 8, "slots": [], "freed": [[1, NOW, "127.0.1.2"]]}, "bad freed entry"),
        ({"count": 8, "slots": [], "freed": [[1, NOW, "nope", 80]]}, "nope"),
        ({"count": 8, "slots": [], "freed": [[1, NOW, "127.0.1.2", True]]}, "bad entry"),
        (
            {
                "count": 8,
                "slots": [],
                "freed": [[1, NOW, "127.0.1.2", 80], [2, NOW, "127.0.1.2", 80]],
            },
            "left two slots",
        ),
        (
            {"count": 8, "slots": [["127.0.1.2", 80, 1]], "freed": [[2, NOW, "127.0.1.2", 80]]},
            "both holds and left",
        ),
    ],
)
def test_a_bad_backend_is_dropped_and_reported_alone(load: Loader, bad: object, why: str) -> None:
    assignment, problems = load(document(bad))
    assert set(assignment) == {"good"}, "the good backend survives its bad neighbour"
    assert dict(assignment["good"].slots) == {("127.0.1.1", 8888): 1}
    assert dict(assignment["good"].freed) == {2: NOW - 5}
    assert len(problems) == 1 and "'bad'" in problems[0] and why in problems[0], problems


def test_a_huge_slot_count_is_refused_before_it_is_used(load: Loader) -> None:
    """1,000,000 slots was accepted: 93 MB of JSON, 646 MB of memory, and `SRV_1000000`
    that no agent renders. Refused at load, and the backend rebuilt within the bound."""
    assignment, problems = load(document({"count": 1_000_000, "slots": []}))
    assert "bad" not in assignment and problems
    state = cluster(
        services=[service("s")], slices=[endpoint_slice("s", ["127.0.1.1"])], pods=DEFAULT_PODS
    )
    result = compute(state, assignment, now=NOW)
    assert all(b.count <= limits.MAX_SLOTS for b in result.assignment.values())


def test_format_1_counts_every_free_slot_as_freed_at_load(load: Loader) -> None:
    old = {"format": 1, "backends": {"shop": {"count": 4, "slots": [["127.0.1.1", 8888, 2]]}}}
    assignment, problems = load(json.dumps(old))
    assert dict(assignment["shop"].slots) == {("127.0.1.1", 8888): 2}
    assert dict(assignment["shop"].freed) == {1: NOW, 3: NOW, 4: NOW}
    assert len(problems) == 1 and "format 1" in problems[0]


@pytest.mark.parametrize("fmt", [True, 99, "2", None])
def test_unknown_format_is_an_empty_assignment(load: Loader, fmt: object) -> None:
    assignment, problems = load(json.dumps({"format": fmt, "backends": {"good": GOOD}}))
    assert assignment == {} and len(problems) == 1 and "unknown format" in problems[0]


def test_oversized_state_is_refused_unparsed(load: Loader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "MAX_LEDGER_BYTES", 1000)
    assignment, problems = load(document({"count": 8, "slots": [["127.0.1.2", 8888, 1]] * 50}))
    assert assignment == {} and len(problems) == 1 and "larger than" in problems[0]


def test_state_path_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory as --state was read as "no state" and rebuilt from sorted order; it is
    not a ledger that can be used, so nothing is computed from it."""
    with pytest.raises(LedgerReadError, match="not a regular file"):
        FileLedger(tmp_path).load()
    code = cli.main(["compute", "--source", f"files:{DEMO}", "--state", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1
    assert f"--state {tmp_path}: not a regular file" in err and "Traceback" not in err
    assert out == "", "snapshots whose slots were not read are not printed"


def test_state_path_that_cannot_be_saved(capsys: pytest.CaptureFixture[str]) -> None:
    state = "/proc/self/peerplane-slots.db"  # absent, and no file can be made there (root too)
    code = cli.main(["compute", "--source", f"files:{DEMO}", "--state", str(state)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "cannot save slot state" in err and "Traceback" not in err
    assert out == "", "snapshots whose slots were not saved are not printed"


def test_round_trip_keeps_freed_times_and_who_left(tmp_path: Path) -> None:
    saved: SlotAssignment = {
        "shop": BackendSlots(
            8,
            MappingProxyType({("127.0.1.1", 8888): 3}),
            MappingProxyType({1: NOW, 2: NOW + 0.5}),
            MappingProxyType({2: ("127.0.1.2", 8888)}),
        )
    }
    FileLedger(tmp_path / "slots.db", clock=lambda: NOW + 100).save(saved)
    assignment, problems = FileLedger(tmp_path / "slots.db", clock=lambda: NOW + 100).load()
    assert problems == [] and assignment == saved


def test_endpoints_beyond_the_slot_limit_are_reported_not_rendered_out_of_range() -> None:
    addresses = [f"127.{100 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}" for i in range(10_005)]
    state = cluster(
        services=[service("s", annotations={"haproxy.org/server-slots": "1000"})],
        slices=[endpoint_slice("s", addresses)],
        pods=DEFAULT_PODS,
    )
    result = compute(state, {}, now=NOW)
    (b,) = result.workloads[WORKLOAD].backends
    assert b.slots.count == limits.MAX_SLOTS
    assert sum(s.enabled for s in b.slot_list()) == limits.MAX_SLOTS
    assert any("5 endpoints beyond the 10000-slot limit" in r.reason for r in result.rejections)
    (encoded,) = encode_one(result.workloads[WORKLOAD]).message().backends
    render_backend(encoded)  # the agent renders every slot compute may assign


def test_the_agent_refuses_a_slot_above_the_limit() -> None:
    index = limits.MAX_SLOTS + 1
    b = pb.Backend(
        name="default_s_http",
        mode="http",
        balance="roundrobin",
        slots=[pb.Slot(index=index, server_name=f"SRV_{index}")],
    )
    with pytest.raises(RenderError, match=f"slot {index} above {limits.MAX_SLOTS}"):
        render_backend(b)
