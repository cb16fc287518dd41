"""The sides ``prescaler tune`` compares, each tuned the same way.

A side is a base ScaledObject, its manifest (what the printed setting is
written into) and the knobs searched. One small builder per side
(:data:`BUILDERS`), run only for the sides asked for; docs/tuning.md ("The
sides") says what each one is and why it is in the family.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import yaml

from decision.settings import ScalerSettings
from engine.profile_types import Profile
from engine.profiles import use_profile
from simulations.autoscaling.scaledobject import (
    ScaledObjectSpec,
    load_scaledobject,
    parse_scaledobject,
    seeds_reactive,
)
from simulations.sim_inputs import SimInputs
from simulations.tune.manifest import (
    COOLDOWN_PERIOD,
    PRESCALER_BEHAVIOR_SPACE,
    apply_to_manifest,
    cooldown_param,
    cron_space,
    keda_space,
    load_manifest,
    manifest_of,
    trigger_space,
    triggers_of,
)
from simulations.tune.request import CRON_REPLICAS, TuneRequest, WrittenCron
from simulations.tune.search import PREDICTIVE_SPACE, Param, default_bases
from simulations.tune.timing_floors import timing_floors

__all__ = [
    "BUILDERS",
    "CRON_REPLICAS",
    "CRON_SIDES",
    "DEFAULT_SIDES",
    "SIDES",
    "Side",
    "WrittenCron",
    "cold_start_s",
    "cron_manifest",
    "gateway_manifest",
    "gateway_note",
    "gateway_queue_kv_manifest",
    "make_sides",
    "prescaler_gateway_manifest",
    "queue_and_kv_manifest",
    "with_cron",
]

CRON_SIDES = ("keda-queue-kv-cron", "keda-gateway-cron", "prescaler-cron")
"""The sides whose daily window ``SideChoice.cron_window`` writes."""
DEFAULT_SIDES = ("prescaler", "keda-queue", "keda-queue-kv", "user")
"""The sides a tune runs unless it names others (``user`` only with a
prometheus ``--scaledobject``); the rest cost a study each and pay on
traffic with a known daily ramp or long idle gaps."""


@dataclass(frozen=True)
class Side:
    """One tuned set-up."""

    name: str
    description: str
    base: ScaledObjectSpec
    manifest: Mapping[str, Any]
    """The base's manifest: the user's file as written, else rendered."""
    space: tuple[Param, ...]
    max_replicas: int


@dataclass(frozen=True)
class _Prescaler:
    """prescaler's trigger as a side starts from: its base, manifest and space."""

    base: ScaledObjectSpec
    doc: Mapping[str, Any]
    space: tuple[Param, ...]
    bound: int


