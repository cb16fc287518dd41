"""`prescaler emulate`: one emulated vLLM replica on a port (flags only)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from engine.emulator.driver import WALL_CLOCK, ModelClock
from engine.metrics import METRICS_VERSIONS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "emulate",
        help="serve vLLM's HTTP API and /metrics from the replica model (no GPU)",
        description="One emulated vLLM replica: /health, /metrics, /v1/models, "
        "/v1/completions, /v1/chat/completions, timed by the profile's step-time model.",
    )
    p.add_argument(
        "--profile",
        default="llama-3-8b@g5.xlarge",
        help="engine profile, e.g. llama-3-8b@p5.48xlarge (default %(default)s)",
    )
    p.add_argument("--port", type=int, default=8000, help="TCP port (0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    p.add_argument(
        "--served-model-name",
        default=None,
        help="model name clients send and metrics carry (default: the HF id)",
    )
    p.add_argument(
        "--metrics-version",
        choices=METRICS_VERSIONS,
        default="v1",
        help="vLLM metric set: v1 (0.12), v0.32 (0.32 and later: waiting by reason, "
        "sleep state, admission rejections, cache config) or v0 (0.6.x, Neuron) (default v1)",
    )
    p.add_argument(
        "--api-server-count",
        type=int,
        default=1,
        help="as vLLM's flag: above 1, /metrics is a multiprocess registry with no "
        "samples until the first request (default 1)",
    )
    p.add_argument("--max-num-seqs", type=int, default=None, help="override max_num_seqs")
    p.add_argument("--num-gpu-blocks", type=int, default=None, help="override the KV blocks")
    p.add_argument("--max-model-len", type=int, default=None, help="override max_model_len")
    p.add_argument(
        "--default-max-tokens",
        type=int,
        default=128,
        help="output tokens when a request gives no max_tokens (default 128)",
    )
    p.add_argument(
        "--max-num-queued-reqs",
        type=int,
        default=None,
        help="as vLLM's flag: refuse (503) a request that would make more than this "
        "many waiting + running, counted in vllm:admission_rejections_total",
    )
    p.add_argument(
        "--stall-seed",
        type=int,
        default=0,
        help="seed of the replica's stalls, where its profile has any (replicas side by "
        "side take different seeds; default 0)",
    )
    p.set_defaults(func=emulate_command)


def emulate_command(args: argparse.Namespace, *, clock: ModelClock = WALL_CLOCK) -> int:
    """Serve until interrupted; ``clock`` runs the model faster (the stack's
    compressed time) without a flag of its own."""
    from engine.emulator.server import EmulatorSettings, serve_forever

    if not 0 <= args.port <= 65535:
        print(f"prescaler emulate: --port must be 0-65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        settings = EmulatorSettings(
            clock=clock,
            profile=args.profile,
            served_model_name=args.served_model_name,
            metrics_version=args.metrics_version,
            max_num_seqs=args.max_num_seqs,
            num_gpu_blocks=args.num_gpu_blocks,
            max_model_len=args.max_model_len,
            default_max_tokens=args.default_max_tokens,
            api_server_count=args.api_server_count,
            max_num_queued_reqs=args.max_num_queued_reqs,
            stall_seed=args.stall_seed,
        )
        settings.build_profile()
    except (ValueError, KeyError) as exc:
        print(f"prescaler emulate: {exc}", file=sys.stderr)
        return 2
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_forever(settings, args.host, args.port))
    except OSError as exc:
        # The port is taken, the address is not this host's, ...: say so
        # in one line, not a traceback.
        print(f"prescaler emulate: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
