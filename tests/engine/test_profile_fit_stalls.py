"""Reading a server's stalls from benchmark runs' tails (``engine.profile_fit_stalls``),
through ``prescaler engine fit-profile`` on data the engine made from a known truth."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from engine.bench_result import BenchMeasurement
from engine.percentile import percentile
from engine.profile_files import read_profile_file
from engine.profile_fit_stalls import P99_ONLY_CHANCE, admission_stalls, starting_stalls
from engine.profile_types import EngineStalls
from engine.serving_replay import ServingLoad, replay_load
from tests.engine.profile_fit_truth import BASE, BENCH_LOAD, true_profile
from tests.engine.synthetic_vllm import bench_files
from tests.support.cli_run import run_cli


def _run_with(median: float, p90: float, p99: float) -> BenchMeasurement:
    return BenchMeasurement(
        load=BENCH_LOAD,
        median_ttft_s=median,
        median_itl_s=0.01,
        output_throughput=100.0,
        p90_ttft_s=p90,
        p99_ttft_s=p99,
    )


def test_an_exponential_ttft_tail_gives_back_its_chance_and_mean() -> None:
    """c e^(-x / D) past the median: p90 and p99 read back c and D exactly."""
    chance, mean = 0.3, 0.2
    x90, x99 = mean * math.log(chance / 0.1), mean * math.log(chance / 0.01)
    got = admission_stalls([_run_with(0.05, 0.05 + x90, 0.05 + x99)])
    assert got == pytest.approx((chance, mean))
    # no tail past the median: no stall on admission; a p90 at the median with a
    # p99 past it: one in ten at most, read from the p99
    assert admission_stalls([_run_with(0.05, 0.05, 0.05)]) == (0.0, 0.0)
    chance, mean = admission_stalls([_run_with(0.05, 0.05, 0.06)])
    assert chance == P99_ONLY_CHANCE and mean == pytest.approx(0.01 / math.log(10.0), rel=1e-3)
    # a p99 alone (vllm bench serve's default percentiles): one admission in ten
    chance, mean = admission_stalls([dataclasses.replace(_run_with(1, 2, 3), p90_ttft_s=None)])
    assert chance == P99_ONLY_CHANCE and mean == pytest.approx(2.0 / math.log(10.0), rel=1e-3)
    no_tails = dataclasses.replace(_run_with(1, 2, 3), p90_ttft_s=None, p99_ttft_s=None)
    assert admission_stalls([no_tails]) == (0.0, 0.0)


def test_a_bench_fit_reads_the_stalls_from_the_tails_and_predicts_another_load(
    tmp_path: Path,
) -> None:
    """A server that stalls (a fifth of its busy time, and one admission in five),
    seen by two ``vllm bench serve`` runs with their tails: the fit finds both
    kinds, says where from, and predicts a load it never saw (median ITL and
    throughput within 10 %; p90 TTFT, a tail of a few dozen requests, within 50 %)."""
    stalls = EngineStalls(share=0.2, mean_s=0.05, admit_chance=0.2, admit_mean_s=0.15)
    truth = dataclasses.replace(true_profile(), stalls=stalls)
    runs = bench_files(truth, tmp_path, 200, tails=True)
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, *runs, "--out", str(out), "--json"]
    )
    assert code == 0, stderr
    report = json.loads(stdout)
    found = {d["field"]: d for d in report["determined"]}
    assert 0.1 <= found["stalls.share"]["fitted"] <= 0.3
    assert "mean ITL" in found["stalls.share"]["source"]
    assert found["stalls.admit_chance"]["fitted"] > 0.05
    names = {t["name"] for t in report["targets"]}
    assert names >= {"p90_ttft_s@8x128+128#1", "mean_itl_s@8x1024+128#2"}
    fitted = read_profile_file(out)
    other = ServingLoad(300, 512, 128, max_concurrency=4)
    want, got = replay_load(truth, other), replay_load(fitted, other)
    assert want.median_itl_s is not None and got.median_itl_s is not None
    assert got.median_itl_s == pytest.approx(want.median_itl_s, rel=0.10)
    assert got.output_throughput == pytest.approx(want.output_throughput, rel=0.10)
    assert percentile(got.ttfts, 90) == pytest.approx(percentile(want.ttfts, 90), rel=0.5)


def test_default_percentiles_still_start_the_stalls_on_admission() -> None:
    """``vllm bench serve`` writes p99s but no p90 unless asked: the admission
    stalls start from the p99 alone rather than being left out."""
    run = dataclasses.replace(_run_with(0.05, 0.0, 0.25), p90_ttft_s=None, mean_itl_s=0.012)
    start = starting_stalls([run])
    assert start.admit_chance == P99_ONLY_CHANCE
    assert start.admit_mean_s == pytest.approx(0.2 / math.log(10.0), rel=1e-3)
    assert start.share == pytest.approx(1.0 - 0.01 / 0.012)
