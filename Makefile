# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTO_OUT := protos/externalscaler_pb2.py protos/externalscaler_pb2_grpc.py

.PHONY: all venv protos test demo bench lint clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

$(PROTO_OUT): protos/externalscaler.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. protos/externalscaler.proto

protos: $(PROTO_OUT)

test: protos
	$(PY) -m pytest

demo: protos
	$(VENV)/bin/prescaler demo

bench: protos
	mkdir -p bench-results
	$(PY) -m pytest -m bench -p no:cacheprovider -o addopts="-q -ra" tests

lint: protos
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy engine forecasting scaler/policy.py scaler/settings.py scaler/forecast_worker.py simulations
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(PROTO_OUT) protos/externalscaler_pb2.pyi bench-results
