"""The summary JSON contract, the table and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.policies import PolicySpec
from simulations.report import (
    CEILING_LABEL,
    CONTRACT_KEYS,
    plot,
    scale_up_reaction_s,
    summary,
    table,
    timeline_figure,
)
from simulations.runner import Outcome, run_policy
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    w = synthetic_workload(duration_s=600.0, base_rps=2.0, seed=1, prompt_tokens=(500, 0.5))
    static = run_policy(PolicySpec("static", "static", replicas=3), w, PROFILE, SimConfig())
    oracle = run_policy(PolicySpec("oracle", "oracle"), w, PROFILE, SimConfig())
    return {"static": Outcome(static, replicas=3), "oracle": Outcome(oracle)}


def test_summary_has_exactly_the_contract_keys(outcomes: dict[str, Outcome]) -> None:
    """`simulate --json`: the top-level and per-policy keys of the published contract
    are all there (additions allowed), and the document is strict JSON."""
    doc = summary("synthetic", 1200, 600.0, 1.5, outcomes)
    assert {"trace", "requests", "duration_s", "wall_s", "policies"} <= set(doc)
    for p in doc["policies"].values():
        assert set(CONTRACT_KEYS) <= set(p)
        assert p["requests_total"] == p["completed"] + p["timed_out"] + p["rejected"]
        assert 0.0 <= p["slo_attainment"] <= 1.0
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["policies"]["oracle"]["cost_ratio_to_oracle"] == 1.0
    assert doc["policies"]["static"]["static_replicas"] == 3


def test_missing_values_are_null_not_nan() -> None:
    """A run where nothing completed has no percentiles: null, never NaN."""
    w = Workload(np.array([1.0]), np.array([100]), np.array([10]), "w", 10.0)
    r = run_policy(PolicySpec("static", "static", replicas=0), w, PROFILE, SimConfig(timeout_s=2.0))
    doc = summary("w", 1, 10.0, 0.1, {"static": Outcome(r)})
    p = doc["policies"]["static"]
    assert p["ttft_p99_s"] is None and p["timed_out"] == 1 and p["slo_attainment"] == 0.0
    json.dumps(doc, allow_nan=False)


def test_slo_attainment_counts_every_request(outcomes: dict[str, Outcome]) -> None:
    """Attainment is over all requests: the fraction whose TTFT met the SLO."""
    r = outcomes["static"].result
    doc = summary("w", r.status.size, r.duration_s, 0.1, {"static": outcomes["static"]})
    expected = float(np.sum(r.ttft_s <= r.slo_ttft_s)) / r.status.size
    assert doc["policies"]["static"]["slo_attainment"] == pytest.approx(expected, abs=1e-6)


def test_table_compares_policies_side_by_side(outcomes: dict[str, Outcome]) -> None:
    """The printed table has one column per policy and the before/after rows."""
    text = table(summary("synthetic", 1200, 600.0, 1.5, outcomes))
    for row in (
        "P99 TTFT",
        "SLO attainment",
        "GPU utilization",
        "scale-up reaction",
        "cost per month",
        "cost ratio to oracle",
        "timed out",
        "spot interruptions",
    ):
        assert row in text
    assert "static" in text.splitlines()[1] and "oracle" in text.splitlines()[1]


def test_scale_up_reaction_from_the_timeline() -> None:
    """Reaction = overload start to the next rise in Ready replicas."""
    t = np.arange(0.0, 150.0, 15.0)
    ready = np.array([2, 2, 2, 2, 3, 4, 4, 4, 4, 4], dtype=float)
    waiting = np.array([0, 0, 10, 20, 20, 0, 0, 0, 0, 0], dtype=float)
    tl = {"t": t, "ready": ready, "waiting": waiting, "gateway": np.zeros_like(t)}
    assert scale_up_reaction_s(tl) == pytest.approx(30.0)
    tl["waiting"] = np.zeros_like(t)
    assert scale_up_reaction_s(tl) is None


def test_plots_are_written(outcomes: dict[str, Outcome], tmp_path: Path) -> None:
    """--plot FILE writes FILE and FILE-ttft.png."""
    main, cdf = plot(outcomes, tmp_path / "out.png")
    assert main.stat().st_size > 1000 and cdf.name == "out-ttft.png" and cdf.exists()


def test_cost_ratio_is_null_without_an_oracle(outcomes: dict[str, Outcome]) -> None:
    doc = summary("w", 1, 600.0, 0.1, {"static": outcomes["static"]})
    assert doc["policies"]["static"]["cost_ratio_to_oracle"] is None
    assert not math.isnan(doc["policies"]["static"]["cost_per_month_usd"])


def test_rejection_reasons_are_grouped_by_kind() -> None:
    """vLLM's message names each request's token counts: one key per kind, counted."""
    w = Workload(
        np.array([1.0, 2.0, 3.0]), np.array([9000, 9100, 10]), np.array([5, 5, 5]), "w", 9.0
    )
    r = run_policy(PolicySpec("static", "static", replicas=1), w, PROFILE, SimConfig())
    reasons = summary("w", 3, 9.0, 0.1, {"static": Outcome(r)})["policies"]["static"][
        "rejected_reasons"
    ]
    assert list(reasons.values()) == [2]
    assert "maximum context length is N tokens" in next(iter(reasons))


def test_table_ceiling_and_stopped_rows(outcomes: dict[str, Outcome]) -> None:
    """Given the idle-fleet attainment, the table shows it under every column right
    below SLO attainment; a stack run's stopped count gets its own row, apart from
    rejections; neither row appears when not given."""
    doc = summary("synthetic", 1200, 600.0, 1.5, outcomes)
    lines = table(doc, ceiling=0.9123).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("SLO attainment"))
    assert lines[at + 1].startswith(CEILING_LABEL)
    assert lines[at + 1].split()[-4:] == ["91.2", "%", "91.2", "%"]
    assert CEILING_LABEL not in table(doc) and "stopped" not in table(doc)
    doc["policies"]["static"]["stopped"] = 7
    row = next(line for line in table(doc).splitlines() if line.startswith("stopped"))
    assert row.split()[-2:] == ["7", "-"]


def test_timeline_shares_scales_and_heads_each_panel(outcomes: dict[str, Outcome]) -> None:
    """The timeline's title names trace, profile and rate scale; every panel has the
    same replicas and req/s scales, is headed by its own SLO attainment and cost, and
    the legend sits below every panel."""
    import matplotlib.pyplot as plt

    fig = timeline_figure(outcomes, rate_scale=0.5)
    try:
        fig.canvas.draw()
        title = fig.get_suptitle()
        r = outcomes["static"].result
        assert r.trace in title and r.profile in title and "x0.5" in title
        replicas = [a for a in fig.axes if a.get_ylabel() == "replicas"]
        rps = [a for a in fig.axes if a.get_ylabel() == "req/s"]
        assert len(replicas) == len(rps) == len(outcomes)
        assert len({a.get_ylim() for a in replicas}) == 1 and len({a.get_ylim() for a in rps}) == 1
        doc = summary("synthetic", 1200, 600.0, 1.5, outcomes)
        for ax, (name, p) in zip(replicas, doc["policies"].items(), strict=True):
            heading = ax.get_title(loc="left")
            assert heading.startswith(f"{name}:")
            assert f"{100 * p['slo_attainment']:.1f} %" in heading
            assert f"cost \\${p['cost_usd']:,.2f}" in heading
        (legend,) = fig.legends
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        top = legend.get_window_extent(renderer).y1
        assert all(top <= a.get_window_extent(renderer).y0 for a in replicas)
    finally:
        plt.close(fig)
