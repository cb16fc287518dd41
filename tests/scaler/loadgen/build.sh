#!/bin/sh
# Build keda-loadgen, the scaler bench's load generator (KEDA's own gRPC
# client stack, grpc-go): build.sh OUTPUT [MAIN.go]. Go and grpc-go come from
# Debian (golang-go, golang-google-grpc-dev); as root they are installed when
# missing. The build is in module mode and offline (go.mod, go.sh here).
set -e
here=$(cd "$(dirname "$0")" && pwd)
# go.sh runs in this folder: make the caller's relative paths absolute first.
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
out=$(abs "$1")
if [ -n "$2" ]; then main=$(abs "$2"); else main=main.go; fi
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
exec sh "$here/go.sh" build -trimpath -o "$out" "$main"
