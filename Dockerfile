# prescaler: the KEDA external scaler image the manifests deploy.
#   docker build -t ghcr.io/<you>/prescaler:0.1.0 .
# Two stages: the build stage generates the gRPC code from
# protos/externalscaler.proto (never committed) and builds a wheel; the
# runtime stage installs only that wheel and runs as an unprivileged user.

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN pip install "grpcio-tools>=1.60" "setuptools>=68" wheel
COPY . .
RUN python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. protos/externalscaler.proto \
    && pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11.11-slim-bookworm
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
# Same uid/gid as the Deployment's securityContext (runAsUser: 10001).
RUN groupadd --system --gid 10001 prescaler \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --shell /usr/sbin/nologin prescaler
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels
USER 10001:10001
# 9090 gRPC (KEDA external scaler + grpc.health.v1), 9091 Prometheus /metrics.
EXPOSE 9090 9091
ENTRYPOINT ["prescaler", "serve"]
CMD ["--port", "9090", "--metrics-port", "9091"]
