"""A trace from a fleet's own vLLM metrics: pure conversion, and a real Prometheus.

The integration test backfills six hours of vLLM history into a real
Prometheus with ``promtool tsdb create-blocks-from openmetrics`` (as the
scaler bench does), one pod with V1 labels (``engine``) and one with V0's,
and checks that ``prescaler tune --prometheus`` reads back the arrival
rate and token lengths that were written.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.readers import read_series
from simulations.fleet_prometheus import fetch_fleet_trace, parse_since, write_fleet_trace
from simulations.fleet_trace import (
    bucket_counts,
    build_fleet_trace,
    histogram_query,
    parse_labels,
    sample_buckets,
)
from simulations.traffic import TrafficOptions, load_workload

# vLLM's request_prompt_tokens / request_generation_tokens buckets (1-2-5 up to max_model_len)
BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)


def test_parse_labels_accepts_pairs_and_refuses_promql() -> None:
    """--selector is label=value pairs turned into escaped exact matchers;
    anything that could smuggle PromQL in is an error (Prometheus data model:
    label names match [a-zA-Z_][a-zA-Z0-9_]*, __ names are reserved)."""
    assert parse_labels('namespace=llm, model_name="m"') == {"namespace": "llm", "model_name": "m"}
    assert parse_labels("") == {}
    q = histogram_query("vllm:request_prompt_tokens", {"pod": 'a"}or vector(1)#'}, 60)
    assert 'pod="a\\"}or vector(1)#"' in q
    for bad in ("namespace", "__name__=x", "a b=c", "x=1,x=2", "job=~vllm"):
        with pytest.raises(ValueError):
            parse_labels(bad)


def test_bucket_counts_difference_the_cumulative_buckets() -> None:
    """Prometheus histogram buckets are cumulative (le); the per-bucket counts
    are their differences, series with one le (V0 and V1 pods) summed."""
    res = [
        {"metric": {"le": "10"}, "value": [0, "3"]},
        {"metric": {"le": "100"}, "value": [0, "5"]},
        {"metric": {"le": "+Inf"}, "value": [0, "6"]},
        {"metric": {"le": "10"}, "value": [0, "1"]},
    ]
    assert bucket_counts(res) == [(10.0, 4.0), (100.0, 1.0), (math.inf, 1.0)]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1000), min_size=len(BOUNDS) + 1, max_size=len(BOUNDS) + 1))
def test_samples_fall_inside_observed_buckets(counts: list[float]) -> None:
    """A drawn length lies in a bucket that held observations (the +Inf bucket
    up to twice the last bound), and is an integer >= 1."""
    buckets = [*zip(BOUNDS, counts[:-1], strict=True), (math.inf, counts[-1])]
    rng = np.random.default_rng(0)
    if sum(counts) <= 0:
        with pytest.raises(ValueError):
            sample_buckets(buckets, 10, rng)
        return
    x = sample_buckets(buckets, 500, rng)
    assert x.min() >= 1 and x.max() <= 2 * BOUNDS[-1]
    edges = (0.0, *BOUNDS, 2 * BOUNDS[-1])
    for v in x.tolist():
        k = next(i for i in range(len(edges) - 1) if edges[i] < v <= edges[i + 1])
        assert counts[k] > 0


def test_fleet_trace_files_load_as_a_workload(tmp_path: Path) -> None:
    """The two CSVs are the per-minute count layout and the Azure token layout
    that forecasting.readers detects; requests per minute are rate x step."""
    rate = np.full(120, 2.0)  # 2 req/s sampled every 30 s for an hour
    rate[10] = np.nan  # a gap: no requests counted there
    buckets = [(100.0, 5.0), (1000.0, 5.0), (math.inf, 0.0)]
    fleet = build_fleet_trace(rate, 30.0, buckets, [(50.0, 1.0), (math.inf, 0.0)], samples=500)
    counts, tokens = write_fleet_trace(fleet, tmp_path, "fleet")
    series = read_series(counts)
    assert fleet.minutes == 60 and series.step_s == 60.0
    assert fleet.counts_csv.splitlines()[1:3] == ["0,120.000", "60,120.000"]
    assert series.values[0] == 2.0 and series.values[5] == 1.0  # the reader gives req/s
    w = load_workload(counts, TrafficOptions(tokens_from=tokens, seed=1))
    assert w.prompt_tokens.max() <= 1000 and w.output_tokens.max() <= 50
    assert abs(len(w) - fleet.requests) < 5 * math.sqrt(fleet.requests)


@pytest.mark.parametrize(("text", "seconds"), [("7d", 604800), ("36h", 129600), ("90", 90)])
def test_parse_since(text: str, seconds: float) -> None:
    """--since takes Prometheus-style durations."""
    assert parse_since(text) == seconds


# ------------------------------------------------------------ integration
HISTORY_S = 6 * 3600
STEP_S = 30.0


def _history(path: Path, end_s: float) -> tuple[float, float, float]:
    """OpenMetrics history of two pods (V1 labels with ``engine``, V0 without):
    success counters rising at 1.5 and 0.5 req/s, token histograms with
    prompts in (100, 200] and outputs in (20, 50]. Returns (rate, prompt
    bucket upper, generation bucket upper)."""
    times = np.arange(end_s - HISTORY_S, end_s, STEP_S)
    pods = [('engine="0",model_name="m",namespace="llm",pod="a"', 1.5),
            ('model_name="m",namespace="llm",pod="b"', 0.5)]  # fmt: skip
    fams: dict[str, list[str]] = {}
    for labels, rps in pods:
        n = (times - times[0]) * rps
        fams.setdefault("vllm:request_success_total", []).extend(
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {v:.1f} {t:.3f}'
            for t, v in zip(times, n, strict=True)
        )
        for metric, top in (("vllm:request_prompt_tokens", 200.0),
                            ("vllm:request_generation_tokens", 50.0)):  # fmt: skip
            for le in (*BOUNDS, math.inf):
                le_text = "+Inf" if math.isinf(le) else f"{le:.1f}"
                fams.setdefault(f"{metric}_bucket", []).extend(
                    f'{metric}_bucket{{{labels},le="{le_text}"}} {(v if le >= top else 0):.1f} '
                    f"{t:.3f}"
                    for t, v in zip(times, n, strict=True)
                )
    lines = []
    for name, samples in fams.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(samples)
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")
    return 2.0, 200.0, 50.0


@pytest.mark.integration
def test_tune_reads_a_real_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Against a real Prometheus holding backfilled vLLM history (both metric
    generations): the arrival rate read back is the counters' slope, token
    lengths come from the histograms' buckets, and `prescaler tune
    --prometheus` tunes on it end to end (Prometheus HTTP API query_range and
    query; promtool tsdb create-blocks-from openmetrics)."""
    from tests.support.prometheus import backfill_openmetrics, running_prometheus

    end = math.floor(time.time() / 60) * 60 - 120
    om = tmp_path / "history.om.txt"
    rate, p_top, g_top = _history(om, end)
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    backfill_openmetrics(om, prom_dir / "data")
    with running_prometheus([], workdir=prom_dir) as prom:
        fleet = fetch_fleet_trace(
            prom.url, {"namespace": "llm"}, since_s=4 * 3600, end_s=end, step_s=60, seed=0
        )
        counts, tokens = write_fleet_trace(fleet, tmp_path / "fleet", "fleet")
        series = read_series(counts)
        inner = series.values[5:-5]
        assert np.allclose(inner, rate, rtol=0.02), inner[:5]  # req/s
        w = load_workload(counts, TrafficOptions(tokens_from=tokens))
        assert w.prompt_tokens.min() > 100 and w.prompt_tokens.max() <= p_top
        assert w.output_tokens.min() > 20 and w.output_tokens.max() <= g_top
        with pytest.raises(ValueError, match="no vllm:request_success_total"):
            fetch_fleet_trace(prom.url, {"namespace": "other"}, since_s=3600, end_s=end)

        from simulations.tune.cli import main

        out = tmp_path / "tune.json"
        code = main([
            "--prometheus", prom.url, "--selector", "namespace=llm", "--since", "1h",
            "--duration", "1200", "--holdout-seeds", "1", "--trials", "2", "--target", "0.5",
            "--quiet",
            "--storage", f"sqlite:///{tmp_path / 's.db'}", "--json", str(out),
        ])  # fmt: skip
    assert code == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["trials"] == 2 and doc["trace"].startswith("fleet")


