"""The dashboards' queries against a real Prometheus fed by the real scaler
and emulated vLLM replicas.

Set-up, all on 127.0.0.1: two `engine.emulator` replicas serving the model
name the GPU Deployment serves (one with vLLM V1 metric names, one with V0),
`prescaler serve` as a subprocess (the container's command line), and a real
Prometheus scraping all three. The test speaks KEDA's part over gRPC with the
GPU overlay's own trigger metadata (only `prometheusAddress` pointed at the
test's Prometheus, and pre-warming off: no Kubernetes API here), sends
traffic, and then runs every panel query of both dashboards, Grafana
variables substituted, and checks which return data.

All 28 panel queries must return data. The forecast panels (forecast vs
actual shifted by its horizon, APE, coverage) need a fitted forecaster and
matured forecasts, so the scaler runs with 1 s forecast bins and a 5 s refit,
and the trigger with a 4 s lead time: forecasts exist after ~8 s and mature
4 s later. Variables are substituted as Grafana would (the signal and
horizon from `prescaler_forecast`'s own labels).

A second ScaledObject on the same fleet has a `gatewayRateQuery` (a
constant): the forecast panel's "actual" must be its gateway series as the
scaler exports it, and vLLM's arrivals for the first object.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.manifests.conftest import MANIFESTS, find

pytestmark = pytest.mark.integration

prom_support = pytest.importorskip("tests.support.prometheus")
emu_support = pytest.importorskip("tests.support.emulator")

DASHBOARDS = MANIFESTS / "grafana" / "dashboards"
MODEL = "llama-3-8b-instruct"
SO_NAMESPACE, SO_NAME = "llm-serving", "vllm-llama3-8b"
# A second object on the same fleet whose gatewayRateQuery is a constant rate.
GATEWAY_SO_NAME, GATEWAY_RPS = "vllm-llama3-8b-gateway", 3.0
BACKFILLED = "prescaler_hindsight_"  # its series: ..._ready_replicas, ..._replicas
# Panels that must return data within the test's few seconds.
PROMPT_PANELS = (
    "vllm:",
    "prescaler_desired_replicas",
    "prescaler_ready_replicas",
    "prescaler_demand",
    "prescaler_lead_time_seconds",
    "prescaler_decisions_total",
    "prescaler_source_up",
    "prescaler_grpc_request_duration_seconds",
)


def _actual_expr() -> str:
    """The query of the forecast panel's "actual" series."""
    d = json.loads((DASHBOARDS / "forecast-accuracy.json").read_text(encoding="utf-8"))
    (expr,) = [
        t["expr"]
        for p in d["panels"]
        for t in p.get("targets", [])
        if t["legendFormat"] == "actual"
    ]
    return str(expr)


def _exprs(path: Path) -> list[tuple[str, str]]:
    d = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for panel in d["panels"]:
        for t in panel.get("targets", []):
            out.append((f"{path.stem}: {panel['title']} [{t['refId']}]", t["expr"]))
    return out


def _substitute(expr: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], expr)


def _post(url: str, body: dict[str, Any]) -> int:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()
        return int(resp.status)


@pytest.fixture
def scaler_ports() -> tuple[int, int]:
    return prom_support.free_port(), prom_support.free_port()


