"""The decider's side of ``prescaler serve``: what its publisher sends (an
answer's staleness, an answer again after a re-registration; the speed its
config carries), and a bad
object that is skipped rather than ending the process (the decider's loop
for real, over a real socket pair, in this process)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

from decision.capacity import capacity_for
from decision.settings import parse_settings
from scaler.decider import Publisher, run
from scaler.decider_wire import (
    Answer,
    DeciderConfig,
    ObjectKey,
    Registrations,
    TableUpdate,
    read_message,
    write_message,
)
from scaler.sources import SourceSpec
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry
from tests.scaler.test_state import FakeSource, make_state, meta, queue_of, wait_until

KEY = ("ns", "so")


def _answers(update: TableUpdate | None) -> dict[ObjectKey, Answer]:
    return {} if update is None else dict(update.answers)


async def test_a_stale_answer_carries_when_its_data_was_last_fresh() -> None:
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), queue_of(waiting=12))
    state = make_state(source)
    state.register(*KEY, meta(staleAfterSeconds="0.3", fallbackAfterSeconds="60"))
    publisher = Publisher(state)
    await state.start()
    try:
        await wait_until(lambda: state.decision(*KEY).reason == "queue")
        fresh = publisher.sweep()
        assert fresh is not None and fresh.reset
        assert fresh.answers == [(KEY, fresh.answers[0][1])]
        assert fresh.answers[0][1].stale_since_s is None
        source.fail = True
        failed_at = time.time()
        await wait_until(lambda: state.decision(*KEY).reason == "stale_hold")
        stale = _answers(publisher.sweep())[KEY]
        assert stale.reason == "stale_hold"
        since = stale.stale_since_s
        assert since is not None and failed_at - 1.0 <= since <= failed_at + 0.1
        refreshes = state.refreshes
        await wait_until(lambda: state.refreshes >= refreshes + 2)
        assert KEY not in _answers(publisher.sweep())  # the same instant: not sent again
        publisher.forget(KEY)  # the serving process registered it anew
        assert _answers(publisher.sweep())[KEY] == stale
    finally:
        await state.stop()


async def test_a_bad_object_is_skipped_and_a_registered_one_is_answered_again() -> None:
    serving, child = socket.socketpair()
    decider = asyncio.create_task(run(child))
    reader, writer = await asyncio.open_unix_connection(sock=serving)
    good = parse_settings({"metricsUrls": "http://127.0.0.1:9/metrics", "forecast": "off"})
    bad = dataclasses.replace(good, metrics_urls=())  # names no data source
    bad_key, good_key = ("ns", "bad"), ("ns", "good")

    async def answered(key: ObjectKey) -> None:
        while True:
            update = await asyncio.wait_for(read_message(reader), 10)
            assert isinstance(update, TableUpdate)
            if key in dict(update.answers):
                return

    try:
        write_message(writer, DeciderConfig(refresh_interval_s=0.2))
        write_message(writer, Registrations([(bad_key, bad), (good_key, good)]))
        await answered(good_key)
        write_message(writer, Registrations([(good_key, good)]))  # e.g. after a removal
        await answered(good_key)
        assert not decider.done()
    finally:
        writer.close()
        await asyncio.wait_for(decider, 10)


def test_the_speed_reaches_the_deciders_trackers() -> None:
    """``stack.speed`` runs ``serve`` at a speed: the decider's state, built
    from its config, counts a profile's capacity at it."""
    config = DeciderConfig(speed=4.0)
    state = ScalerState(telemetry=ScalerTelemetry(part="loop"), **config.state_kwargs())
    state.register("ns", "llama", meta(profile="llama-3-8b@g5.xlarge"))
    settings = state.objects[("ns", "llama")].settings
    assert state.objects[("ns", "llama")].tracker.capacity(0.0) == capacity_for(settings, 4.0)
    assert DeciderConfig().state_kwargs()["speed"] == 1.0


def test_the_fit_window_reaches_the_deciders_trackers() -> None:
    """``serve --fit-window-seconds`` sizes every tracker's history; without
    it the state's default (three days) stands."""
    short = ScalerState(
        telemetry=ScalerTelemetry(part="loop"),
        **DeciderConfig(fit_window_s=7200.0).state_kwargs(),
    )
    default = ScalerState(telemetry=ScalerTelemetry(part="loop"), **DeciderConfig().state_kwargs())
    assert short.tracker_config.fit_window_s == 7200.0
    assert short.fit_bins == 7200 // 15
    assert default.tracker_config.fit_window_s == 3 * 86400.0
    assert default.fit_bins == 3 * 86400 // 15
