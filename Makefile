# peerplane: `make demo` runs it, `make test` tests it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: venv proto test lint unit fast churn demo haproxy bench bench-full image chart chart-docs clean conformance

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/peerplane/v1/peerplane.proto

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The 25 slowest tests are listed at the end: the CI run has a time limit (45 minutes).
unit: $(STAMP)
	$(BIN)/pytest -q --durations=25

# The fast loop: no real HAProxy, no real API server, no whole-system test (tests/README.md).
fast: $(STAMP)
	$(BIN)/pytest -q -m "not system and not haproxy and not realkube"

# The full persistence churn system test (30 events and a third instance joining);
# `make test` runs its shorter variant (18 events, no join).
churn: $(STAMP)
	PEERPLANE_CHURN=1 $(BIN)/pytest -q -s tests/system/test_e2e_persistence_churn.py

test: lint unit

# The upstream Gateway API conformance suite (tests/conformance/, the version its go.mod
# pins) on a real cluster, every test of the GATEWAY-HTTP profile and the extended features
# peerplane claims: writes the upstream ConformanceReport (root, Go for the first build).
GATEWAY_API_VERSION := $(shell awk '/sigs.k8s.io\/gateway-api\/conformance v/ {print $$NF}' tests/conformance/go.mod)
CONFORMANCE_REPORT ?= conformance/reports/$(GATEWAY_API_VERSION)/peerplane.yaml
conformance: $(STAMP) haproxy
	$(PY) tests/conformance/run --report $(CONFORMANCE_REPORT)

# KUBE=real: the same demo on a real API server (tests/cluster/up; root, Go for the
# first build of the cluster's binaries).
KUBE ?= folder
demo: $(STAMP) haproxy
	$(PY) deploy/examples/run_demo.py --kube $(KUBE)

# HAProxy 2.6 from Debian: installed when we are root, explained otherwise.
haproxy:
	@command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy || \
	if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y haproxy; \
	else echo "HAProxy is missing: run 'sudo apt-get install haproxy' (Debian/Ubuntu, 2.6)" >&2; exit 1; fi

# The quick forms of every benchmark, one table at the end (about 10 minutes with the real-API-server variants and the before run: tests/bench/before.py);
# `make bench-full` (or `make bench BENCH_FULL=1`) the full sizes (about 2 h 45 min with the soak's hour and the before run; SOAK_MINUTES=10: 1 h 55 min).
bench: $(STAMP)
	$(PY) -m tests.bench $(if $(filter-out 0,$(BENCH_FULL)),--full,--quick) --before $(BENCH_BEFORE)

bench-full: $(STAMP)
	$(PY) -m tests.bench --full --before $(BENCH_BEFORE)

# The image (deploy/Dockerfile) without Docker or a registry: mmdebstrap, podman, buildah,
# as root. RELEASE=trixie (HAProxy 3.0, default) or bookworm (HAProxy 2.6).
RELEASE ?= trixie
image:
	deploy/build-image --release $(RELEASE)

# The Helm chart as a package: CHART_OUT/peerplane-<version>.tgz, its version and appVersion
# the project's (pyproject.toml). Helm is built from tests/helm/go.mod (Go, once; cached).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
CHART_OUT ?= dist
HELM ?= $(shell tests/helm/build)
chart:
	mkdir -p $(CHART_OUT)
	$(HELM) lint --strict deploy/chart/peerplane
	$(HELM) package deploy/chart/peerplane --version $(VERSION) --app-version $(VERSION) \
		--destination $(CHART_OUT)

# The chart's values table in docs/operations.md, from values.yaml's `# --` comments.
chart-docs: $(STAMP)
	$(PY) -m tests.helpers.chart_values --write

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
