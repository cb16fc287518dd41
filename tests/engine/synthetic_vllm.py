"""Measurements a vLLM server *would* give, made with the engine model from a known profile.

The profile-fit tests need data whose truth is known: a ``vllm bench serve``
result and a sequence of /metrics pages, produced by the engine from a
profile with altered step-time figures, so a fit from the unaltered profile
can be checked against the truth.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

from engine.metrics import ServerInfo, render_metrics
from engine.metrics_windows import MetricsPage
from engine.percentile import percentile
from engine.profile_types import Profile
from engine.replica import Replica
from engine.requests import Request, RequestRecord
from engine.serving_replay import ServingLoad, replay_load


def synthetic_bench_document(
    profile: Profile, load: ServingLoad, *, tails: bool = False
) -> dict[str, Any]:
    """What ``vllm bench serve --save-result`` would write for ``load`` on ``profile``
    (with ``tails``, the mean ITL and the p90 and p99s that ``--metric-percentiles
    90,99`` adds)."""
    out = replay_load(profile, load)
    assert out.median_itl_s is not None  # replayed per token
    duration = out.duration_s
    total_in = load.num_requests * load.prompt_tokens
    total_out = load.num_requests * load.output_tokens
    return {
        "date": "synthetic",
        "endpoint_type": "openai",
        "backend": "openai",
        "model_id": profile.model.hf_id,
        "num_prompts": load.num_requests,
        "request_rate": "inf" if load.request_rate is None else load.request_rate,
        "burstiness": 1.0,
        "max_concurrency": load.max_concurrency,
        "duration": duration,
        "completed": load.num_requests,
        "failed": 0,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": load.num_requests / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "median_ttft_ms": out.median_ttft_s * 1e3,
        "median_tpot_ms": out.median_tpot_s * 1e3,
        "median_itl_ms": out.median_itl_s * 1e3,
        **(
            {
                "mean_itl_ms": statistics.fmean(out.itls) * 1e3,
                "p99_itl_ms": percentile(out.itls, 99) * 1e3,
                "p90_ttft_ms": percentile(out.ttfts, 90) * 1e3,
                "p99_ttft_ms": percentile(out.ttfts, 99) * 1e3,
            }
            if tails
            else {}
        ),
    }


def synthetic_pages(
    profile: Profile,
    phases: list[tuple[int, float]],
    *,
    prompt_tokens: int,
    output_tokens: int,
    every_s: float = 1.0,
    join_over_s: float = 5.0,
    think_s: float = 0.05,
    seed: int = 0,
) -> list[MetricsPage]:
    """/metrics pages every ``every_s`` while closed-loop clients keep ``concurrency``
    requests in flight, phase by phase: ``phases`` is [(concurrency, seconds)].

    Clients a phase adds join one by one over ``join_over_s`` (out of step, as
    in a steady service; the fit assumes so, see ``engine.profile_fit``); a
    client pauses a random 0 to 2 x ``think_s`` between a response and its
    next request (a real client's round trip: arrivals fall anywhere in a step).
    """
    rng = random.Random(seed)
    thinking: list[float] = []
    replica = Replica(profile)
    server = ServerInfo(
        num_gpu_blocks=profile.kv_blocks,
        block_size=profile.vllm.block_size,
        max_model_len=profile.vllm.max_model_len,
    )
    pages: list[MetricsPage] = []
    live: set[str] = set()
    serial = 0
    t = 0.0
    next_page = 0.0
    for concurrency, seconds in phases:
        phase_end = t + seconds
        added = max(0, concurrency - len(live))
        joins = [t + i * join_over_s / added for i in range(added)]
        target_live = len(live)
        while t < phase_end:
            while joins and joins[0] <= t:
                joins.pop(0)
                target_live += 1
            target_live = min(target_live, concurrency)
            thinking = [x for x in thinking if x > t]
            while len(live) + len(thinking) < target_live:
                rid = f"r{serial}"
                serial += 1
                replica.submit(Request(rid, t, prompt_tokens, output_tokens))
                live.add(rid)
            next_join = joins[0] if joins else None
            step = replica.next_event_time()
            wake = min(thinking) if thinking else None
            target = min(x for x in (step, next_page, phase_end, next_join, wake) if x is not None)
            for rec in replica.advance_to(target):
                live.discard(rec.request_id)
                thinking.append(max(target, rec.finish_s) + rng.uniform(0.0, 2.0 * think_s))
            t = target
            if t >= next_page:
                text = render_metrics(
                    replica.metrics_snapshot(), model_name="m", version="v0.32", server=server
                )
                pages.append(MetricsPage(t, text.decode()))
                next_page += every_s
    return pages


def bench_files(profile: Profile, folder: Path, requests: int, *, tails: bool = False) -> list[str]:
    """Two synthetic ``vllm bench serve`` runs of ``profile`` at 8 clients, 128- and
    1024-token prompts (128 out), written to ``folder``: the ``--bench-result``
    arguments of a fit that can tell a fixed time from prefill."""
    args: list[str] = []
    for prompt in (128, 1024):
        doc = synthetic_bench_document(
            profile, ServingLoad(requests, prompt, 128, max_concurrency=8), tails=tails
        )
        path = folder / f"run-{prompt}.json"
        path.write_text(json.dumps(doc))
        args += ["--bench-result", str(path)]
    return args


def synthetic_idle_document(
    profile: Profile, pauses_s: list[float], prompt: int = 128, output: int = 16
) -> dict[str, Any]:
    """What ``prescaler engine load --idle-pauses`` would save from ``profile``: one
    request at a time, each ``pauses_s[i - 1]`` after the one before it ended (the
    first at 1 s, after the replica sat idle since 0); gaps even between first and
    last token."""
    replica = Replica(profile)
    starts: list[float] = []
    ttfts: list[float] = []
    itls: list[list[float]] = []
    t = 1.0
    for i, pause in enumerate([0.0, *pauses_s]):
        t += pause
        replica.advance_to(t)
        replica.submit(Request(f"r{i}", t, prompt, output))
        done: list[RequestRecord] = []
        while not done:
            step = replica.next_event_time()
            assert step is not None
            done = replica.advance_to(step)
        [record] = done
        assert record.first_token_s is not None
        starts.append(t - 1.0)
        ttfts.append(record.first_token_s - t)
        itls.append([(record.finish_s - record.first_token_s) / (output - 1)] * (output - 1))
        t = record.finish_s
    n = len(starts)
    return {
        "completed": n,
        "total_input_tokens": n * prompt,
        "total_output_tokens": n * output,
        "start_times": starts,
        "ttfts": ttfts,
        "itls": itls,
        "errors": [""] * n,
        "input_lens": [prompt] * n,
        "output_lens": [output] * n,
    }
