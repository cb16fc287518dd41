"""The sides ``prescaler tune`` compares, each tuned the same way.

A side is a base ScaledObject, its manifest (what the printed setting is
written into) and the knobs searched. The family:

- ``prescaler``: prescaler's external trigger (the user's ScaledObject when
  it has one, else the shipped defaults): its metadata
  (:data:`simulations.tune.search.PREDICTIVE_SPACE`) and the ScaledObject's
  polling and HPA behavior
  (:data:`simulations.tune.manifest.PRESCALER_BEHAVIOR_SPACE`: the trigger's
  scale-down window is the one scale-in wait, the HPA's is derived).
- ``keda-queue``: plain KEDA on ``sum(vllm:num_requests_waiting)``, the
  public recipes' queue-length ScaledObject: every knob of
  :func:`simulations.tune.manifest.keda_space`.
- ``keda-queue-kv``: the same plus a second prometheus trigger on
  ``avg(vllm:kv_cache_usage_perc)`` (threshold 0.8, the KV-cache share
  prescaler's own ``targetKvCacheUsage`` defaults to); KEDA hands the HPA
  one metric per trigger and the HPA takes the largest proposal.
- ``user``: the user's own prometheus-trigger ScaledObject as written, with
  the same knobs over each of its triggers.
- ``keda-queue-kv-cron`` (asked for by name): the queue and KV-cache
  triggers plus a ``cron`` trigger holding a replica count through a daily
  window, what a team does for a ramp it knows the hour of; written with
  the hours and replicas the request names (``cron_window``, else 2
  replicas from 08:00 to 18:00), its start, length and replicas searched
  with the rest.
- ``keda-gateway`` (asked for by name): scale to zero the way the KEDA HTTP
  add-on does it, on the request rate at the gateway in front of vLLM
  (``sum(rate(gateway_requests_total[1m]))``, 0.5 requests/s per replica),
  ``minReplicaCount`` 0 and an ``activationThreshold`` searched. A trigger
  on vLLM's own metrics cannot wake a fleet at zero (no replica, no
  series), so the gateway's count is the only live wake-up signal.
- ``keda-gateway-cron`` (asked for by name): every KEDA trigger of the
  family in one ScaledObject at ``minReplicaCount`` 0: the gateway's rate
  (the wake-up signal), the queue and the KV cache (sizing a running
  fleet) and the cron side's daily window, written and searched the same
  way. The KEDA set-up with the same information as ``prescaler-cron``.
- ``prescaler-gateway`` (asked for by name): prescaler's trigger given the
  same gateway series (``gatewayRateQuery``), ``minReplicaCount`` 0 and
  ``minReplicas`` searched from 0 (``minReplicaCount`` follows it: a trial
  at 1 or more holds that floor): prescaler scaling to zero and waking on
  the gateway's rate or its forecast. The ``prescaler`` side searches
  ``minReplicas`` from 0 too when its ScaledObject has the key.
- ``prescaler-cron`` (asked for by name): ``prescaler-gateway`` with the
  cron side's daily window beside it (written the same way, searched the
  same way): what a team that knows its ramp's hour runs once it adopts
  prescaler, keeping the window it already has.

A user's ScaledObject with prescaler's trigger beside KEDA triggers (a
cron window, a prometheus trigger) is the ``prescaler`` side's base, each
of its other triggers' knobs searched with prescaler's; the order of the
triggers is the user's.

Every side gets the same optimizer, trial budget, seed and out-of-sample
protocol; ``maxReplicaCount`` stays the user's on every side (or the
trace's bound when no ScaledObject is given).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from simulations.autoscaling.scaledobject import ScaledObjectSpec, parse_scaledobject
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
from simulations.tune.search import (
    PREDICTIVE_SPACE,
    Param,
    default_bases,
)
from simulations.tune.timing_floors import timing_floors

if TYPE_CHECKING:
    from decision.settings import ScalerSettings
    from engine.profile_types import Profile
    from simulations.tune.run import TuneRequest

__all__ = [
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

SIDES = (
    "prescaler",
    "keda-queue",
    "keda-queue-kv",
    "user",
    "keda-queue-kv-cron",
    "keda-gateway",
    "keda-gateway-cron",
    "prescaler-gateway",
    "prescaler-cron",
)
"""Side names, in report order."""
CRON_SIDES = ("keda-queue-kv-cron", "keda-gateway-cron", "prescaler-cron")
"""The sides whose daily window ``TuneRequest.cron_window`` writes."""
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


def make_sides(request: TuneRequest, profile: Profile | str, bound: int) -> tuple[Side, ...]:
    """The sides for ``request``: prescaler's and plain KEDA's, plus the
    user's own when ``--scaledobject`` is a prometheus-trigger one."""
    from simulations.autoscaling.scaledobject import load_scaledobject, seeds_reactive

    p_base, _ = default_bases(profile, bound)
    p_doc: Mapping[str, Any] = manifest_of(p_base)
    others: tuple[Param, ...] = ()
    user: Side | None = None
    if request.scaledobject:
        mine = load_scaledobject(request.scaledobject)
        doc = load_manifest(request.scaledobject)
        bound = mine.keda.max_replica_count
        kinds = {t.kind for t in triggers_of(mine)}
        if "prescaler" in kinds:
            # prescaler's trigger alone, or beside the KEDA triggers the team
            # keeps (a cron window, a queue trigger): one side, each of the
            # other triggers' knobs searched with prescaler's
            p_base, p_doc = mine, doc
            others = trigger_space(mine, bound, floor_key="minReplicas")
        else:
            p_base, _ = default_bases(profile, bound)
            p_doc = manifest_of(p_base)
            user = Side(
                "user",
                f"{mine.name} as written ({', '.join(sorted(kinds))} triggers)",
                mine,
                doc,
                keda_space(mine, bound),
                bound,
            )
    p_space = PREDICTIVE_SPACE
    fixed = dict(request.prescaler_fixed)
    if request.forecaster:
        fixed["forecast"] = request.forecaster
    g_doc = prescaler_gateway_manifest(p_doc)
    g_space = _from_zero(PREDICTIVE_SPACE)
    if fixed:
        # held in the manifests: a trial's ScaledObject is its setting
        # applied to the side's manifest, and the base is that manifest parsed
        p_doc, g_doc = apply_to_manifest(p_doc, fixed), apply_to_manifest(g_doc, fixed)
        p_base = _parsed(p_doc, p_base.name)
        p_space, g_space = _without(p_space, fixed), _without(g_space, fixed)
        others = _without(others, fixed)
    g_base = _parsed(g_doc, "prescaler-gateway")
    p_settings, g_settings = _settings_of(p_base), _settings_of(g_base)
    if p_settings.gateway_rate_query:
        p_space = _from_zero(p_space)
    told = request.cron_window
    if told is not None and told.replicas > bound:
        raise ValueError(
            f"cron_window: {told.replicas} replicas is above maxReplicaCount {bound}, "
            "which no cron trigger can hold"
        )
    start_s = cold_start_s(request, profile)
    p_space = timing_floors(p_space, p_settings, start_s)
    g_space = timing_floors(g_space, g_settings, start_s)
    g_bound = min(bound, g_settings.max_replicas)
    q_base = seeds_reactive(max_replicas=bound)
    sides = [
        Side(
            "prescaler",
            "prescaler's external trigger",
            p_base,
            p_doc,
            (*p_space, *others, *PRESCALER_BEHAVIOR_SPACE),
            min(bound, p_settings.max_replicas),
        ),
        Side(
            "keda-queue",
            "KEDA prometheus trigger on sum(vllm:num_requests_waiting)",
            q_base,
            manifest_of(q_base),
            keda_space(q_base, bound),
            bound,
        ),
    ]
    kv_doc = queue_and_kv_manifest(q_base)
    kv_base = parse_scaledobject(yaml.safe_dump(kv_doc, sort_keys=False), "keda-queue-kv")
    sides.append(
        Side(
            "keda-queue-kv",
            "KEDA prometheus triggers on the queue and avg(vllm:kv_cache_usage_perc)",
            kv_base,
            kv_doc,
            keda_space(kv_base, bound),
            bound,
        )
    )
    if user is not None:
        sides.append(user)
    cron_doc = cron_manifest(kv_doc, request.cron_window)
    sides.append(
        _keda_side(
            "keda-queue-kv-cron",
            "KEDA queue and KV-cache triggers plus a daily cron window",
            cron_doc,
            bound,
        )
    )
    sides.append(
        _keda_side(
            "keda-gateway",
            "KEDA scale to zero on the gateway's request rate",
            gateway_manifest(q_base),
            bound,
        )
    )
    sides.append(
        _keda_side(
            "keda-gateway-cron",
            "KEDA scale to zero: gateway, queue and KV-cache triggers plus a daily cron window",
            with_cron(gateway_queue_kv_manifest(kv_doc), request.cron_window, "vllm-gateway-cron"),
            bound,
        )
    )
    sides.append(
        Side(
            "prescaler-gateway",
            "prescaler's trigger scaling to zero, woken by the gateway's request rate",
            g_base,
            g_doc,
            (*g_space, *others, *PRESCALER_BEHAVIOR_SPACE),
            g_bound,
        )
    )
    c_name = f"{g_doc['metadata']['name']}-cron"
    window: tuple[Param, ...] = ()
    if any(t.kind == "cron" for t in triggers_of(g_base)):
        # the user's own window is the window (its knobs are in ``others``)
        c_doc = copy.deepcopy(g_doc)
        c_doc["metadata"]["name"] = c_name
    else:
        c_doc = with_cron(g_doc, request.cron_window, c_name)
        window = _without(
            cron_space(len(g_doc["spec"]["triggers"]), bound, floor_key="minReplicas"), fixed
        )
    sides.append(
        Side(
            "prescaler-cron",
            "prescaler's trigger scaling to zero, beside a daily cron window",
            _parsed(c_doc, "prescaler-cron"),
            c_doc,
            (*g_space, *others, *window, *PRESCALER_BEHAVIOR_SPACE),
            g_bound,
        )
    )
    wanted = request.sides or DEFAULT_SIDES
    unknown = sorted(set(wanted) - set(SIDES))
    if unknown:
        raise ValueError(f"unknown side(s) {', '.join(unknown)} (known: {', '.join(SIDES)})")
    chosen = tuple(s for s in sides if s.name in wanted)
    if not chosen:
        raise ValueError(
            "no side left to tune: the user side is a --scaledobject with prometheus "
            "triggers (one with prescaler's trigger is the prescaler side's base)"
        )
    return chosen