class _Given:
    """What the builders share, each piece made the first time a builder asks."""

    def __init__(self, request: TuneRequest, profile: Profile | str, bound: int) -> None:
        self.request, self.profile = request, profile
        self.mine: ScaledObjectSpec | None = None
        self.mine_doc: Mapping[str, Any] | None = None
        if request.choice.scaledobject:
            self.mine = load_scaledobject(request.choice.scaledobject)
            self.mine_doc = load_manifest(request.choice.scaledobject)
            bound = self.mine.keda.max_replica_count
        self.bound = bound
        self.fixed = dict(request.choice.prescaler_fixed)
        if request.replay.forecaster:
            self.fixed["forecast"] = request.replay.forecaster
        told = request.choice.cron_window
        if told is not None and told.replicas > bound:
            raise ValueError(
                f"cron_window: {told.replicas} replicas is above maxReplicaCount {bound}, "
                "which no cron trigger can hold"
            )

    @property
    def user_prescaler(self) -> bool:
        """Whether the user's ScaledObject carries prescaler's trigger (then that side's base)."""
        return self.mine is not None and any(t.kind == "prescaler" for t in triggers_of(self.mine))

    @cached_property
    def raw_prescaler(self) -> tuple[ScaledObjectSpec, Mapping[str, Any], tuple[Param, ...]]:
        """prescaler's base and manifest before any held key, and the knobs
        of the user's other triggers."""
        if self.user_prescaler:
            assert self.mine is not None and self.mine_doc is not None
            # prescaler's trigger alone, or beside the KEDA triggers the team
            # keeps (a cron window, a queue trigger): one side, each of the
            # other triggers' knobs searched with prescaler's
            others = trigger_space(self.mine, self.bound, floor_key="minReplicas")
            return self.mine, self.mine_doc, others
        base, _ = default_bases(self.profile, self.bound)
        return base, manifest_of(base), ()

    @cached_property
    def others(self) -> tuple[Param, ...]:
        raw = self.raw_prescaler[2]
        return _without(raw, self.fixed) if self.fixed else raw

    @cached_property
    def start_s(self) -> float:
        return cold_start_s(self.request, self.profile)

    @cached_property
    def prescaler(self) -> _Prescaler:
        base, doc, _ = self.raw_prescaler
        space = PREDICTIVE_SPACE
        if self.fixed:
            # held in the manifests: a trial's ScaledObject is its setting
            # applied to the side's manifest, and the base is that manifest parsed
            doc = apply_to_manifest(doc, self.fixed)
            base = _parsed(doc, base.name)
            space = _without(space, self.fixed)
        settings = _settings_of(base)
        if settings.gateway_rate_query:
            space = _from_zero(space)
        space = timing_floors(space, settings, self.start_s)
        return _Prescaler(base, doc, space, min(self.bound, settings.max_replicas))

    @cached_property
    def gateway(self) -> _Prescaler:
        doc = prescaler_gateway_manifest(self.raw_prescaler[1])
        space = _from_zero(PREDICTIVE_SPACE)
        if self.fixed:
            doc = apply_to_manifest(doc, self.fixed)
            space = _without(space, self.fixed)
        base = _parsed(doc, "prescaler-gateway")
        settings = _settings_of(base)
        space = timing_floors(space, settings, self.start_s)
        return _Prescaler(base, doc, space, min(self.bound, settings.max_replicas))

    @cached_property
    def queue(self) -> ScaledObjectSpec:
        return seeds_reactive(max_replicas=self.bound)

    @cached_property
    def queue_kv(self) -> dict[str, Any]:
        return queue_and_kv_manifest(self.queue)


def _prescaler_side(g: _Given) -> Side:
    """prescaler's external trigger (the user's ScaledObject when it has one)."""
    p = g.prescaler
    space = (*p.space, *g.others, *PRESCALER_BEHAVIOR_SPACE)
    return Side("prescaler", "prescaler's external trigger", p.base, p.doc, space, p.bound)


def _keda_queue(g: _Given) -> Side:
    """Plain KEDA on the queue length, the public recipes' ScaledObject."""
    q = g.queue
    return Side(
        "keda-queue",
        "KEDA prometheus trigger on sum(vllm:num_requests_waiting)",
        q, manifest_of(q), keda_space(q, g.bound), g.bound,
    )  # fmt: skip


def _keda_queue_kv(g: _Given) -> Side:
    """The queue trigger plus one on the KV cache; the HPA takes the larger proposal."""
    base = parse_scaledobject(yaml.safe_dump(g.queue_kv, sort_keys=False), "keda-queue-kv")
    return Side(
        "keda-queue-kv",
        "KEDA prometheus triggers on the queue and avg(vllm:kv_cache_usage_perc)",
        base, g.queue_kv, keda_space(base, g.bound), g.bound,
    )  # fmt: skip


def _user(g: _Given) -> Side | None:
    """The user's own prometheus-trigger ScaledObject as written (None without one)."""
    if g.mine is None or g.mine_doc is None or g.user_prescaler:
        return None
    kinds = sorted({t.kind for t in triggers_of(g.mine)})
    return Side(
        "user",
        f"{g.mine.name} as written ({', '.join(kinds)} triggers)",
        g.mine, g.mine_doc, keda_space(g.mine, g.bound), g.bound,
    )  # fmt: skip


def _keda_queue_kv_cron(g: _Given) -> Side:
    """The queue and KV-cache triggers plus a daily cron window a team writes for its ramp."""
    return _keda_side(
        "keda-queue-kv-cron",
        "KEDA queue and KV-cache triggers plus a daily cron window",
        cron_manifest(g.queue_kv, g.request.choice.cron_window),
        g.bound,
    )


def _keda_gateway(g: _Given) -> Side:
    """KEDA scaling to zero on the gateway's request rate (the HTTP add-on's way)."""
    return _keda_side(
        "keda-gateway",
        "KEDA scale to zero on the gateway's request rate",
        gateway_manifest(g.queue),
        g.bound,
    )


