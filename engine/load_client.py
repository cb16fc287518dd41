"""A `vllm bench serve`-like client: put a load on a server, measure what its clients see.

Behind `prescaler engine load` and `prescaler engine check --url`: streamed
``/v1/completions`` requests of random, distinct token ids (no prefix cache
helps) and exact output lengths (``ignore_eos``), all at once, at a Poisson
rate or through at most N clients. The result document has the field names
of ``vllm bench serve --save-result --save-detailed`` plus the send times
(``start_times``, so a replay can send the same load at the same moments)
and where output lengths came from (``output_token_counts``). A stream with
no token is a failed request. The statistics (``result_document``) are pure.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from engine.percentile import percentile

#: Percentiles written for TTFT, TPOT, ITL and e2e latency (vLLM's ``p{N}_{metric}_ms``).
PERCENTILES: tuple[int, ...] = (50, 90, 99)
#: Prompt token ids are drawn from this range (no special token in any common vocabulary).
TOKEN_IDS = (3, 1024)


class LoadError(RuntimeError):
    """The server could not be loaded (which URL, and why)."""


@dataclass(frozen=True)
class LoadSpec:
    """The load: ``num_requests`` of ``prompt_tokens`` + ``output_tokens``.

    ``request_rate`` None sends them all at once (capped by ``max_concurrency``
    if set); otherwise Poisson arrivals at that mean rate, seeded.
    ``idle_pauses_s`` instead sends them one at a time, each that many seconds
    after the previous one ended, the pauses in a seeded shuffled order (each
    as often as the others): the input an idle wake-up is fitted from.
    """

    num_requests: int
    prompt_tokens: int
    output_tokens: int
    max_concurrency: int | None = None
    request_rate: float | None = None
    seed: int = 0
    idle_pauses_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_requests", "prompt_tokens", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"load: {name} must be >= 1, got {getattr(self, name)}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"load: max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"load: request_rate must be > 0, got {self.request_rate}")
        if any(not (p >= 0.0 and p < float("inf")) for p in self.idle_pauses_s):
            raise ValueError(f"load: idle pauses must be seconds >= 0, got {self.idle_pauses_s}")
        if self.idle_pauses_s and (
            self.request_rate is not None or self.max_concurrency not in (None, 1)
        ):
            raise ValueError(
                "load: idle pauses send one request at a time; leave out the request rate "
                "and the concurrency"
            )

    def pauses(self) -> list[float]:
        """The idle pause before each request after the first (``idle_pauses_s``)."""
        k = len(self.idle_pauses_s)
        if not k:
            return []
        need = self.num_requests - 1
        pauses = list(self.idle_pauses_s) * (-(-need // k))
        random.Random(self.seed).shuffle(pauses)
        return pauses[:need]

    def send_offsets(self) -> list[float]:
        """When each request is due (seconds from the start), before any concurrency cap."""
        if self.request_rate is None:
            return [0.0] * self.num_requests
        rng = random.Random(self.seed)
        t, out = 0.0, []
        for _ in range(self.num_requests):
            out.append(t)
            t += rng.expovariate(self.request_rate)
        return out


@dataclass
class RequestOutcome:
    """One request as its client saw it (seconds)."""

    start_s: float
    prompt_tokens: int
    ttft_s: float | None = None
    itls: list[float] = field(default_factory=list)
    latency_s: float = 0.0
    output_tokens: int = 0
    error: str = ""
    #: ``output_tokens`` is the server's own count (its usage); else one per streamed chunk
    tokens_from_usage: bool = False


def _stats(prefix: str, values_s: Sequence[float]) -> dict[str, float]:
    ms = [v * 1e3 for v in values_s]
    out = {
        f"mean_{prefix}_ms": statistics.fmean(ms) if ms else 0.0,
        f"median_{prefix}_ms": statistics.median(ms) if ms else 0.0,
        f"std_{prefix}_ms": statistics.pstdev(ms) if len(ms) > 1 else 0.0,
    }
    out.update({f"p{p}_{prefix}_ms": percentile(ms, p) if ms else 0.0 for p in PERCENTILES})
    return out


def result_document(
    spec: LoadSpec, outcomes: Sequence[RequestOutcome], duration_s: float, model_id: str
) -> dict[str, Any]:
    """The outcomes in ``vllm bench serve --save-result --save-detailed``'s field names."""
    done = [o for o in outcomes if not o.error and o.ttft_s is not None]
    ttfts = [o.ttft_s for o in done if o.ttft_s is not None]
    itls = [gap for o in done for gap in o.itls]
    tpots = [
        (o.latency_s - o.ttft_s) / (o.output_tokens - 1)
        for o in done
        if o.ttft_s is not None and o.output_tokens > 1
    ]
    total_in = sum(o.prompt_tokens for o in done)
    total_out = sum(o.output_tokens for o in done)
    first = min((o.start_s for o in outcomes), default=0.0)
    duration = max(duration_s, 1e-9)
    return {
        "date": time.strftime("%Y%m%d-%H%M%S", time.gmtime()),
        "backend": "openai",
        "endpoint_type": "openai",
        "model_id": model_id,
        "num_prompts": spec.num_requests,
        "request_rate": "inf" if spec.request_rate is None else spec.request_rate,
        "burstiness": 1.0,
        "max_concurrency": 1 if spec.idle_pauses_s else spec.max_concurrency,
        **({"idle_pauses_s": list(spec.idle_pauses_s)} if spec.idle_pauses_s else {}),
        "duration": duration,
        "completed": len(done),
        "failed": len(outcomes) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        **_stats("ttft", ttfts),
        **_stats("tpot", tpots),
        **_stats("itl", itls),
        **_stats("e2el", [o.latency_s for o in done]),
        "input_lens": [o.prompt_tokens for o in outcomes],
        "output_lens": [o.output_tokens for o in outcomes],
        "ttfts": [o.ttft_s or 0.0 for o in outcomes],
        "itls": [o.itls for o in outcomes],
        "errors": [o.error for o in outcomes],
        "start_times": [o.start_s - first for o in outcomes],
        "output_token_counts": token_counts(done),
    }


