"""The serving replay's client models: clients that start together, and steady ones."""

from __future__ import annotations

import math

import pytest

from engine.profiles import get_profile
from engine.serving_replay import ServingLoad, replay_load, steady_clients

PROFILE = "llama-3-8b@g5.xlarge"


@pytest.mark.parametrize("prompt", [256, 1024])
def test_steady_clients_meet_requests_mid_decode(prompt: int) -> None:
    """Four clients starting together with identical requests stay in step for ever:
    every request is prefilled in a batch of four, so every TTFT is the same. Steady
    clients are out of step: each newcomer's prompt is prefilled beside the others'
    decodes, so first tokens come sooner and differ, at the same gap between tokens,
    with the server still kept busy by nearly all four."""
    profile = get_profile(PROFILE)
    together = replay_load(profile, ServingLoad(40, prompt, 64, max_concurrency=4))
    assert together.median_itl_s is not None
    steady = replay_load(profile, steady_clients(40, prompt, 64, 4, together.median_itl_s))
    assert len({round(t, 9) for t in together.ttfts}) == 1
    assert len({round(t, 9) for t in steady.ttfts}) > 20
    assert steady.median_ttft_s < 0.5 * together.median_ttft_s
    assert steady.median_itl_s == pytest.approx(together.median_itl_s, rel=0.02)
    assert 3.5 < steady.mean_concurrency <= 4.0


def test_steady_clients_spread_their_first_requests_over_one_decode() -> None:
    """The load says what it models: the first requests spread over one request's
    decode and a pause of about one gap between a client's requests."""
    load = steady_clients(24, 128, 50, 3, 0.02)
    assert load.max_concurrency == 3 and load.num_requests == 24
    assert load.first_arrivals_over_s == pytest.approx(1.0)
    assert load.think_s == pytest.approx(0.02)


@pytest.mark.parametrize("itl", [0.0, -0.01, math.nan, math.inf])
def test_steady_clients_need_a_gap_to_spread_over(itl: float) -> None:
    """Without a gap the clients could not be spread: they would start in step."""
    with pytest.raises(ValueError, match="itl_s must be a number > 0"):
        steady_clients(8, 128, 50, 2, itl)
