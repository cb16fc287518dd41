"""A tuned setting as a ScaledObject manifest: the KEDA and HPA knobs searched,
and the document a person pastes.

Each candidate is built as a person would build it, by editing the
manifest, and read back by the simulator's own ScaledObject reader, so what
is scored is exactly what is printed. Plain keys are prescaler trigger
metadata; dotted keys are manifest knobs (:data:`KNOB_PREFIXES`), triggers
addressed by their index. ``maxReplicaCount`` is the user's budget, never searched.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from simulations.autoscaling.keda import KedaConfig
from simulations.autoscaling.scaledobject import (
    ScaledObjectSpec,
    load_scaledobject,
    parse_scaledobject,
)
from simulations.tune.search import Param, format_value, merged_metadata

__all__ = [
    "BEHAVIOR_SPACE",
    "FRACTION_METRICS",
    "KEDA_DEFAULTS",
    "KNOB_PREFIXES",
    "PRESCALER_BEHAVIOR_SPACE",
    "apply_setting",
    "apply_to_manifest",
    "cron_space",
    "hpa_scale_down_s",
    "keda_space",
    "knob_value",
    "load_manifest",
    "manifest_of",
    "manifest_yaml",
    "metric_ceiling",
    "trigger_space",
    "triggers_of",
]

KNOB_PREFIXES = ("spec.", "scaleUp.", "scaleDown.", "triggers.")
"""Dotted keys that name a manifest knob rather than prescaler trigger metadata."""

MIN_REPLICA_COUNT = "spec.minReplicaCount"
POLLING_INTERVAL = "spec.pollingInterval"

BEHAVIOR_SPACE: tuple[Param, ...] = (
    Param(POLLING_INTERVAL, "choice", choices=("5", "10", "15", "30", "60"), reacts="low"),
    Param("scaleUp.stabilizationWindowSeconds", "int", 0, 300, step=15, reacts="low"),
    Param("scaleUp.periodSeconds", "choice", choices=("15", "30", "60"), reacts="low"),
    Param("scaleUp.percent", "int", 25, 400, step=25, reacts="high"),
    Param("scaleUp.pods", "int", 0, 8, reacts="high"),
    Param("scaleDown.stabilizationWindowSeconds", "int", 0, 1800, step=30),
    Param("scaleDown.percent", "int", 5, 100, step=5),
)
"""The HPA behavior and KEDA polling knobs every ScaledObject has: how often
KEDA reads the metric, how fast the HPA may add replicas (a Percent and a
Pods policy per period, the larger wins; Pods 0 is no Pods policy) and
after what window, how fast it may remove them (a Percent per minute) and
after what window."""


HPA_SCALE_DOWN_WINDOW = "scaleDown.stabilizationWindowSeconds"
TRIGGER_SCALE_DOWN_WINDOW = "scaleDownStabilizationSeconds"
PRESCALER_BEHAVIOR_SPACE: tuple[Param, ...] = tuple(
    p for p in BEHAVIOR_SPACE if p.key != HPA_SCALE_DOWN_WINDOW
)
""":data:`BEHAVIOR_SPACE` less the HPA's scale-down window, for a
ScaledObject with prescaler's trigger: its ``scaleDownStabilizationSeconds``
is the one scale-in wait searched, and the HPA's window is derived from it
(written 0, :func:`apply_to_manifest`). Both windows keep the highest
proposal seen over their span, one after the other, so two written waits
add up: a block that printed 1800 beside 1710 waited close to an hour."""


def hpa_scale_down_s(spec: ScaledObjectSpec) -> float:
    """The HPA's scale-down stabilization window ``spec`` runs with: its
    behavior's, else the controller's flag (5 minutes)."""
    behavior = spec.hpa.behavior
    window = None if behavior is None else behavior.scale_down.stabilization_window_s
    return float(spec.hpa.downscale_stabilization_s if window is None else window)


HPA_DEFAULTS: dict[str, str] = {
    "scaleUp.stabilizationWindowSeconds": "0",
    "scaleUp.periodSeconds": "15",
    "scaleUp.percent": "100",
    "scaleUp.pods": "4",
    "scaleDown.stabilizationWindowSeconds": "300",
    "scaleDown.percent": "100",
}
"""The knobs' values when a ScaledObject writes no behavior: the
autoscaling/v2 API defaults (scale-up Pods 4 and Percent 100 per 15 s, no
window; scale-down Percent 100, the controller's 5-minute window)
(:meth:`simulations.autoscaling.hpa_config.HpaBehavior.from_spec`). The first trial starts
from them; written out (scale-down per 60 s, the knob's period) they are
close to, not the same as, no behavior, so the ScaledObject as written is
scored as its own baseline."""


def triggers_of(spec: ScaledObjectSpec) -> tuple[Any, ...]:
    """Every trigger of ``spec``, in manifest order (one today; the spec's
    ``triggers`` when it holds several)."""
    many = getattr(spec, "triggers", None)
    return tuple(many) if many else (spec.trigger,)


def load_manifest(path: str | Path) -> dict[str, Any]:
    """The ScaledObject document of a YAML file, as written (other documents
    skipped); checked by the simulator's reader first, so errors are its."""
    load_scaledobject(path)
    docs = [d for d in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")) if d]
    return next(d for d in docs if isinstance(d, dict) and d.get("kind") == "ScaledObject")


def manifest_of(spec: ScaledObjectSpec, target: str = "vllm") -> dict[str, Any]:
    """The manifest of a parsed ScaledObject (the shipped defaults have no
    file): every field the simulator reads, ``scaleTargetRef`` named
    ``target``. ``parse_scaledobject`` of it gives ``spec`` back."""
    k = spec.keda
    body: dict[str, Any] = {
        "scaleTargetRef": {"name": target},
        "pollingInterval": int(k.polling_interval_s),
        "cooldownPeriod": int(k.cooldown_period_s),
        "minReplicaCount": k.min_replica_count,
        "maxReplicaCount": k.max_replica_count,
    }
    if k.initial_cooldown_period_s:
        body["initialCooldownPeriod"] = int(k.initial_cooldown_period_s)
    if k.idle_replica_count is not None:
        body["idleReplicaCount"] = k.idle_replica_count
    if k.fallback_failure_threshold is not None:
        body["fallback"] = {
            "failureThreshold": k.fallback_failure_threshold,
            "replicas": k.fallback_replicas,
            "behavior": k.fallback_behavior,
        }
    if spec.behavior_spec is not None:
        body["advanced"] = {
            "horizontalPodAutoscalerConfig": {"behavior": copy.deepcopy(dict(spec.behavior_spec))}
        }
    body["triggers"] = [_trigger_doc(t, spec.push) for t in triggers_of(spec)]
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": spec.name},
        "spec": body,
    }


def _trigger_doc(t: Any, push: bool) -> dict[str, Any]:
    """One trigger's manifest entry (``t`` a parsed trigger of any kind)."""
    kind = ("external-push" if push else "external") if t.kind == "prescaler" else t.kind
    doc: dict[str, Any] = {"type": kind}
    if getattr(t, "name", None):
        doc["name"] = t.name
    if kind != "cron":
        doc["metricType"] = t.metric_type
    doc["metadata"] = dict(t.metadata)
    return doc


# ----------------------------------------------------------------- space
def keda_space(spec: ScaledObjectSpec, max_replicas: int) -> tuple[Param, ...]:
    """The knobs of ``spec``'s KEDA set-up: ``minReplicaCount`` (0 only when
    the user scales to zero already), each prometheus trigger's
    ``threshold`` (a log-wide range around the user's, on a step a person
    writes) and ``activationThreshold`` and ``cooldownPeriod`` (only when
    ``minReplicaCount`` is 0: above one replica they decide nothing), each cron trigger's window and
    replicas (:func:`cron_space`), then :data:`BEHAVIOR_SPACE`."""
    low = min(1, spec.keda.min_replica_count)
    high = max(low + 1, min(8, max_replicas))
    params: list[Param] = [Param(MIN_REPLICA_COUNT, "int", low, high)]
    if low == 0:
        params.append(cooldown_param((MIN_REPLICA_COUNT, "0")))
    params.extend(trigger_space(spec, max_replicas, activation=low == 0))
    return (*params, *BEHAVIOR_SPACE)


def trigger_space(
    spec: ScaledObjectSpec,
    max_replicas: int,
    *,
    activation: bool = False,
    floor_key: str = MIN_REPLICA_COUNT,
) -> tuple[Param, ...]:
    """The knobs of ``spec``'s KEDA triggers, each addressed by its index:
    a prometheus trigger's ``threshold`` (and ``activationThreshold`` when
    ``activation``, searched only at a ``minReplicaCount`` of 0), within the
    range its query's metric can reach (:func:`metric_ceiling`), a cron
    trigger's window and replicas above ``floor_key`` (:func:`cron_space`).
    prescaler's own trigger has none here (its metadata is its own space)."""
    params: list[Param] = []
    for i, t in enumerate(triggers_of(spec)):
        if t.kind == "cron":
            params.extend(cron_space(i, max_replicas, floor_key=floor_key))
            continue
        if t.kind != "prometheus" or t.threshold is None:
            continue
        ceiling = metric_ceiling(str(t.metadata.get("query", "")))
        lo, hi, step = _threshold_range(t.threshold, ceiling)
        params.append(Param(f"triggers.{i}.threshold", "float", lo, hi, step=step, reacts="low"))
        if activation:
            params.append(
                Param(
                    f"triggers.{i}.activationThreshold",
                    "float",
                    0.0,
                    hi,
                    step=_activation_step(t.activation_threshold, step),
                    when=(MIN_REPLICA_COUNT, "0"),
                    reacts="low",
                )
            )
    return tuple(params)


def _activation_step(written: float, step: float) -> float:
    """The threshold's ``step``, or the written activation's last decimal
    place where that is finer: a wake-up written off the threshold's grid
    (0.05 beside a threshold of 4, 0.25 beside 3) stays on the grid, so the
    first trial is the ScaledObject as written."""
    if written > 0 and math.isfinite(written):
        exponent = Decimal(f"{written:.6g}").normalize().as_tuple().exponent
        if isinstance(exponent, int):
            step = min(step, 10.0**exponent)
    return float(f"{step:.6g}")


COOLDOWN_PERIOD = "spec.cooldownPeriod"
"""KEDA's wait after the last activity before it takes a fleet to zero."""


def cooldown_param(when: tuple[str, str]) -> Param:
    """``cooldownPeriod`` as a knob, searched only where the floor is 0 (``when``):
    how long a fleet at zero's last replica outlives its last request is
    what a scale-to-zero set-up trades cost for the next burst's wait on."""
    return Param(COOLDOWN_PERIOD, "int", 30, 1800, step=30, when=when)


CRON_START = "startMinuteOfDay"
"""A cron trigger's window start as a minute of the day (a knob; the
manifest's ``start`` gets its minute and hour fields)."""
CRON_LENGTH = "windowMinutes"
"""A cron trigger's window length in minutes (a knob; the manifest's ``end``
is written as start plus this, across midnight when it runs past it)."""


def cron_space(
    index: int, max_replicas: int, *, floor_key: str = MIN_REPLICA_COUNT
) -> tuple[Param, ...]:
    """The knobs of cron trigger ``index``: when its window opens (on the
    quarter hour), how long it lasts (15 minutes to a day less 15 minutes,
    so it never ends where it starts, which KEDA refuses) and the replicas it
    holds inside: above the floor the trial picked (``floor_key``:
    ``spec.minReplicaCount`` for KEDA, ``minReplicas`` beside prescaler's
    trigger) up to ``maxReplicaCount``. The HPA takes the largest proposal,
    so a window at or below the floor holds nothing the floor does not; a
    trial whose floor leaves no room keeps the window as written."""
    pre = f"triggers.{index}."
    return (
        Param(pre + CRON_START, "int", 0, 1425, step=15),
        Param(pre + CRON_LENGTH, "int", 15, 1425, step=15),
        Param(pre + "desiredReplicas", "int", 1, max(2, max_replicas), above=floor_key),
    )


def _cron_minute(expr: str) -> int | None:
    """The minute of the day a cron expression with a plain minute and hour
    fires at (None for lists, ranges or steps: not a point on the knob)."""
    fields = expr.split()
    if len(fields) != 5 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return int(fields[1]) * 60 + int(fields[0])


def _cron_at(expr: str, minute_of_day: int) -> str:
    """``expr`` firing at ``minute_of_day``: its minute and hour fields
    replaced, its day fields kept (a weekday window stays one)."""
    fields = expr.split() if len(expr.split()) == 5 else ["0", "0", "*", "*", "*"]
    minute_of_day %= 1440
    return " ".join([str(minute_of_day % 60), str(minute_of_day // 60), *fields[2:]])


def _cron_knob(meta: Mapping[str, Any], field: str) -> str | None:
    start = _cron_minute(str(meta.get("start", "")))
    end = _cron_minute(str(meta.get("end", "")))
    if start is None or end is None:
        return None
    return str(start) if field == CRON_START else str((end - start) % 1440)


def _set_cron_window(meta: dict[str, Any], start: str | None, length: str | None) -> None:
    """Write the window knobs into a cron trigger's ``start`` and ``end``."""
    old_start = _cron_minute(str(meta.get("start", ""))) or 0
    old_end = _cron_minute(str(meta.get("end", ""))) or 0
    first = int(start) if start is not None else old_start
    span = int(length) if length is not None else (old_end - old_start) % 1440
    meta["start"] = _cron_at(str(meta.get("start", "")), first)
    meta["end"] = _cron_at(str(meta.get("end", meta["start"])), first + span)


def _threshold_range(base: float, ceiling: float | None = None) -> tuple[float, float, float]:
    """From an eighth to eight times ``base``, on a decimal step (0.1 for a
    queue threshold of 3, 0.01 for a KV-cache fraction of 0.8), no higher
    than ``ceiling`` (the most the trigger's metric can read; a threshold
    above it never fires, and neither does an activation)."""
    if ceiling is not None:
        base = min(base, ceiling)
    step = 10.0 ** math.floor(math.log10(base / 8.0))
    lo = max(step, math.ceil(base / 8.0 / step) * step)
    hi = math.floor(base * 8.0 / step) * step
    if ceiling is not None:
        hi = min(hi, math.floor(ceiling / step) * step)
    return float(f"{lo:.6g}"), float(f"{hi:.6g}"), float(f"{step:.6g}")


FRACTION_METRICS = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:cpu_cache_usage_perc",
)
"""vLLM's metrics that read a fraction, 0 to 1 (``_perc`` notwithstanding)."""

_GROUPING = r"(?:\s*(?:by|without)\s*\([^()]*\))?"
_PER_REPLICA = re.compile(
    r"^(?:avg|max|min|(?:avg|max|min)_over_time)" + _GROUPING + r"\s*\((.*)\)" + _GROUPING + r"$",
    re.DOTALL,
)
_QUANTILE = re.compile(
    r"^quantile(?:_over_time)?" + _GROUPING + r"\s*\(\s*[0-9.]+\s*,(.*)\)" + _GROUPING + r"$",
    re.DOTALL,
)
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^{}]*\})?\s*(?:\[[^\[\]]*\])?$")


def metric_ceiling(query: str) -> float | None:
    """The most a trigger's ``query`` can read: 1 for a vLLM fraction
    (:data:`FRACTION_METRICS`) read per replica, plainly (the series, or an
    ``avg``, ``max``, ``min`` or quantile of it, over replicas or time, and
    nothing else); None otherwise, unbounded or unknown: a ``sum`` or
    ``count`` across replicas, or any arithmetic on it (``* 100`` reads 0
    to 100). A threshold searched above the ceiling could never fire.
    ``A or B`` (a series or its older name, as prescaler's own query
    writes it) reads 1 at most when both sides do."""
    parts = _top_level_or(query)
    if len(parts) > 1:
        ceilings = [metric_ceiling(part) for part in parts]
        return 1.0 if all(c == 1.0 for c in ceilings) else None
    inner = query.strip()
    peeled = _PER_REPLICA.match(inner) or _QUANTILE.match(inner)
    if peeled is not None:
        return metric_ceiling(peeled.group(1))
    series = _SERIES.match(inner)
    return 1.0 if series is not None and series.group(1) in FRACTION_METRICS else None


def _top_level_or(query: str) -> list[str]:
    """``query`` split at each ``or`` outside brackets and quotes."""
    parts: list[str] = []
    depth, start, quote = 0, 0, ""
    for i, ch in enumerate(query):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and re.match(r"\sor\s", query[i - 1 : i + 3] if i else ""):
            parts.append(query[start:i])
            start = i + 2
    return [*parts, query[start:]]


KEDA_DEFAULTS: dict[str, str] = {
    POLLING_INTERVAL: format_value(KedaConfig().polling_interval_s),
    "spec.cooldownPeriod": format_value(KedaConfig().cooldown_period_s),
    "spec.minReplicaCount": format_value(KedaConfig().min_replica_count),
    "activationThreshold": "0",
}
"""What KEDA runs for a knob the ScaledObject leaves out (its CRD's
defaults, as :class:`simulations.autoscaling.keda.KedaConfig` holds them; a trigger's
``activationThreshold`` is 0): the first trial is the ScaledObject as it
runs, as prescaler's trigger keys left out are seeded with theirs."""


def knob_value(doc: Mapping[str, Any], key: str) -> str | None:
    """What the manifest ``doc`` has for knob ``key``, KEDA's default when it
    leaves the key out (None when it says it another way, e.g. no Pods
    policy): the study's first trial starts from these."""
    spec = doc.get("spec", {})
    if key.startswith("spec."):
        value = spec.get(key[5:])
        return KEDA_DEFAULTS.get(key) if value is None else format_value(value)
    if key.startswith("triggers."):
        _, index, field = key.split(".", 2)
        triggers = spec.get("triggers", [])
        meta = triggers[int(index)].get("metadata", {}) if int(index) < len(triggers) else {}
        if field in (CRON_START, CRON_LENGTH):
            return _cron_knob(meta, field)
        return meta.get(field, KEDA_DEFAULTS.get(field))
    direction, field = key.split(".", 1)
    rules = _behavior(doc).get(direction)
    if rules is None:
        # no behavior written: the HPA's API defaults for that direction
        return HPA_DEFAULTS.get(key)
    if field == "stabilizationWindowSeconds":
        value = rules.get(field)
        return None if value is None else format_value(value)
    policies = rules.get("policies") or []
    if field == "periodSeconds":
        periods = {p.get("periodSeconds") for p in policies}
        return format_value(periods.pop()) if len(periods) == 1 else None
    kind = {"percent": "Percent", "pods": "Pods"}[field]
    found = [p for p in policies if p.get("type") == kind]
    if not found and kind == "Pods" and policies:
        return "0"  # policies without a Pods one: the knob's "none"
    return format_value(found[0]["value"]) if len(found) == 1 else None


def _behavior(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    advanced = doc.get("spec", {}).get("advanced") or {}
    return (advanced.get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}


# ----------------------------------------------------------------- apply
def apply_to_manifest(doc: Mapping[str, Any], picked: Mapping[str, str]) -> dict[str, Any]:
    """``doc`` with a search setting applied: metadata keys on prescaler's
    trigger (``leadTimeSeconds`` from its mode, ``nodeLeadTimeSeconds``
    dropped with prewarm off, ``fallbackReplicas`` raised to a higher
    floor), knob keys on the manifest. prescaler's ``minReplicas`` is the
    ScaledObject's ``minReplicaCount`` too, so KEDA's floor and the
    trigger's say the same (a ``minReplicas`` above a ``minReplicaCount`` of
    0 keeps IsActive true and never reaches zero; at 0 both scale to zero). A tuned
    ``scaleDownStabilizationSeconds`` is the ScaledObject's one scale-in
    wait: the HPA's scale-down window is written 0 beside it
    (:data:`PRESCALER_BEHAVIOR_SPACE`). ``fallback.replicas`` follows the
    trigger's ``fallbackReplicas`` and the floor (:func:`_agree_fallback`).
    The user's other fields are kept as written."""
    out = copy.deepcopy(dict(doc))
    spec = out.setdefault("spec", {})
    triggers = spec.get("triggers") or []
    meta_keys = {k: v for k, v in picked.items() if not k.startswith(KNOB_PREFIXES)}
    for trig in triggers:
        if trig.get("type") in ("external", "external-push"):
            if meta_keys:
                trig["metadata"] = merged_metadata(trig.get("metadata") or {}, meta_keys)
            floor = (trig.get("metadata") or {}).get("minReplicas")
            if floor is not None:
                # one floor: a trigger minReplicas above a minReplicaCount of
                # 0 keeps IsActive true, so that block never reaches zero
                spec["minReplicaCount"] = int(floor)
    windows: dict[int, dict[str, str]] = {}
    for key, value in picked.items():
        if key.startswith("spec."):
            spec[key[5:]] = int(value)
        elif key.startswith("triggers."):
            _, index, field = key.split(".", 2)
            if field in (CRON_START, CRON_LENGTH):
                windows.setdefault(int(index), {})[field] = value
            else:
                triggers[int(index)].setdefault("metadata", {})[field] = value
    for at, window in windows.items():
        meta = triggers[at].setdefault("metadata", {})
        _set_cron_window(meta, window.get(CRON_START), window.get(CRON_LENGTH))
    behavior = {k: v for k, v in picked.items() if k.startswith(("scaleUp.", "scaleDown."))}
    if TRIGGER_SCALE_DOWN_WINDOW in meta_keys and any(
        t.get("type") in ("external", "external-push") for t in triggers
    ):
        # one scale-in wait: the trigger's; the HPA's after it would add to it
        behavior[HPA_SCALE_DOWN_WINDOW] = "0"
    if behavior:
        _set_behavior(spec, behavior)
    _agree_fallback(spec, triggers)
    return out


def _agree_fallback(spec: dict[str, Any], triggers: Sequence[Mapping[str, Any]]) -> None:
    """KEDA's ``fallback.replicas`` made to agree with the rest: prescaler's
    trigger's ``fallbackReplicas`` when it has one (both say what to run
    when the metrics are gone), never below ``minReplicaCount`` (a fallback
    under the floor is one KEDA would undercut the floor with)."""
    fallback = spec.get("fallback")
    if not isinstance(fallback, dict) or "replicas" not in fallback:
        return
    replicas = int(fallback["replicas"])
    for trig in triggers:
        if trig.get("type") in ("external", "external-push"):
            written = (trig.get("metadata") or {}).get("fallbackReplicas")
            if written is not None:
                replicas = int(written)
    fallback["replicas"] = max(replicas, int(spec.get("minReplicaCount", 0) or 0))


def _set_behavior(spec: dict[str, Any], knobs: Mapping[str, str]) -> None:
    """Write the searched behavior: knobs given replace the user's policies
    for that direction; what a knob does not name keeps the user's value
    (or the HPA's default)."""
    advanced = spec.setdefault("advanced", {})
    hpa = advanced.setdefault("horizontalPodAutoscalerConfig", {})
    behavior = hpa.setdefault("behavior", {})
    for direction in ("scaleUp", "scaleDown"):
        mine = {k.split(".", 1)[1]: v for k, v in knobs.items() if k.startswith(direction + ".")}
        if not mine:
            continue
        rules = dict(behavior.get(direction) or {})
        if "stabilizationWindowSeconds" in mine:
            rules["stabilizationWindowSeconds"] = int(mine["stabilizationWindowSeconds"])
        period = int(mine.get("periodSeconds", "15" if direction == "scaleUp" else "60"))
        policies = [
            {"type": kind, "value": int(mine[field]), "periodSeconds": period}
            for field, kind in (("percent", "Percent"), ("pods", "Pods"))
            if field in mine and int(mine[field]) > 0
        ]
        if policies:
            rules["policies"] = policies
            rules["selectPolicy"] = "Max"
        behavior[direction] = rules


def apply_setting(
    base: ScaledObjectSpec,
    picked: Mapping[str, str],
    manifest: Mapping[str, Any] | None = None,
) -> ScaledObjectSpec:
    """The ScaledObject a search setting makes of ``base`` (of its
    ``manifest`` as the user wrote it, when given), parsed by the
    simulator's reader (the knobs' values are checked as a user's would be)."""
    doc = apply_to_manifest(manifest if manifest is not None else manifest_of(base), picked)
    return parse_scaledobject(yaml.safe_dump(doc, sort_keys=False), base.name)


def manifest_yaml(doc: Mapping[str, Any]) -> str:
    """The manifest as YAML to paste: trigger metadata values double-quoted
    (KEDA's trigger metadata is a map of strings; JSON quoting is YAML)."""
    body = copy.deepcopy(dict(doc))
    triggers = body.get("spec", {}).get("triggers") or []
    placeholders: dict[str, str] = {}
    for i, trig in enumerate(triggers):
        for key, value in list((trig.get("metadata") or {}).items()):
            mark = f"@@{i}:{key}@@"
            placeholders[mark] = json.dumps(str(value))
            trig["metadata"][key] = mark
    text = yaml.safe_dump(body, sort_keys=False, default_flow_style=False)
    for mark, quoted in placeholders.items():
        text = text.replace(f"'{mark}'", quoted).replace(mark, quoted)
    return text


def metadata_of(doc: Mapping[str, Any], kinds: Sequence[str]) -> dict[str, str]:
    """The metadata of the first trigger of one of ``kinds`` in ``doc``."""
    for trig in doc.get("spec", {}).get("triggers") or []:
        if trig.get("type") in kinds:
            return {str(k): str(v) for k, v in (trig.get("metadata") or {}).items()}
    return {}
