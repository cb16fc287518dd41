"""Calibration bench: the engine model against every covered figure of calibration.md.

`make bench` runs the bench test: it writes bench-results/engine_calibration.json
(a list of {"point", "reference", "model", "unit", "error_pct", "source"}),
prints the table and requires every |error| <= 15 %. The other tests here run
in `make test` and check that the embedded reference data matches its source.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from engine.calibration import VIDUR_A100_LINEAR_MS, calibration_points

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "data" / "vidur_a100_llama3_8b_linear_ops_per_iter.csv"
SHARED_CSV = (
    ROOT / ".." / "shared" / "docs" / "calibration_data"
    / "vidur_a100_llama3_8b_linear_ops_per_iter.csv"
)  # fmt: skip
TOLERANCE_PCT = 15.0


def _vidur_means(path: Path) -> dict[int, float]:
    rows: dict[int, list[float]] = defaultdict(list)
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            rows[int(row["num_tokens"])].append(float(row["per_iteration_32_layers_ms"]))
    return {tokens: sum(v) / len(v) for tokens, v in rows.items()}


def test_embedded_vidur_points_match_the_fixture_csv() -> None:
    means = _vidur_means(FIXTURE)
    for tokens, ms in VIDUR_A100_LINEAR_MS:
        assert means[tokens] == pytest.approx(ms, abs=0.001)


def test_fixture_is_the_shared_calibration_csv() -> None:
    if not SHARED_CSV.exists():
        pytest.skip("shared calibration data not checked out beside the project")
    assert FIXTURE.read_bytes() == SHARED_CSV.read_bytes()


@pytest.mark.bench
def test_calibration_bench(capsys: pytest.CaptureFixture[str]) -> None:
    points = calibration_points()
    rows = [p.as_dict() for p in points]
    out_dir = ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "engine_calibration.json").write_text(json.dumps(rows, indent=2) + "\n")

    width = max(len(p.point) for p in points)
    lines = [f"{'point':<{width}}  {'reference':>11}  {'model':>11}  {'unit':<6}  {'err %':>6}"]
    for p in points:
        lines.append(
            f"{p.point:<{width}}  {p.reference:>11.2f}  {p.model:>11.2f}  {p.unit:<6}  "
            f"{p.error_pct:>+6.1f}"
        )
    worst = max(points, key=lambda p: abs(p.error_pct))
    lines.append(f"{len(points)} points, worst {worst.error_pct:+.1f} % ({worst.point})")
    with capsys.disabled():
        print("\n" + "\n".join(lines))

    failing = [p for p in points if abs(p.error_pct) > TOLERANCE_PCT]
    assert not failing, "outside ±15 %: " + "; ".join(
        f"{p.point}: {p.error_pct:+.1f} %" for p in failing
    )
    assert len(points) >= 30