def test_counters_that_never_rose_say_how_long_the_history_is() -> None:
    """No traffic in the span read is said as such, with the span: "the
    fleet served no requests" used to be all it said when the history was
    only a few minutes long."""
    buckets = [(100.0, 5.0), (math.inf, 0.0)]
    with pytest.raises(ValueError) as err:
        build_fleet_trace(np.zeros(6), 30.0, buckets, buckets)
    assert "cover 3 minutes" in str(err.value) and "never rose" in str(err.value)


def _flat_history(path: Path, times: np.ndarray, value: float) -> None:
    """vLLM's request counter and token histograms, each held at ``value``."""
    labels = 'model_name="m",namespace="llm",pod="a"'
    lines = ["# TYPE vllm:request_success_total gauge"]
    lines += [
        f'vllm:request_success_total{{{labels},finished_reason="stop"}} {value:.1f} {t:.3f}'
        for t in times
    ]
    for metric in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens"):
        lines.append(f"# TYPE {metric}_bucket gauge")
        for le in ("100.0", "+Inf"):
            lines += [f'{metric}_bucket{{{labels},le="{le}"}} {value:.1f} {t:.3f}' for t in times]
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.integration
def test_a_short_history_is_named_as_the_cause(tmp_path: Path) -> None:
    """Against a real Prometheus: one sample of the counters (too few for a
    rate) and ten minutes of counters that never rose are each told apart
    from "no such series", with what was found."""
    from tests.support.prometheus import backfill_openmetrics, running_prometheus

    end = math.floor(time.time() / 60) * 60 - 120
    om = tmp_path / "h.om.txt"
    _flat_history(om, np.array([end - 600.0]), 5.0)  # one scrape, ten minutes ago
    other = tmp_path / "flat.om.txt"
    _flat_history(other, np.arange(end - 600.0, end, 15.0) + 0.5, 7.0)
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    # the flat counters on another pod label, so each case is selected apart
    other.write_text(other.read_text().replace('pod="a"', 'pod="b"'))
    backfill_openmetrics(om, prom_dir / "data")
    backfill_openmetrics(other, prom_dir / "data")
    with running_prometheus([], workdir=prom_dir) as prom:
        with pytest.raises(ValueError, match=r"1 sample\(s\).*too few.*too short"):
            fetch_fleet_trace(prom.url, {"pod": "a"}, since_s=3600, end_s=end)
        with pytest.raises(ValueError, match=r"cover \d+ minutes here and never rose"):
            fetch_fleet_trace(prom.url, {"pod": "b"}, since_s=3600, end_s=end)
        with pytest.raises(ValueError, match="no vllm:request_success_total series match"):
            fetch_fleet_trace(prom.url, {"pod": "c"}, since_s=3600, end_s=end)
