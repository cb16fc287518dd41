"""Replaying a list of requests through one fresh replica, for the engine tests."""

from __future__ import annotations

from collections.abc import Iterable

from engine.replica import Replica
from engine.requests import Request, RequestRecord
from engine.scheduler import ProfileLike


def run_requests(
    profile: ProfileLike,
    requests: Iterable[Request],
    *,
    start_s: float = 0.0,
    jump: bool = True,
) -> tuple[Replica, list[RequestRecord]]:
    """Replay `requests` (any order) through a fresh replica until all finish."""
    replica = Replica(profile, start_s=start_s, jump=jump)
    records: list[RequestRecord] = []
    for req in sorted(requests, key=lambda r: r.arrival_s):
        records.extend(replica.advance_to(req.arrival_s))
        replica.submit(req)
    while (t := replica.next_event_time()) is not None:
        records.extend(replica.advance_to(t))
    return replica, records


def run_looking(profile: ProfileLike, requests: Iterable[Request]) -> list[RequestRecord]:
    """`run_requests`, but the driver asks when the next event and the next token
    come before each arrival (as the simulator and the emulator do): a held step
    must not be planned by looking."""
    replica = Replica(profile)
    records: list[RequestRecord] = []
    for req in sorted(requests, key=lambda r: r.arrival_s):
        replica.next_event_time()
        replica.next_token_time()
        records.extend(replica.advance_to(req.arrival_s))
        replica.submit(req)
    while (t := replica.next_event_time()) is not None:
        records.extend(replica.advance_to(t))
    return records