def _keda_gateway_cron(g: _Given) -> Side:
    """Every KEDA trigger of the family at zero: the KEDA peer of ``prescaler-cron``."""
    window = g.request.choice.cron_window
    return _keda_side(
        "keda-gateway-cron",
        "KEDA scale to zero: gateway, queue and KV-cache triggers plus a daily cron window",
        with_cron(gateway_queue_kv_manifest(g.queue_kv), window, "vllm-gateway-cron"),
        g.bound,
    )


def _prescaler_gateway(g: _Given) -> Side:
    """prescaler's trigger scaling to zero, woken by the gateway's rate or its forecast."""
    p = g.gateway
    return Side(
        "prescaler-gateway",
        "prescaler's trigger scaling to zero, woken by the gateway's request rate",
        p.base, p.doc, (*p.space, *g.others, *PRESCALER_BEHAVIOR_SPACE), p.bound,
    )  # fmt: skip


def _prescaler_cron(g: _Given) -> Side:
    """``prescaler-gateway`` with the cron window beside it (the user's own when it has one)."""
    p = g.gateway
    name = f"{p.doc['metadata']['name']}-cron"
    window: tuple[Param, ...] = ()
    if any(t.kind == "cron" for t in triggers_of(p.base)):
        # the user's own window is the window (its knobs are in ``others``)
        doc = copy.deepcopy(dict(p.doc))
        doc["metadata"]["name"] = name
    else:
        doc = with_cron(p.doc, g.request.choice.cron_window, name)
        space = cron_space(len(p.doc["spec"]["triggers"]), g.bound, floor_key="minReplicas")
        window = _without(space, g.fixed)
    return Side(
        "prescaler-cron",
        "prescaler's trigger scaling to zero, beside a daily cron window",
        _parsed(doc, "prescaler-cron"), doc,
        (*p.space, *g.others, *window, *PRESCALER_BEHAVIOR_SPACE), p.bound,
    )  # fmt: skip


BUILDERS: dict[str, Callable[[_Given], Side | None]] = {
    "prescaler": _prescaler_side,
    "keda-queue": _keda_queue,
    "keda-queue-kv": _keda_queue_kv,
    "user": _user,
    "keda-queue-kv-cron": _keda_queue_kv_cron,
    "keda-gateway": _keda_gateway,
    "keda-gateway-cron": _keda_gateway_cron,
    "prescaler-gateway": _prescaler_gateway,
    "prescaler-cron": _prescaler_cron,
}
"""Each side's builder, in report order."""

SIDES = tuple(BUILDERS)
"""Side names, in report order."""


def make_sides(request: TuneRequest, profile: Profile | str, bound: int) -> tuple[Side, ...]:
    """The sides ``request`` names (else :data:`DEFAULT_SIDES`), in report
    order, each built only when named; ``bound`` is the fleet bound unless
    ``--scaledobject`` states one."""
    wanted = request.choice.sides or DEFAULT_SIDES
    unknown = sorted(set(wanted) - set(SIDES))
    if unknown:
        raise ValueError(f"unknown side(s) {', '.join(unknown)} (known: {', '.join(SIDES)})")
    given = _Given(request, profile, bound)
    built = (BUILDERS[name](given) for name in SIDES if name in wanted)
    chosen = tuple(side for side in built if side is not None)
    if not chosen:
        raise ValueError(
            "no side left to tune: the user side is a --scaledobject with prometheus "
            "triggers (one with prescaler's trigger is the prescaler side's base)"
        )
    return chosen


def cold_start_s(request: TuneRequest, profile: Profile | str) -> float:
    """The replica cold start the run is told (``--lead-time-preset`` and the
    phase flags, else the profile's): the floor of a searched fixed lead time."""
    prof = use_profile(profile)
    startup = (request.replay.inputs or SimInputs()).startup(prof) or prof.startup
    return float(startup.total_s)


def _without(space: tuple[Param, ...], fixed: Mapping[str, str]) -> tuple[Param, ...]:
    """``space`` less the keys held at a value; a key conditional on a held
    one is searched unconditionally when the held value meets its condition
    (``nodeLeadTimeSeconds`` with ``prewarm`` held at ``true``), else dropped
    (the forecast's keys with ``forecast`` held ``off``, and a key
    conditional on one of those); a key searched above a held one starts
    above its value."""
    kept: list[Param] = []
    for p in space:
        if p.key in fixed:
            continue
        if p.when is not None and p.when[0] in fixed:
            if fixed[p.when[0]] != p.when[1]:
                continue
            p = dataclasses.replace(p, when=None)
        if p.unless is not None and p.unless[0] in fixed:
            if fixed[p.unless[0]] == p.unless[1]:
                continue
            p = dataclasses.replace(p, unless=None)
        if p.above is not None and p.above in fixed:
            low = max(p.low, float(fixed[p.above]) + 1)
            if low >= p.high:
                continue
            p = dataclasses.replace(p, low=low, above=None)
        kept.append(p)
    # a key conditional on one no longer searched (nor held) is never drawn
    keys = {p.key for p in kept}
    return tuple(p for p in kept if p.when is None or p.when[0] in keys)


