#!/bin/sh
# Run the go command on prescaler-front, offline: go.sh ARGS... runs
# `go ARGS` in front/ in module mode against Debian's Go sources (front/go.mod
# says how), e.g. `sh front/go.sh vet .` or `sh front/go.sh test .`. Relative
# paths in ARGS are read from front/. Every Go step of the build (build.sh,
# `make lint`, `make test`, `make front-fuzz`) goes through here, so they all
# see the same settings.
set -e
cd "$(dirname "$0")"
if ! command -v go >/dev/null 2>&1; then
    echo "go.sh: no Go toolchain: sudo apt-get install golang-go golang-google-grpc-dev" >&2
    exit 127
fi
# GOPROXY=off: no download, ever; GOSUMDB=off: the replaced modules are local
# directories (no checksum to look up); GOWORK=off: no workspace above us
# changes the graph; GOTOOLCHAIN=local: never fetch another Go (Go 1.21+).
# -mod=mod lets a build go on when a Debian update bumps a requirement (go.mod
# is then updated); FRONT_MOD=readonly (`make lint`) fails instead, so a
# go.mod that no longer matches Debian's sources is caught.
export GO111MODULE=on GOPROXY=off GOSUMDB=off GOWORK=off GOTOOLCHAIN=local \
    GOFLAGS="-mod=${FRONT_MOD:-mod}" GOCACHE="${GOCACHE:-${TMPDIR:-/tmp}/prescaler-go-cache}"
exec go "$@"
