"""The replica driver's model clock: a faster clock or grouped streaming changes
when the loop wakes, never what the model computes."""

from __future__ import annotations

import pytest

from engine.emulator.driver import ModelClock, ReplicaDriver
from engine.profiles import get_profile
from engine.replica import Replica
from engine.requests import Request, RequestRecord

PROFILE = "llama-3-8b@g5.xlarge"


async def _served(clock: ModelClock) -> RequestRecord:
    driver = ReplicaDriver(Replica(get_profile(PROFILE)), clock)
    driver.start()
    try:
        stream = driver.submit("r", 512, 48, "length")
        while True:
            _, record = await stream.wait()
            if record is not None:
                return record
    finally:
        await driver.stop()


def _offline(arrival_s: float) -> RequestRecord:
    """The same request on a replica stepped by the model alone (no loop, no clock)."""
    replica = Replica(get_profile(PROFILE))
    replica.advance_to(arrival_s)
    replica.submit(Request("r", arrival_s, 512, 48, "length"))
    [record] = replica.advance_to(arrival_s + 600.0)
    return record


@pytest.mark.parametrize(
    "clock",
    [ModelClock(speed=40.0), ModelClock(speed=40.0, stream_quantum_s=0.05)],
    ids=["every-token", "event-wakeups"],
)
async def test_a_fast_clock_keeps_first_token_and_completion_exact(clock: ModelClock) -> None:
    served = await _served(clock)
    offline = _offline(served.arrival_s)
    assert served.output_tokens == 48
    assert served.first_token_s == pytest.approx(offline.first_token_s, abs=1e-9)
    assert served.finish_s == pytest.approx(offline.finish_s, abs=1e-9)


def test_model_clock_is_validated() -> None:
    with pytest.raises(ValueError, match="speed"):
        ModelClock(speed=0.0)
    with pytest.raises(ValueError, match="stream_quantum_s"):
        ModelClock(stream_quantum_s=0.0)


async def test_the_server_runs_its_replica_on_the_settings_clock() -> None:
    """``EmulatorSettings.clock`` reaches the driver: a request served over HTTP on a
    fast clock is answered whole, with the model's own token count."""
    import aiohttp

    from engine.emulator import EmulatorServer, EmulatorSettings

    clock = ModelClock(speed=40.0, stream_quantum_s=0.05)
    async with EmulatorServer.running(EmulatorSettings(clock=clock)) as server:
        assert server.driver.clock == clock
        body = {"model": "meta-llama/Meta-Llama-3-8B-Instruct", "prompt": "x", "max_tokens": 32}
        async with (
            aiohttp.ClientSession() as http,
            http.post(server.url + "/v1/completions", json=body) as resp,
        ):
            answer = await resp.json()
    assert answer["usage"]["completion_tokens"] == 32
    assert answer["choices"][0]["finish_reason"] == "length"
