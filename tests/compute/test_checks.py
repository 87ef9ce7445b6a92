"""Health-check settings: on by default, Service > ConfigMap > default, strict values."""

from __future__ import annotations

import pytest

from controlplane.compute import BackendSpec, compute
from controlplane.publish import encode_one
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, service, settings


def backends(state) -> dict[str, BackendSpec]:  # type: ignore[no-untyped-def]
    snap = compute(state, {}).workloads[WORKLOAD]
    return {b.name: b for b in snap.backends}


def check_of(b: BackendSpec) -> tuple[int, int, int, str] | None:
    if b.check is None:
        return None
    c = b.check
    return (c.interval_ms, c.rise, c.fall, c.http_path)


def test_checks_are_on_by_default_with_haproxy_defaults() -> None:
    (b,) = backends(cluster(services=[service("s")], pods=DEFAULT_PODS)).values()
    assert check_of(b) == (2000, 2, 3, "")
    assert not b.warnings


def test_service_then_configmap_then_default() -> None:
    config = settings(**{"check-interval": "5s", "check-fall": "4", "check-http": "/healthz"})
    services = [
        service("a", annotations={"haproxy.org/check-interval": "500ms", "check-rise": "1"}),
        service("b"),
        service("off", annotations={"haproxy.org/check": "false"}),
    ]
    got = backends(cluster(services=services, pods=DEFAULT_PODS, config=config))
    assert check_of(got["default_a_http"]) == (500, 1, 4, "/healthz")
    assert check_of(got["default_b_http"]) == (5000, 2, 4, "/healthz")
    assert check_of(got["default_off_http"]) is None


def test_prefixed_key_wins_over_bare() -> None:
    svc = service("s", annotations={"haproxy.org/check-fall": "7", "check-fall": "9"})
    (b,) = backends(cluster(services=[svc], pods=DEFAULT_PODS)).values()
    assert b.check.fall == 7


def test_configmap_can_turn_checks_off_and_a_service_back_on() -> None:
    config = settings(check="false")
    services = [service("a"), service("b", annotations={"haproxy.org/check": "true"})]
    got = backends(cluster(services=services, pods=DEFAULT_PODS, config=config))
    assert check_of(got["default_a_http"]) is None
    assert check_of(got["default_b_http"]) == (2000, 2, 3, "")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("check-interval", "50ms"),  # below 100ms
        ("check-interval", "2h"),  # above 1h
        ("check-interval", "fast"),
        ("check-rise", "0"),
        ("check-fall", "101"),
        ("check-http", "healthz"),  # no leading /
        ("check-http", "/a b"),
        ("check-http", "/x#y"),
        ("check-http", '/x"y'),
        ("check-http", "/x\nbackend evil"),
        ("check", "maybe"),
    ],
)
def test_bad_values_fall_back_to_the_configmap_and_are_reported(key: str, value: str) -> None:
    config = settings(**{"check-interval": "3s", "check-rise": "3", "check-fall": "5"})
    config_http = settings(**{"check-http": "/ready"}) if key == "check-http" else config
    svc = service("s", annotations={f"haproxy.org/{key}": value})
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS, config=config_http), {})
    (b,) = result.workloads[WORKLOAD].backends
    assert [(w.key, w.object) for w in b.warnings] == [(f"haproxy.org/{key}", "Service default/s")]
    expected = {
        "check-interval": (3000, 3, 5, ""),
        "check-rise": (3000, 3, 5, ""),
        "check-fall": (3000, 3, 5, ""),
        "check-http": (2000, 2, 3, "/ready"),
        "check": (3000, 3, 5, ""),
    }[key]
    assert check_of(b) == expected
    assert "evil" not in str(b.check)


def test_bad_configmap_value_falls_back_to_the_default() -> None:
    config = settings(**{"check-rise": "lots"})
    snap = compute(cluster(services=[service("s")], pods=DEFAULT_PODS, config=config), {})
    message = snap.workloads[WORKLOAD]
    check = message.backends[0].check
    assert check is not None and check.rise == 2
    assert [w.key for w in message.warnings] == ["check-rise"]


def test_check_http_on_a_tcp_service_is_rejected_and_a_configmap_path_ignored() -> None:
    tcp = {"haproxy.org/tcp-port": "5432"}
    services = [
        service("db", ports=[("pg", 5432)], annotations={**tcp, "check-http": "/healthz"}),
        service("mq", ports=[("amqp", 5672)], annotations={"haproxy.org/tcp-port": "5672"}),
    ]
    config = settings(**{"check-http": "/ready"})
    result = compute(cluster(services=services, pods=DEFAULT_PODS, config=config), {})
    snap = result.workloads[WORKLOAD]
    got = {b.name: b for b in snap.backends}
    db, mq = got["default_db_pg"], got["default_mq_amqp"]
    assert check_of(db) == (2000, 2, 3, "")  # a TCP connect check
    assert [w.key for w in db.warnings] == ["check-http"]
    assert "HTTP backend" in db.warnings[0].reason
    assert check_of(mq) == (2000, 2, 3, "")
    assert not mq.warnings and not snap.warnings


def test_check_settings_change_the_content_hash() -> None:
    def digest(notes: dict[str, str]) -> str:
        state = cluster(services=[service("s", annotations=notes)], pods=DEFAULT_PODS)
        return encode_one(compute(state, {}).workloads[WORKLOAD]).content_hash

    hashes = {
        digest({}),
        digest({"check": "off"}),
        digest({"check-interval": "1s"}),
        digest({"check-http": "/healthz"}),
    }
    assert len(hashes) == 4
