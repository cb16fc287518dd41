"""`prescaler simulate`: flags validated at the edge, one-line errors, JSON and plots."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prescaler.cli import main
from simulations.report import CONTRACT_KEYS
from tests.support.counts_trace import write_counts_trace

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small per-minute counts trace (``minute_start_s,requests``): 20 minutes."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 20, 0, 60, 180)


def test_simulate_writes_the_contract_json_and_plots(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """simulate TRACE --policy ... --json --plot: the table on stdout, the summary
    JSON in the published shape, both PNGs."""
    out = tmp_path / "s.json"
    png = tmp_path / "p.png"
    code = main(
        [
            "simulate",
            str(trace),
            "--policy",
            "static,reactive,oracle",
            "--static-replicas",
            "3",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--duration",
            "600",
            "--quiet",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "P99 TTFT" in text and "reactive" in text
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == ["static", "reactive", "oracle"]
    assert set(CONTRACT_KEYS) <= set(doc["policies"]["reactive"])
    assert doc["requests"] == doc["policies"]["oracle"]["requests_total"]
    assert png.exists() and (tmp_path / "p-ttft.png").exists()


def test_simulate_runs_a_user_scaledobject(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--scaledobject FILE adds a policy named by the ScaledObject's metadata.name."""
    code = main(
        [
            "simulate",
            str(trace),
            "--policy",
            "oracle",
            "--duration",
            "300",
            "--quiet",
            "--scaledobject",
            str(DATA / "eks-vllm-keda-blog-b.yaml"),
        ]
    )
    assert code == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert "oracle" in header and len(header.split()) == 2


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--rate-scale", "nan"),
        ("--rate-scale", "-1"),
        ("--slo-ttft", "inf"),
        ("--timeout", "0"),
        ("--duration", "nan"),
        ("--start", "-5"),
        ("--cv", "inf"),
        ("--jobs", "0"),
        ("--static-replicas", "0"),
        ("--seed", "-1"),
        ("--prometheus-outage", "300"),
        ("--prometheus-outage", "300:100"),
        ("--prometheus-outage", "-5:100"),
        ("--prometheus-outage", "a:b"),
    ],
)
def test_bad_flags_are_usage_errors(
    trace: Path, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN, infinities and negatives are refused by argparse (exit 2), flag named."""
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(trace), flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--policy", "psychic"], "unknown policy"),
        (["--profile", "nope@nowhere"], "nope"),
        (["--forecaster", "crystal_ball"], "forecast"),
        (["--scaledobject", "/nonexistent.yaml"], "nonexistent"),
        (["--rate-window", "20"], "--rate-window must span"),
        (["--start", "1000", "--duration", "600"], "runs past the trace end"),
        (["--start", "5000"], "--start 5000 s is past the trace end"),
    ],
)
def test_bad_input_is_one_line_not_a_traceback(
    trace: Path, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input exits 2 with one line on stderr naming the problem."""
    assert main(["simulate", str(trace), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prescaler simulate:") and "\n" not in err and needle in err
    # the flags the person typed, not the library's parameter names
    assert not re.search(r"\b(start_s|duration_s|rate_window_s)\b", err), err


def test_missing_trace_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "/no/such/trace.csv", "--quiet"]) == 2
    assert "trace.csv" in capsys.readouterr().err


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_says_what_the_code_does(capsys: pytest.CaptureFixture[str]) -> None:
    """simulate's static fleet is the smallest reaching STATIC_SLO_TARGET of
    the idle fleet's attainment (98 %), and the help says that number; tune
    has its own parser: simulate-only flags are not advertised, the flags
    both share are defined once, and tune's --plot/--jobs/--scaledobject say
    what they do in tune."""
    from simulations.runner import STATIC_SLO_TARGET

    simulate = _help("simulate", capsys)
    assert f"{100 * STATIC_SLO_TARGET:g} % of what an idle fleet attains" in simulate
    tune = _help("tune", capsys)
    for flag in ("--static-replicas", "--policy"):
        assert flag not in tune
    for flag in ("--slo-ttft", "--rate-scale", "--start", "--no-backfill", "--forecaster"):
        assert flag in tune and flag in simulate
    assert "frontier PNG" in tune and "every exit" in tune
    assert "processes sharing each side's study" in tune
    assert "tuned as its own side" in tune
    assert "timeline PNG" not in tune
