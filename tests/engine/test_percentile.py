"""``engine.percentile``: the one percentile the load client writes and the check compares."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.percentile import percentile


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=40),
    p=st.sampled_from([50, 90, 99]),
)
def test_percentiles_are_the_benchmark_s_own(values: list[float], p: int) -> None:
    """``vllm bench serve`` takes numpy's default percentile: so does the check."""
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-12)


def test_a_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="percentile of nothing"):
        percentile([], 50)
