#!/bin/sh
# Build keda-loadgen (KEDA's own gRPC client stack, grpc-go) for the scaler
# bench: build.sh OUTPUT. Same toolchain as prescaler-front (front/build.sh).
set -e
here=$(cd "$(dirname "$0")" && pwd)
exec sh "$here/../../../front/build.sh" "$1" "$here/main.go"
