"""The shipped alerts and dashboard (deploy/monitoring/) against the metrics a real fleet
exposes: docs/operations.md, "Dashboards and alerts".

How it is checked (promtool is not available on this machine, nor any Prometheus): each
alert's and each panel's PromQL is parsed with `promql-parser` (PyPI, the Python binding
of the Rust parser GreptimeDB uses), and the tree is walked by `tests/helpers/promql.py`:
every metric name must be a series of a live scrape of a real `controlplane serve` and
of real agents driving real HAProxy (histograms by their `_bucket`/`_sum`/`_count`
series), and every label an expression matches on, groups by or joins on must exist
where it is used. The simplest alert conditions (instant selectors, aggregations,
comparisons) are evaluated on the scraped samples for states the test creates: a
NACKing agent (its reload cannot bind a port the test holds), agents that do not
answer (SIGSTOPped: a version stays pending and no agent of the workload is in sync),
agents whose control plane is stopped, and the healthy fleet, where nothing fires.
`for:` durations and the 2-minute staleness threshold are not waited for: the value each
alert compares is checked instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.fleet import HAPROXY_PODS, Fleet, free_port
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.promql import Live, Unsupported, check, evaluate, label_values_query
from tests.helpers.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
OPERATIONS = ROOT / "docs" / "operations.md"
OCTET = 86
HELD_PORT = 15499  # the port of the Service whose frontend agent A cannot bind
SEVERITIES = {"critical", "warning", "info"}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
BAD_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: odd
  namespace: default
  annotations:
    haproxy.org/expose: "true"
    haproxy.org/load-balance: "roundrobin\\n  server evil 1.2.3.4:80"
spec:
  ports: [{name: http, port: 80}]
"""
CACHE = """\
apiVersion: v1
kind: Service
metadata:
  name: cache
  namespace: default
  annotations:
    haproxy.org/expose: "true"
    haproxy.org/tcp-port: "{port}"
spec:
  ports:
    - name: tcp
      port: 6379
      targetPort: 15433
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: cache-x1
  namespace: default
  labels:
    kubernetes.io/service-name: cache
addressType: IPv4
ports:
  - name: tcp
    port: 15433
    protocol: TCP
endpoints:
  - addresses: ["127.{octet}.4.1"]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: db-0}}
"""


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return loaded


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every target, and the variables' `label_values` queries."""
    found = [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            parsed = label_values_query(variable["query"]["query"])
            assert parsed is not None, variable
            metric, label = parsed
            found.append((f"${variable['name']}", f"count by ({label}) ({metric})"))
    return found


# ---------------------------------------------------------------- structure (unit)


@pytest.mark.unit
def test_the_rule_file_is_a_prometheus_rule_whose_alerts_say_what_to_do() -> None:
    document = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    assert document["metadata"]["name"] and document["metadata"]["namespace"]
    groups = document["spec"]["groups"]
    assert len({g["name"] for g in groups}) == len(groups) > 0
    names = []
    guide = OPERATIONS.read_text()
    headings = set(re.findall(r"(?m)^#+ (.+)$", guide))
    alerts_section = guide.split("## Dashboards and alerts", 1)[1].split("\n## ", 1)[0]
    for group in groups:
        assert set(group) <= {"name", "rules", "interval"} and group["rules"], group["name"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            name = rule["alert"]
            assert re.fullmatch(r"Peerplane[A-Z][A-Za-z]+", name), name
            names.append(name)
            assert isinstance(rule["expr"], str) and rule["expr"].strip(), name
            assert DURATION.match(str(rule.get("for", "0s"))), name
            assert rule["labels"]["severity"] in SEVERITIES, name
            annotations = rule["annotations"]
            assert annotations["summary"].strip() and annotations["description"].strip()
            # The description points to the operations guide, at a section that exists,
            # and the guide's alert section explains the alert by name.
            cited = re.findall(r'docs/operations\.md, "([^"]+)"', annotations["description"])
            assert cited and all(c in headings for c in cited), (name, cited)
            assert f"`{name}`" in alerts_section, f"{name} is not explained in the guide"
    assert len(set(names)) == len(names), "alert names repeat"


@pytest.mark.unit
def test_the_dashboard_is_a_grafana_dashboard_whose_panels_have_queries() -> None:
    board = dashboard()
    assert board["title"] and board["uid"] and isinstance(board["schemaVersion"], int)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids, cells = set(), set()
    for panel in board["panels"]:
        assert panel["id"] not in ids, panel["title"]
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat", "gauge", "table"}, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            for used in re.findall(r"\$(\w+)", target["expr"]):
                assert used.startswith("__") or used in variables, (panel["title"], used)


@pytest.mark.unit
def test_the_checker_finds_a_missing_metric_label_or_bucket() -> None:
    """The checker itself, on a tiny scrape: each mistake it must catch, and none in a
    correct expression (else a passing check below would mean nothing)."""
    text = (
        "# TYPE peerplane_nacks_total counter\n"
        'peerplane_nacks_total{workload="w"} 1\n'
        "# TYPE nodeagent_apply_duration_seconds histogram\n"
        'nodeagent_apply_duration_seconds_bucket{le="1",path="reload"} 1\n'
        'nodeagent_apply_duration_seconds_bucket{le="+Inf",path="reload"} 1\n'
        'nodeagent_apply_duration_seconds_count{path="reload"} 1\n'
        'nodeagent_apply_duration_seconds_sum{path="reload"} 0.2\n'
    )
    live = Live.from_scrapes({"pod-a": text})
    good = (
        "histogram_quantile(0.9, sum by (le, path) "
        "(rate(nodeagent_apply_duration_seconds_bucket[$__rate_interval])))"
    )
    assert check(good, live).problems == []
    assert check('sum by (workload) (peerplane_nacks_total{workload="w"}) > 0', live).problems == []
    wrong = {
        "peerplane_nack_total": "not in the scrape",
        "sum by (pod) (peerplane_nacks_total)": "label 'pod'",  # a target label
        'peerplane_nacks_total{agent="a"}': "label 'agent'",
        "histogram_quantile(0.9, sum by (path) (rate("
        "nodeagent_apply_duration_seconds_bucket[5m])))": "label 'le'",
        "nodeagent_apply_duration_seconds": "not in the scrape",  # a histogram's family name
        "sum by (workload) (peerplane_nacks_total) >": "does not parse",
    }
    for expr, problem in wrong.items():
        problems = check(expr, live).problems
        assert any(problem in p for p in problems), (expr, problems)
    assert evaluate("sum by (workload) (peerplane_nacks_total) > 0", live.samples) == [
        ({"workload": "w"}, 1.0)
    ]
    assert evaluate("peerplane_nacks_total > 1", live.samples) == []


@pytest.mark.unit
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_kustomize_renders_the_rule_the_scrape_targets_and_the_dashboard_config_map() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(MONITORING)], capture_output=True, text=True, check=True
    ).stdout
    objects = {o["kind"]: o for o in yaml.safe_load_all(rendered)}
    assert set(objects) == {"ConfigMap", "PrometheusRule", "PodMonitor"}
    config_map = objects["ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["peerplane.json"]) == dashboard()
    assert all(o["metadata"]["namespace"] == "haproxy-system" for o in objects.values())
    # The PodMonitor's ports are the ones the base's pods declare.
    base = yaml.safe_load_all(
        subprocess.run(
            ["kubectl", "kustomize", str(ROOT / "deploy")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    declared = {
        port["name"]
        for obj in base
        if obj["kind"] in ("Deployment", "DaemonSet")
        for container in obj["spec"]["template"]["spec"]["containers"]
        for port in container.get("ports", [])
    }
    ports = {e["port"] for e in objects["PodMonitor"]["spec"]["podMetricsEndpoints"]}
    assert ports == {"metrics", "agent-metrics"} and ports <= declared
    # Not in the default install: the CRDs may be missing there.
    assert "monitoring" not in (ROOT / "deploy" / "kustomization.yaml").read_text()


# ---------------------------------------------------------------- against a live fleet


def scrape(address: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=5) as answer:
        text: str = answer.read().decode()
    return text


class Scrapes:
    """The control plane's and each agent's metrics endpoints, scraped together."""

    def __init__(self, fleet: Fleet, control_plane_port: int, agent_ports: dict[str, int]):
        self.fleet = fleet
        self.control_plane_port = control_plane_port
        self.agent_ports = agent_ports

    def live(self, agents: bool = True, control_plane: bool = True) -> Live:
        """Every endpoint, or leaving out the agents' or the control plane's (a stopped
        process cannot answer; Prometheus would see its target down)."""
        texts = {}
        if control_plane:
            texts["controlplane"] = scrape("127.0.0.1", self.control_plane_port)
        for pod, port in self.agent_ports.items() if agents else ():
            texts[pod] = scrape(self.fleet.agents[pod].address, port)
        return Live.from_scrapes(texts)

    def until(
        self,
        what: str,
        predicate: Any,
        timeout: float = 45,
        agents: bool = True,
        control_plane: bool = True,
    ) -> Live:
        """Scrape until `predicate(live)` holds; the scrape that satisfied it."""
        seen: dict[str, Live] = {}

        def ready() -> bool:
            seen["live"] = self.live(agents, control_plane)
            return bool(predicate(seen["live"]))

        wait_until(ready, timeout, what, step=0.25)
        return seen["live"]


def firing(live: Live) -> dict[str, list[dict[str, str]]]:
    """Alerts whose condition holds on this scrape (ignoring `for`), with the label sets
    they fire for; rules outside the evaluator (range functions) are left out."""
    out: dict[str, list[dict[str, str]]] = {}
    for rule in rules():
        try:
            result = evaluate(rule["expr"], live.samples)
        except Unsupported:
            continue
        if result:
            out[rule["alert"]] = [labels for labels, _ in result]
    return out


def compared(alert: str, live: Live) -> list[tuple[dict[str, str], float]]:
    """The value the alert compares with its threshold (the left side of its `>`)."""
    (rule,) = [r for r in rules() if r["alert"] == alert]
    left = re.split(r"\s(?:>|<|==|>=|<=|!=)\s", rule["expr"])[0]
    return evaluate(left, live.samples)


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[tuple[Fleet, Scrapes]]:
    control_plane_port = free_port()
    agent_ports: dict[str, int] = {}
    args = ["--metrics-port", str(control_plane_port)]
    with Fleet(tmp_path, OCTET, haproxy_bin=haproxy_bin.path, server_args=args) as running:
        running.write_manifests()
        (running.manifests / "odd.yaml").write_text(BAD_SERVICE)  # one rejected input
        running.start_backends()
        running.start_control_plane()
        for name, address in HAPROXY_PODS:
            port = free_port(running.ip(address))
            agent_ports[name] = port
            metrics = ["--metrics-port", str(port), "--metrics-address", running.ip(address)]
            running.start_agent(name, address, extra_args=metrics)
        running.wait_all_acked()
        yield running, Scrapes(running, control_plane_port, agent_ports)


def write_manifest(fleet: Fleet, name: str, text: str | None) -> None:
    """Write (None: remove) one manifest atomically, then wait for the new version."""
    before = fleet.snapshot().content_hash
    path = fleet.manifests / name
    if text is None:
        path.unlink()
    else:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    wait_until(lambda: fleet.snapshot().content_hash != before, 30, f"a version after {name}")


def agents(live: Live, state: str) -> float:
    return live.value("peerplane_agents", workload=WORKLOAD, state=state)


def test_every_alert_and_panel_queries_live_metrics_and_alerts_fire_on_real_states(
    fleet: tuple[Fleet, Scrapes],
) -> None:
    running, scrapes = fleet
    (pod_a, _), (pod_b, _) = HAPROXY_PODS

    # The healthy fleet: every agent synced and ready, nothing fires (once the peer
    # sessions, reported every few seconds, are established).
    scrapes.until(
        "both agents synced and ready, nothing firing",
        lambda live: (
            agents(live, "synced") == 2
            and live.value("nodeagent_ready") == 2
            and firing(live) == {}
        ),
    )

    # Agent A cannot bind the new Service's port (the test holds it on A's address):
    # its reload fails, it NACKs and retries; B applies the version.
    with socket.socket() as held:
        held.bind((running.agents[pod_a].address, HELD_PORT))
        held.listen()
        write_manifest(running, "cache.yaml", CACHE.format(port=HELD_PORT, octet=OCTET))
        # A failed reload drops the peer sessions for a while (about 10 s on 2.6: the
        # master re-executes); PeerplanePeerSessionDown's `for: 5m` rides that out. Here
        # the test waits until, A still NACKing, the sessions are back.
        nacking = scrapes.until(
            "agent A to NACK, B to ACK and the peer sessions to settle",
            lambda live: (
                agents(live, "nacked") == 1
                and agents(live, "synced") == 1
                and firing(live) == {"PeerplaneAgentNacking": [{"workload": WORKLOAD}]}
            ),
        )
    assert nacking.value("peerplane_nacks_total", workload=WORKLOAD) >= 1
    assert nacking.value("nodeagent_nacks_sent_total", pod=pod_a) >= 1
    assert nacking.value("nodeagent_nacks_sent_total", pod=pod_b) == 0

    # The port is free again: A's retry applies the same version and ACKs it.
    scrapes.until("agent A to apply on retry", lambda live: agents(live, "synced") == 2)

    # Both agents stopped (SIGSTOP, by PID): the next version stays pending, and no
    # agent of the workload runs the current snapshot.
    processes = [running.agents[pod].process for pod in (pod_a, pod_b)]
    for process in processes:
        os.kill(process.pid, signal.SIGSTOP)
    try:
        write_manifest(running, "cache.yaml", None)
        stopped = scrapes.until(
            "both agents pending for over a second",
            lambda live: (
                agents(live, "pending") == 2
                and all(v > 1.0 for _, v in compared("PeerplaneAgentStale", live))
            ),
            agents=False,
        )
    finally:
        for process in processes:
            os.kill(process.pid, signal.SIGCONT)
    alerts = firing(stopped)
    assert alerts["PeerplaneWorkloadNoAgentInSync"] == [{"workload": WORKLOAD}], alerts
    assert set(alerts) == {"PeerplaneWorkloadNoAgentInSync"}, alerts  # stale is under 2 min
    (age,) = compared("PeerplaneAgentStale", stopped)
    assert age[0] == {"workload": WORKLOAD} and 1.0 < age[1] < 120

    # Resumed: both apply the version.
    resumed = scrapes.until(
        "both agents synced after the stop",
        lambda live: agents(live, "synced") == 2 and agents(live, "pending") == 0,
    )

    # Each change both agents applied was observed once they had both ACKed it: the
    # convergence panel and PeerplaneSlowConvergence read real observations.
    converged = resumed.value("peerplane_convergence_seconds_count")
    assert converged >= 2, converged  # cache.yaml written, then removed
    assert 0 < resumed.value("peerplane_convergence_seconds_sum") < 120 * converged

    # Every query against this scrape: by now every labelled counter the queries group
    # by has samples (a NACK, deltas, a rejection happened; a restart would reset them).
    queries = [(rule["alert"], rule["expr"]) for rule in rules()] + panel_queries()
    problems = {}
    for where, expr in queries:
        checked = check(expr, resumed)
        assert checked.metrics, (where, expr)
        if checked.problems:
            problems[f"{where}: {expr}"] = checked.problems
    assert not problems, json.dumps(problems, indent=1)

    # The control plane stopped (SIGTERM, by PID): each agent loses its stream.
    running.stop_control_plane()
    alone = scrapes.until(
        "both agents to notice",
        lambda live: live.value("nodeagent_connected") == 0,
        control_plane=False,
    )
    alerts = firing(alone)
    # The peers sessions may still be re-establishing after the pause above (the agent
    # reads them every report interval): that alert is not the control plane's doing,
    # and the last step waits until it is gone.
    alerts.pop("PeerplanePeerSessionDown", None)
    assert alerts == {"PeerplaneAgentDisconnected": [{"pod": pod_a}, {"pod": pod_b}]}, alerts

    # Started again (same state file): the agents reconnect, hear InSync, nothing fires.
    running.start_control_plane()
    running.wait_all_acked()
    # (The new replica reports itself ready within its first second or so.)
    scrapes.until(
        "both agents synced again and nothing firing",
        lambda live: (
            agents(live, "synced") == 2 and agents(live, "pending") == 0 and firing(live) == {}
        ),
    )
