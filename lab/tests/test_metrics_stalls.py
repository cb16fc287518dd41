"""Reading stalls from /metrics histograms (``lab.metrics_stalls``): the pure parts."""

from __future__ import annotations

import math

import pytest

from lab.metrics_stalls import TailShare, exponential_tail, tail_shares


def test_the_tail_starts_past_the_median_bucket_and_ends_where_nothing_passes() -> None:
    # 100 gaps: 60 under 25 ms (the median's bucket is 10-25 ms), then a tail
    buckets = ((0.01, 10.0), (0.025, 60.0), (0.05, 80.0), (0.075, 95.0), (0.1, 100.0),
               (0.15, 100.0), (math.inf, 100.0))  # fmt: skip
    shares = tail_shares("itl", buckets, per_event=4.0)
    assert [s.bound_s for s in shares] == [0.05, 0.075, 0.1]
    assert [s.measured for s in shares] == pytest.approx([0.2, 0.05, 0.0])
    assert all(s.floor == pytest.approx(0.04) for s in shares)
    # too few observations to read a tail
    assert tail_shares("itl", tuple((b, c / 10) for b, c in buckets), per_event=1.0) == ()


def test_an_exponential_tail_gives_back_its_chance_and_mean() -> None:
    chance, mean, start = 0.3, 0.04, 0.02
    points = [
        TailShare("itl", b, chance * math.exp(-(b - start) / mean), 0.001)
        for b in (0.05, 0.075, 0.1, 0.15)
    ]
    assert exponential_tail(points, start) == pytest.approx((chance, mean))
    # a tail that falls slowly, or not at all, says only that stalls outlast its
    # last bound
    flat = [TailShare("itl", b, 0.1, 0.001) for b in (0.05, 0.1)]
    assert exponential_tail(flat, start)[1] == 0.1
    slow = [TailShare("itl", 0.05, 0.1, 0.001), TailShare("itl", 0.1, 0.09, 0.001)]
    assert exponential_tail(slow, start)[1] == 0.1
    assert exponential_tail([TailShare("itl", 0.05, 0.0, 0.001)], start) == (0.0, 0.0)


def test_a_residual_counts_a_share_under_one_event_as_noise() -> None:
    share = TailShare("itl", 0.05, 0.0, 0.01)
    assert share.residual(0.0) == 0.0
    assert share.residual(0.01) == pytest.approx(math.log(2.0))
