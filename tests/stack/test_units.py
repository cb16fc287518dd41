"""The stack's pieces that need no Prometheus: time scaling, flags, the load generator.

Time compression must be the same everywhere (docs/stack.md): every
time-valued trigger key and ``prescaler serve`` interval divided by K,
nothing else in the manifest's metadata touched (the trigger keys are those
of decision.settings, parsed by the live scaler). The load generator follows
the simulator's request rules (simulations.simulation): each request ends
exactly once, vLLM's 400 is a rejection with its message.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from decision.settings import parse_settings
from prescaler.cli import build_parser
from simulations.scaledobject import load_scaledobject
from simulations.simulation import COMPLETED, REJECTED
from simulations.traffic import Workload
from stack.loadgen import Clock, LoadGenerator
from stack.run import DEFAULT_SCALEDOBJECT, TIME_KEYS, scaled_metadata, scaler_flags
from tests.support.emulator import async_emulator


def test_scaled_metadata_divides_time_keys_only() -> None:
    """At speed K every time-valued key is the manifest's value / K (auto: the
    profile's cold start / K); the other keys are the manifest's, and the live
    scaler's parser accepts the result."""
    so = load_scaledobject(DEFAULT_SCALEDOBJECT)
    meta = scaled_metadata(so, 10.0, "http://127.0.0.1:1", "127.0.0.1:2")
    settings = parse_settings(meta)
    assert settings.lead_time_seconds == pytest.approx(15.0)  # auto -> 150 s cold start / 10
    assert settings.scale_down_stabilization_seconds == pytest.approx(30.0)
    assert settings.stale_after_seconds == pytest.approx(6.0)
    assert settings.fallback_after_seconds == pytest.approx(18.0)
    assert settings.node_lead_time_seconds == pytest.approx(18.0)
    assert meta["prometheusAddress"] == "http://127.0.0.1:1"
    for key, value in so.trigger.metadata.items():
        if key not in (*TIME_KEYS, "prometheusAddress", "scalerAddress"):
            assert meta[key] == str(value)
    same = scaled_metadata(so, 1.0, "http://127.0.0.1:1", "x")
    assert same["leadTimeSeconds"] == so.trigger.metadata["leadTimeSeconds"]


def test_scaler_flags_divide_intervals() -> None:
    """prescaler serve's refresh, refit, forecast step and rate window are / K."""
    flags = scaler_flags(5.0)
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    assert float(values["--refresh-seconds"]) == 1.0
    assert float(values["--refit-seconds"]) == 120.0
    assert float(values["--forecast-step-seconds"]) == 3.0
    assert float(values["--rate-window-seconds"]) == 24.0
    odd = dict(zip(*(iter(scaler_flags(5.8)),) * 2, strict=True))
    args = build_parser().parse_args(["serve", *(x for kv in odd.items() for x in kv)])
    from scaler.cli import _check

    assert _check(args) is None  # serve accepts them at any speed


@pytest.mark.parametrize(
    "argv",
    [["--speed", "nan"], ["--speed", "-1"], ["--duration", "0"], ["--policy", "oracle"]],
)
def test_cli_rejects_bad_flags(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """NaN, negatives and unknown policies are usage errors (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["stack", *argv])
    assert exc.value.code == 2


class _OneReplica:
    def __init__(self, url: str) -> None:
        self.url = url
        self.outstanding = 0

    def routable(self) -> list[_OneReplica]:
        return [self]

    async def wait_routable(self, timeout_s: float) -> bool:
        return True


def test_loadgen_ends_each_request_once() -> None:
    """Requests replayed against one emulator: completions carry TTFT and E2E, a
    request beyond the model's length is rejected with vLLM's message, and every
    request ends exactly once."""
    workload = Workload(
        arrival_s=np.array([0.0, 0.05, 0.1, 0.15]),
        prompt_tokens=np.array([100, 200, 50_000, 10], dtype=np.int64),
        output_tokens=np.array([5, 3, 4, 1], dtype=np.int64),
        name="unit",
        duration_s=1.0,
    )

    async def main() -> LoadGenerator:
        async with async_emulator() as server:
            lg = LoadGenerator(workload, _OneReplica(server.url), timeout_s=30.0)
            await lg.run(Clock(time.monotonic(), 1.0), asyncio.Event())
            return lg

    lg = asyncio.run(main())
    lg.check()
    assert lg.status.tolist() == [COMPLETED, COMPLETED, REJECTED, COMPLETED]
    assert np.all(np.isfinite(lg.ttft_s[[0, 1, 3]]))
    assert np.all(lg.e2e_s[[0, 1, 3]] >= lg.ttft_s[[0, 1, 3]])
    assert len(lg.reasons) == 1 and "maximum context length" in next(iter(lg.reasons))


def test_missing_prometheus_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the prometheus binary the command says how to install it, in one line,
    and exits 1 before starting anything."""
    import stack.processes

    monkeypatch.setattr(stack.processes, "prometheus_binary", lambda: None)
    args = build_parser().parse_args(["stack", "--duration", "30", "--no-view"])
    assert args.func(args) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "apt-get install -y prometheus" in err
