"""The scaling policies a simulation can run, as picklable specs and live controllers.

``static`` (a fixed count), ``reactive`` (the seeds' queue-length
ScaledObject), ``predictive`` (prescaler's own ScaledObject answered by
:class:`decision.tracker.Tracker`), ``oracle`` (sees future arrivals; the
reference of ``cost_ratio_to_oracle``), ``hindsight`` (the cheapest schedule
that meets the target, :mod:`simulations.hindsight`) and any user
ScaledObject. Only the oracle and hindsight know anything production would
not: the others share one stated maximum and one opening fleet
(:func:`opening_fleet`). A :class:`PolicySpec` is plain data so it crosses
``--jobs`` processes; :func:`make_controller` makes it live.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from decision.policy import NO_ANSWER_REASONS
from decision.prediction import ForecasterFactory
from decision.prewarm import plan_balloons
from decision.tracker_data import TrackerConfig
from engine.profiles import Profile
from engine.validate import int_at_least
from forecasting import make_forecaster
from forecasting.registry import BASELINES
from simulations.autoscaling.hpa import Hpa
from simulations.autoscaling.keda import Keda
from simulations.autoscaling.scaledobject import (
    ScaledObjectSpec,
    prescaler_scaledobject,
    seeds_reactive,
)
from simulations.autoscaling.trigger_state import PrescalerHook, TriggerState
from simulations.backfill import DemandHistory
from simulations.capacity_belief import BelievingTracker
from simulations.events import PRIORITY_CONTROL
from simulations.forecast_memo import PROCESS_MEMO, ForecastMemo
from simulations.hindsight_controller import HindsightController
from simulations.simulation import Simulation, servable, workload_capacity
from simulations.traffic import Workload

__all__ = [
    "DEFAULT_MAX_REPLICAS",
    "HINDSIGHT_STEP_S",
    "OPENING_WINDOW_S",
    "ORACLE_STEP_S",
    "ORACLE_UTILIZATION",
    "OracleController",
    "PolicySpec",
    "ScaledObjectController",
    "StaticController",
    "fleet_bound",
    "initial_replicas",
    "make_controller",
    "opening_fleet",
    "oracle_need",
    "predictive_spec",
    "reactive_spec",
    "step_load",
    "with_history",
]

ORACLE_STEP_S = 15.0
"""The oracle re-decides as often as the HPA syncs."""
ORACLE_UTILIZATION = 0.85
"""Peak load per replica the oracle sizes for, as a fraction of the sustainable
rate: ``decision.capacity``'s rate is ~95 % of a saturated replica's, and a
fleet run at that through a 15 s peak queues (M/G/c), however well it knows
the future."""
HINDSIGHT_STEP_S = 15.0
"""The hindsight schedule's grid: the HPA's sync period, the finest step a
Deployment written by KEDA and the HPA changes on."""
HPA_SYNC_S = 15.0
"""kube-controller-manager --horizontal-pod-autoscaler-sync-period default."""
REFRESH_S = 5.0
"""``prescaler serve``'s default refresh interval."""
REFIT_S = TrackerConfig.refit_interval_s
"""``prescaler serve``'s default refit interval (``--refit-seconds``)."""
DEFAULT_MAX_REPLICAS = 16
"""The built-in policies' maxReplicaCount: the shipped GPU ScaledObject's
(manifests/vllm/gpu/scaledobject.yaml). A bound from the window's own peak
would tell every policy the future."""
OPENING_WINDOW_S = 300.0
"""The opening fleet covers the highest need of this long before the window:
a policy that kept up holds its recent peak for the HPA's default 300 s
scale-down stabilization."""


