"""``prescaler hindsight``: the bound for a fleet's recorded demand, as a series
Prometheus can hold beside the live fleet's (and the fleet dashboard draws)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from prescaler.cli import main as prescaler_main
from simulations.hindsight_cli import SERIES, openmetrics

HISTORY_S = 3 * 3600
STEP_S = 30.0


def test_the_series_are_openmetrics_with_a_timestamp_per_step() -> None:
    text = openmetrics(
        {"a": [1, 2], "b": [0]}, 1_700_000_000.0, 15.0, {"scaledobject": 'x"y', "namespace": "n"}
    )
    lines = text.splitlines()
    assert lines[0] == "# TYPE a gauge" and lines[-1] == "# EOF"
    assert lines[1] == 'a{namespace="n",scaledobject="x\\"y"} 1 1700000000.000'
    assert lines[2].endswith(" 2 1700000015.000")
    assert lines[3:5] == [
        "# TYPE b gauge",
        'b{namespace="n",scaledobject="x\\"y"} 0 1700000000.000',
    ]


def test_one_source_is_required(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = prescaler_main(["hindsight", "--namespace", "n", "--scaledobject", "s",
                           "--out", str(tmp_path / "x.om")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["prescaler hindsight: give TRACE or --prometheus URL (one of them)"]


def test_a_trace_at_a_stated_factor_is_planned_without_replay(tmp_path: Path) -> None:
    """``--factor`` plans from the trace alone; the series start at ``--trace-start``."""
    trace = tmp_path / "counts.csv"
    rows = [f"{60 * i},{c}" for i, c in enumerate([120, 600, 600, 60, 0, 0, 300, 300])]
    trace.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    out, summary = tmp_path / "s.om", tmp_path / "s.json"
    code = prescaler_main(["hindsight", str(trace), "--trace-start", "1700000000", "--factor",
                           "1", "--namespace", "llm", "--scaledobject", "vllm", "--out",
                           str(out), "--json", str(summary)])  # fmt: skip
    assert code == 0
    doc = json.loads(summary.read_text())
    assert doc["calibrated"] is False and doc["capacity_factor"] == 1.0
    lines = out.read_text().splitlines()
    first = next(line for line in lines if line.startswith(SERIES[0] + "{"))
    assert first.endswith(" 1700000000.000")
    assert len([ln for ln in lines if ln.startswith(SERIES[0] + "{")]) == doc["samples"]


def _history(path: Path, end_s: float, rps: float) -> None:
    """A pod's vLLM counters rising at ``rps`` requests a second (prompts in
    (100, 200], outputs in (20, 50]), one sample every ``STEP_S``."""
    times = np.arange(end_s - HISTORY_S, end_s, STEP_S)
    labels = 'model_name="m",namespace="llm",pod="a"'
    n = (times - times[0]) * rps
    lines = ["# TYPE vllm:request_success_total gauge"]
    lines += [f'vllm:request_success_total{{{labels},finished_reason="stop"}} {v:.1f} {t:.3f}'
              for t, v in zip(times, n, strict=True)]  # fmt: skip
    for metric, top in (("vllm:request_prompt_tokens", 200.0),
                        ("vllm:request_generation_tokens", 50.0)):  # fmt: skip
        lines.append(f"# TYPE {metric}_bucket gauge")
        for le in (20.0, 50.0, 100.0, 200.0, math.inf):
            le_text = "+Inf" if math.isinf(le) else f"{le:.1f}"
            lines += [f'{metric}_bucket{{{labels},le="{le_text}"}} {(v if le >= top else 0):.1f} '
                      f"{t:.3f}" for t, v in zip(times, n, strict=True)]  # fmt: skip
    # the live fleet's Ready replicas, as the scaler exports them
    lines.append("# TYPE prescaler_ready_replicas gauge")
    lines += [f'prescaler_ready_replicas{{namespace="llm",scaledobject="vllm"}} 6 {t:.3f}'
              for t in times]  # fmt: skip
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


def _dashboard_ratio(namespace: str, scaledobject: str, range_: str) -> str:
    """The fleet dashboard's "Live fleet / hindsight schedule" query, as Grafana sends it."""
    board = Path(__file__).parents[2] / "manifests" / "grafana" / "dashboards" / "fleet.json"
    panels = json.loads(board.read_text())["panels"]
    panels += [q for p in panels for q in p.get("panels", [])]
    (expr,) = [
        t["expr"]
        for p in panels
        if p.get("title") == "Live fleet / hindsight schedule"
        for t in p.get("targets", [])
    ]
    for name, value in (("$namespace", namespace), ("$scaledobject", scaledobject),
                        ("$__range", range_), ("$__interval", "60s")):  # fmt: skip
        expr = expr.replace(name, value)
    return str(expr)