def _from_zero(space: tuple[Param, ...]) -> tuple[Param, ...]:
    """``space`` with ``minReplicas`` searched from 0: with the gateway's rate
    a fleet at zero still sees demand, so zero is a floor worth trying; and
    KEDA's ``cooldownPeriod`` with it, as a KEDA side scaling to zero has."""
    widened = tuple(
        dataclasses.replace(p, low=0) if p.key == "minReplicas" and p.low > 0 else p for p in space
    )
    if any(p.key == COOLDOWN_PERIOD for p in widened):
        return widened
    return (*widened, cooldown_param(("minReplicas", "0")))


def _keda_side(name: str, description: str, doc: Mapping[str, Any], bound: int) -> Side:
    base = _parsed(doc, name)
    return Side(name, description, base, doc, keda_space(base, bound), bound)


def _parsed(doc: Mapping[str, Any], name: str) -> ScaledObjectSpec:
    """``doc`` read by the simulator's own reader, errors named by ``name``."""
    return parse_scaledobject(yaml.safe_dump(dict(doc), sort_keys=False), name)


def _settings_of(so: ScaledObjectSpec) -> ScalerSettings:
    trig = so.prescaler_trigger
    assert trig is not None and trig.settings is not None, "prescaler's trigger is parsed"
    return trig.settings


KV_THRESHOLD = "0.8"
"""The KV-cache trigger's starting threshold: the share of KV cache in use
per replica that prescaler's ``targetKvCacheUsage`` defaults to."""


def queue_and_kv_manifest(queue: ScaledObjectSpec) -> dict[str, Any]:
    """The queue-length ScaledObject with a KV-cache trigger beside it."""
    doc = manifest_of(queue)
    doc["metadata"]["name"] = "vllm-queue-kv"
    server = doc["spec"]["triggers"][0]["metadata"].get("serverAddress", "")
    doc["spec"]["triggers"].append(
        {
            "type": "prometheus",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": server,
                "query": "avg(vllm:kv_cache_usage_perc)",
                "threshold": KV_THRESHOLD,
            },
        }
    )
    return doc


CRON_START = "0 8 * * *"
CRON_END = "0 18 * * *"
"""The cron trigger's starting window: :data:`CRON_REPLICAS` replicas from
08:00 to 18:00 UTC every day, a business day's hours (the search moves all three)."""


def cron_manifest(queue_kv: Mapping[str, Any], window: WrittenCron | None = None) -> dict[str, Any]:
    """The queue and KV-cache ScaledObject with a daily cron window beside
    them (the HPA takes the largest proposal, so the window is a floor):
    ``window`` the hours the team knows its ramp comes in and the replicas
    it holds; None: :data:`CRON_REPLICAS` from :data:`CRON_START` to
    :data:`CRON_END`."""
    return with_cron(queue_kv, window, "vllm-queue-kv-cron")


def with_cron(manifest: Mapping[str, Any], window: WrittenCron | None, name: str) -> dict[str, Any]:
    """``manifest`` named ``name`` with a daily cron trigger appended last
    (``window``, else :data:`CRON_REPLICAS` from :data:`CRON_START` to
    :data:`CRON_END`); its other triggers are kept as written."""
    start, end, replicas = CRON_START, CRON_END, CRON_REPLICAS
    if window is not None:
        minutes = (window.start_min, window.end_min)
        start, end = (f"{m % 60} {m % 1440 // 60} * * *" for m in minutes)
        replicas = str(window.replicas)
    doc = copy.deepcopy(dict(manifest))
    doc["metadata"]["name"] = name
    doc["spec"]["triggers"].append(
        {
            "type": "cron",
            "metadata": {
                "timezone": "UTC",
                "start": start,
                "end": end,
                "desiredReplicas": replicas,
            },
        }
    )
    return doc


