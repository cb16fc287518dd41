"""What `prescaler tune` tells its reader: the headline is about the settings
it prints to paste, a tune whose sides all settle on a fixed fleet says so
in words and names every side, any subset of sides runs (``--sides``), and
the trials picture counts what it draws."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.tune.cli import main
from simulations.tune.plot import side_style, trial_points, trials_caption
from simulations.tune.sides import SIDES
from simulations.tune.study import TrialRecord


def _counts(path: Path, per_minute: list[int]) -> Path:
    rows = [f"{60 * i},{n}" for i, n in enumerate(per_minute)]
    path.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    return path


def _tune(trace: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any] | None]:
    out = tmp_path / "tune.json"
    code = main([
        str(trace), "--trials", "3", "--quiet", "--target", "0.8", "--holdout-seeds", "1",
        "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--json", str(out), *extra,
    ])  # fmt: skip
    return code, json.loads(out.read_text()) if out.exists() else None


def test_a_flat_trace_says_no_side_beat_a_static_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Twenty minutes at a steady third of a request a second: one replica
    serves it, every side's chosen setting sits at its floor of 1, and the
    report says so in words, naming every side as degenerate, with the
    targets explained once."""
    trace = _counts(tmp_path / "flat.csv", [20] * 20)
    code, doc = _tune(trace, tmp_path)
    assert code == 0 and doc is not None
    text = capsys.readouterr().out
    verdict = doc["verdict"]
    assert verdict["static_floor"] == 1
    # the headline covers the blocks printed to paste: with both KEDA sides
    # tuned, the queue + KV block is printed and the queue-only one is not
    assert verdict["static_sides"] == ["prescaler", "keda-queue-kv"]
    assert "no side beat a static floor of 1 here" in text
    assert "the trace is too short or too flat to tell settings apart" in text
    degenerate = [w for w in doc["warnings"] if w.startswith("degenerate:")]
    assert len(degenerate) == 1
    assert all(side in degenerate[0] for side in ("prescaler", "keda-queue", "keda-queue-kv"))
    # both targets, once each, in the line that explains them
    tuned, held = doc["target_attainment"]["tuned"], doc["target_attainment"]["holdout"]
    explained = [line for line in text.splitlines() if line.startswith("target:")]
    assert len(explained) == 1
    assert f"{100 * tuned:.2f} %" in explained[0] and f"{100 * held:.2f} %" in explained[0]
    assert "what an idle fleet attains on each part" in explained[0]


def test_the_headline_is_the_printed_settings_and_any_subset_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sides prescaler,keda-queue: the headline's ratio is the chosen
    (printed) settings' held-back costs, prescaler's over KEDA queue-length's,
    and its words quote prescaler's held-back figures; the other default
    side was not tuned, and the trials picture has both."""
    trace = _counts(tmp_path / "burst.csv", [20] * 8 + [160] * 4 + [20] * 8)
    png = tmp_path / "f.png"
    code, doc = _tune(trace, tmp_path, "--sides", "prescaler,keda-queue", "--plot", str(png))
    assert code == 0 and doc is not None
    text = capsys.readouterr().out
    assert set(doc["sides"]) == {"prescaler", "keda-queue"}
    p, q = doc["sides"]["prescaler"], doc["sides"]["keda-queue"]
    ratio = doc["verdict"]["chosen_cost_ratio"]
    assert ratio == round(p["holdout"]["cost_usd"] / q["holdout"]["cost_usd"], 4)
    if doc["verdict"]["static_floor"] is None:
        months = p["holdout"]["cost_usd"] / p["holdout"]["cost_per_month_usd"]
        quoted = f"${p['holdout']['cost_usd'] / months:,.0f}/month"
        assert "prescaler's chosen setting, printed below: " in text and quoted in text
    assert "paste: the tuned prescaler ScaledObject" in text
    assert png.stat().st_size > 0 and (tmp_path / "f-trials.png").stat().st_size > 0


def test_a_tune_without_prescaler_or_the_queue_side_reports_and_pastes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sides keda-queue-kv alone: no assertion on a missing side, the JSON
    has nulls where prescaler's and the queue side's figures would be, the
    exit status follows the side that ran, and its block is printed."""
    trace = _counts(tmp_path / "flat.csv", [20] * 20)
    code, doc = _tune(trace, tmp_path, "--sides", "keda-queue-kv")
    assert code == 0 and doc is not None
    assert set(doc["sides"]) == {"keda-queue-kv"}
    assert doc["predictive"] == {"metadata": {}, "tuned": None, "holdout": None}
    assert doc["reactive"] == {"threshold": None, "tuned": None, "holdout": None}
    assert doc["verdict"]["chosen_cost_ratio"] is None and doc["trials"] == 3
    assert "paste: the tuned keda-queue-kv ScaledObject" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sides", "prescaler", "--add-sides", "keda-gateway"], "not both"),
        (["--sides", "user"], "--sides user tunes your --scaledobject FILE"),
        (["--sides", "keda-gateway", "--cron-window", "08:00-18:00"], "--cron-window writes"),
    ],
)
def test_bad_side_choices_are_one_line_usage_errors(
    tmp_path: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _counts(tmp_path / "flat.csv", [20] * 20)
    assert main([str(trace), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_an_unknown_side_is_refused_by_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "t.csv"), "--sides", "prescaler,keda-http"])
    assert exc.value.code == 2
    assert "unknown side(s) keda-http" in capsys.readouterr().err


