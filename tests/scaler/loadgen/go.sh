#!/bin/sh
# Run the go command on the scaler bench's load generator, offline: go.sh
# ARGS... runs `go ARGS` in this folder in module mode against Debian's Go
# sources (go.mod here says how), e.g. `sh go.sh vet .`. Relative paths in
# ARGS are read from this folder; build.sh goes through here.
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
# is then updated); LOADGEN_MOD=readonly fails instead.
export GO111MODULE=on GOPROXY=off GOSUMDB=off GOWORK=off GOTOOLCHAIN=local \
    GOFLAGS="-mod=${LOADGEN_MOD:-mod}" GOCACHE="${GOCACHE:-${TMPDIR:-/tmp}/prescaler-go-cache}"
exec go "$@"
