#!/bin/sh
# Build prescaler-front, the compiled gRPC front of `prescaler serve`:
# build.sh OUTPUT [MAIN.go] (the scaler bench's load generator builds with
# this script too). Go and grpc-go come from Debian (golang-go,
# golang-google-grpc-dev); as root they are installed when missing.
set -e
out=$1
here=$(cd "$(dirname "$0")" && pwd)
main=${2:-$here/main.go}
grpc_src=/usr/share/gocode/src/google.golang.org/grpc
if ! command -v go >/dev/null 2>&1 || [ ! -d "$grpc_src" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends golang-go golang-google-grpc-dev \
            || { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
                 golang-go golang-google-grpc-dev; }
    else
        echo "building $out needs Go and grpc-go:" \
             "sudo apt-get install golang-go golang-google-grpc-dev" >&2
        exit 1
    fi
fi
mkdir -p "$(dirname "$out")"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="${GOCACHE:-${TMPDIR:-/tmp}/prescaler-go-cache}" \
    go build -trimpath -o "$out" "$main"