@pytest.fixture
def scaler(scaler_ports: tuple[int, int], tmp_path: Path) -> Iterator[str]:
    grpc_port, metrics_port = scaler_ports
    log = (tmp_path / "scaler.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prescaler.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(grpc_port),
            "--metrics-port",
            str(metrics_port),
            "--refresh-seconds",
            "1",
            "--forecast-step-seconds",
            "1",
            "--refit-seconds",
            "5",
            "--grace-seconds",
            "0",
            # the operator's consent to the second object's gatewayRateQuery
            "--allow-cross-namespace",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{metrics_port}/metrics", timeout=1
                ) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / "scaler.log").read_text(errors="replace")
            assert time.monotonic() < deadline, "scaler did not start"
            time.sleep(0.2)
        yield f"127.0.0.1:{grpc_port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_every_panel_query_returns_data(
    rendered: dict[str, list[dict[str, Any]]],
    scaler: str,
    scaler_ports: tuple[int, int],
    tmp_path: Path,
) -> None:
    from protos import externalscaler_pb2 as pb
    from protos import externalscaler_pb2_grpc as pb_grpc

    trigger = find(rendered["gpu-g5-g6"], "ScaledObject", SO_NAME)["spec"]["triggers"][0]
    with (
        emu_support.running_emulators(
            1, served_model_name=MODEL, metrics_version="v1", max_num_seqs=2
        ) as v1_urls,
        emu_support.running_emulators(
            1, served_model_name=MODEL, metrics_version="v0", max_num_seqs=2
        ) as v0_urls,
    ):
        urls = v1_urls + v0_urls
        # the ScaledObject's namespace, as ServiceMonitor relabelling adds it: the
        # scaler confines its Prometheus queries to it
        targets = [
            prom_support.Target(
                u.removeprefix("http://"), {"pod": f"vllm-{i}", "namespace": SO_NAMESPACE}
            )
            for i, u in enumerate(urls)
        ]
        targets.append(prom_support.Target(f"127.0.0.1:{scaler_ports[1]}", {"pod": "prescaler"}))
        with prom_support.running_prometheus(
            targets, scrape_interval_s=0.5, workdir=tmp_path
        ) as prom:
            prom.wait_for_targets_up(3)
            # A short lead time so forecasts mature (and their error and coverage
            # exist) within the test; everything else is the overlay's own metadata.
            metadata = dict(
                trigger["metadata"],
                prometheusAddress=prom.url,
                prewarm="false",
                leadTimeSeconds="4",
            )
            ref = pb.ScaledObjectRef(name=SO_NAME, namespace=SO_NAMESPACE, scalerMetadata=metadata)
            # The same fleet seen by an object whose forecast learns a gateway's
            # rate (a constant here): its "actual" must be the gateway's series.
            gateway_ref = pb.ScaledObjectRef(
                name=GATEWAY_SO_NAME,
                namespace=SO_NAMESPACE,
                scalerMetadata=dict(metadata, gatewayRateQuery=f"vector({GATEWAY_RPS})"),
            )
            with (
                grpc.insecure_channel(scaler) as channel,
                concurrent.futures.ThreadPoolExecutor(8) as pool,
            ):
                stub = pb_grpc.ExternalScalerStub(channel)

                def poll() -> None:
                    for so in (ref, gateway_ref):
                        spec = stub.GetMetricSpec(so, timeout=10)
                        try:
                            stub.GetMetrics(
                                pb.GetMetricsRequest(
                                    scaledObjectRef=so, metricName=spec.metricSpecs[0].metricName
                                ),
                                timeout=10,
                            )
                            stub.IsActive(so, timeout=10)
                        except grpc.RpcError as exc:
                            # Before its first data the scaler answers UNAVAILABLE (KEDA
                            # then keeps the current scale); anything else is a failure.
                            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                                raise

                poll()
                body = {"model": MODEL, "prompt": "hello " * 200, "max_tokens": 64}
                sent = [
                    pool.submit(_post, f"{u}/v1/completions", body) for _ in range(6) for u in urls
                ]
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not all(f.done() for f in sent):
                    poll()
                    time.sleep(0.5)
                assert all(f.result() == 200 for f in sent)
                # More polls until forecasts have matured into errors and coverage
                # (1 s bins: 8 to fit, the 4 s lead time to mature) and are scraped.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not all(
                    prom.query(f'{metric}{{scaledobject="{SO_NAME}"}}')
                    for metric in (
                        "prescaler_forecast_abs_percentage_error",
                        "prescaler_forecast_coverage",
                    )
                ):
                    poll()
                    time.sleep(0.5)
                for _ in range(6):
                    poll()
                    time.sleep(0.5)

            prom.wait_for(f'prescaler_desired_replicas{{scaledobject="{SO_NAME}"}}')
            prom.wait_for("vllm:time_to_first_token_seconds_bucket", min_series=2)
            forecast = prom.query(f'prescaler_forecast{{scaledobject="{SO_NAME}"}}')
            values = {
                "__rate_interval": "20s",
                "__interval": "1s",
                "__range": "5m",
                "namespace": SO_NAMESPACE,
                "scaledobject": SO_NAME,
                "model": MODEL,
                # as the dashboard's own variable: label_values(prescaler_forecast, signal)
                "signal": forecast[0]["metric"]["signal"] if forecast else "requests_per_s",
                "horizon": forecast[0]["metric"]["horizon_seconds"] if forecast else "60",
                "datasource": "prometheus",
            }
            empty: list[str] = []
            deadline = time.monotonic() + 20
            every = [item for path in sorted(DASHBOARDS.glob("*.json")) for item in _exprs(path)]
            # The hindsight schedule's series exist only once `prescaler hindsight`
            # has been backfilled with promtool; tests/simulations/test_hindsight_cli.py
            # runs that and these panels' queries against a real Prometheus.
            backfilled = [item for item in every if BACKFILLED in item[1]]
            assert len(backfilled) == 3, backfilled
            pending = [item for item in every if item not in backfilled]
            while True:
                empty = []
                for title, expr in pending:
                    result = prom.query(_substitute(expr, values))  # raises on a PromQL error
                    if not result:
                        empty.append(title)
                must = [
                    t
                    for t in empty
                    if any(m in dict(pending)[t] for m in PROMPT_PANELS)
                    and "offset" not in dict(pending)[t]
                ]
                if not empty or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert not must, f"panels without data: {must}\n(all empty: {empty})"
            assert len(pending) == 29 and not empty, empty
            # The forecast's actual: vLLM's arrivals for the object without
            # gatewayRateQuery, the gateway's rate (never both) for the one with it.
            prom.wait_for(
                f'prescaler_demand{{scaledobject="{GATEWAY_SO_NAME}",signal="gateway_requests_per_s"}}'
            )
            actual = _actual_expr()
            for name, signal in (
                (SO_NAME, "requests_per_s"),
                (GATEWAY_SO_NAME, "gateway_requests_per_s"),
            ):
                result = prom.query(_substitute(actual, dict(values, scaledobject=name)))
                assert [r["metric"]["signal"] for r in result] == [signal], (name, result)
            assert float(result[0]["value"][1]) == GATEWAY_RPS
