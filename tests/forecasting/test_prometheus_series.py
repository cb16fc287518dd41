"""PromQL text and conversion of a canned range-query result (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.prometheus_series import build_query, series_from_range_result


def test_query_sums_over_pods_and_engine_with_v0_v1_alternatives() -> None:
    q = build_query("requests_per_s", {"model_name": "llama"}, rate_window_s=60)
    assert q.startswith('sum(rate(vllm:request_success_total{model_name="llama"}[60s]))')
    assert ' or sum(rate(vllm:request_success{model_name="llama"}[60s]))' in q
    assert " by " not in q  # one fleet-wide series: pods and engines summed
    assert "vllm:prompt_tokens_total" in build_query("prompt_tokens_per_s")
    assert "vllm:generation_tokens_total[60s]" in build_query("output_tokens_per_s")


def test_label_values_are_escaped_and_names_validated() -> None:
    q = build_query("requests_per_s", {"model_name": 'a"} or vector(1) #'})
    assert 'model_name="a\\"} or vector(1) #"' in q
    with pytest.raises(ValueError, match="label name"):
        build_query("requests_per_s", {"bad-name": "x"})
    with pytest.raises(ValueError, match="unknown signal"):
        build_query("qps")


CANNED = [
    {"metric": {"pod": "a"}, "values": [[1000, "1.5"], [1015, "2"], [1045, "NaN"], [1060, "4"]]},
    {"metric": {"pod": "b"}, "values": [[1000, "0.5"], [1015, "1"], [1060, "0"]]},
]


def test_conversion_sums_series_and_fills_gaps() -> None:
    s = series_from_range_result(CANNED, 15, signal="requests_per_s")
    assert s.start_s == 1000 and s.step_s == 15
    # 1030 missing, 1045 NaN in one series and absent in the other -> gaps.
    np.testing.assert_allclose(s.values, [2, 3, 10 / 3, 11 / 3, 4])


def test_empty_result_is_an_error() -> None:
    with pytest.raises(ValueError, match="no series"):
        series_from_range_result([], 15, signal="requests_per_s")
