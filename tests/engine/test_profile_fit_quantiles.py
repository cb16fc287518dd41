"""The /metrics fit matches the median and p90 of TTFT and ITL where the histogram's
buckets pin them, beside the means: on pages the engine made from a known profile,
the quantile targets are reported and the fit still recovers the profile."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from engine.metrics_reader import write_pages
from engine.metrics_windows import LoadWindow, histogram_quantile, load_windows
from engine.profile_fit import ProfileFit
from engine.profile_fit_measurements import fit_to_measurements
from engine.profile_fit_windows import MAX_BUCKET_RATIO, window_groups
from engine.profiles import get_profile
from prescaler.cli import main
from tests.engine.profile_fit_truth import BASE, TRUE_HARDWARE, true_profile
from tests.engine.synthetic_vllm import synthetic_pages

PHASES: list[tuple[int, float]] = [(1, 40), (4, 40), (16, 40)]


@pytest.fixture(scope="module")
def windows() -> list[LoadWindow]:
    truth = true_profile().with_vllm(num_gpu_blocks=2000)
    pages = synthetic_pages(truth, PHASES, prompt_tokens=512, output_tokens=128)
    return load_windows(pages, min_window_s=10)[0]


@pytest.fixture(scope="module")
def fit(windows: list[LoadWindow]) -> ProfileFit:
    return fit_to_measurements(get_profile(BASE), windows=windows)


def test_histogram_quantile_interpolates_as_prometheus_does() -> None:
    """Linear inside the bucket holding the rank; an open bucket (from 0, or to +Inf)
    gives nothing rather than a guess."""
    buckets = ((0.01, 0.0), (0.02, 40.0), (0.04, 80.0), (float("inf"), 100.0))
    assert histogram_quantile(buckets, 0.5) == pytest.approx((0.025, 0.02, 0.04))
    assert histogram_quantile(buckets, 0.2) == pytest.approx((0.015, 0.01, 0.02))
    assert histogram_quantile(buckets, 0.9) is None  # in the +Inf bucket
    assert histogram_quantile(((0.01, 10.0), (0.02, 10.0)), 0.5) is None  # from 0
    assert histogram_quantile((), 0.5) is None


def test_the_quantiles_appear_with_their_buckets_and_are_finite(fit: ProfileFit) -> None:
    quantiles = [t for t in fit.targets if t.bucket is not None]
    names = {t.name.split("@")[0] for t in quantiles}
    assert {"p50_itl_s", "p90_itl_s", "p50_ttft_s", "p90_ttft_s"} <= names
    assert {t.name for t in fit.targets if t.name.startswith("mean_")}  # the means stay
    for t in quantiles:
        assert t.bucket is not None
        lower, upper = t.bucket
        assert 0 < lower <= t.measured <= upper <= MAX_BUCKET_RATIO * lower, t
        assert math.isfinite(t.base_model) and math.isfinite(t.fitted_model), t
        # the truth's own quantile lies in the bucket: the fitted one must too, nearly
        assert abs(t.miss) < 0.05, t
    assert not any(w.startswith("poor fit") for w in fit.warnings)


def test_a_fit_with_quantiles_still_recovers_the_truth(fit: ProfileFit) -> None:
    hw = fit.profile.hardware
    assert hw.eta_mem == pytest.approx(TRUE_HARDWARE["eta_mem"], rel=0.05)
    assert hw.eta_compute == pytest.approx(TRUE_HARDWARE["eta_compute"], rel=0.10)
    for t in fit.targets:
        if t.bucket is None:
            assert abs(t.fitted_error) < 0.10, t


def test_too_few_observations_or_too_wide_a_bucket_match_no_quantile(
    windows: list[LoadWindow],
) -> None:
    """A histogram of a handful of requests, or one whose buckets span a factor of
    ten, says too little about a quantile: only the means are matched."""
    coarse = tuple((u, c) for u, c in windows[0].itl_buckets if u in (0.01, 0.1, float("inf")))
    wide = [dataclasses.replace(w, itl_buckets=coarse, ttft_buckets=()) for w in windows[:1]]
    assert [g.quantiles for g in window_groups(wide)] == [()]
    few = [
        dataclasses.replace(
            w, ttft_buckets=(), itl_buckets=tuple((u, min(c, 10.0)) for u, c in w.itl_buckets)
        )
        for w in windows[:1]
    ]
    assert [g.quantiles for g in window_groups(few)] == [()]


def test_the_cli_report_carries_the_buckets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = true_profile().with_vllm(num_gpu_blocks=2000)
    pages = synthetic_pages(truth, [(4, 30)], prompt_tokens=512, output_tokens=128)
    saved = write_pages(pages, tmp_path / "pages.jsonl")
    argv = ["engine", "fit-profile", "--base", BASE, "--metrics-pages", str(saved),
            "--out", str(tmp_path / "f.yaml")]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    quantiles = [t for t in report["targets"] if "bucket" in t]
    assert any(t["name"].startswith("p50_itl_s@4x") for t in quantiles)
    for t in quantiles:
        assert t["bucket"][0] <= t["measured"] <= t["bucket"][1]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "p50_itl_s@4x" in text and "[bucket " in text
