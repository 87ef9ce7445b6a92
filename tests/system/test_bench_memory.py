"""The soak benchmark's logic: the RSS trend and its verdict, the sizes from the
environment, and the stream of changes (each Service and route in turn, and back)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tests.bench import soak
from tests.bench.memory import FLAT_MIB_PER_HOUR, RssSampler, flat_limit, slope_per_hour, trend
from tests.bench.scalefolder import endpoint_address, service_file, service_name


def test_the_slope_is_the_least_squares_one_in_mib_per_hour() -> None:
    rising = [(t * 60.0, 100.0 + t) for t in range(10)]  # 1 MiB a minute
    assert slope_per_hour(rising) == pytest.approx(60.0)
    assert slope_per_hour([(0.0, 5.0), (30.0, 7.0), (60.0, 5.0)]) == pytest.approx(0.0)
    assert math.isnan(slope_per_hour([(0.0, 1.0)]))
    assert math.isnan(slope_per_hour([(5.0, 1.0), (5.0, 2.0)]))


def test_the_warm_up_is_left_out_and_a_leak_is_not_flat() -> None:
    """The heap settling over the first fifth (a jump) is not a trend; a steady climb of
    one object per change is."""
    settling = [(0.0, 50.0), (60.0, 90.0)] + [(60.0 * m, 100.0) for m in range(2, 61)]
    found = trend(settling)
    assert found.start == 100.0 and found.end == 100.0 and found.flat
    assert found.peak == 100.0 and found.samples == 61
    leaking = [(60.0 * m, 100.0 + 0.5 * m) for m in range(61)]  # 30 MiB an hour
    assert not trend(leaking).flat and trend(leaking).judged
    assert not trend(leaking[:5]).judged  # 4 minutes: a slope, no verdict
    assert flat_limit(100.0) == FLAT_MIB_PER_HOUR and flat_limit(2000.0) == 20.0


def test_a_named_warm_up_replaces_the_first_fifth() -> None:
    """The soak names when its warm-up ended (every Service and route changed once): the
    slope is taken from there, however long the warm-up was."""
    filling = [(60.0 * m, 100.0 + 2.0 * m) for m in range(30)]  # a cache filling
    flat = [(60.0 * m, 160.0) for m in range(30, 61)]
    found = trend(filling + flat, since=1800.0)
    assert found.start == 160.0 and found.slope == pytest.approx(0.0) and found.flat
    assert found.peak == 160.0 and found.samples == 61 and found.seconds == 1800.0
    assert not trend(filling + flat).flat  # the first fifth alone keeps the filling


def test_the_series_shows_a_step_a_slope_would_hide() -> None:
    """Nine points of the measured part, the sample nearest each: a step at the 30th
    minute (a stream reconnecting) reads as a step, not only as a slope."""
    warm = [(0.0, 50.0)]
    stepped = [(60.0 * m, 100.0 if m < 30 else 106.0) for m in range(1, 61)]
    found = soak.Soaked(soak.QUICK, measured_from=60.0, series={"agent": warm + stepped})
    (line,) = soak.series_lines(found)
    assert line.startswith("agent RSS (MiB) by minute of the measured part: 0 min 100.0, ")
    assert "22 min 100.0" in line and "37 min 106.0" in line and line.endswith("59 min 106.0")


def test_the_warm_up_changes_every_service_and_route_once(tmp_path: Path) -> None:
    size = soak.SoakSize(services=3, routes=5, minutes=1.0, interval_s=1.0, sample_s=1.0)
    for index in range(size.services):
        (tmp_path / f"{service_name(index)}.yaml").write_text(service_file(index))
    soak.write_routes(tmp_path, size.routes, size.services)
    original = {p.name: p.read_text() for p in tmp_path.iterdir()}
    changed: set[str] = set()
    stream = soak.Changes(tmp_path, size.services, size.routes)
    for n in range(size.warm_up_changes):
        stream.apply(n)
        changed |= {p.name for p in tmp_path.iterdir() if p.read_text() != original[p.name]}
    assert changed == set(original) - {"gateway.yaml"}
    assert size.warm_up_changes == 10  # no more than one turn of the longer list


def test_the_sampler_follows_each_named_process_until_stopped() -> None:
    sampler = RssSampler(lambda: {"me": os.getpid(), "gone": 2**22 + 7}, every_s=60.0)
    sampler.start()
    sampler.stop()
    assert list(sampler.series) == ["me"] and len(sampler.series["me"]) == 2
    assert all(rss > 0 for _, rss in sampler.series["me"])


def test_sizes_come_from_the_environment() -> None:
    size = soak.size_from(soak.FULL, {"SOAK_MINUTES": "2", "SOAK_ROUTES": "7"})
    assert (size.services, size.routes, size.minutes) == (8000, 7, 2.0)
    assert size.sample_s == 6.0  # 20 samples at least
    assert soak.size_from(soak.FULL, {}) == soak.FULL
    amplified = soak.size_from(soak.FULL, {"SOAK_INTERVAL_S": "0.01"})
    assert amplified.warm_up_interval_s == 0.01  # the warm-up no slower than the stream
    assert soak.FULL.warm_up_changes == 20_000


def test_the_stream_moves_each_service_and_repoints_each_route_then_back(
    tmp_path: Path,
) -> None:
    for index in range(2):
        (tmp_path / f"{service_name(index)}.yaml").write_text(service_file(index))
    soak.write_routes(tmp_path, routes=3, services=2)
    original = {p.name: p.read_text() for p in tmp_path.iterdir()}
    stream = soak.Changes(tmp_path, services=2, routes=3)
    stream.apply(0)  # svc 0's first endpoint moved
    text = (tmp_path / "svc-00000.yaml").read_text()
    assert f'"{endpoint_address(0, 0)}"' not in text and '"127.91.0.0"' in text
    stream.apply(1)  # route 0 to svc 1
    assert "name: svc-00001" in (tmp_path / "route-00000.yaml").read_text()
    for n in range(2, 24):  # 12 turns: each Service and route an even number of times
        stream.apply(n)
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == original
    assert stream.applied == 24
