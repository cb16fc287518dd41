"""The shipped ScaledObject at a cold start: one replica ready, about 2.5
requests/s arriving, every replica after the first minutes away. The queue
that builds while replicas start must not ask for the whole bound."""

from __future__ import annotations

import json
from pathlib import Path

from prescaler.cli import main
from simulations.traffic import DEFAULT_TOKENS_TRACE

SHIPPED = Path(__file__).resolve().parents[2] / "manifests/vllm/gpu/scaledobject.yaml"


def test_shipped_scaledobject_does_not_stampede_at_a_cold_start(tmp_path: Path) -> None:
    """Twenty minutes of the shipped trace at half its rate (2,998 requests),
    from one ready replica. The oracle (hindsight: the true peak over each
    start-up ahead) runs at most 5 replicas; asked for again at each poll while
    replicas started, the shipped trigger went 1, 8, 14, 16 (the bound) and
    averaged 11.3. Held to at most twice the oracle's peak and mean."""
    out = tmp_path / "cold.json"
    argv = [
        "simulate",
        str(DEFAULT_TOKENS_TRACE),
        "--policy",
        "oracle",
        "--scaledobject",
        str(SHIPPED),
        "--duration",
        "1200",
        "--rate-scale",
        "0.5",
        "--initial-replicas",
        "1",
        "--quiet",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    oracle, shipped = doc["policies"]["oracle"], doc["policies"]["vllm-llama3-8b"]
    assert doc["requests"] > 2500
    assert shipped["max_replicas"] <= 2 * oracle["max_replicas"], (shipped, oracle)
    assert shipped["mean_replicas"] <= 2 * oracle["mean_replicas"], (shipped, oracle)
    assert shipped["max_replicas"] < doc["max_replicas_bound"]