@dataclass(frozen=True)
class PolicySpec:
    """What to run: plain data, picklable."""

    name: str
    kind: Literal["static", "oracle", "scaledobject", "hindsight"]
    replicas: int | None = None
    """static: the fixed count (None: searched by the runner)."""
    max_replicas: int | None = None
    """static and oracle: the most replicas they may run (the static search's
    cap, the oracle's ceiling); None: unbounded, as before bounds were stated.
    A ScaledObject policy's bound is its own maxReplicaCount."""
    scaledobject: ScaledObjectSpec | None = None
    history: DemandHistory | None = None
    """Demand before the window, loaded into a prescaler trigger's tracker as the
    live scaler's backfill from Prometheus would (:mod:`simulations.backfill`)."""
    forecaster: str | None = None
    """A forecasting method the live scaler does not offer (statsforecast's
    ``sf_*`` baselines): a prescaler trigger's tracker forecasts with it
    whatever ``forecast:`` says, so baselines are compared by the outcome they
    buy. Simulation only."""
    schedule: tuple[int, ...] | None = None
    """hindsight: the Deployment's replicas each :data:`HINDSIGHT_STEP_S`
    (None: calibrated by the runner, :mod:`simulations.hindsight_run`)."""
    target: float | None = None
    """hindsight: the attainment to meet, as a fraction of what an idle fleet
    attains (None: ``simulations.tune.run.DEFAULT_TARGET``)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a policy needs a name")
        if self.kind == "scaledobject" and self.scaledobject is None:
            raise ValueError(f"policy {self.name!r}: a scaledobject policy needs its ScaledObject")
        if self.replicas is not None and (isinstance(self.replicas, bool) or self.replicas < 0):
            raise ValueError(f"policy {self.name!r}: replicas must be >= 0, got {self.replicas!r}")
        bound = self.max_replicas
        if bound is not None and not int_at_least(bound, 1):
            raise ValueError(f"policy {self.name!r}: max_replicas must be >= 1, got {bound!r}")


# --------------------------------------------------------------- capacity
def step_load(workload: Workload, profile: Profile, step_s: float) -> np.ndarray:
    """Replicas' worth of demand in each ``step_s`` bin (what the oracle and
    the hindsight schedule size from).

    Requests the model must reject load nothing. Prefill and decode are
    separate resources of one replica: a bin needs
    ``max(prompt tokens/s / prefill capacity, output tokens/s / decode
    capacity)`` replicas, both capacities being the sustainable batch's at
    the workload's mean shape. A bin with longer answers than the mean then
    needs more replicas, as it does on a real replica.
    """
    n = max(1, math.ceil(workload.duration_s / step_s - 1e-9))
    ok = servable(workload, profile)
    if not ok.any():
        return np.zeros(n)
    cap = workload_capacity(workload, profile)
    per_s = cap.requests_per_s or 1.0
    prompt_tokens = workload.prompt_tokens[ok].astype(np.float64)
    output_tokens = workload.output_tokens[ok].astype(np.float64)
    prompt_cap = per_s * max(1.0, float(np.mean(prompt_tokens)))
    output_cap = per_s * max(1.0, float(np.mean(output_tokens)))
    slot = np.minimum((workload.arrival_s[ok] // step_s).astype(np.int64), n - 1)
    prompt = np.bincount(slot, weights=prompt_tokens, minlength=n)
    output = np.bincount(slot, weights=output_tokens, minlength=n)
    return np.maximum(prompt / prompt_cap, output / output_cap) / step_s


def oracle_need(workload: Workload, profile: Profile, step_s: float = ORACLE_STEP_S) -> np.ndarray:
    """Replicas needed at each ``step_s`` tick: the true peak load over
    ``[t, t + lead]`` (lead = node + image pull + model load), see :func:`_load`."""
    load = step_load(workload, profile, step_s)
    lead_bins = max(1, math.ceil(profile.startup.total_s / step_s))
    n = load.size
    if n > lead_bins:
        windows = np.lib.stride_tricks.sliding_window_view(
            np.concatenate([load, np.zeros(lead_bins)]), lead_bins + 1
        )
        peak = windows.max(axis=1)[:n]
    else:
        peak = np.full(n, load.max())
    return np.ceil(peak / ORACLE_UTILIZATION - 1e-9).astype(np.int64)


def fleet_bound(workload: Workload, profile: Profile) -> int:
    """10 (the seeds') unless the trace's peak needs more than half of that,
    then twice the peak. Hindsight: benches use it to size a bound that fits a
    trace; ``simulate`` and ``tune`` do not (:data:`DEFAULT_MAX_REPLICAS`)."""
    peak = int(oracle_need(workload, profile).max()) if len(workload) else 1
    return max(10, 2 * peak)


def initial_replicas(workload: Workload, profile: Profile) -> int:
    """What the window's opening demand needs (the oracle's first answer).
    Hindsight, kept for callers that state no opening fleet; ``simulate``
    uses :func:`opening_fleet` instead."""
    return max(1, int(oracle_need(workload, profile)[0])) if len(workload) else 1


def opening_fleet(prior: Workload, profile: Profile) -> int:
    """The fleet a policy that kept up would hold as the window opens, from the
    traffic before it (``prior``, which ends where the window starts): the
    highest replicas' worth of load over its last :data:`OPENING_WINDOW_S`,
    at the oracle's utilization; at least 1."""
    if len(prior) == 0:
        return 1
    load = step_load(prior, profile, ORACLE_STEP_S)
    tail = load[-max(1, math.ceil(OPENING_WINDOW_S / ORACLE_STEP_S)) :]
    return max(1, math.ceil(float(tail.max()) / ORACLE_UTILIZATION - 1e-9))


