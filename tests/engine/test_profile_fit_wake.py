"""Reading an idle server's wake-up from requests sent after idle pauses
(``engine.profile_fit_wake``), alone and through ``prescaler engine fit-profile``."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest

from engine.bench_result import BenchResultError
from engine.profile_files import read_profile_file, write_profile_file
from engine.profile_fit_measurements import fit_to_measurements
from engine.profile_fit_wake import IdleRequest, fit_wake, idle_requests
from engine.profile_types import EngineStalls, RequestOverhead
from engine.profiles import get_profile
from tests.engine.profile_fit_truth import BASE, true_profile
from tests.engine.synthetic_vllm import bench_files, synthetic_idle_document
from tests.support.cli_run import run_cli
from tests.support.emulator import FAST_PROFILE, emulator_process

PAUSES = [0.0, 0.02, 0.1, 0.3, 0.7, 1.5]
WAKE = EngineStalls(wake_s=0.006, wake_tau_s=0.08)


def _curve(idle: float, base: float = 0.008) -> float:
    return base + WAKE.wake_after_s(idle)


def test_the_curve_comes_back_from_noisy_requests_with_a_stray_tail() -> None:
    """0.3 ms of noise and one request in ten 20 ms late (a stall): the wake-up,
    its time constant and the base come back, each within its stated 2 sigma."""
    rng = random.Random(3)
    reqs = []
    for i in range(120):
        idle = PAUSES[i % len(PAUSES)] + rng.uniform(0.0, 0.002)
        late = 0.02 if i % 10 == 7 else 0.0
        reqs.append(IdleRequest(idle, _curve(idle) + rng.gauss(0.0, 0.0003) + late))
    fit = fit_wake(reqs, "run.json")
    assert fit.seen and fit.requests == 120
    assert abs(fit.wake_s - WAKE.wake_s) <= max(2 * fit.wake_sd_s, 2e-4)
    assert abs(math.log(fit.wake_tau_s / WAKE.wake_tau_s)) <= max(2 * fit.tau_log_sd, 0.05)
    assert fit.base_ttft_s == pytest.approx(0.008, abs=5e-4)


def test_a_flat_run_reads_no_wake_up_it_cannot_tell_from_none() -> None:
    rng = random.Random(4)
    reqs = [IdleRequest(PAUSES[i % 6], 0.008 + rng.gauss(0, 0.0003)) for i in range(60)]
    fit = fit_wake(reqs, "flat.json")
    assert fit.wake_s < 5e-4 and not fit.seen


@pytest.mark.parametrize(
    ("idles", "why"),
    [
        ([0.0] * 5 + [1.0] * 5, "10 requests found the server idle"),
        ([0.0] * 20, "0 after over 300 ms"),
        ([0.5] * 20, "0 after under 50 ms"),
    ],
)
def test_too_little_idle_time_says_what_to_send(idles: list[float], why: str) -> None:
    with pytest.raises(ValueError, match="--idle-pauses") as err:
        fit_wake([IdleRequest(i, 0.01) for i in idles], "run.json")
    assert why in str(err.value) and str(err.value).startswith("run.json:")


def test_only_requests_sent_to_an_idle_server_count() -> None:
    """One sent while another streams is busy; the one after a failure has an
    unknown idle time; the first's idle time is before the file; a long request
    still streaming keeps the server busy across a failure."""
    doc = {
        "start_times": [0.0, 0.05, 0.5, 1.0, 1.5, 2.0, 3.0, 3.1, 3.2, 3.5],
        "ttfts": [0.01, 0.01, 0.01, 0.0, 0.01, 0.01, 0.01, 0.0, 0.01, 0.01],
        "itls": [[0.1], [0.01], [0.01], [], [0.01], [0.01], [1.0], [], [0.01], [0.01]],
        "errors": ["", "", "", "HTTP 500", "", "", "", "HTTP 500", "", ""],
        "input_lens": [8] * 10,
        "output_lens": [2, 2, 2, 0, 2, 2, 7, 0, 2, 2],
    }
    got = idle_requests(doc, "run.json")
    # 0.05 starts inside the first (ends 0.11); 0.5 follows 0.11 (0.39 idle);
    # 1.5 follows a failure; 2.0 follows 1.5's end at 1.52; 3.0 follows 2.02;
    # 3.2 follows a failure; 3.5 is sent while 3.0's request streams (to 4.01)
    assert [round(r.idle_s, 6) for r in got] == [0.39, 0.48, 0.98]
    assert [r.previous_output_tokens for r in got] == [2, 2, 2]
    with pytest.raises(BenchResultError, match="start_times"):
        idle_requests({"ttfts": [], "itls": []}, "bench.json")


def test_fit_profile_reads_the_wake_up_alone_and_beside_a_speed_fit(tmp_path: Path) -> None:
    """Alone, ``--wake-result`` adds the wake-up to the base and nothing else; beside
    benchmark runs with tails, the stalls read from them keep it. Both say where it
    came from and how sure it is."""
    truth = dataclasses.replace(true_profile(), stalls=WAKE)
    doc = synthetic_idle_document(truth, PAUSES * 5)
    wake_path = tmp_path / "idle.json"
    wake_path.write_text(json.dumps(doc))
    alone = tmp_path / "alone.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--wake-result", str(wake_path),
         "--out", str(alone), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    found = {d["field"]: d for d in report["determined"]}
    assert set(found) == {"stalls.wake_s", "stalls.wake_tau_s", "stalls.wake_max_idle_s"}
    assert found["stalls.wake_s"]["fitted"] == pytest.approx(WAKE.wake_s, rel=0.05)
    assert found["stalls.wake_tau_s"]["fitted"] == pytest.approx(WAKE.wake_tau_s, rel=0.1)
    assert "requests sent to an idle server" in found["stalls.wake_s"]["source"]
    assert found["stalls.wake_s"]["uncertainty"] is not None
    fitted = read_profile_file(alone)
    assert fitted.hardware == get_profile(BASE).hardware
    both = tmp_path / "both.yaml"
    runs = bench_files(truth, tmp_path, 60, tails=True)
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, *runs, "--wake-result", str(wake_path),
         "--out", str(both), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    fields = {d["field"] for d in json.loads(stdout)["determined"]}
    assert {"stalls.wake_s", "hardware.eta_mem"} <= fields
    assert read_profile_file(both).stalls.wake_s == fitted.stalls.wake_s
    plain = tmp_path / "plain"
    plain.mkdir()
    code, stdout, _ = run_cli(
        ["engine", "fit-profile", "--base", BASE, *bench_files(truth, plain, 40),
         "--out", str(both), "--json"]
    )  # fmt: skip
    kept = json.loads(stdout)["kept_reasons"]
    assert "--idle-pauses" in kept["stalls.wake_s"]


def test_the_emulator_s_wake_up_is_read_back_over_http(tmp_path: Path) -> None:
    """``prescaler emulate`` serving a profile whose engine wakes slowly (40 ms after
    a long pause), loaded by ``prescaler engine load --idle-pauses``: the fit reads
    the wake-up back over HTTP."""
    wake = EngineStalls(wake_s=0.04, wake_tau_s=0.15)
    profile = dataclasses.replace(get_profile(FAST_PROFILE), stalls=wake)
    path = write_profile_file(profile, tmp_path / "slow-wake.yaml", "a test profile")
    saved = tmp_path / "idle.json"
    with emulator_process(profile=str(path)) as url:
        code, _, stderr = run_cli(
            ["engine", "load", url, "--input-len", "32", "--output-len", "4",
             "--idle-pauses", "0,0.02,0.3,0.8", "--num-prompts", "21",
             "--save-result", str(saved)]
        )  # fmt: skip
    assert code == 0, stderr
    doc = json.loads(saved.read_text())
    assert doc["idle_pauses_s"] == [0.0, 0.02, 0.3, 0.8] and doc["max_concurrency"] == 1
    fit = fit_wake(idle_requests(doc, str(saved)), str(saved))
    # the wall clock of a busy machine adds its own delays: within a factor of two
    # of the wait after the longest pause (none would read about 0)
    truth = wake.wake_after_s(fit.max_idle_s)
    assert fit.seen and truth / 2 <= fit.at_max_idle_s <= 2 * truth


def test_a_flat_run_through_fit_profile_keeps_the_base_s_wake_up_and_says_why(
    tmp_path: Path,
) -> None:
    """No rise with idle time: nothing is written, the report keeps both fields
    with the reason, warns, and stays valid JSON (no infinite uncertainty)."""
    for seed in range(6):
        rng = random.Random(seed)
        n = 61
        starts, t = [], 0.0
        for i in range(n):
            starts.append(t)
            t += 0.02 + PAUSES[i % 6]
        doc = {
            "start_times": starts,
            "ttfts": [0.008 + rng.gauss(0, 0.0003) for _ in range(n)],
            "itls": [[0.001] * 9 for _ in range(n)],
            "input_lens": [64] * n,
            "output_lens": [10] * n,
        }
        path = tmp_path / f"flat-{seed}.json"
        path.write_text(json.dumps(doc))
        out = tmp_path / "flat.yaml"
        code, stdout, stderr = run_cli(
            ["engine", "fit-profile", "--base", BASE, "--wake-result", str(path),
             "--out", str(out), "--json"]
        )  # fmt: skip
        assert code == 0, stderr
        report = json.loads(stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
        assert report["determined"] == []
        assert {"stalls.wake_s", "stalls.wake_tau_s", "stalls.wake_max_idle_s"} <= set(
            report["kept"]
        )
        assert "kept from the base" in report["kept_reasons"]["stalls.wake_s"]
        assert any("wake-up is kept" in w for w in report["warnings"])
        assert read_profile_file(out).stalls.wake_s == 0.0


def test_the_idle_time_is_the_model_s_when_requests_spend_time_outside_the_scheduler(
    tmp_path: Path,
) -> None:
    """With 20 ms on the way in and out, the clients' idle times are 40 ms short of
    the engine's: read with the profile's overhead, the wake-up comes back whole."""
    overhead = RequestOverhead(in_fixed_s=0.02, out_fixed_s=0.02)
    truth = dataclasses.replace(true_profile(), stalls=WAKE, request_overhead=overhead)
    idle = idle_requests(synthetic_idle_document(truth, PAUSES * 5), "run.json")
    plain = fit_wake(idle, "run.json")
    shifted = fit_wake(idle, "run.json", overhead)
    assert shifted.wake_s == pytest.approx(WAKE.wake_s, rel=0.02)
    assert shifted.wake_tau_s == pytest.approx(WAKE.wake_tau_s, rel=0.05)
    assert plain.wake_s < 0.8 * WAKE.wake_s  # the clients' idle time alone misreads it


def test_a_curve_still_rising_at_the_longest_pause_is_held_there(tmp_path: Path) -> None:
    """A time constant of 5 s seen up to 1.5 s: the size is an extrapolation, so the
    profile holds the curve at 1.5 s (the wait after a minute idle is the wait
    after 1.5 s), and the report says so."""
    slow = EngineStalls(wake_s=0.02, wake_tau_s=5.0)
    reqs = [IdleRequest(p, 0.008 + slow.wake_after_s(p)) for p in PAUSES * 6]
    fit = fit_wake(reqs, "run.json")
    assert fit.seen and fit.still_rising and fit.max_idle_s == 1.5
    assert fit.at_max_idle_s == pytest.approx(slow.wake_after_s(1.5), rel=0.02)
    fitted = fit_to_measurements(get_profile(BASE), idle=reqs, idle_source="run.json")
    stalls = fitted.profile.stalls
    assert stalls.wake_max_idle_s == 1.5
    assert stalls.wake_after_s(60.0) == stalls.wake_after_s(1.5)
    assert stalls.wake_after_s(60.0) == pytest.approx(slow.wake_after_s(1.5), rel=0.02)
    assert any("holds the wake-up there" in w for w in fitted.warnings)


def test_a_speed_fit_without_idle_requests_keeps_the_base_s_whole_wake_up(
    tmp_path: Path,
) -> None:
    """Benchmark runs with tails and no idle requests: the stalls are read from the
    tails, and the base's wake-up stays as the base wrote it, its cap included (a
    cap dropped would let the fitted profile's wait grow past any idle time measured)."""
    capped = EngineStalls(wake_s=0.01, wake_tau_s=1.0, wake_max_idle_s=2.0)
    base = dataclasses.replace(get_profile(BASE), stalls=capped)
    base_path = tmp_path / "base.yaml"
    write_profile_file(base, base_path, "a base with a capped wake-up")
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", str(base_path),
         *bench_files(true_profile(), tmp_path, 40, tails=True), "--out", str(out), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    assert "stalls.wake_max_idle_s" in json.loads(stdout)["kept"]
    stalls = read_profile_file(out).stalls
    assert (stalls.wake_s, stalls.wake_tau_s, stalls.wake_max_idle_s) == (0.01, 1.0, 2.0)
