"""``prescaler doctor`` against a real Prometheus and a real ``prescaler serve``.

Three ScaledObjects read one real Prometheus through one real scaler (a
child process, gRPC and ``/metrics`` over sockets): a healthy one, one whose
``model`` matches no series (the scaler reads an idle fleet and answers
``minReplicas`` from "fresh" data: the inert autoscaler), and one whose only
pod stops answering its scrape (the scaler holds). The test plays KEDA (it
polls each object over gRPC) and checks that the doctor passes the first
and names the cause of the other two, reading the scaler's ``/metrics``
only: a file that differs from what KEDA sends leaves the live tracker as
it was.

The movement check needs an hour: Prometheus starts on an hour of history
written with ``promtool tsdb create-blocks-from openmetrics`` (vLLM's
completions in the namespace rising and falling, and the scaler's answer
for each object as a scaler would have exported it: following demand for
the healthy object, flat at 1 for the broken one); the live series follow.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from prescaler.cli import main
from prescaler.doctor.fetch import read_url
from prescaler.doctor.gather import read_scaler_metrics
from protos import externalscaler_pb2 as pb
from protos import externalscaler_pb2_grpc as pb_grpc
from stack.processes import ScalerProcess
from tests.scaler.conftest import Engine, FakeVllm
from tests.support.prometheus import PrometheusServer, Target, backfill_openmetrics

pytestmark = pytest.mark.integration

MODEL = "llama"
HISTORY_S = 3600
STEP_S = 15


def _rate(frac: float) -> float:
    """Completions per second over the hour: 1 at its ends, 4 in the middle."""
    return 1.0 + 3.0 * math.sin(math.pi * frac)


def _history(path: Path, end_s: float) -> None:
    times = [end_s - HISTORY_S + i * STEP_S for i in range(HISTORY_S // STEP_S)]
    total = 0.0
    served, healthy, broken, seen = [], [], [], []
    for t in times:
        frac = (t - times[0]) / HISTORY_S
        total += _rate(frac) * STEP_S
        served.append(
            f'vllm:request_success_total{{namespace="llm",model_name="{MODEL}",pod="vllm-old",'
            f'instance="old:8000",job="vllm-old",finished_reason="stop"}} {total:.1f} {t:.3f}'
        )
        healthy.append(
            f'prescaler_desired_replicas{{namespace="llm",scaledobject="healthy",job="scaler"}} '
            f"{math.ceil(_rate(frac) / 1.5)} {t:.3f}"
        )
        broken.append(
            f'prescaler_desired_replicas{{namespace="llm",scaledobject="broken",job="scaler"}} '
            f"1 {t:.3f}"
        )
        # the demand each object's scaler read: the fleet's, and nothing for the broken one
        for name, value in (("healthy", _rate(frac)), ("broken", 0.0)):
            seen.append(
                f'prescaler_demand{{namespace="llm",scaledobject="{name}",job="scaler",'
                f'signal="requests_per_s"}} {value:.3f} {t:.3f}'
            )
    lines = ["# TYPE vllm:request_success_total gauge", *served]
    lines += ["# TYPE prescaler_desired_replicas gauge", *healthy, *broken]
    lines += ["# TYPE prescaler_demand gauge", *seen, "# EOF"]
    path.write_text("\n".join(lines) + "\n")


def scaledobject(
    name: str, namespace: str, prometheus: str, scaler: str, model: str, queue: bool = False
) -> dict:
    so: dict[str, Any] = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": f"vllm-{name}"},
            "minReplicaCount": 1,
            "maxReplicaCount": 16,
            "triggers": [
                {
                    "type": "external",
                    "name": "prescaler",
                    "metricType": "AverageValue",
                    "metadata": {
                        "scalerAddress": scaler,
                        "prometheusAddress": prometheus,
                        "model": model,
                        "forecast": "off",
                        "minReplicas": "1",
                        "maxReplicas": "16",
                        "scaleDownStabilizationSeconds": "5",
                    },
                }
            ],
        },
    }
    if queue:  # the KEDA trigger the team had, with the same label
        query = f'sum(vllm:num_requests_waiting{{namespace="{namespace}",model_name="{model}"}})'
        so["spec"]["triggers"].append(
            {
                "type": "prometheus",
                "name": "queue",
                "metadata": {"serverAddress": prometheus, "query": query, "threshold": "3"},
            }
        )
    return so


@dataclass
class Loop:
    prom: PrometheusServer
    scaler: ScalerProcess
    files: dict[str, Path]
    stale_pod: FakeVllm
    workdir: Path

    @property
    def metrics_url(self) -> str:
        return f"http://{self.scaler.metrics_address}/metrics"

    def poll(self, name: str) -> float | None:
        """One KEDA poll of ``name``: its answer, None while UNAVAILABLE."""
        so = yaml.safe_load(self.files[name].read_text())
        trigger = so["spec"]["triggers"][0]
        ref = pb.ScaledObjectRef(
            name=name, namespace=so["metadata"]["namespace"], scalerMetadata=trigger["metadata"]
        )
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="prescaler-desired-replicas")
        with grpc.insecure_channel(self.scaler.address) as channel:
            try:
                got = pb_grpc.ExternalScalerStub(channel).GetMetrics(request, timeout=5.0)
            except grpc.RpcError:
                return None
        return float(got.metricValues[0].metricValueFloat) if got.metricValues else None

    def scraped(self, namespace: str, name: str) -> tuple[float | None, float]:
        """The object's ``prescaler_desired_replicas`` and its decisions so far."""
        found = read_scaler_metrics(read_url(self.metrics_url, 5.0), namespace, name)
        return found.desired, sum(found.decisions.values())

    def reasons(self, namespace: str, name: str) -> dict[str, float]:
        text = read_url(self.metrics_url, 5.0)
        return dict(read_scaler_metrics(text, namespace, name).decisions)

    def doctor(self, name: str, *extra: str) -> list[str]:
        return [
            "doctor",
            str(self.files[name]),
            "--prometheus",
            self.prom.url,
            "--scaler",
            self.scaler.address,
            "--scaler-metrics",
            self.metrics_url,
            "--settle-seconds",
            "3",
            "--rate-window-seconds",
            "4",
            *extra,
        ]