def opening_replicas(sim: Simulation, lo: int, hi: int) -> int:
    """The run's opening fleet within one policy's bounds ``[lo, hi]``:
    ``SimConfig.initial_replicas``, or for a caller that states none the
    window's own opening need (:func:`initial_replicas`, hindsight; ``simulate``
    always states it)."""
    stated = sim.config.initial_replicas
    base = initial_replicas(sim.workload, sim.profile) if stated is None else stated
    return min(hi, max(lo, base))


# ------------------------------------------------------------------ specs
def reactive_spec(max_replicas: int = 10) -> PolicySpec:
    return PolicySpec(
        "reactive", "scaledobject", scaledobject=seeds_reactive(max_replicas=max_replicas)
    )


def predictive_spec(
    profile: str,
    *,
    max_replicas: int = 16,
    forecaster: str | None = None,
    prewarm: bool = False,
    node_lead_time_s: float | None = None,
) -> PolicySpec:
    """prescaler's trigger with its default metadata, as the shipped manifest has it
    (``node_lead_time_s``: the ``nodeLeadTimeSeconds`` the balloons plan for)."""
    baseline = forecaster if forecaster in BASELINES else None
    meta = {
        "prometheusAddress": "http://prometheus:9090",
        "profile": profile,
        "targetWaitingPerReplica": "3",
        "targetKvCacheUsage": "0.8",
        "leadTimeSeconds": "auto",
        "forecast": "auto" if baseline else (forecaster or "auto"),
        "forecastQuantile": "0.9",
        "seasonalPeakDays": "3",
        "seasonalWanderSeconds": "1800",
        "minReplicas": "1",
        "maxReplicas": str(max_replicas),
        "scaleDownStabilizationSeconds": "300",
        "fallbackAfterSeconds": "180",
        "fallbackReplicas": str(min(4, max_replicas)),
        "prewarm": "true" if prewarm else "false",
    }
    if node_lead_time_s is not None:
        meta["nodeLeadTimeSeconds"] = f"{node_lead_time_s:g}"
    behavior = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15},
                {"type": "Pods", "value": 4, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 300,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
        },
    }
    so = prescaler_scaledobject(
        meta,
        name="predictive",
        min_replica_count=1,
        max_replica_count=max_replicas,
        polling_interval=15,
        cooldown_period=600,
        behavior=behavior,
        fallback={
            "failureThreshold": 4,
            "replicas": min(4, max_replicas),
            "behavior": "currentReplicasIfHigher",
        },
    )
    return PolicySpec("predictive", "scaledobject", scaledobject=so, forecaster=baseline)


def scaledobject_spec(so: ScaledObjectSpec) -> PolicySpec:
    return PolicySpec(so.name, "scaledobject", scaledobject=so)


# ------------------------------------------------------------ controllers
class StaticController:
    """A fixed fleet: the Deployment is set once and never changed."""

    def __init__(self, name: str, replicas: int) -> None:
        self.name = name
        self.replicas = replicas

    def initial_replicas(self, sim: Simulation) -> int:
        return self.replicas

    def start(self, sim: Simulation) -> None:
        if sim.cluster.spec_replicas != self.replicas:
            sim.scale_deployment(sim.queue.now, self.replicas)

    def timeline_extra(self) -> dict[str, float]:
        return {"desired": float(self.replicas)}


