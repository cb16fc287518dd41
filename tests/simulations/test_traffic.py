"""Workloads from traces, curves and synthetic shapes (simulations.traffic)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.readers import read_events, read_series
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, Workload, load_workload
from tests.support.synthetic_traffic import synthetic_workload, true_rate

DATA = Path(__file__).resolve().parents[1] / "forecasting" / "data"
AZURE = DATA / "azure_2023_code_head.csv"
BURSTGPT = DATA / "burstgpt_synthetic.csv"
MOONCAKE = DATA / "mooncake_head.jsonl"
SERVEGEN = DATA / "servegen_m-large_rate_head.csv"
PER_MINUTE = DATA / "azure_2024_coding_per_minute_head.csv"
COUNTS_10S = DATA / "azure_2024_coding_10s_head.csv"
PER_MINUTE_SYN = DATA / "per_minute_synthetic.csv"
PLAIN_RATE = DATA / "plain_rate_synthetic.csv"
PER_REQUEST = (AZURE, BURSTGPT, MOONCAKE)
CURVES = (SERVEGEN, PER_MINUTE, COUNTS_10S, PER_MINUTE_SYN, PLAIN_RATE)
# Keep curve workloads small: the ServeGen head is ~240 req/s for 50 hours.
CURVE_SCALE = {SERVEGEN: 0.001, PER_MINUTE: 0.05}


def _check(w: Workload) -> None:
    assert len(w) == w.arrival_s.size == w.prompt_tokens.size == w.output_tokens.size
    assert np.all(np.diff(w.arrival_s) >= 0)
    if len(w):
        assert w.arrival_s[0] >= 0 and w.arrival_s[-1] < w.duration_s
        assert w.prompt_tokens.min() >= 1 and w.output_tokens.min() >= 1
    assert w.prompt_tokens.dtype == np.int64 and w.output_tokens.dtype == np.int64


# --------------------------------------------------------------------------
# Per-request traces
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path", PER_REQUEST, ids=lambda p: p.name)
def test_per_request_trace_replays_as_recorded(path: Path) -> None:
    """A per-request trace (Azure/AzurePublicDataset, BurstGPT, kvcache-ai/Mooncake
    layouts) replays every request at its recorded time relative to the first,
    with its own token counts."""
    events = read_events(path)
    order = np.argsort(events.times_s, kind="stable")
    w = load_workload(path)
    _check(w)
    assert len(w) == events.times_s.size
    np.testing.assert_allclose(w.arrival_s, events.times_s[order] - events.times_s[order[0]])
    np.testing.assert_array_equal(w.prompt_tokens, events.prompt_tokens[order].astype(np.int64))
    np.testing.assert_array_equal(w.output_tokens, events.output_tokens[order].astype(np.int64))
    assert w.duration_s == math.floor(w.arrival_s[-1]) + 1
    assert w.clamped_tokens == 0
    assert w.name == path.stem


def test_window_shifts_and_cuts_a_per_request_trace() -> None:
    """start_s drops what came before and moves the origin there; duration_s cuts
    the end (half-open window [start, start + duration))."""
    full = load_workload(AZURE)
    w = load_workload(AZURE, TrafficOptions(start_s=60.0, duration_s=100.0))
    inside = (full.arrival_s >= 60.0) & (full.arrival_s < 160.0)
    np.testing.assert_allclose(w.arrival_s, full.arrival_s[inside] - 60.0)
    np.testing.assert_array_equal(w.prompt_tokens, full.prompt_tokens[inside])
    assert w.duration_s == 100.0


def test_zero_tokens_are_raised_to_one_and_counted(tmp_path: Path) -> None:
    """A request with 0 prompt or output tokens is kept, with 1 token, and counted
    in clamped_tokens: nothing is dropped silently."""
    path = tmp_path / "azure_zero.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,100,0\n"
        "2023-11-16 18:17:04.5000000,0,0\n"
        "2023-11-16 18:17:05.0000000,50,7\n"
    )
    w = load_workload(path)
    assert len(w) == 3
    assert w.clamped_tokens == 3
    assert w.prompt_tokens.tolist() == [100, 1, 50]
    assert w.output_tokens.tolist() == [1, 1, 7]


def test_rate_scale_below_one_thins_a_trace() -> None:
    """rate_scale < 1 keeps each request independently with that probability
    (Bernoulli thinning of a point process), so the kept ones are a subset of
    the original arrivals with a binomial count."""
    full = load_workload(BURSTGPT)
    w = load_workload(BURSTGPT, TrafficOptions(rate_scale=0.3, seed=3))
    _check(w)
    n, p = len(full), 0.3
    assert abs(len(w) - n * p) < 5 * math.sqrt(n * p * (1 - p))
    assert np.all(np.isin(w.arrival_s, full.arrival_s))


def test_rate_scale_above_one_superposes_jittered_copies() -> None:
    """rate_scale > 1 superposes ceil(rate_scale) thinned copies: the count is
    about rate_scale times the original and extra copies are shifted by at most
    half the jitter window (1 s)."""
    full = load_workload(AZURE)
    w = load_workload(AZURE, TrafficOptions(rate_scale=2.5, seed=1))
    _check(w)
    n = len(full)
    mean, var = 2.5 * n, 3 * n * (2.5 / 3) * (1 - 2.5 / 3)
    assert abs(len(w) - mean) < 5 * math.sqrt(var) + 3  # + edge losses at the window ends
    gaps = np.abs(w.arrival_s[:, None] - full.arrival_s[None, :]).min(axis=1)
    assert gaps.max() <= 0.5 + 1e-9
    doubled = load_workload(AZURE, TrafficOptions(rate_scale=2.0, seed=1))
    assert abs(len(doubled) - 2 * n) <= 4  # whole copies; only jitter across the edges


def test_gamma_arrivals_are_refused_for_a_per_request_trace() -> None:
    """Gamma arrivals apply to curves; a per-request trace keeps its recorded times."""
    with pytest.raises(ValueError, match="recorded arrival times"):
        load_workload(AZURE, TrafficOptions(arrivals="gamma", cv=2.0))


# --------------------------------------------------------------------------
# Rate and count curves
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path", CURVES, ids=lambda p: p.name)
def test_curve_follows_its_rate(path: Path) -> None:
    """A rate or count curve (ServeGen rate, per-minute and 10-second counts,
    plain rate) gives as many arrivals as its rate integrates to, within
    Poisson bounds, over the whole file."""
    scale = CURVE_SCALE.get(path, 1.0)
    series = read_series(path)
    w = load_workload(path, TrafficOptions(rate_scale=scale, seed=5))
    _check(w)
    assert w.duration_s == pytest.approx(len(series) * series.step_s)
    expected = float(series.values.sum() * series.step_s * scale)
    assert abs(len(w) - expected) < 5 * math.sqrt(expected)


def test_poisson_counts_per_window_match_the_rate() -> None:
    """Poisson arrivals: a window of length L at rate r holds Poisson(r L)
    requests (any probability text, e.g. Ross, Introduction to Probability
    Models, ch. 5), so the per-window counts sit within their Poisson bounds
    and their index of dispersion is about 1."""
    series = read_series(PLAIN_RATE)
    w = load_workload(PLAIN_RATE, TrafficOptions(seed=11))
    step = series.step_s
    counts = np.bincount((w.arrival_s // step).astype(int), minlength=len(series))
    expected = series.values * step
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 1)
    dispersion = float(np.sum((counts - expected) ** 2 / expected) / len(series))
    assert 0.7 < dispersion < 1.4


def test_gamma_arrivals_are_burstier_with_the_same_mean() -> None:
    """A gamma renewal process with coefficient of variation cv has about
    cv^2 times the Poisson count variance over long windows (renewal CLT,
    Cox, Renewal Theory) while keeping the mean rate."""
    series = read_series(PLAIN_RATE)
    w = load_workload(PLAIN_RATE, TrafficOptions(seed=2, arrivals="gamma", cv=3.0))
    _check(w)
    step = series.step_s
    counts = np.bincount((w.arrival_s // step).astype(int), minlength=len(series))
    expected = series.values * step
    total = float(expected.sum())
    assert abs(len(w) - total) < 5 * 3.0 * math.sqrt(total)
    dispersion = float(np.sum((counts - expected) ** 2 / expected) / len(series))
    assert dispersion > 4.0
    low = load_workload(PLAIN_RATE, TrafficOptions(seed=2, arrivals="gamma", cv=0.3))
    counts = np.bincount((low.arrival_s // step).astype(int), minlength=len(series))
    assert float(np.sum((counts - expected) ** 2 / expected) / len(series)) < 0.5


def test_rate_scale_multiplies_a_curve() -> None:
    """For a curve, rate_scale multiplies the rate."""
    base = load_workload(PER_MINUTE_SYN, TrafficOptions(seed=4))
    big = load_workload(PER_MINUTE_SYN, TrafficOptions(seed=4, rate_scale=10.0))
    assert abs(len(big) - 10 * len(base)) < 6 * math.sqrt(10 * len(base)) + 10


def test_curve_window_cut_counts_only_the_window() -> None:
    """start_s and duration_s cut a curve mid-window: arrivals follow only the
    covered part of each window."""
    w = load_workload(PLAIN_RATE, TrafficOptions(seed=9, start_s=90.0, duration_s=600.0))
    _check(w)
    series = read_series(PLAIN_RATE)
    t = series.times_s
    lo, hi = np.maximum(t, 90.0), np.minimum(t + series.step_s, 690.0)
    expected = float(np.sum(series.values * np.clip(hi - lo, 0, None)))
    assert w.duration_s == 600.0
    assert abs(len(w) - expected) < 5 * math.sqrt(expected)


def test_curve_tokens_are_bootstrapped_from_tokens_from() -> None:
    """Without per-window means, a curve's token counts are drawn from the
    per-request trace tokens_from (pairs kept together)."""
    events = read_events(AZURE)
    w = load_workload(PER_MINUTE_SYN, TrafficOptions(seed=1, tokens_from=AZURE))
    pairs = set(
        zip(events.prompt_tokens.astype(int), events.output_tokens.astype(int), strict=True)
    )
    assert set(zip(w.prompt_tokens.tolist(), w.output_tokens.tolist(), strict=True)) <= pairs


def test_default_tokens_trace_is_shipped() -> None:
    """The default token source ships with the package (CC-BY-4.0 Azure conversation trace)."""
    assert DEFAULT_TOKENS_TRACE.is_file()
    assert DEFAULT_TOKENS_TRACE.read_text().startswith("TIMESTAMP,ContextTokens,GeneratedTokens")
    w = load_workload(PER_MINUTE_SYN, TrafficOptions(seed=1))
    _check(w)


def test_servegen_token_means_rescale_each_window(tmp_path: Path) -> None:
    """A ServeGen rate file with a ``<prefix>_tokens_<step>.csv`` beside it
    (alibaba/ServeGen layout) gets token counts whose mean follows that file's
    per-window means."""
    rate = tmp_path / "servegen_test_rate_10min.csv"
    shutil.copy(SERVEGEN, rate)
    (tmp_path / "servegen_test_tokens_6h.csv").write_text(
        "window_start_s,mean_input_tokens,mean_output_tokens\n0,300.0,50.0\n21600,2000.0,400.0\n"
    )
    w = load_workload(rate, TrafficOptions(seed=7, rate_scale=0.01, duration_s=43200.0))
    first = w.arrival_s < 21600
    assert first.sum() > 10_000 and (~first).sum() > 10_000
    assert w.prompt_tokens[first].mean() == pytest.approx(300.0, rel=0.08)
    assert w.output_tokens[first].mean() == pytest.approx(50.0, rel=0.08)
    assert w.prompt_tokens[~first].mean() == pytest.approx(2000.0, rel=0.08)
    assert w.output_tokens[~first].mean() == pytest.approx(400.0, rel=0.08)


def test_multimodal_token_means_sum_the_input_columns(tmp_path: Path) -> None:
    """ServeGen multimodal token files split the input by modality; the prompt
    mean is their sum."""
    rate = tmp_path / "servegen_mm_rate_10min.csv"
    shutil.copy(SERVEGEN, rate)
    (tmp_path / "servegen_mm_tokens_6h.csv").write_text(
        "window_start_s,mean_image_count,mean_image_tokens,mean_output_tokens,mean_text_tokens\n"
        "0,1.5,700.0,100.0,500.0\n"
    )
    w = load_workload(rate, TrafficOptions(seed=7, rate_scale=0.01, duration_s=21600.0))
    assert w.prompt_tokens.mean() == pytest.approx(1200.0, rel=0.08)
    assert w.output_tokens.mean() == pytest.approx(100.0, rel=0.08)


# --------------------------------------------------------------------------
# Determinism and validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "options"),
    [
        (BURSTGPT, TrafficOptions(rate_scale=1.7)),
        (PLAIN_RATE, TrafficOptions()),
        (PER_MINUTE_SYN, TrafficOptions(arrivals="gamma", cv=2.0)),
    ],
    ids=["trace", "poisson", "gamma"],
)
def test_same_seed_same_workload(path: Path, options: TrafficOptions) -> None:
    """Everything is drawn from one numpy Generator seeded by the options:
    the same inputs give the same workload, another seed another one."""
    a = load_workload(path, options)
    b = load_workload(path, options)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    other = load_workload(path, TrafficOptions(**{**options.__dict__, "seed": options.seed + 1}))
    assert len(other) != len(a) or not np.array_equal(other.arrival_s, a.arrival_s)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate_scale": 0.0},
        {"rate_scale": -1.0},
        {"rate_scale": math.nan},
        {"rate_scale": math.inf},
        {"cv": 0.0},
        {"cv": math.nan},
        {"duration_s": 0.0},
        {"duration_s": -5.0},
        {"duration_s": math.inf},
        {"start_s": -1.0},
        {"start_s": math.nan},
        {"arrivals": "uniform"},
        {"seed": -1},
    ],
)
def test_bad_options_are_rejected(kwargs: dict[str, object]) -> None:
    """Options are validated when built: rates, cv and durations finite and > 0,
    start >= 0, a known arrival process."""
    with pytest.raises(ValueError):
        TrafficOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [AZURE, PLAIN_RATE], ids=lambda p: p.name)
def test_window_past_the_trace_end_is_an_error(path: Path) -> None:
    """A start or window beyond the end of the trace is an error, not a short workload."""
    with pytest.raises(ValueError, match="past the trace end"):
        load_workload(path, TrafficOptions(start_s=1e7))
    with pytest.raises(ValueError, match="past the trace end"):
        load_workload(path, TrafficOptions(duration_s=1e7))


def test_tokens_from_must_be_a_per_request_trace() -> None:
    """Token lengths can only be bootstrapped from a file that has them."""
    with pytest.raises(ValueError, match="per-request trace"):
        load_workload(PLAIN_RATE, TrafficOptions(tokens_from=PER_MINUTE_SYN))


def test_workload_checks_its_invariants() -> None:
    """A Workload refuses unsorted times, times outside [0, duration), tokens < 1
    and arrays of different lengths."""
    one = np.array([1], dtype=np.int64)
    with pytest.raises(ValueError, match="sorted"):
        Workload(np.array([2.0, 1.0]), np.array([1, 1]), np.array([1, 1]), "x", 10.0)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        Workload(np.array([10.0]), one, one, "x", 10.0)
    with pytest.raises(ValueError, match=">= 1"):
        Workload(np.array([1.0]), np.array([0]), one, "x", 10.0)
    with pytest.raises(ValueError, match="length"):
        Workload(np.array([1.0, 2.0]), one, one, "x", 10.0)


# --------------------------------------------------------------------------
# Synthetic workloads and true_rate
# --------------------------------------------------------------------------


def test_synthetic_daily_cycle_bursts_and_off_periods() -> None:
    """The synthetic rate is a sinusoid times burst multipliers, zero when off;
    arrivals are an inhomogeneous Poisson process (Lewis and Shedler thinning)."""
    w = synthetic_workload(
        duration_s=4000.0, base_rps=5.0, seed=1, daily_amplitude=0.5, period_s=4000.0
    )
    _check(w)
    rate = true_rate(w, 1000.0)
    assert rate[0] > rate[2] and rate[1] > rate[3]  # sin > 0 in the first half
    burst = synthetic_workload(duration_s=600.0, base_rps=2.0, seed=2, bursts=[(200.0, 100.0, 5.0)])
    r = true_rate(burst, 100.0)
    assert r[2] > 2.5 * max(r[0], r[1], r[3])
    onoff = synthetic_workload(duration_s=600.0, base_rps=3.0, seed=3, on_off=(60.0, 40.0))
    assert np.all(np.mod(onoff.arrival_s, 100.0) < 60.0)
    assert abs(len(onoff) - 3.0 * 360) < 5 * math.sqrt(3.0 * 360)


def test_synthetic_tokens_follow_their_distribution() -> None:
    """Token counts are lognormal with the given mean (cv 0: always the mean)."""
    w = synthetic_workload(
        duration_s=2000.0, base_rps=10.0, prompt_tokens=(800.0, 1.0), output_tokens=(120.0, 0.0)
    )
    assert w.prompt_tokens.mean() == pytest.approx(800.0, rel=0.05)
    assert np.all(w.output_tokens == 120)


def test_synthetic_rejects_bad_shapes() -> None:
    """Bad shapes fail eagerly with a ValueError."""
    with pytest.raises(ValueError):
        synthetic_workload(duration_s=0.0, base_rps=1.0)
    with pytest.raises(ValueError):
        synthetic_workload(duration_s=10.0, base_rps=1.0, daily_amplitude=1.5)
    with pytest.raises(ValueError):
        synthetic_workload(duration_s=10.0, base_rps=1.0, bursts=[(0.0, -1.0, 2.0)])
    with pytest.raises(ValueError):
        synthetic_workload(duration_s=10.0, base_rps=1.0, prompt_tokens=(0.0, 1.0))


def test_true_rate_bins_arrivals_per_second() -> None:
    """true_rate is arrivals per second in each bin; a short last bin is divided
    by its own width."""
    w = Workload(
        np.array([0.5, 1.0, 9.0, 10.5]), np.ones(4, np.int64), np.ones(4, np.int64), "x", 11.0
    )
    np.testing.assert_allclose(true_rate(w, 5.0), [2 / 5, 1 / 5, 1 / 1])
    with pytest.raises(ValueError):
        true_rate(w, 0.0)


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    path=st.sampled_from([AZURE, MOONCAKE, PLAIN_RATE, PER_MINUTE_SYN]),
    scale=st.floats(0.05, 3.0),
    start=st.floats(0.0, 20.0),
    duration=st.floats(1.0, 38.0),  # the Mooncake head spans 58.5 s
    gamma=st.booleans(),
    cv=st.floats(0.2, 4.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_workload_invariants_hold(
    path: Path, scale: float, start: float, duration: float, gamma: bool, cv: float, seed: int
) -> None:
    """For any valid options, arrivals are sorted within [0, duration), tokens
    are >= 1 and the arrays have equal lengths."""
    per_request = path in (AZURE, MOONCAKE)
    options = TrafficOptions(
        rate_scale=scale,
        start_s=start,
        duration_s=duration,
        seed=seed,
        arrivals="gamma" if gamma and not per_request else "poisson",
        cv=cv,
        tokens_from=AZURE,
    )
    w = load_workload(path, options)
    _check(w)
    assert w.duration_s == duration


@settings(max_examples=25, deadline=None)
@given(
    duration=st.floats(1.0, 5000.0),
    base=st.floats(0.0, 20.0),
    amplitude=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
    burst=st.tuples(st.floats(0.0, 5000.0), st.floats(1.0, 500.0), st.floats(0.0, 10.0)),
)
def test_synthetic_invariants_hold(
    duration: float, base: float, amplitude: float, seed: int, burst: tuple[float, float, float]
) -> None:
    """Synthetic workloads satisfy the same invariants as loaded ones."""
    w = synthetic_workload(
        duration_s=duration,
        base_rps=base,
        seed=seed,
        daily_amplitude=amplitude,
        bursts=[burst],
        on_off=(30.0, 10.0),
    )
    _check(w)
    assert true_rate(w, 15.0).sum() > 0 or len(w) == 0