def cold_start_s(request: TuneRequest, profile: Profile | str) -> float:
    """The replica cold start the run is told (``--lead-time-preset`` and the
    phase flags, else the profile's): the floor of a searched fixed lead time."""
    from engine.profiles import use_profile
    from simulations.sim_inputs import SimInputs

    prof = use_profile(profile)
    startup = (request.inputs or SimInputs()).startup(prof) or prof.startup
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
CRON_REPLICAS = "2"
"""The cron trigger's starting window: 2 replicas from 08:00 to 18:00 UTC
every day, a business day's hours (the search moves all three)."""


@dataclass(frozen=True)
class WrittenCron:
    """A cron side's window as its team writes it: the minutes of the day
    (UTC) it opens and closes at, and the replicas it holds in between."""

    start_min: int
    end_min: int
    replicas: int = int(CRON_REPLICAS)

    def __post_init__(self) -> None:
        minutes = (self.start_min, self.end_min)
        if not all(isinstance(m, int) and not isinstance(m, bool) for m in minutes) or not all(
            0 <= m <= 1440 for m in minutes
        ):
            raise ValueError(f"cron_window: minutes of the day in [0, 1440], got {minutes!r}")
        if self.start_min % 1440 == self.end_min % 1440:
            raise ValueError(f"cron_window: a window cannot end where it starts, got {minutes!r}")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"cron_window: replicas must be >= 1, got {self.replicas!r}")


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