def _wait(what: str, check: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    root = tmp_path_factory.mktemp("doctor")
    end = math.floor(time.time() / 60) * 60 - 60
    history = root / "history.om.txt"
    _history(history, end)
    prom_dir = root / "prom"
    prom_dir.mkdir()
    backfill_openmetrics(history, prom_dir / "data")

    def engine() -> Engine:
        per_second = {"success": 1.0, "prompt": 200.0, "generation": 100.0}
        return Engine(running=2.0, kv=0.3, per_second=per_second)

    pods = [FakeVllm(model=MODEL, engines=[engine()]).start() for _ in range(3)]
    scaler = ScalerProcess(root, ["--refresh-seconds", "1", "--rate-window-seconds", "4"])
    targets = [
        Target(pods[0].address, {"namespace": "llm", "pod": "vllm-a"}),
        Target(pods[1].address, {"namespace": "llm", "pod": "vllm-b"}),
        Target(pods[2].address, {"namespace": "stale", "pod": "vllm-c"}),
        Target(scaler.metrics_address, {"job_kind": "scaler"}),
    ]
    prom = PrometheusServer(targets, workdir=prom_dir)
    try:
        prom.start()
        scaler.start()
        prom.wait_for("vllm:num_requests_running", min_series=3)
        address = f"dns:///{scaler.address}"
        files = {}
        for name, ns, model in (
            ("healthy", "llm", MODEL),
            ("broken", "llm", "llama-3-8b"),
            ("stale", "stale", MODEL),
        ):
            files[name] = root / f"{name}.yaml"
            so = scaledobject(name, ns, prom.url, address, model, queue=name == "broken")
            files[name].write_text(yaml.safe_dump(so))
        state = Loop(prom, scaler, files, pods[2], root)
        for name in files:
            _wait(f"an answer for {name}", lambda n=name: state.poll(n) is not None)
        # the stale object's only pod stops answering its scrape: the scaler holds
        pods[2].mode = "refuse"

        def holding() -> bool:
            state.poll("stale")
            return state.reasons("stale", "stale").get("stale_hold", 0) > 0

        _wait("the scaler to hold the stale object", holding)
        yield state
    finally:
        scaler.stop()
        prom.stop()
        for pod in pods:
            pod.stop()


def _hpa(answer: float, replicas: int) -> dict:
    milli = int(answer / replicas * 1000)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "keda-hpa-healthy", "namespace": "llm"},
        "spec": {"minReplicas": 1, "maxReplicas": 16},
        "status": {
            "currentReplicas": replicas,
            "desiredReplicas": replicas,
            "currentMetrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "s0-prescaler-desired-replicas"},
                        "current": {"averageValue": f"{milli}m"},
                    },
                }
            ],
            "conditions": [
                {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
                {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange"},
            ],
        },
    }


