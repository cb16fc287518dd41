"""``prescaler engine load``: put a benchmark load on a running server and save what it saw.

A thin shell around ``engine.load_client``: the load to fit a profile from
(run it while ``fit-profile --metrics-url`` scrapes, or fit from the result
file it writes), or to check one with (``prescaler engine check``). Its
result file has ``vllm bench serve``'s field names, so either tool's file
feeds either command.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from engine.cli_shell import run_reported, write_json
from engine.load_client import LoadError, LoadSpec, run_load

COMMAND = "prescaler engine load"


def add_load_arguments(parser: Any, *, required: bool) -> None:
    """The load's flags (``vllm bench serve``'s names), shared with ``engine check``."""
    parser.add_argument(
        "--num-prompts", type=int, default=100, help="requests to send (default %(default)s)"
    )
    parser.add_argument(
        "--input-len", type=int, required=required, help="prompt tokens per request"
    )
    parser.add_argument(
        "--output-len", type=int, required=required, help="output tokens per request"
    )
    parser.add_argument(
        "--max-concurrency", type=int, help="requests in flight at most (default: no cap)"
    )
    parser.add_argument(
        "--request-rate",
        type=float,
        help="mean requests/s, Poisson arrivals (default: all at once)",
    )
    parser.add_argument(
        "--idle-pauses",
        type=_pauses,
        default=(),
        help="comma-separated seconds, e.g. 0,0.02,0.1,0.3,0.7,1.5: send one request at a "
        "time, each after one of these idle pauses (shuffled, each as often): the input "
        "`fit-profile --wake-result` reads an idle server's wake-up from",
    )
    parser.add_argument("--seed", type=int, default=0, help="prompts and arrivals (default 0)")
    parser.add_argument(
        "--served-model-name", help="the model name to send (default: the server's)"
    )


def _pauses(text: str) -> tuple[float, ...]:
    try:
        pauses = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated seconds, e.g. 0,0.1,1.5; got {text!r}"
        ) from None
    if any(not (p >= 0.0 and p < float("inf")) for p in pauses):
        raise argparse.ArgumentTypeError(f"pauses must be seconds >= 0, got {text!r}")
    return pauses


def load_spec(args: argparse.Namespace) -> LoadSpec:
    return LoadSpec(
        num_requests=args.num_prompts,
        prompt_tokens=args.input_len,
        output_tokens=args.output_len,
        max_concurrency=args.max_concurrency,
        request_rate=args.request_rate,
        seed=args.seed,
        idle_pauses_s=args.idle_pauses,
    )


def put_load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run the load the flags describe against ``url``; the result document."""
    return asyncio.run(run_load(url, load_spec(args), model=args.served_model_name))


def register_load(engine_sub: Any) -> None:
    """Add ``load`` under ``prescaler engine``."""
    load = engine_sub.add_parser(
        "load",
        help="put a vllm-bench-serve-like load on a server and save what its clients saw",
        description=(
            "Send streamed /v1/completions requests of exact prompt and output lengths "
            "(random token ids, ignore_eos) all at once, at a Poisson rate, or through "
            "at most N clients; print TTFT/ITL percentiles and throughput and save the "
            "result in vllm bench serve's field names (with --save-detailed's lists)."
        ),
    )
    load.add_argument("url", help="the server's root URL, e.g. http://127.0.0.1:8000")
    add_load_arguments(load, required=True)
    load.add_argument("--save-result", help="write the result JSON here")
    load.set_defaults(func=run_load_command)


def run_load_command(args: argparse.Namespace) -> int:
    doc = run_reported(COMMAND, (ValueError, LoadError), lambda: _load(args), summary)
    return 2 if doc is None else 0


def _load(args: argparse.Namespace) -> dict[str, Any]:
    doc = put_load(args.url, args)
    if args.save_result:
        write_json(args.save_result, doc)
    return doc


def summary(doc: dict[str, Any]) -> str:
    lines = [
        f"{doc['completed']} of {doc['num_prompts']} requests in {doc['duration']:.2f} s "
        f"({doc['failed']} failed); output {doc['output_throughput']:.1f} tokens/s",
    ]
    for metric in ("ttft", "itl", "tpot"):
        lines.append(
            f"  {metric.upper():4} ms: median {doc[f'median_{metric}_ms']:.2f}  "
            f"p90 {doc[f'p90_{metric}_ms']:.2f}  p99 {doc[f'p99_{metric}_ms']:.2f}"
        )
    if doc.get("output_token_counts", "usage") != "usage":
        lines.append(
            "note: the server sent no usage for some requests: their output tokens were "
            "counted one per streamed chunk (too few where it sends several tokens in one)"
        )
    return "\n".join(lines) + "\n"