class OracleController:
    """Sets the Deployment straight from the future (see the module docstring).

    Its need is computed from the run's own profile (the run's lead time), on
    the first call that has the run."""

    def __init__(self, name: str, max_replicas: int | None = None) -> None:
        self.name = name
        self.max_replicas = max_replicas
        self.need = np.zeros(0, dtype=np.int64)
        self._desired = 0
        self._sim: Simulation | None = None

    def _need_for(self, sim: Simulation) -> None:
        if self._sim is not sim:
            self._sim = sim
            self.need = oracle_need(sim.workload, sim.profile)

    def _at(self, t: float) -> int:
        if self.need.size == 0:
            return 1
        i = min(self.need.size - 1, max(0, int(t // ORACLE_STEP_S)))
        want = max(1, int(self.need[i]))
        return want if self.max_replicas is None else min(self.max_replicas, want)

    def initial_replicas(self, sim: Simulation) -> int:
        self._need_for(sim)
        hi = self.max_replicas if self.max_replicas is not None else 2**31 - 1
        return opening_replicas(sim, 1, hi)

    def start(self, sim: Simulation) -> None:
        self._need_for(sim)
        self._tick(sim.queue.now)

    def _tick(self, t: float) -> None:
        sim = self._sim
        assert sim is not None
        desired = self._at(t)
        spec = sim.cluster.spec_replicas
        if desired < spec and sim.backlog > 0:
            desired = spec  # never shrink under a queue: it would only grow
        self._desired = desired
        if spec != desired:
            sim.scale_deployment(t, self._desired)
        if t < sim.workload.duration_s:
            sim.queue.schedule(t + ORACLE_STEP_S, PRIORITY_CONTROL, self._tick)

    def timeline_extra(self) -> dict[str, float]:
        return {"desired": float(self._desired)}


class ScaledObjectController:
    """KEDA's polling loop and the HPA it creates, over one trigger.

    Each loop has its own phase (from the run's seed). The prescaler trigger's
    value is its tracker's latest ``decision.replicas``, refreshed every 5 s like
    ``prescaler serve``; with a ``forecast_memo`` the tracker's forecasts are
    shared across runs of one window (:mod:`simulations.forecast_memo`; results
    are the same either way)."""

    def __init__(
        self,
        name: str,
        so: ScaledObjectSpec,
        history: DemandHistory | None = None,
        forecaster: str | None = None,
        forecast_memo: ForecastMemo | None = PROCESS_MEMO,
        refit_interval_s: float = REFIT_S,
    ) -> None:
        self.name = name
        self.so = so
        self.history = history
        self.keda = Keda(so.keda, created_s=0.0, triggers=len(so.triggers))
        self.hpa = Hpa(so.hpa)
        trig = so.prescaler_trigger
        self.tracker: BelievingTracker | None = None
        if trig is not None:
            assert trig.settings is not None
            method = forecaster
            factory: ForecasterFactory | None = None
            # Only a gateway-fed tracker's history is the same whatever the
            # policy did (vLLM's counters exist only on the pods a run
            # started), so only there can another run's fits be reused; a
            # memo elsewhere costs pickling and memory for no hit.
            if forecast_memo is not None and trig.settings.gateway_rate_query is not None:
                factory = forecast_memo.factory(method)
            elif method is not None:
                factory = lambda _name: make_forecaster(method)  # noqa: E731
            self.tracker = BelievingTracker(
                (so.name, so.name),
                trig.settings,
                TrackerConfig(refresh_interval_s=REFRESH_S, refit_interval_s=refit_interval_s),
                factory,
            )
        self._sim: Simulation | None = None
        self._upper = math.nan
        self._median = math.nan
        self._desired = math.nan
        self._balloons = 0

    def initial_replicas(self, sim: Simulation) -> int:
        lo = max(1, self.so.keda.min_replica_count)
        return opening_replicas(sim, lo, max(lo, self.so.keda.max_replica_count))

    def start(self, sim: Simulation) -> None:
        self._sim = sim
        hook = None
        if self.tracker is not None:
            hook = PrescalerHook(self._prescaler_value, self._prescaler_active)
        self._triggers = TriggerState(self.so, self.keda, sim.prometheus, hook)
        now = sim.queue.now
        if self.tracker is not None:
            self.tracker.believe(
                capacity_error=sim.config.capacity_error,
                learned_capacity=sim.config.learned_capacity,
            )
        poll = self.so.keda.polling_interval_s
        sim.queue.schedule(now + float(sim.rng.uniform(0.0, poll)), PRIORITY_CONTROL, self._poll)
        sim.queue.schedule(
            now + float(sim.rng.uniform(0.0, HPA_SYNC_S)), PRIORITY_CONTROL, self._sync
        )
        if self.tracker is not None:
            first = now
            history = self.history
            if history is not None and len(history):
                # The backfill covers the trace up to the window's start; the
                # warm-up before it has no traffic in the simulation (live, the
                # scaler would have seen the trace's), so the tracker sits it out.
                zeros = np.zeros(len(history))
                self.tracker.load_history(
                    history.times_s,
                    history.requests_per_s,
                    history.tokens_per_s,
                    zeros,
                    zeros,
                    zeros,
                )
                first = max(now, 0.0)
            sim.queue.schedule(
                first + float(sim.rng.uniform(0.0, REFRESH_S)), PRIORITY_CONTROL, self._refresh
            )

    # -- the trigger --------------------------------------------------------
    # (the other triggers: simulations.autoscaling.trigger_state)
    def _prescaler_value(self) -> float | None:
        assert self.tracker is not None
        decision = self.tracker.decision
        if decision.reason in NO_ANSWER_REASONS:
            return None  # the scaler answers UNAVAILABLE: the HPA holds
        return float(decision.replicas)

    def _prescaler_active(self) -> bool:
        assert self.tracker is not None
        return self.tracker.active

    # -- loops --------------------------------------------------------------
    def _poll(self, t: float) -> None:
        sim = self._sim
        assert sim is not None
        spec = sim.cluster.spec_replicas
        new = self._triggers.poll(t, spec=spec, ready=sim.cluster.ready_replicas)
        if new is not None and new != spec:
            sim.scale_deployment(t, new)
        sim.queue.schedule(t + self.so.keda.polling_interval_s, PRIORITY_CONTROL, self._poll)

    def _sync(self, t: float) -> None:
        sim = self._sim
        assert sim is not None
        cluster = sim.cluster
        spec = cluster.spec_replicas
        usages = self._triggers.hpa_usages(t, spec=spec, ready=cluster.ready_replicas)
        new = self.hpa.sync_metrics(
            t,
            spec=spec,
            status=cluster.status_replicas,
            ready=cluster.ready_replicas,
            usages=usages,
        )
        if new != spec:
            sim.scale_deployment(t, new)
        sim.queue.schedule(t + HPA_SYNC_S, PRIORITY_CONTROL, self._sync)

    def _refresh(self, t: float) -> None:
        sim = self._sim
        tracker = self.tracker
        assert sim is not None and tracker is not None
        samples = tuple(getattr(sim.cluster, "pod_start_samples_s", ())[-64:])
        reading = self._triggers.prescaler_reading(sim.prometheus.reading(samples))
        step = tracker.step(t, reading, t)
        self._desired = float(step.decision.replicas)
        fc = step.forecast
        if fc is not None:
            self._upper, self._median = fc.upper_requests_per_s, fc.median_requests_per_s
        if self.so.push and step.burst:
            spec = sim.cluster.spec_replicas
            new = self.keda.push_active(t, spec=spec)
            if new is not None and new != spec:
                sim.scale_deployment(t, new)
        settings = tracker.settings
        if settings.prewarm:
            plan = plan_balloons(
                settings=settings,
                forecast=tracker.demand_forecast(t, settings.node_lead_time_seconds),
                capacity=step.capacity,
                ready_replicas=sim.cluster.ready_replicas,
                desired_replicas=step.decision.replicas,
                current_balloons=self._balloons,
            )
            if plan.replicas != self._balloons:
                self._balloons = plan.replicas
                sim.cluster.scale_balloons(t, plan.replicas)
        sim.queue.schedule(t + REFRESH_S, PRIORITY_CONTROL, self._refresh)

    def timeline_extra(self) -> dict[str, float]:
        if self.tracker is None:
            return {}
        return {
            "desired": self._desired,
            "forecast_upper_rps": self._upper,
            "forecast_median_rps": self._median,
        }


def make_controller(
    spec: PolicySpec,
    workload: Workload,
    profile: Profile,
    *,
    forecast_memo: ForecastMemo | None = PROCESS_MEMO,
    refit_interval_s: float = REFIT_S,
) -> StaticController | OracleController | HindsightController | ScaledObjectController:
    """The live controller for one run (fresh state every time; a prescaler
    trigger's forecasts through ``forecast_memo`` and refitted every
    ``refit_interval_s``, see :class:`ScaledObjectController`)."""
    if spec.kind == "static":
        if spec.replicas is None:
            raise ValueError("static policy: the replica count must be resolved before a run")
        return StaticController(spec.name, spec.replicas)
    if spec.kind == "oracle":
        return OracleController(spec.name, spec.max_replicas)
    if spec.kind == "hindsight":
        if spec.schedule is None:
            raise ValueError("hindsight policy: the schedule must be calibrated before a run")
        return HindsightController(spec.name, spec.schedule, HINDSIGHT_STEP_S)
    assert spec.scaledobject is not None
    return ScaledObjectController(
        spec.name,
        spec.scaledobject,
        spec.history,
        spec.forecaster,
        forecast_memo,
        refit_interval_s,
    )


def with_replicas(spec: PolicySpec, replicas: int) -> PolicySpec:
    return replace(spec, replicas=replicas)


def with_history(spec: PolicySpec, history: DemandHistory | None) -> PolicySpec:
    """``spec`` with the backfilled ``history`` when its ScaledObject has a
    prescaler trigger, wherever that trigger stands among its triggers (its
    tracker is the one that loads it); other specs unchanged."""
    so = spec.scaledobject
    if history is None or so is None or so.prescaler_trigger is None:
        return spec
    return replace(spec, history=history)
