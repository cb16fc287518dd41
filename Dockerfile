# prescaler: the KEDA external scaler image the manifests deploy.
#   docker build -t ghcr.io/<you>/prescaler:0.1.0 .
# Two stages: the build stage generates the gRPC code from
# protos/externalscaler.proto (never committed), builds a wheel and compiles
# the hot modules with mypyc (prescaler_native/build.py: the forecaster's
# smoothing loops among them, a third of the forecasting's CPU); the runtime
# stage installs only those and runs as an unprivileged user.

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN pip install "grpcio-tools>=1.60" "setuptools>=68" wheel "mypy>=1.10"
COPY . .
# The compiled modules are type-checked against the installed dependencies,
# like `make native`; the build's manifest records the sources' SHA-256,
# which the installed copies in site-packages must match at run time.
RUN python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. protos/externalscaler.proto \
    && pip wheel --no-deps --wheel-dir /wheels . \
    && pip install /wheels/*.whl \
    && python -m prescaler_native.build /native

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
# The compiled modules load only while they match the installed sources
# (prescaler_native/loader.py); the image refuses to build when they do not.
COPY --from=build /native /opt/prescaler/native
ENV PRESCALER_NATIVE_DIR=/opt/prescaler/native
RUN python -c "import forecasting.filters as f, prescaler_native.loader as n; assert n.is_native(f)"
USER 10001:10001
# 9090 gRPC (KEDA external scaler + grpc.health.v1), 9091 Prometheus /metrics.
EXPOSE 9090 9091
ENTRYPOINT ["prescaler", "serve"]
CMD ["--port", "9090", "--metrics-port", "9091"]
