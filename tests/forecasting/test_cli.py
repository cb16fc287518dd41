"""`prescaler backtest`: JSON contract, plot, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forecasting.registry import METHODS, backtest_methods
from prescaler.cli import main

DATA = Path(__file__).parent / "data"
NAMES = {*METHODS, *(("sf_autoets",) if "sf_autoets" in backtest_methods() else ())}
"""The anchors, prescaler, and one statsforecast baseline when installed (each
baseline has its own tests; AutoARIMA's refits alone would take seconds here)."""


def test_backtest_json_shape_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "bt.json", tmp_path / "bt.png"
    code = main(
        [
            "backtest",
            str(DATA / "per_minute_synthetic.csv"),
            "--horizon",
            "180",
            "--max-origins",
            "12",
            "--methods",
            ",".join(sorted(NAMES, key=lambda m: m == "prescaler")),
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    # The contract's four keys, extended by prescaler's MAE ratio to each method.
    assert set(doc) == {"input", "step_s", "horizon_s", "methods", "prescaler_mae_ratio"}
    ratios = doc["prescaler_mae_ratio"]
    assert set(ratios) == NAMES - {"prescaler"}
    for name, r in ratios.items():
        assert r["ratio"] == pytest.approx(
            doc["methods"]["prescaler"]["mae"] / doc["methods"][name]["mae"]
        )
        assert r["interval90"][0] <= r["interval90"][1]
    assert doc["step_s"] == 60 and doc["horizon_s"] == 180
    assert isinstance(doc["step_s"], int) and isinstance(doc["horizon_s"], int)
    assert set(doc["methods"]) == NAMES
    for scores in doc["methods"].values():
        assert set(scores) == {"mae", "mase", "pinball_p90", "coverage_p90", "fit_seconds"}
        assert all(isinstance(v, float) for v in scores.values())
    assert png.stat().st_size > 1000
    table = capsys.readouterr().out
    assert "prescaler" in table and "pinball_p90" in table
    assert "prescaler MAE / this (90 % interval)" in table
    kalman_row = next(line for line in table.splitlines() if line.startswith("kalman"))
    assert any(v in kalman_row for v in ("better", "worse", "within noise"))


def _backtest_mooncake_head(methods: str, out: Path) -> dict[str, Any]:
    """``prescaler backtest`` on the shipped Mooncake head at 1-s steps; its JSON."""
    args = ["backtest", str(DATA / "mooncake_head.jsonl"), "--horizon", "2", "--step", "1"]
    assert main([*args, "--methods", methods, "--json", str(out)]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_backtest_methods_subset_and_step(tmp_path: Path) -> None:
    doc = _backtest_mooncake_head("last_value,prescaler", tmp_path / "bt.json")
    assert set(doc["methods"]) == {"last_value", "prescaler"} and doc["step_s"] == 1
    assert set(doc["prescaler_mae_ratio"]) == {"last_value"}
    # Without prescaler among the methods there is nothing to compare it with.
    doc = _backtest_mooncake_head("last_value,kalman", tmp_path / "bt.json")
    assert "prescaler_mae_ratio" not in doc


def test_backtest_bad_input_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("foo,bar\n1,2\n")
    assert main(["backtest", str(bad), "--horizon", "60"]) == 2
    assert "unknown header" in capsys.readouterr().err
    assert (
        main(
            [
                "backtest",
                str(DATA / "per_minute_synthetic.csv"),
                "--horizon",
                "60",
                "--methods",
                "prophet",
            ]
        )
        == 2
    )


def test_backtest_json_is_strict_json_when_a_ratio_is_infinite() -> None:
    """An infinite ratio (prescaler erred where the other method never did)
    is written as null: ``Infinity`` is not JSON and strict parsers refuse the file."""
    import math

    import numpy as np

    from forecasting import DemandSeries
    from forecasting.backtest import backtest
    from forecasting.cli import summary
    from forecasting.significance import RatioInterval

    y = np.full(60, 5.0)
    res = backtest(DemandSeries(0, 60, y, "requests_per_s", "t"), (2,), ["last_value"])
    doc = summary(res, "t", 2, {"last_value": RatioInterval(math.inf, 3.0, math.inf, 0.9, 2, 40)})
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["prescaler_mae_ratio"]["last_value"] == {
        "ratio": None,
        "interval90": [3.0, None],
    }


@pytest.mark.parametrize(
    "flags",
    [
        ["--horizon", "nan"],
        ["--horizon", "inf"],
        ["--horizon", "0"],
        ["--horizon", "60", "--step", "-1"],
        ["--horizon", "60", "--window", "nan"],
        ["--horizon", "60", "--max-origins", "0"],
    ],
)
def test_backtest_flags_are_validated_at_the_edge(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad number is argparse's usage error (exit 2), naming the flag."""
    with pytest.raises(SystemExit) as exit_info:
        main(["backtest", str(DATA / "per_minute_synthetic.csv"), *flags])
    assert exit_info.value.code == 2
    assert f"argument {flags[-2]}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--methods", " , "], "names no method"),
        (["--window", "10"], "shorter than one step"),
        (["--json", "/no/such/dir/bt.json"], "no such directory"),
        (["--plot", "/no/such/dir/bt.png"], "no such directory"),
    ],
)
def test_backtest_refuses_what_it_cannot_do_before_running(
    flags: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = str(DATA / "per_minute_synthetic.csv")
    assert main(["backtest", csv, "--horizon", "60", *flags]) == 2
    err = capsys.readouterr().err
    assert reason in err and "Traceback" not in err


def test_backtest_reports_a_failed_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target that cannot be written (here: a directory) is a one-line error, exit 1."""
    csv = str(DATA / "per_minute_synthetic.csv")
    args = ["backtest", csv, "--horizon", "60", "--methods", "last_value", "--max-origins", "5"]
    assert main([*args, "--json", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "cannot write" in err and "Traceback" not in err
