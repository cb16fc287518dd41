"""The example ScaledObjects shipped under simulations/data/scaledobjects run
through `prescaler simulate --scaledobject` on the shipped trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prescaler.cli import main
from simulations.autoscaling.scaledobject import load_scaledobject
from simulations.traffic import DEFAULT_TOKENS_TRACE

EXAMPLES = Path(__file__).resolve().parents[3] / "simulations" / "data" / "scaledobjects"


def test_examples_parse_with_the_triggers_they_advertise() -> None:
    """queue + KV cache: two prometheus metrics (AverageValue 3, Value 0.8);
    scale to zero: the gateway rate and a cron trigger, minReplicaCount 0."""
    kv = load_scaledobject(EXAMPLES / "queue-and-kv-cache.yaml")
    assert [t.name for t in kv.triggers] == ["queue", "kv"]
    assert [(m.target_type, m.target) for m in kv.hpa.metrics] == [
        ("AverageValue", 3.0),
        ("Value", 0.8),
    ]
    zero = load_scaledobject(EXAMPLES / "scale-to-zero.yaml")
    assert [t.kind for t in zero.triggers] == ["prometheus", "cron"]
    assert zero.keda.min_replica_count == 0
    cron = zero.triggers[1].cron
    assert cron is not None and cron.inside(0.0)  # a Thursday, 10:15 in Los Angeles


@pytest.mark.parametrize("name", ["queue-and-kv-cache", "scale-to-zero"])
def test_example_runs_through_prescaler_simulate(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = EXAMPLES / f"{name}.yaml"
    policy = load_scaledobject(path).name
    out = tmp_path / "s.json"
    code = main(
        [
            "simulate",
            str(DEFAULT_TOKENS_TRACE),
            "--policy",
            "oracle",
            "--duration",
            "600",
            "--quiet",
            "--scaledobject",
            str(path),
            "--json",
            str(out),
        ]
    )
    assert code == 0
    assert policy in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == ["oracle", policy]
    assert doc["policies"][policy]["requests_total"] == doc["requests"]
    summary = doc["policies"][policy]
    assert summary["completed"] + summary["timed_out"] + summary["rejected"] == doc["requests"]
    assert summary["max_replicas"] >= 1
