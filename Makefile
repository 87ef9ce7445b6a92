# peerplane: `make demo` runs it, `make test` tests it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: venv proto test lint unit demo bench clean

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

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint unit

demo: $(STAMP)
	$(PY) -m controlplane.demo

bench: $(STAMP)
	$(PY) -m tests.bench

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