def token_counts(done: Sequence[RequestOutcome]) -> str:
    """Where the output lengths came from: ``usage`` (the server's count, for every
    successful request), ``chunks`` (one per streamed chunk: the server sent no
    usage), or ``mixed``."""
    from_usage = sum(o.tokens_from_usage for o in done)
    if from_usage == len(done):
        return "usage"
    return "chunks" if from_usage == 0 else "mixed"


async def _model_id(session: aiohttp.ClientSession, url: str) -> str:
    try:
        async with session.get(url + "/v1/models") as resp:
            resp.raise_for_status()
            data = await resp.json()
        return str(data["data"][0]["id"])
    except (aiohttp.ClientError, OSError, KeyError, IndexError, ValueError) as exc:
        raise LoadError(f"{url}/v1/models: cannot read the served model ({exc})") from None


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompt: list[int],
    output: int,
    out: RequestOutcome,
) -> None:
    """Stream one completion into ``out``.

    Each streamed chunk with a choice is one arrival (TTFT, then one gap each),
    as ``vllm bench serve`` times them; the output length is the server's
    ``usage.completion_tokens`` (asked for with ``stream_options``, as the
    benchmark does), since a server may put several tokens in one chunk. A
    server that sends no usage gets one token counted per chunk (too few
    where it coalesces). A stream that ends without a token, or carries an
    error event, is a failed request, never one with a TTFT of 0.
    """
    body = {
        "model": model, "prompt": prompt, "max_tokens": output, "ignore_eos": True,
        "stream": True, "temperature": 0.0, "stream_options": {"include_usage": True},
    }  # fmt: skip
    start = time.perf_counter()
    last: float | None = None
    chunks = 0
    usage_tokens: int | None = None
    try:
        async with session.post(url + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:
                    out.error = f"error event in the stream: {_error_message(chunk['error'])}"
                    continue
                usage = chunk.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    usage_tokens = usage["completion_tokens"]
                if not chunk.get("choices"):
                    continue  # the usage chunk
                now = time.perf_counter()
                if last is None:
                    out.ttft_s = now - start
                else:
                    out.itls.append(now - last)
                last = now
                chunks += 1
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.latency_s = time.perf_counter() - start
    out.output_tokens = chunks if usage_tokens is None else usage_tokens
    out.tokens_from_usage = usage_tokens is not None
    if not out.error and out.ttft_s is None:
        out.error = "HTTP 200 but the stream carried no token"


def _error_message(error: Any) -> str:
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])[:200]
    return str(error)[:200]


async def run_load(url: str, spec: LoadSpec, model: str | None = None) -> dict[str, Any]:
    """Put ``spec`` on the server at ``url`` (its root, no path) and return the result document."""
    base = url.rstrip("/")
    rng = random.Random(spec.seed + 1)
    prompts = [
        [rng.randrange(*TOKEN_IDS) for _ in range(spec.prompt_tokens)]
        for _ in range(spec.num_requests)
    ]
    offsets = spec.send_offsets()
    cap = asyncio.Semaphore(spec.max_concurrency or spec.num_requests)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    # no pool limit (aiohttp's default is 100 connections): the semaphore is the only cap,
    # so "all at once" is all at once, as in vllm bench serve
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        model_id = model or await _model_id(session, base)
        outcomes: list[RequestOutcome] = []
        started = time.perf_counter()

        async def send(i: int) -> None:
            await asyncio.sleep(max(0.0, offsets[i] - (time.perf_counter() - started)))
            async with cap:
                out = RequestOutcome(time.perf_counter() - started, spec.prompt_tokens)
                outcomes.append(out)
                await _one(session, base, model_id, prompts[i], spec.output_tokens, out)

        async def one_at_a_time() -> None:
            for i, pause in enumerate([0.0, *spec.pauses()]):
                await asyncio.sleep(pause)
                out = RequestOutcome(time.perf_counter() - started, spec.prompt_tokens)
                outcomes.append(out)
                await _one(session, base, model_id, prompts[i], spec.output_tokens, out)

        if spec.idle_pauses_s:
            await one_at_a_time()
        else:
            await asyncio.gather(*(send(i) for i in range(spec.num_requests)))
        duration = time.perf_counter() - started
    outcomes.sort(key=lambda o: o.start_s)
    if not any(o.ttft_s is not None and not o.error for o in outcomes):
        first_error = next((o.error for o in outcomes if o.error), "no token came back")
        raise LoadError(f"{base}: no request succeeded ({first_error})")
    return result_document(spec, outcomes, duration, model_id)