def _lines(out: str, trigger: str = "prescaler") -> dict[str, str]:
    """check -> its line (the level first), for one trigger."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0] in ("OK", "WARN", "FAIL") and parts[2] == f"[{trigger}]:":
            found[parts[1]] = line
    return found


def test_healthy_loop_passes(loop: Loop, capsys: pytest.CaptureFixture[str]) -> None:
    answer = loop.poll("healthy")
    assert answer is not None and answer >= 1
    hpa = loop.workdir / "hpa.json"
    hpa.write_text(json.dumps({"kind": "List", "items": [_hpa(answer, 2)]}))
    code = main(loop.doctor("healthy", "--hpa", str(hpa)))
    out = capsys.readouterr().out
    lines = _lines(out)
    assert code == 0, out
    assert set(lines) == {"bounds", "series", "movement", "answer", "hpa", "max"}, out
    assert all(line.startswith("OK") for line in lines.values()), out
    assert "2 pod(s) (vllm-a, vllm-b)" in lines["series"]
    assert "from fresh data" in lines["answer"]
    # the history's demand ranged 1-4 req/s and the answer followed
    assert "demand ranged" in lines["movement"]
    assert "below maxReplicaCount 16" in lines["max"]


def test_broken_selector_fails_naming_the_label(
    loop: Loop, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(loop.doctor("broken"))
    out = capsys.readouterr().out
    lines = _lines(out)
    assert code == 1, out
    # the scaler itself answers from "fresh" data: only the series say why it is inert
    assert lines["answer"].startswith("OK"), out
    series = lines["series"]
    assert series.startswith("FAIL") and 'model_name="llama-3-8b" matches nothing' in series
    assert "set model to one of: llama" in series
    movement = lines["movement"]
    assert movement.startswith("FAIL") and "the scaler saw 0 req/s" in movement, out
    assert "namespace llm" in movement
    # the team's own KEDA trigger with the same label: read as 0, never scales
    queue = _lines(out, "queue")
    assert queue["series"].startswith("FAIL") and "reads that as 0" in queue["series"], out
    assert 'model_name="llama-3-8b"' in queue["series"]
    assert queue["movement"].startswith("FAIL") and "read nothing" in queue["movement"], out


def test_a_keda_query_with_several_series_fails_as_reading_too_much(
    loop: Loop, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unaggregated, the query returns one series per pod (two in namespace llm)."""
    so = yaml.safe_load(loop.files["healthy"].read_text())
    query = f'vllm:num_requests_running{{namespace="llm",model_name="{MODEL}"}}'
    so["spec"]["triggers"].append(
        {
            "type": "prometheus",
            "name": "running",
            "metadata": {"serverAddress": loop.prom.url, "query": query, "threshold": "3"},
        }
    )
    path = loop.workdir / "healthy-unaggregated.yaml"
    path.write_text(yaml.safe_dump(so))
    loop.files["healthy-unaggregated"] = path
    code = main(loop.doctor("healthy-unaggregated"))
    out = capsys.readouterr().out
    assert code == 1, out
    running = _lines(out, "running")
    assert running["series"].startswith("FAIL") and "returns 2 series" in running["series"], out
    movement = running["movement"]
    assert movement.startswith("FAIL") and "2 series" in movement, out
    assert "read nothing" not in movement and "read too much" in movement, out


def test_stale_target_fails_naming_the_hold(loop: Loop, capsys: pytest.CaptureFixture[str]) -> None:
    loop.poll("stale")
    code = main(loop.doctor("stale"))
    out = capsys.readouterr().out
    lines = _lines(out)
    assert code == 1, out
    assert lines["answer"].startswith("FAIL") and "stale_hold" in lines["answer"], out
    series = lines["series"]
    assert series.startswith("FAIL") and "fail their scrape" in series, out
    assert loop.stale_pod.address in series


def test_doctor_leaves_the_live_tracker_as_it_was(
    loop: Loop, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file whose minReplicas (9) differs from what KEDA sends (1): if the
    doctor asked the scaler over gRPC, the scaler would take the file's
    settings and answer at least 9 from its next decision on."""
    so = yaml.safe_load(loop.files["healthy"].read_text())
    so["spec"]["minReplicaCount"] = 9
    so["spec"]["triggers"][0]["metadata"]["minReplicas"] = "9"
    edited = loop.workdir / "healthy-edited.yaml"
    edited.write_text(yaml.safe_dump(so))
    loop.files["healthy-edited"] = edited
    loop.poll("healthy")
    desired, _ = loop.scraped("llm", "healthy")
    assert desired is not None and desired < 9
    warming = loop.reasons("llm", "healthy").get("warming_up", 0)
    main(loop.doctor("healthy-edited"))
    out = capsys.readouterr().out
    # the answer is the scaler's own (from /metrics), below the file's minReplicas
    assert _lines(out)["answer"].startswith("OK"), out
    assert _lines(out)["bounds"].startswith("OK"), out
    _, decided = loop.scraped("llm", "healthy")
    _wait("two more decisions", lambda: loop.scraped("llm", "healthy")[1] >= decided + 2)
    after, _ = loop.scraped("llm", "healthy")
    assert after is not None and after < 9, f"the doctor changed the live tracker: {after}"
    assert loop.reasons("llm", "healthy").get("warming_up", 0) == warming


def test_unreachable_scaler_fails_with_the_fix(
    loop: Loop, capsys: pytest.CaptureFixture[str]
) -> None:
    args = loop.doctor("healthy")
    args[args.index("--scaler-metrics") + 1] = "http://127.0.0.1:9/metrics"
    code = main(args)
    out = capsys.readouterr().out
    assert code == 1
    assert "cannot read the scaler" in _lines(out)["answer"]
    assert "port-forward" in _lines(out)["answer"]


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "so.yaml"
    path.write_text("kind: Deployment\nmetadata: {name: x}\n")
    code = main(["doctor", str(path), "--prometheus", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"prescaler doctor: {path}: no ScaledObject in the file"


def test_flag_out_of_range_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "so.yaml"
    path.write_text("kind: ScaledObject\n")
    code = main(["doctor", str(path), "--settle-seconds", "0"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "prescaler doctor: --settle-seconds must be > 0"
