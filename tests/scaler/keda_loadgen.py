"""The scaler bench's load generator: polls a KEDA external scaler the way
KEDA's operator does, in its own process so the client's CPU never shares an
event loop or a GIL with the server it measures.

For each ScaledObject, once per ``interval_s`` (1 s unless the plan says
otherwise) from a seeded random phase (KEDA's pollers are not synchronised):
GetMetricSpec, GetMetrics, IsActive, in that order, over ONE shared channel
(KEDA pools one connection per scalerAddress) with round_robin balancing like
KEDA's dialer. Requests arrive as serialized protobuf bytes and replies leave
as bytes (grpcio's pass-through when no serializer is given), so the bytes on
the wire are exactly the caller's messages.

Run: ``python -m tests.scaler.keda_loadgen < plan.json > result.json``. The
plan and the result are JSON: see ``Plan`` and ``run``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import sys
import time
from typing import Any, TypedDict

import grpc

SERVICE = "/externalscaler.ExternalScaler/"
METHODS = ("GetMetricSpec", "GetMetrics", "IsActive")
MAX_ERROR_SAMPLES = 5


class PlanObject(TypedDict):
    name: str
    ref: str  # base64 ScaledObjectRef
    metrics_request: str  # base64 GetMetricsRequest


class Plan(TypedDict, total=False):
    address: str
    start_at: float  # unix seconds, shared by all generators
    seconds: float
    interval_s: float  # each object's poll interval; 0 or absent means 1 s
    timeout_s: float
    seed: int
    objects: list[PlanObject]


PLAN_KEYS = ("address", "start_at", "seconds", "objects")
OBJECT_KEYS = ("name", "ref", "metrics_request")


def plan_problem(plan: object) -> str | None:
    """Why ``plan`` cannot run (a missing key), or None."""
    if not isinstance(plan, dict):
        return "not a JSON object"
    missing = [k for k in PLAN_KEYS if k not in plan]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(plan["objects"], list):
        return "objects is not a list"
    for i, obj in enumerate(plan["objects"]):
        if not isinstance(obj, dict):
            return f"objects[{i}] is not a JSON object"
        missing = [k for k in OBJECT_KEYS if k not in obj]
        if missing:
            return f"objects[{i}] missing {', '.join(missing)}"
    return None


class _Totals:
    """What every object's poller adds to; one event loop, so no lock."""

    def __init__(self) -> None:
        self.polls = 0
        self.errors = 0
        self.warming_up = 0
        self.error_samples: list[str] = []
        # per method: [seconds since start when the poll began, seconds taken]
        self.latencies: dict[str, list[list[float]]] = {m: [] for m in METHODS}
        self.last_metrics: dict[str, str] = {}  # base64 GetMetricsResponse


async def _poll_object(
    channel: grpc.aio.Channel,
    obj: PlanObject,
    start: float,
    end: float,
    phase: float,
    interval: float,
    timeout: float | None,
    totals: _Totals,
) -> None:
    """One object's poll loop on the event loop's clock; a late poll is not
    skipped, the next one starts at once."""
    loop = asyncio.get_running_loop()
    calls = {m: channel.unary_unary(SERVICE + m) for m in METHODS}
    ref = base64.b64decode(obj["ref"])
    requests = {
        "GetMetricSpec": ref,
        "GetMetrics": base64.b64decode(obj["metrics_request"]),
        "IsActive": ref,
    }
    samples: list[str] = []
    last: bytes | None = None
    next_at = start + phase
    while next_at < end:
        delay = next_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        at = loop.time() - start
        try:
            replies: dict[str, bytes] = {}
            for method in METHODS:
                t0 = time.perf_counter()
                replies[method] = await calls[method](requests[method], timeout=timeout)
                totals.latencies[method].append([at, time.perf_counter() - t0])
        except grpc.aio.AioRpcError as err:
            details = err.details() or ""
            if err.code() == grpc.StatusCode.UNAVAILABLE and "warming_up" in details:
                totals.warming_up += 1
            else:
                totals.errors += 1
                if len(samples) < MAX_ERROR_SAMPLES:
                    samples.append(f"{err.code().name}: {details}")
        except Exception as err:  # one poller's surprise must not abort the others' result
            totals.errors += 1
            if len(samples) < MAX_ERROR_SAMPLES:
                samples.append(f"{type(err).__name__}: {err}")
        else:
            totals.polls += 1
            last = replies["GetMetrics"]
        next_at += interval
    room = MAX_ERROR_SAMPLES - len(totals.error_samples)
    totals.error_samples.extend(samples[: max(room, 0)])
    if last is not None:
        totals.last_metrics[obj["name"]] = base64.b64encode(last).decode()


async def run(plan: Plan) -> dict[str, Any]:
    """Poll every object of ``plan`` until ``start_at + seconds``. The result:
    ``polls`` (complete three-call polls), ``errors``, ``warming_up`` (polls
    answered UNAVAILABLE "warming_up"), ``error_samples`` (up to 5),
    ``latencies`` (per method, ``[start offset s, seconds]`` of each successful
    call) and ``last_metrics`` (each object's last GetMetricsResponse, base64)."""
    loop = asyncio.get_running_loop()
    start = loop.time() + (plan["start_at"] - time.time())
    end = start + plan["seconds"]
    interval = plan.get("interval_s") or 1.0
    timeout = plan.get("timeout_s") or None
    rng = random.Random(plan.get("seed", 0))
    totals = _Totals()
    options = [("grpc.lb_policy_name", "round_robin")]
    async with grpc.aio.insecure_channel(plan["address"], options=options) as channel:
        await asyncio.gather(
            *(
                _poll_object(
                    channel, obj, start, end, rng.random() * interval, interval, timeout, totals
                )
                for obj in plan["objects"]
            )
        )
    return {
        "polls": totals.polls,
        "errors": totals.errors,
        "warming_up": totals.warming_up,
        "error_samples": totals.error_samples,
        "latencies": totals.latencies,
        "last_metrics": totals.last_metrics,
    }


def main() -> int:
    try:
        plan: Plan = json.load(sys.stdin)
    except json.JSONDecodeError as err:
        print(f"keda-loadgen: bad plan: {err}", file=sys.stderr)
        return 2
    problem = plan_problem(plan)
    if problem is not None:
        print(f"keda-loadgen: bad plan: {problem}", file=sys.stderr)
        return 2
    result = asyncio.run(run(plan))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