def test_every_side_has_its_own_colour_and_marker() -> None:
    """No two sides share a colour (none is grey) or a marker."""
    styles = [side_style(name) for name in SIDES]
    assert len({c for c, _ in styles}) == len(SIDES)
    assert len({m for _, m in styles}) == len(SIDES)
    assert not any("grey" in c or "gray" in c or c.startswith("0.") for c, _ in styles)


def _trial(n: int, attainment: float, cost: float, finished: bool = True) -> TrialRecord:
    return TrialRecord(n, {}, attainment, cost if finished else math.nan, finished, True)


@settings(max_examples=40, deadline=None)
@given(
    scores=st.lists(
        st.tuples(st.sampled_from([0.8, 0.9, 0.95]), st.sampled_from([1.0, 2.0]), st.booleans()),
        min_size=1,
        max_size=40,
    )
)
def test_the_trials_caption_counts_what_is_drawn(scores: list[tuple[float, float, bool]]) -> None:
    """A hundred trials that settle on three scores are three points: the
    caption says how many trials ran, how many points they make and how many
    stopped early (not drawn)."""
    trials = [_trial(i, a, c, f) for i, (a, c, f) in enumerate(scores)]
    ran = sum(1 for _, _, f in scores if f)
    points = len({(a, c) for a, c, f in scores if f})
    assert sum(trial_points(trials).values()) == ran and len(trial_points(trials)) == points
    caption = trials_caption([("prescaler", trials, None)])
    drawn = f"{len(trials)} trials: {ran} ran to the end, drawn at {points} point"
    assert caption.startswith(drawn)
    assert f"{len(trials) - ran} stopped early, not drawn" in caption


def test_the_user_side_alone_needs_a_prometheus_scaledobject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sides user with a ScaledObject whose trigger is prescaler's: that
    file is the prescaler side's base, so nothing is left to tune; one line
    says why (exit 2), before any trial."""
    so = tmp_path / "so.yaml"
    so.write_text(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: mine}\n"
        "spec:\n  scaleTargetRef: {name: vllm}\n  minReplicaCount: 1\n  maxReplicaCount: 4\n"
        "  triggers:\n  - type: external\n    metadata:\n"
        "      prometheusAddress: http://prom:9090\n      profile: llama-3-8b@g5.xlarge\n"
    )
    trace = _counts(tmp_path / "flat.csv", [20] * 20)
    code, doc = _tune(trace, tmp_path, "--sides", "user", "--scaledobject", str(so))
    assert code == 2 and doc is None
    err = capsys.readouterr().err.strip()
    assert "no side left to tune" in err and len(err.splitlines()) == 1