@pytest.mark.integration
def test_the_schedule_is_backfilled_beside_the_live_fleet(tmp_path: Path) -> None:
    """Against a real Prometheus holding a fleet's vLLM history: the command
    reads it, calibrates the schedule by replay (it meets its target), and
    its file, backfilled with promtool, answers the fleet dashboard's
    queries: the schedule at a step is what the command computed, and the
    live fleet over the range is a multiple of it."""
    from tests.support.prometheus import backfill_openmetrics, running_prometheus

    end = math.floor(time.time() / 60) * 60 - 120
    om = tmp_path / "history.om.txt"
    _history(om, end, rps=3.0)
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    backfill_openmetrics(om, prom_dir / "data")
    out, summary = tmp_path / "schedule.om", tmp_path / "schedule.json"
    with running_prometheus([], workdir=prom_dir) as prom:
        code = prescaler_main([
            "hindsight", "--prometheus", prom.url, "--selector", "namespace=llm",
            "--since", "40m", "--end", str(end), "--namespace", "llm", "--scaledobject", "vllm",
            "--out", str(out), "--json", str(summary),
        ])  # fmt: skip
        assert code == 0
        doc = json.loads(summary.read_text())
        assert doc["calibrated"] and doc["stated_lead"]["met"]
        assert doc["slo_attainment"] >= doc["target_attainment"]
        prom.stop()
        backfill_openmetrics(out, prom_dir / "data")
        prom.start()
        values = {}
        for line in out.read_text().splitlines():
            if line.startswith(SERIES[0] + "{"):
                _, value, stamp = line.rsplit(" ", 2)
                values[float(stamp)] = float(value)
        at = sorted(values)[len(values) // 2]
        got = prom.api("query", query=f'{SERIES[0]}{{scaledobject="vllm"}}', time=f"{at:.3f}")
        assert float(got["result"][0]["value"][1]) == values[at]
        ratio = prom.api(
            "query", query=_dashboard_ratio("llm", "vllm", "30m"), time=f"{end - 300:.3f}"
        )
    assert ratio["result"] and float(ratio["result"][0]["value"][1]) > 0


@pytest.mark.integration
def test_a_history_shorter_than_since_is_stamped_from_its_own_start(tmp_path: Path) -> None:
    """Prometheus holds 3 h and ``--since`` asks for 5 h: the series begin where
    the fleet's history does (its first rate), not 5 h before ``--end``, so
    the backfill lines up with the live fleet's series."""
    from tests.support.prometheus import backfill_openmetrics, running_prometheus

    end = math.floor(time.time() / 60) * 60 - 120
    om = tmp_path / "history.om.txt"
    _history(om, end, rps=3.0)
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    backfill_openmetrics(om, prom_dir / "data")
    out = tmp_path / "schedule.om"
    with running_prometheus([], workdir=prom_dir) as prom:
        code = prescaler_main([
            "hindsight", "--prometheus", prom.url, "--selector", "namespace=llm",
            "--since", "5h", "--end", str(end), "--factor", "1", "--namespace", "llm",
            "--scaledobject", "vllm", "--out", str(out),
        ])  # fmt: skip
    assert code == 0
    stamps = sorted(
        float(line.rsplit(" ", 1)[1])
        for line in out.read_text().splitlines()
        if line.startswith(SERIES[0] + "{")
    )
    first_sample = end - HISTORY_S
    # the first rate needs two samples in its window: a step or two after the first sample
    assert first_sample <= stamps[0] <= first_sample + 300, stamps[0] - first_sample
    # and end within the trace's last minute (its resolution) of --end
    assert end - 60 <= stamps[-1] <= end + 60, stamps[-1] - end


def test_max_replicas_below_one_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        prescaler_main(["hindsight", "--prometheus", "http://127.0.0.1:9",
                        "--max-replicas", "0", "--namespace", "llm", "--scaledobject", "vllm",
                        "--out", str(tmp_path / "x.om")])  # fmt: skip
    assert done.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--max-replicas must be >= 1, got 0" in lines[0], lines
