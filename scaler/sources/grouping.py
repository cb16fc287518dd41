"""Split grouped Prometheus answers into one ``Reading`` per selection (pure).

A selection's value is the sum over the answer's groups its matchers accept,
matched once per refresh with an index on each selection's first equality
matcher, so 1,000 ScaledObjects over 1,000 groups stay cheap. Missing is never
zero: a NaN group makes that signal unknown only for the selections that
match it; a gauge absent while replicas are present is NaN; lost replicas
(a failing scrape) make waiting NaN and rates unknown (``partial_hold``), and
``running`` a lower bound; no replica left at all is no reading; no series
and nothing lost is a fleet at zero, zero demand. The newer vLLM families
are read as the direct scrape reads them (``scaler.sources.scrape.aggregate``),
so both sources give the same ``Reading`` for the same fleet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from decision.reading import Reading, usable
from scaler.sources.model import History, Selection, SourceError
from scaler.sources.promql import CACHE_BLOCK_SIZE_LABEL, CACHE_BLOCKS_LABEL, QueryPlan

GroupKey = tuple[str, ...]

#: The raw cache-config signal and the two summable ones made from it.
CACHE_SIGNAL = "kv_cache"
KV_TOKENS = "kv_tokens"
KV_REPLICAS = "kv_replicas"


def parse_value(raw: Any, signal: str) -> float:
    """A Prometheus sample value (a string) as a float; NaN/Inf come back as NaN
    (unknown, for the matching selections only); a non-number is a ``SourceError``."""
    try:
        value = float(raw)
    except (TypeError, ValueError) as exc:
        raise SourceError(f"{signal}: value {raw!r} is not a number") from exc
    return value if math.isfinite(value) else math.nan


def _groups(
    plan: QueryPlan, signal: str, series: Iterable[Mapping[str, Any]], value_of: Any
) -> dict[GroupKey, float]:
    out: dict[GroupKey, float] = {}
    for item in series:
        try:
            labels = item["metric"]
        except (KeyError, TypeError) as exc:
            raise SourceError(f"{signal}: malformed series {item!r}") from exc
        key = tuple(str(labels.get(name, "")) for name in plan.group_labels)
        out[key] = out.get(key, 0.0) + parse_value(value_of(item), signal)
    return out


def _cache_tokens(labels: Mapping[str, Any]) -> float | None:
    """``num_gpu_blocks x block_size`` of one engine's cache config; ``None``
    before the engine profiled its memory (``"None"``) or for garbage, as the
    direct scrape reads it."""
    try:
        size = float(labels.get(CACHE_BLOCKS_LABEL, "")) * float(
            labels.get(CACHE_BLOCK_SIZE_LABEL, "")
        )
    except (TypeError, ValueError):
        return None
    return size if math.isfinite(size) and size > 0 else None


def expand_cache_config(
    plan: QueryPlan, answers: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, Sequence[Mapping[str, Any]]]:
    """``answers`` with the ``kv_cache`` answer replaced by ``kv_tokens`` (KV
    tokens per group, summed over its replicas' engines) and ``kv_replicas``
    (replicas per group that state a size), instant or range alike.

    Why: the size lives in labels, which PromQL cannot do arithmetic on, and
    the direct scrape's ``kv_cache_tokens`` is the mean over replicas of each
    replica's total, so replicas with several engines or configs are first
    merged per (group, instance).
    """
    out = {signal: series for signal, series in answers.items() if signal != CACHE_SIGNAL}
    raw = answers.get(CACHE_SIGNAL)
    if raw is None:
        return out
    instant = False
    merged: dict[tuple[GroupKey, str], dict[float, float]] = {}
    stamps: dict[float, Any] = {}
    for item in raw:
        try:
            labels = item["metric"]
            points = item["values"] if "values" in item else [item["value"]]
        except (KeyError, TypeError) as exc:
            raise SourceError(f"{CACHE_SIGNAL}: malformed series {item!r}") from exc
        instant = instant or "value" in item
        per_engine = _cache_tokens(labels)
        if per_engine is None:
            continue
        key = tuple(str(labels.get(name, "")) for name in plan.group_labels)
        row = merged.setdefault((key, str(labels.get("instance", ""))), {})
        for ts, value in points:
            t = round(float(ts), 3)
            stamps.setdefault(t, ts)
            row[t] = row.get(t, 0.0) + parse_value(value, CACHE_SIGNAL) * per_engine
    tokens: list[Mapping[str, Any]] = []
    replicas: list[Mapping[str, Any]] = []
    for (key, _instance), row in merged.items():
        metric = dict(zip(plan.group_labels, key, strict=True))
        if instant:
            for t, value in row.items():
                tokens.append({"metric": metric, "value": [stamps[t], value]})
                replicas.append({"metric": metric, "value": [stamps[t], 1.0]})
        else:
            tokens.append({"metric": metric, "values": [[stamps[t], v] for t, v in row.items()]})
            replicas.append({"metric": metric, "values": [[stamps[t], 1.0] for t in row]})
    out[KV_TOKENS] = tokens
    out[KV_REPLICAS] = replicas
    return out


def match_groups(
    plan: QueryPlan, selections: Sequence[Selection], keys: Iterable[GroupKey]
) -> dict[Selection, list[GroupKey]]:
    """For each selection, the group keys its matchers accept."""
    names = plan.group_labels
    position = {name: i for i, name in enumerate(names)}
    all_keys = list(dict.fromkeys(keys))
    index: dict[str, dict[str, list[GroupKey]]] = {}
    out: dict[Selection, list[GroupKey]] = {}
    for selection in dict.fromkeys(selections):
        candidates: Iterable[GroupKey] = all_keys
        for matcher in selection.matchers:
            if matcher.op == "=":
                by_value = index.get(matcher.name)
                if by_value is None:
                    by_value = {}
                    pos = position[matcher.name]
                    for key in all_keys:
                        by_value.setdefault(key[pos], []).append(key)
                    index[matcher.name] = by_value
                candidates = by_value.get(matcher.value, [])
                break
        out[selection] = [
            key for key in candidates if selection.matches(dict(zip(names, key, strict=True)))
        ]
    return out


def split_instant(
    plan: QueryPlan,
    answers: Mapping[str, Sequence[Mapping[str, Any]]],
    selections: Sequence[Selection],
    time_s: float,
) -> dict[Selection, Reading]:
    """Readings for ``selections`` from one instant answer per signal."""
    if not answers.get("health"):
        raise SourceError("Prometheus knows no targets (count(up) is empty)")
    answers = expand_cache_config(plan, answers)
    grouped = {
        signal: _groups(plan, signal, series, lambda item: item["value"][1])
        for signal, series in answers.items()
        if signal != "health"
    }
    return _readings(plan, grouped, selections, time_s)


def split_range(
    plan: QueryPlan,
    answers: Mapping[str, Sequence[Mapping[str, Any]]],
    selections: Sequence[Selection],
) -> dict[Selection, list[Reading]]:
    """Readings per evaluation time from one range answer per signal.

    Times where ``count(up)`` has no sample (Prometheus was not scraping) are
    left out: a gap, never a false zero.
    """
    answers = expand_cache_config(plan, answers)
    times: set[float] = set()
    for item in answers.get("health", ()):
        times.update(round(float(ts), 3) for ts, _ in item.get("values", ()))
    per_time: dict[float, dict[str, dict[GroupKey, float]]] = {t: {} for t in times}
    for signal, series in answers.items():
        if signal == "health":
            continue
        for item in series:
            labels = item.get("metric", {})
            key = tuple(str(labels.get(name, "")) for name in plan.group_labels)
            for ts, raw in item.get("values", ()):
                t = round(float(ts), 3)
                if t not in per_time:
                    continue
                # NaN/Inf: unknown for the selections matching this group (as live)
                value = parse_value(raw, signal)
                bucket = per_time[t].setdefault(signal, {})
                bucket[key] = bucket.get(key, 0.0) + value
    out: dict[Selection, list[Reading]] = {s: [] for s in selections}
    for t in sorted(per_time):
        for selection, reading in _readings(plan, per_time[t], selections, t).items():
            out[selection].append(reading)
    return out


HISTORY_SIGNALS: tuple[str, ...] = (
    "health",
    "replicas",
    "waiting",
    "completions",
    "in_system_delta",
    "prompt_tokens",
    "generation_tokens",
    "failed",
    "rejections",
    "asleep",
    "lost",
)


def _add_samples(row: np.ndarray, index: Mapping[float, int], values: Any) -> None:
    """Add one series' finite ``[time, value]`` samples into ``row`` at their
    grid times (a row's first value replaces its NaN), sample by sample."""
    for ts, raw in values:
        i = index.get(round(float(ts), 3))
        if i is None:
            continue
        value = float(raw)
        if math.isfinite(value):
            row[i] = value if math.isnan(row[i]) else row[i] + value


def _add_packed(row: np.ndarray, times: np.ndarray, values: Any) -> bool:
    """``_add_samples`` for a packed series (``PackedValues``) at once, when
    every sample's time is a grid time exactly (a range answer's are: a
    time with at most 3 decimals is its own ``round(t, 3)``) and none
    repeats; False, and nothing added, otherwise. Why: a three-day history
    is 17,000 samples a series, too many for a Python step each on the
    event loop."""
    array = getattr(values, "array", None)
    if not isinstance(array, np.ndarray) or array.ndim != 2 or array.shape[1] != 2:
        return False
    stamps, numbers = array[:, 0], array[:, 1]
    if times.size == 0:
        return stamps.size == 0
    at = np.minimum(np.searchsorted(times, stamps), times.size - 1)
    if not np.array_equal(times[at], stamps) or np.unique(at).size != at.size:
        return False
    keep = np.isfinite(numbers)
    at, numbers = at[keep], numbers[keep]
    current = row[at]
    row[at] = np.where(np.isnan(current), numbers, current + numbers)
    return True


def split_history(
    plan: QueryPlan,
    answers: Mapping[str, Sequence[Mapping[str, Any]]],
    selections: Sequence[Selection],
) -> dict[Selection, History]:
    """Arrays per selection from range answers of ``HISTORY_SIGNALS``.

    Same arithmetic as ``split_range`` (and so as a live read), vectorised:
    groups are summed per selection with numpy, never one object per point.
    """
    answers = expand_cache_config(plan, answers)
    stamps: set[float] = set()
    for item in answers.get("health", ()):
        stamps.update(round(float(ts), 3) for ts, _ in item.get("values", ()))
    times = np.array(sorted(stamps), dtype=float)
    index = {t: i for i, t in enumerate(times.tolist())}
    n = times.size
    per_signal: dict[str, dict[GroupKey, np.ndarray]] = {}
    for signal, series in answers.items():
        if signal == "health":
            continue
        groups = per_signal.setdefault(signal, {})
        for item in series:
            labels = item.get("metric", {})
            key = tuple(str(labels.get(name, "")) for name in plan.group_labels)
            row = groups.get(key)
            if row is None:
                row = groups[key] = np.full(n, np.nan)
            values = item.get("values", ())
            if not _add_packed(row, times, values):
                _add_samples(row, index, values)
    keys: set[GroupKey] = set()
    for groups in per_signal.values():
        keys.update(groups)
    matched = match_groups(plan, selections, keys)
    window = float(plan.rate_window_s)

    def total(signal: str, my_keys: list[GroupKey]) -> np.ndarray:
        rows = [per_signal.get(signal, {}).get(k) for k in my_keys]
        present = [r for r in rows if r is not None]
        if not present:
            return np.full(n, np.nan)
        stack = np.vstack(present)
        any_value = ~np.all(np.isnan(stack), axis=0)
        return np.where(any_value, np.nansum(stack, axis=0), np.nan)

    out: dict[Selection, History] = {}
    for selection, my_keys in matched.items():
        present = np.nan_to_num(total("replicas", my_keys), nan=0.0).round()
        asleep = np.nan_to_num(total("asleep", my_keys), nan=0.0).round()
        ready = np.maximum(present - asleep, 0.0)  # a sleeping replica is no capacity
        # Lost replicas (scrape failing, target still there) make the point
        # unknown, as in a live reading: a backfilled scaler must not learn
        # an outage as a quiet spell, nor count the readable replicas' load
        # as the whole demand.
        lost = total("lost", my_keys)
        incomplete = np.isfinite(lost) & (lost > 0)
        empty = (present == 0) & ~incomplete

        def rate(
            signal: str,
            keys: list[GroupKey] = my_keys,
            empty: np.ndarray = empty,
            incomplete: np.ndarray = incomplete,
        ) -> np.ndarray:
            value = np.maximum(total(signal, keys), 0.0)
            return np.where(incomplete, np.nan, np.where(np.isnan(value) & empty, 0.0, value))

        completions = rate("completions")
        delta = np.nan_to_num(total("in_system_delta", my_keys), nan=0.0)
        # error finishes and admission rejections: demand, absent on older vLLM
        turned = np.nan_to_num(rate("failed")) + np.nan_to_num(rate("rejections"))
        arrival = np.maximum(0.0, completions + turned + delta / window)
        prompt, generation = rate("prompt_tokens"), rate("generation_tokens")
        tokens = np.where(
            np.isnan(prompt) & np.isnan(generation),
            np.nan,
            np.nan_to_num(prompt) + np.nan_to_num(generation),
        )
        waiting = total("waiting", my_keys)
        # replicas but no waiting gauge: unknown, as in a live reading
        waiting = np.where(np.isnan(waiting) & empty, 0.0, np.maximum(waiting, 0.0))
        waiting = np.where(incomplete, np.nan, waiting)
        arrival = np.where(incomplete, np.nan, arrival)
        out[selection] = History(
            times=times,
            requests_per_s=arrival,
            tokens_per_s=tokens,
            ready=ready,
            waiting=waiting,
            completions_per_s=completions,
        )
    return out


def _total(
    grouped: Mapping[str, Mapping[GroupKey, float]], signal: str, keys: list[GroupKey]
) -> float | None:
    """Sum over the matched groups: ``None`` when none has a series, NaN when
    one of them is NaN (unknown)."""
    values = grouped.get(signal, {})
    present = [values[k] for k in keys if k in values]
    return sum(present) if present else None


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _signal(
    totals: Mapping[str, float | None], empty_fleet: bool, incomplete: bool, signal: str
) -> float | None:
    """One selection's value of ``signal``, ``None`` when unknown (see the module doc)."""
    if incomplete:
        return None
    value = totals.get(signal)
    if value is None:
        return 0.0 if empty_fleet else None
    return max(0.0, value) if math.isfinite(value) else None


def _gauge(
    totals: Mapping[str, float | None], empty_fleet: bool, incomplete: bool, signal: str
) -> float:
    """Like ``_signal`` with NaN for unknown (``Reading.waiting``/``running`` are floats)."""
    value = _signal(totals, empty_fleet, incomplete, signal)
    return math.nan if value is None else value


def _readings(
    plan: QueryPlan,
    grouped: Mapping[str, Mapping[GroupKey, float]],
    selections: Sequence[Selection],
    time_s: float,
) -> dict[Selection, Reading]:
    keys: set[GroupKey] = set()
    for values in grouped.values():
        keys.update(values)
    matched = match_groups(plan, selections, keys)
    window = float(plan.rate_window_s)
    out: dict[Selection, Reading] = {}
    for selection, my_keys in matched.items():
        totals = {signal: _total(grouped, signal, my_keys) for signal in grouped}
        replicas = totals.get("replicas")
        if replicas is not None and not math.isfinite(replicas):
            continue  # fleet size unknown: no reading (hold)
        present = round(replicas or 0.0)
        asleep = totals.get("asleep")
        if asleep is not None and not math.isfinite(asleep):
            continue  # how many replicas serve is unknown: no reading (hold)
        # a sleeping replica is read (its series are data) but is no capacity
        ready = max(0, present - round(asleep or 0.0))
        lost = totals.get("lost")
        incomplete = lost is not None and not (math.isfinite(lost) and lost <= 0)
        if incomplete and present == 0:
            continue  # every replica it had is unreachable: missing, never idle
        # No series for a signal: an empty fleet has none (zero demand); a
        # running one lacks the gauge/counter (old vLLM) or a window (just started).
        empty_fleet = present == 0

        rate = partial(_signal, totals, empty_fleet, incomplete)
        gauge = partial(_gauge, totals, empty_fleet, incomplete)
        kv_sum, kv_count = totals.get("kv_sum"), totals.get("kv_count")
        kv = None
        if _known(kv_sum) and _known(kv_count) and kv_count:
            assert kv_sum is not None and kv_count is not None
            kv = kv_sum / kv_count
        completions = rate("completions")
        delta = totals.get("in_system_delta")
        # error finishes left the system and rejections never entered it: both
        # are demand; absent (older vLLM) adds nothing, NaN makes it unknown
        turned = [totals.get("failed"), totals.get("rejections")]
        arrival = None
        if (
            completions is not None
            and (delta is None or math.isfinite(delta))
            and all(x is None or math.isfinite(x) for x in turned)
        ):
            extra = sum(max(0.0, x) for x in turned if x is not None)
            arrival = max(0.0, completions + extra + (delta or 0.0) / window)
        kv_tokens, kv_replicas = totals.get(KV_TOKENS), totals.get(KV_REPLICAS)
        kv_cache_tokens = None
        if _known(kv_tokens) and _known(kv_replicas) and kv_replicas:
            assert kv_tokens is not None and kv_replicas is not None
            kv_cache_tokens = kv_tokens / kv_replicas
        reading = Reading(
            time_s=time_s,
            ready_replicas=ready,
            waiting=gauge("waiting"),
            # incomplete: the readable replicas' sum, a lower bound that still
            # says "traffic present" (IsActive), which NaN would not
            running=partial(_gauge, totals, empty_fleet, False)("running"),
            kv_usage=kv,
            arrival_rate_rps=arrival,
            completion_rate_rps=completions,
            prompt_tokens_per_s=rate("prompt_tokens"),
            generation_tokens_per_s=rate("generation_tokens"),
            preemptions_per_s=rate("preemptions"),
            rejections_per_s=rate("rejections"),
            computed_prompt_tokens_per_s=rate("computed_prompt"),
            kv_cache_tokens=kv_cache_tokens,
        )
        if usable(reading):
            out[selection] = reading
    return out
