# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTO_OUT := protos/externalscaler_pb2.py protos/externalscaler_pb2_grpc.py protos/front_pb2.py
FRONT := build/prescaler-front

.PHONY: all venv protos front test demo bench lint clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

$(PROTO_OUT): protos/externalscaler.proto protos/front.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. protos/externalscaler.proto
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. protos/front.proto

# The compiled gRPC front of `prescaler serve` (Go, from Debian packages).
# Without Go, serve answers from Python's grpcio and the front's tests skip;
# under CI=true a front that does not build fails the run.
$(FRONT): front/main.go front/build.sh
	sh front/build.sh $(FRONT) || { [ -z "$$CI" ] && \
		echo "prescaler-front not built (no Go): serve uses Python gRPC alone" >&2; }

front: $(FRONT)

protos: $(PROTO_OUT)

test: protos front
	$(PY) -m pytest

demo: protos
	$(VENV)/bin/prescaler demo

bench: protos front
	mkdir -p bench-results
	$(PY) -m pytest -m bench -p no:cacheprovider -o addopts="-q -ra" tests

lint: protos
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy engine forecasting scaler/policy.py scaler/settings.py scaler/forecast_worker.py scaler/front.py scaler/service.py simulations
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(PROTO_OUT) protos/externalscaler_pb2.pyi protos/front_pb2.pyi bench-results build