GATEWAY_QUERY = "sum(rate(gateway_requests_total[1m]))"
GATEWAY_THRESHOLD = "0.5"
GATEWAY_ACTIVATION = "0.05"
"""The gateway trigger's start: 0.5 requests/s per replica (a little under
what one default-profile replica serves), active above one request in 20 s."""
GATEWAY_WAKE_THRESHOLD = "4"
"""The gateway trigger's threshold beside the fleet's own triggers: eight
times :data:`GATEWAY_THRESHOLD`. The activation (:data:`GATEWAY_ACTIVATION`)
wakes the fleet; at this threshold the gateway's proposal (about an eighth
of the fleet its rate needs) stays under what the queue and KV-cache
triggers propose for a running fleet, so they size it, and until a replica
is Ready it is the only sizing signal. Its searched range (an eighth to
eight times) still holds the sizing threshold."""


def gateway_manifest(queue: ScaledObjectSpec) -> dict[str, Any]:
    """A scale-to-zero ScaledObject on the gateway's request rate, with the
    queue ScaledObject's bounds, polling and behavior."""
    doc = manifest_of(queue)
    doc["metadata"]["name"] = "vllm-gateway"
    doc["spec"]["minReplicaCount"] = 0
    server = doc["spec"]["triggers"][0]["metadata"].get("serverAddress", "")
    doc["spec"]["triggers"] = [_gateway_trigger(server, GATEWAY_THRESHOLD)]
    return doc


def _gateway_trigger(server: str, threshold: str) -> dict[str, Any]:
    """The gateway's request-rate trigger (:data:`GATEWAY_QUERY`) at ``threshold``."""
    return {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": server,
            "query": GATEWAY_QUERY,
            "threshold": threshold,
            "activationThreshold": GATEWAY_ACTIVATION,
        },
    }


def gateway_queue_kv_manifest(queue_kv: Mapping[str, Any]) -> dict[str, Any]:
    """The queue and KV-cache ScaledObject scaling to zero: the gateway's
    trigger first, written as a wake-up (:data:`GATEWAY_WAKE_THRESHOLD`),
    the fleet's own two after it. At zero they have no series and read 0,
    so the gateway wakes the fleet; once it runs the HPA takes the largest
    of the three proposals."""
    doc = copy.deepcopy(dict(queue_kv))
    doc["metadata"]["name"] = "vllm-gateway-queue-kv"
    doc["spec"]["minReplicaCount"] = 0
    server = doc["spec"]["triggers"][0]["metadata"].get("serverAddress", "")
    fleet = doc["spec"]["triggers"]
    for trig in fleet:
        # KEDA's default, written: active while a request waits or runs; an
        # idle fleet reads 0 on both and goes to zero after cooldownPeriod
        trig["metadata"].setdefault("activationThreshold", "0")
    doc["spec"]["triggers"] = [_gateway_trigger(server, GATEWAY_WAKE_THRESHOLD), *fleet]
    return doc


def prescaler_gateway_manifest(prescaler: Mapping[str, Any]) -> dict[str, Any]:
    """prescaler's ScaledObject scaling to zero: ``minReplicaCount`` and
    ``minReplicas`` 0, and the gateway's rate (:data:`GATEWAY_QUERY`, the
    ``keda-gateway`` side's series) as its ``gatewayRateQuery``."""
    doc = copy.deepcopy(dict(prescaler))
    doc["metadata"]["name"] = f"{doc['metadata'].get('name', 'prescaler')}-gateway"
    doc["spec"]["minReplicaCount"] = 0
    for trig in doc["spec"]["triggers"]:
        if trig.get("type") in ("external", "external-push"):
            meta = trig.setdefault("metadata", {})
            meta["minReplicas"] = "0"
            meta["gatewayRateQuery"] = GATEWAY_QUERY
    return doc


def gateway_note(manifest: Mapping[str, Any]) -> str | None:
    """What a printed manifest that reads the gateway's series still needs:
    :data:`GATEWAY_QUERY` names the simulator's counter, which a real
    Prometheus does not have (no series reads 0, so such a fleet would never
    wake); None when nothing reads it."""
    for trig in manifest.get("spec", {}).get("triggers") or []:
        meta = trig.get("metadata") or {}
        if GATEWAY_QUERY in (meta.get("query"), meta.get("gatewayRateQuery")):
            return (
                f"the gateway's request rate: {GATEWAY_QUERY!r} is the simulator's counter; "
                "write your gateway's or ingress controller's requests/s for this model "
                '(e.g. sum(rate(nginx_ingress_controller_requests{service="vllm"}[1m]))), '
                "or the fleet never wakes from zero"
            )
    return None
