"""One stack run: start everything, replay the trace, stop everything, summarize.

Time compression (``speed`` K) is one clock everywhere (docs/stack.md,
"``--speed K``"): the trace and the engines run K times faster
(:mod:`stack.speed`), Prometheus and the scaler's intervals and the
trigger's time-valued keys are divided by K, and the controller's loops run
in trace seconds. A run is told what ``prescaler simulate`` is told
(:class:`simulations.sim_inputs.SimInputs`), never anything from inside the
window.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import yaml

from decision.tracker_data import DEFAULT_FIT_WINDOW_S
from engine.profiles import Profile, get_profile
from simulations.autoscaling.scaledobject import ScaledObjectSpec, load_scaledobject, seeds_reactive
from simulations.cluster.pods import ClusterConfig
from simulations.fleet_ledger import timeline_arrays
from simulations.policies import DEFAULT_MAX_REPLICAS
from simulations.runner import Outcome
from simulations.sim_inputs import SimInputs, window_start
from simulations.sim_types import DEFAULT_INITIAL_REPLICAS, SimConfig
from simulations.simulation import SimResult, workload_capacity
from simulations.traffic import TrafficOptions, Workload, load_workload
from stack.controller import ControlPlane
from stack.keda_client import KedaScalerClient
from stack.loadgen import STOPPED, Clock, LoadGenerator
from stack.processes import PrometheusProcess, ScalerProcess, StackError
from stack.view import LiveView, render
from stack.warmup import ANSWER_WALL_S, WarmupDeadline

__all__ = [
    "DEFAULT_SCALEDOBJECT",
    "StackOptions",
    "StackRun",
    "scaled_metadata",
    "scaler_flags",
]

DEFAULT_SCALEDOBJECT = Path(__file__).resolve().parent.parent / (
    "manifests/vllm/gpu/scaledobject.yaml"
)
"""The ScaledObject the manifests ship: its trigger metadata is what the scaler gets."""
TIME_KEYS = (
    "leadTimeSeconds",
    "scaleDownStabilizationSeconds",
    "staleAfterSeconds",
    "fallbackAfterSeconds",
    "nodeLeadTimeSeconds",
)
SCRAPE_S = 15.0
LOOKBACK_S = 300.0
REFRESH_S = 5.0
REFIT_S = 600.0
FORECAST_STEP_S = 15.0
RATE_WINDOW_S = 120.0


@dataclass(frozen=True)
class StackOptions:
    """What ``prescaler stack`` was asked for (seconds are trace seconds)."""

    trace: str
    policy: str = "predictive"
    speed: float = 10.0
    duration_s: float | None = 300.0
    start_s: float = 0.0
    rate_scale: float = 1.0
    seed: int = 0
    profile: str = "llama-3-8b@g5.xlarge"
    slo_ttft_s: float = 1.0
    timeout_s: float = 60.0
    scaledobject: str | None = None
    json_path: str | None = None
    keep: str | None = None
    view: bool | None = None
    scaler_replicas: int = 1
    drain_s: float | None = None
    """Trace seconds to wait after the trace for requests in flight (default timeout + 60)."""
    max_replicas: int = DEFAULT_MAX_REPLICAS
    """The reactive ScaledObject's maxReplicaCount (a predictive run keeps its YAML's)."""
    initial_replicas: int | None = None
    """Fleet Ready at t=0; None: what the traffic before ``start_s`` needs (1 at the start)."""
    rate_window_s: float = RATE_WINDOW_S
    """The scaler's ``rate()`` window, which the warm-up waits out once (tests shorten it:
    the simulator it is compared with is given the same window)."""


def scaled_metadata(
    so: ScaledObjectSpec, speed: float, prometheus_url: str, scaler_address: str
) -> dict[str, str]:
    """The trigger metadata the scaler gets: the manifest's, pointed at the local
    Prometheus, its time-valued keys divided by ``speed`` (see the module docstring)."""
    meta = {k: str(v) for k, v in so.trigger.metadata.items()}
    meta["prometheusAddress"] = prometheus_url
    meta["scalerAddress"] = scaler_address
    settings = so.trigger.settings
    assert settings is not None
    if speed != 1.0:
        lead = settings.lead_time_seconds
        if lead is None:
            lead = get_profile(settings.profile).startup.total_s if settings.profile else 150.0
        values = {
            "leadTimeSeconds": lead,
            "scaleDownStabilizationSeconds": settings.scale_down_stabilization_seconds,
            "staleAfterSeconds": settings.stale_after_seconds,
            "fallbackAfterSeconds": settings.fallback_after_seconds,
            "nodeLeadTimeSeconds": settings.node_lead_time_seconds,
        }
        for key in TIME_KEYS:
            meta[key] = f"{values[key] / speed:.6g}"
    return meta


def scaler_flags(speed: float, rate_window_s: float = RATE_WINDOW_S) -> list[str]:
    """``prescaler serve``'s interval flags at ``speed`` (defaults at 1). Written at
    full precision, the forecast step an exact multiple of the refresh, as serve checks."""
    refresh = REFRESH_S / speed
    step = refresh * round(FORECAST_STEP_S / REFRESH_S)
    return [
        "--refresh-seconds",
        repr(refresh),
        "--refit-seconds",
        repr(REFIT_S / speed),
        "--forecast-step-seconds",
        repr(step),
        "--fit-window-seconds",
        repr(DEFAULT_FIT_WINDOW_S / speed),
        "--rate-window-seconds",
        repr(max(1.0, rate_window_s / speed)),
        "--grace-seconds",
        "1",
    ]


def _namespace(path: Path) -> str:
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "ScaledObject":
            return str((doc.get("metadata") or {}).get("namespace") or "default")
    return "default"


class StackRun:
    """Everything one ``prescaler stack`` run starts, and its results."""

    def __init__(
        self, opts: StackOptions, out: TextIO | None = None, *, workload: Workload | None = None
    ) -> None:
        """``workload`` replaces the trace file (tests replay synthetic bursts)."""
        if not (opts.speed > 0 and math.isfinite(opts.speed)):
            raise ValueError(f"--speed must be a finite number > 0, got {opts.speed}")
        if not opts.rate_window_s >= 2 * SCRAPE_S:
            raise ValueError(f"rate_window_s must be >= {2 * SCRAPE_S:g}, got {opts.rate_window_s}")
        if opts.rate_window_s / opts.speed < 1.0:
            raise ValueError(f"--speed must be <= {opts.rate_window_s:g} (rate windows of >= 1 s)")
        if opts.policy not in ("predictive", "reactive"):
            raise ValueError(f"--policy must be predictive or reactive, got {opts.policy!r}")
        self.opts = opts
        self.out = sys.stdout if out is None else out
        self.profile: Profile = get_profile(opts.profile)
        stated = SimInputs(max_replicas=opts.max_replicas, initial_replicas=opts.initial_replicas)
        traffic = TrafficOptions(
            rate_scale=opts.rate_scale,
            start_s=opts.start_s,
            duration_s=opts.duration_s,
            seed=opts.seed,
        )
        self.workload: Workload = workload or load_workload(opts.trace, traffic)
        if len(self.workload) == 0:
            raise ValueError(f"{opts.trace}: no requests in the selected window")
        opening = stated.initial_replicas
        if opening is None:
            opening = (
                DEFAULT_INITIAL_REPLICAS
                if workload is not None
                else window_start(
                    opts.trace, traffic, opts.start_s, self.profile, SimConfig(), backfill=False
                ).opening
            )
        self.opening: int = opening
        """The fleet Ready at t=0 before the ScaledObject's bounds (stated or from the past)."""
        self.namespace = "default"
        if opts.policy == "reactive":
            self.so = seeds_reactive(max_replicas=stated.max_replicas)
            self.served_model_name: str | None = None
        else:
            path = Path(opts.scaledobject) if opts.scaledobject else DEFAULT_SCALEDOBJECT
            self.so = load_scaledobject(path)
            self.namespace = _namespace(path)
            if self.so.extra_triggers or self.so.modifiers is not None:
                # The stack's controller polls one trigger; running only the
                # first of several would rehearse a different ScaledObject.
                raise ValueError(
                    f"{path}: the stack runs a ScaledObject with one trigger; this one has "
                    f"{len(self.so.triggers)}{' and scalingModifiers' if self.so.modifiers else ''}"
                    " (`prescaler simulate --scaledobject` runs several)"
                )
            settings = self.so.trigger.settings
            if settings is None:
                raise ValueError(f"{path}: the predictive policy needs the prescaler trigger")
            if settings.profile and settings.profile != self.profile.name:
                raise ValueError(
                    f"{path}: the trigger's profile {settings.profile!r} differs from --profile "
                    f"{self.profile.name!r}"
                )
            self.served_model_name = settings.model
        self.bound = self.so.keda.max_replica_count
        self.prometheus: PrometheusProcess | None = None
        self.scalers: list[ScalerProcess] = []
        self.client: KedaScalerClient | None = None
        self.metadata: dict[str, str] = {}
        self.control: ControlPlane | None = None
        self.loadgen: LoadGenerator | None = None
        self.clock: Clock | None = None
        self.interrupted = False
        self.report_extra: dict[str, Any] = {}
        """The ``stack`` object of the last report."""
        self.wall_s = 0.0
        self.trace_end_s = self.workload.duration_s
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir = Path(opts.keep) if opts.keep else None
        self.stop_event: asyncio.Event | None = None
        self.during: list[Callable[[StackRun], Any]] = []
        """Hooks called once the trace clock runs (chaos tests): ``hook(run)``, may be async."""

    # --------------------------------------------------------------- start
    def _start(self) -> None:
        opts = self.opts
        k = opts.speed
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="prescaler-stack-")
            self.workdir = Path(self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in ("data", "replicas"):
            shutil.rmtree(self.workdir / name, ignore_errors=True)
        if opts.policy == "predictive":
            self.scalers = [
                ScalerProcess(
                    self.workdir, scaler_flags(k, opts.rate_window_s), name=f"scaler-{i}", speed=k
                )
                for i in range(opts.scaler_replicas)
            ]
        labels = {"namespace": self.namespace}
        self.prometheus = PrometheusProcess(
            self.workdir,
            scrape_interval_s=SCRAPE_S / k,
            lookback_delta_s=LOOKBACK_S / k,
            scaler_targets=[s.metrics_address for s in self.scalers],
            vllm_labels=labels,
        )
        self.prometheus.start()
        for scaler in self.scalers:
            scaler.start()
        if self.scalers:
            self.metadata = scaled_metadata(
                self.so, k, self.prometheus.url, ",".join(s.address for s in self.scalers)
            )
        for line in self.addresses():
            print(line, file=self.out, flush=True)
        warmup = 2.0 * self.profile.startup.total_s + 120.0
        lo = max(1, self.so.keda.min_replica_count)
        first = min(self.bound, max(lo, self.opening))
        self.loadgen = LoadGenerator(
            self.workload, self, timeout_s=opts.timeout_s, model=self.served_model_name
        )
        loadgen = self.loadgen
        self.control = ControlPlane(
            self.so,
            self.profile,
            ClusterConfig.for_profile(self.profile),
            prometheus=self.prometheus,
            workdir=self.workdir,
            speed=k,
            seed=opts.seed,
            warmup_s=warmup,
            initial_replicas=first,
            scaler=None,
            served_model_name=self.served_model_name,
            arrived=lambda: loadgen.arrived,
            gateway=lambda: loadgen.at_gateway,
        )
        self.control.preroll()

    def addresses(self) -> list[str]:
        """Where each started process listens, for a person to point tools at
        (``prescaler tune --prometheus``, grpcurl, a browser) while the run lasts."""
        assert self.prometheus is not None and self.workdir is not None
        lines = [f"Prometheus       {self.prometheus.url}"]
        for scaler in self.scalers:
            lines.append(f"scaler gRPC      {scaler.address}  ({scaler.name})")
            lines.append(f"scaler metrics   http://{scaler.metrics_address}/metrics")
        if not self.scalers:
            lines.append("scaler           none (--policy reactive: KEDA's Prometheus trigger)")
        kept = "kept" if self.opts.keep else "deleted at the end; --keep DIR keeps it"
        lines.append(f"work directory   {self.workdir} ({kept})")
        return lines

    # the router the load generator uses is the control plane's
    def routable(self) -> list[Any]:
        assert self.control is not None
        return list(self.control.routable())

    def view_lines(self) -> list[str]:
        """The live view's lines for the run's state now."""
        opts = self.opts
        return render(
            self.loadgen,
            self.control,
            self.clock,
            policy=opts.policy,
            speed=opts.speed,
            duration_s=self.workload.duration_s,
        )

    async def wait_routable(self, timeout_s: float) -> bool:
        assert self.control is not None
        return await self.control.wait_routable(timeout_s)

    def warmup_deadline(self, clock: Callable[[], float] = time.monotonic) -> WarmupDeadline:
        """The warm-up's budgets at this run's speed (:mod:`stack.warmup`): one rate
        window and two scrapes to settle, then at least two minutes (ten scaler
        refreshes when those are longer) for every scaler replica to answer twice."""
        k = self.opts.speed
        return WarmupDeadline(
            settle_s=(self.opts.rate_window_s + 2 * SCRAPE_S) / k,
            answer_s=max(ANSWER_WALL_S, 10 * REFRESH_S / k),
            answers_needed=2 * max(1, len(self.scalers)),
            clock=clock,
        )

    async def _warm_scaler(self) -> None:
        """Register the ScaledObject and wait for the scaler's first answer (and for
        one rate window of scrapes), as a scaler that has run a while would have."""
        assert self.prometheus is not None
        warm = self.warmup_deadline()
        stop = self.stop_event
        assert stop is not None
        print(
            f"warming up: {warm.settle_s:g} s for one rate window of scrapes"
            + (", then the scaler's first answers" if self.client is not None else ""),
            file=self.out,
            flush=True,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=warm.settle_left())
        if self.client is None:
            return
        import grpc

        while not warm.expired() and not stop.is_set():
            try:
                await self.client.poll()
            except grpc.aio.AioRpcError as exc:
                warm.failed(f"{exc.code().name}: {exc.details()}")
                await asyncio.sleep(REFRESH_S / self.opts.speed)
                continue
            if warm.answered():
                self.client.calls = self.client.retries = 0  # count the run's own
                return
        if not stop.is_set():
            tail = " | ".join(self.scalers[0].child.log_tail(800).strip().splitlines()[-3:])
            raise StackError(f"{warm.failure()}; {self.scalers[0].name}'s log ends: {tail}")

    # ----------------------------------------------------------------- run
    async def _run_async(self) -> None:
        assert self.control is not None and self.loadgen is not None
        opts = self.opts
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self.stop_event = stop

        def interrupt() -> None:
            self.interrupted = True
            stop.set()

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, interrupt)
            loop.add_signal_handler(signal.SIGTERM, interrupt)
        if self.scalers:  # a grpc.aio channel belongs to the loop it is made on
            self.client = KedaScalerClient(
                [s.address for s in self.scalers],
                name=self.so.name,
                namespace=self.namespace,
                metadata=self.metadata,
            )
            self.control.scaler = self.client
        await self._warm_scaler()
        if not stop.is_set():
            end = self.workload.duration_s
            print(
                f"replaying {end:g} s of trace at x{opts.speed:g} (about "
                f"{end / opts.speed / 60:.1f} min of wall time); Ctrl-C stops and summarizes",
                file=self.out,
                flush=True,
            )
        clock = Clock(time.monotonic() + 0.2, opts.speed)
        self.clock = clock
        drain = opts.drain_s if opts.drain_s is not None else opts.timeout_s + 60.0
        end_s = self.workload.duration_s
        control = asyncio.create_task(self.control.run(clock, stop, end_s))
        view = LiveView(self.view_lines, enabled=opts.view)
        view_task = asyncio.create_task(view.run(stop))
        hooks = [asyncio.create_task(_call(h, self)) for h in self.during]
        lg_stop = asyncio.Event()
        lg = asyncio.create_task(self.loadgen.run(clock, lg_stop))

        async def deadline() -> None:
            await asyncio.sleep(max(0.0, clock.wall_at(end_s + drain) - time.monotonic()))
            lg_stop.set()

        guard = asyncio.create_task(deadline())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({lg, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            lg_stop.set()
        with contextlib.suppress(Exception):
            await lg
        # the control loops run to the trace's end (the summary's window)
        if not stop.is_set():
            left = clock.wall_at(end_s) - time.monotonic() + 0.05
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=left)
        self.trace_end_s = min(end_s, clock.now())
        stop.set()
        for task in (guard, stopper, *hooks):
            task.cancel()
        for task in (control, view_task, guard, stopper, *hooks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        view.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()

    def run(self) -> dict[str, Any]:
        """Start, replay, stop, and return the summary (also printed / written)."""
        wall0 = time.perf_counter()
        try:
            self._start()
            asyncio.run(self._run_async())
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            self.wall_s = time.perf_counter() - wall0
            self._stop_processes()
        return self.report()

    def _stop_processes(self) -> None:
        if self.control is not None:
            self.control.stop_all()
        for scaler in self.scalers:
            scaler.stop()
        if self.prometheus is not None:
            self.prometheus.stop()

    def cleanup(self) -> None:
        """Delete the work directory unless ``--keep`` named it."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -------------------------------------------------------------- report
    def result(self) -> SimResult:
        """The run as the simulator's :class:`SimResult`, so its report applies."""
        lg, control = self.loadgen, self.control
        if lg is None or control is None:
            raise StackError("the stack did not start")
        lg.check(arrived_only=True)
        n = lg.arrived if self.interrupted else lg.n
        ended = lg.status[:n] != STOPPED  # in flight at the stop: no outcome, counted apart
        duration = max(1e-9, self.trace_end_s)
        cluster = control.cluster
        end = min(duration, control.queue.now)
        if control.at_end is not None:
            area, cost_end, gpu_end = control.at_end
        else:  # stopped before the end (Ctrl-C): up to now
            control.fleet.set_ready(end, 0)
            area = control.fleet.ready_area
            cost_end, gpu_end = cluster.cost_usd(end), cluster.gpu_hours(end)
        return SimResult(
            policy=self.opts.policy,
            trace=self.workload.name,
            profile=self.profile.name,
            duration_s=duration,
            slo_ttft_s=self.opts.slo_ttft_s,
            status=lg.status[:n][ended],
            ttft_s=lg.ttft_s[:n][ended],
            tpot_s=lg.tpot_s[:n][ended],
            e2e_s=lg.e2e_s[:n][ended],
            rejected_reasons=dict(lg.reasons),
            retried=lg.retried,
            gpu_hours=gpu_end - control.at_start[1] if end > 0 else 0.0,
            cost_usd=cost_end - control.at_start[0] if end > 0 else 0.0,
            **control.fleet.result_fields(cluster, area, duration),
            busy_replica_s=0.0,
            served_tokens=lg.served_tokens,
            capacity_tokens_per_s=float(
                workload_capacity(self.workload, self.profile).tokens_per_s or 0.0
            ),
            timeline=timeline_arrays(control.counters.timeline),
            wall_s=self.wall_s,
            events=0,
            extra={},
        )

    def report(self) -> dict[str, Any]:
        from simulations.report import summary, table

        result = self.result()
        control = self.control
        assert control is not None
        counters = dataclasses.asdict(control.counters)
        counters.pop("timeline")
        lg_lag = self.loadgen.lag_s if self.loadgen is not None else []
        stopped = self.loadgen.stopped if self.loadgen is not None else 0
        client = self.client
        extra: dict[str, Any] = {
            "profile": self.profile.name,
            "max_replicas_bound": self.bound,
            "stack": {
                "speed": self.opts.speed,
                "interrupted": self.interrupted,
                "stopped": stopped,
                "scaledobject": self.so.name,
                "seed": self.opts.seed,
                "control": counters,
                "loadgen_lag_p99_s": float(np.percentile(lg_lag, 99)) if lg_lag else None,
                "grpc_calls": client.calls if client else 0,
                "grpc_retries": client.retries if client else 0,
                "workdir": str(self.workdir) if self.opts.keep else None,
            },
        }
        self.report_extra = extra["stack"]
        doc = summary(
            self.workload.name,
            int(result.status.size),
            result.duration_s,
            self.wall_s,
            {self.opts.policy: Outcome(result)},
            tp=self.profile.tp,
            extra=extra,
        )
        doc["policies"][self.opts.policy]["stopped"] = stopped
        print(table(doc), file=self.out)
        if self.interrupted:
            print(
                f"(interrupted: the summary covers the {doc['requests']} requests that ended; "
                f"{stopped} in flight at the stop are counted as stopped, not as rejected)",
                file=self.out,
            )
        if self.opts.json_path:
            import json

            path = Path(self.opts.json_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
        if self.opts.keep:
            print(f"Prometheus data kept in {Path(self.opts.keep) / 'data'}", file=self.out)
        return doc


async def _call(hook: Callable[[StackRun], Any], run: StackRun) -> None:
    result = hook(run)
    if asyncio.iscoroutine(result):
        await result
