"""PromQL for all ScaledObjects that share one Prometheus: one query per signal.

KEDA's own Prometheus scaler sends one query per ScaledObject per poll. Here
each signal is ONE query grouped ``by`` the union of the label names any
selection filters on; the groups are summed per selection in Python with
Prometheus' matcher semantics (``scaler.sources.model.matcher_matches``).
When every ScaledObject selects the same series the matchers go into the
query itself, escaped by ``LabelMatcher.promql()``; label *names* are
validated, so ``by (...)`` is safe. Both vLLM generations are read; what
each signal means is said beside its query in :func:`build_plan`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from decision.selectors import LabelMatcher
from scaler.sources.model import Selection

SIGNALS: tuple[str, ...] = (
    "waiting",
    "running",
    "replicas",
    "kv_sum",
    "kv_count",
    "completions",
    "in_system_delta",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "failed",
    "rejections",
    "computed_prompt",
    "asleep",
    "kv_cache",
    "lost",
    "health",
)

DEFAULT_RATE_WINDOW_S = 120.0
"""Four 30 s scrapes or two 60 s ones (``prescaler serve --rate-window-seconds``):
the window must span ~4 scrape intervals, or ``rate()`` often sees a single
sample of a target and drops it from the sum."""
#: ``vllm:cache_config_info`` labels that say how big the KV cache is.
CACHE_BLOCKS_LABEL = "num_gpu_blocks"
CACHE_BLOCK_SIZE_LABEL = "block_size"
#: Labels the cache-config join never copies onto ``vllm:cache_config_info``:
#: the join keys (Prometheus refuses a label in both ``on`` and
#: ``group_left``) and ``engine``, which the family has per series already
#: (copying one value over every engine's series would collide them).
_CACHE_OWN_LABELS = frozenset({"instance", "job", "engine"})
LOST_LOOKBACK_S = 3600.0
"""How long a replica whose scrape fails keeps counting as lost (``lost``)."""

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


@dataclass(frozen=True)
class QueryPlan:
    """The queries for one refresh of one Prometheus, and how to split their results."""

    group_labels: tuple[str, ...]
    queries: dict[str, str]
    rate_window_s: int


def format_window(seconds: float) -> str:
    """``60`` -> ``"60s"``; PromQL durations must be whole units."""
    whole = round(seconds)
    if whole < 1:
        raise ValueError(f"rate window must be at least 1 s, got {seconds}")
    return f"{whole}s"


def group_labels_for(selections: Sequence[Selection]) -> tuple[str, ...]:
    """Union of the label names the selections filter on, sorted (stable query text)."""
    names: set[str] = set()
    for selection in selections:
        names.update(selection.label_names)
    for name in names:
        if not _LABEL_NAME.match(name) or name.startswith("__"):
            raise ValueError(f"invalid label name {name!r} in a selector")
    return tuple(sorted(names))


def _filter_for(selections: Sequence[Selection]) -> str:
    distinct = {selection.matchers for selection in selections}
    if len(distinct) != 1:
        return ""
    (matchers,) = distinct
    if not matchers:
        return ""
    return "{" + ",".join(m.promql() for m in matchers) + "}"


_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _literal_pattern(value: str) -> str:
    """An RE2 (and Python ``re``) pattern matching exactly ``value``."""
    return _RE2_SPECIAL.sub(r"\\\1", value)


def _union_filter(selections: Sequence[Selection]) -> str:
    """Matchers every series of any of ``selections`` satisfies: on each label
    that every selection matches positively (``=`` or ``=~``), one regex of
    their alternatives; a label some selection leaves open or matches only
    negatively is not filtered. The per-selection sums are unchanged (each
    filtered label is a grouping label, so whole groups are kept or left out)."""
    parts = []
    for name in group_labels_for(selections):
        alternatives: set[str] = set()
        for selection in selections:
            positive = [m for m in selection.matchers if m.name == name and m.op in ("=", "=~")]
            if not positive:
                break
            first = positive[0]
            alternatives.add(
                _literal_pattern(first.value) if first.op == "=" else f"(?:{first.value})"
            )
        else:
            parts.append(LabelMatcher(name, "=~", "|".join(sorted(alternatives))).promql())
    return "{" + ",".join(parts) + "}" if parts else ""


def _with_matcher(name: str, flt: str, matcher: str) -> str:
    """``name`` with the shared filter ``flt`` plus one fixed ``matcher``."""
    return f"{name}{flt[:-1]},{matcher}}}" if flt else f"{name}{{{matcher}}}"


def _agg(op: str, labels: Sequence[str], expr: str) -> str:
    by = f" by ({', '.join(labels)})" if labels else ""
    return f"{op}{by} ({expr})"


def build_plan(
    selections: Sequence[Selection],
    rate_window_s: float = DEFAULT_RATE_WINDOW_S,
    lost_lookback_s: float = LOST_LOOKBACK_S,
    *,
    narrow: bool = False,
) -> QueryPlan:
    """All queries for ``selections`` (non-empty), one per signal.

    Selections with different matchers share an unfiltered query (every
    group Prometheus holds answers); ``narrow`` filters it to the union of
    their matchers instead (``_union_filter``). Range reads narrow: unfiltered,
    each backfill batch's page of a three-day history would carry every
    object's series, so a restart's memory would grow with the fleet and its
    time with the fleet's square.
    """
    if not selections:
        raise ValueError("build_plan needs at least one selection")
    labels = group_labels_for(selections)
    flt = _filter_for(selections) or (_union_filter(selections) if narrow else "")
    window = format_window(rate_window_s)
    lookback = format_window(lost_lookback_s)
    per_instance = list(labels) if "instance" in labels else [*labels, "instance"]

    def metric(name: str) -> str:
        return f"{name}{flt}"

    kv = f"{metric('vllm:kv_cache_usage_perc')} or {metric('vllm:gpu_cache_usage_perc')}"
    capacity = _with_matcher("vllm:num_requests_waiting_by_reason", flt, 'reason="capacity"')
    served = _with_matcher("vllm:request_success_total", flt, 'finished_reason!="error"')
    failed = _with_matcher("vllm:request_success_total", flt, 'finished_reason="error"')
    computed = _with_matcher("vllm:prompt_tokens_by_source_total", flt, 'source="local_compute"')
    awake = _with_matcher("vllm:engine_sleep_state", flt, 'sleep_state="awake"')
    # ``engine`` is summed away everywhere: it is never a grouping label.
    queries = {
        # Where a replica splits its queue (vllm:num_requests_waiting_by_reason)
        # only the ``capacity`` part asks for replicas (LoRA budget or KV
        # transfer deferrals do not); ``or ignoring(reason)`` falls back to the
        # whole queue, series by series, for replicas without the split.
        "waiting": _agg(
            "sum",
            labels,
            f"{capacity} or ignoring(reason) {metric('vllm:num_requests_waiting')}",
        ),
        "running": _agg("sum", labels, metric("vllm:num_requests_running")),
        # distinct scrape targets; dead or removed targets go stale at once
        "replicas": _agg(
            "count", labels, _agg("count", per_instance, metric("vllm:num_requests_running"))
        ),
        # mean KV usage = kv_sum / kv_count; the new name wins where a replica
        # exposes both (0.9.2-0.11)
        "kv_sum": _agg("sum", labels, kv),
        "kv_count": _agg("count", labels, kv),
        # An ``error`` finish (an internal failure, answered 500) served nobody;
        # older vLLM has no such reason and every finish counts.
        "completions": _agg("sum", labels, f"rate({served}[{window}])"),
        # arrivals = completions + failed + rejections + delta / W: an exact
        # balance that rises as soon as a burst queues, long before completions
        "in_system_delta": _agg(
            "sum", labels, f"delta({metric('vllm:num_requests_waiting')}[{window}])"
        )
        + " + "
        + _agg("sum", labels, f"delta({metric('vllm:num_requests_running')}[{window}])"),
        "prompt_tokens": _agg(
            "sum", labels, f"rate({metric('vllm:prompt_tokens_total')}[{window}])"
        ),
        "generation_tokens": _agg(
            "sum", labels, f"rate({metric('vllm:generation_tokens_total')}[{window}])"
        ),
        "preemptions": _agg(
            "sum", labels, f"rate({metric('vllm:num_preemptions_total')}[{window}])"
        ),
        # error finishes left the system: the arrival balance counts them
        # (absent before vLLM 0.2x: none)
        "failed": _agg("sum", labels, f"rate({failed}[{window}])"),
        # turned away at the front end's queue limit (vLLM >= 0.33): demand the
        # queue and completions never show, added to arrivals; absent: unknown
        "rejections": _agg(
            "sum", labels, f"rate({metric('vllm:admission_rejections_total')}[{window}])"
        ),
        # prompt tokens actually prefilled (prompt_tokens counts prefix-cache
        # hits too); absent: unknown
        "computed_prompt": _agg("sum", labels, f"rate({computed}[{window}])"),
        # Sleep mode (vLLM >= 0.32): a replica whose engines all sleep is there
        # (its series are data) but serves nothing, so ready = replicas - asleep.
        "asleep": _agg("count", labels, _agg("max", per_instance, awake) + " <= 0"),
        "kv_cache": _cache_query(labels, per_instance, metric("vllm:num_requests_running")),
        # Series seen in the last ``lost_lookback_s`` that are absent now on a
        # target still scraped (``up`` present): a failing scrape or a replica
        # that stopped exposing its gauges, never a removed pod (its ``up`` goes
        # too). Such a selection reads as incomplete (scaler.sources.grouping):
        # missing data, not an idle fleet.
        "lost": _agg(
            "count",
            labels,
            _agg(
                "count",
                per_instance,
                f"(last_over_time({metric('vllm:num_requests_running')}[{lookback}])"
                f" unless {metric('vllm:num_requests_running')}) and on (instance, job) up",
            ),
        ),
        # a Prometheus with no targets (or a proxy answering empty) is down,
        # not zero traffic
        "health": "count(up)",
    }
    assert tuple(queries) == SIGNALS
    return QueryPlan(group_labels=labels, queries=queries, rate_window_s=int(window[:-1]))


def _cache_query(labels: Sequence[str], per_instance: Sequence[str], running: str) -> str:
    """One series per (selection groups, replica, cache config) with the count of
    engines that have it.

    ``vllm:cache_config_info`` holds the KV cache size in its *labels*
    (``num_gpu_blocks``, ``block_size``; ``scaler.sources.grouping``
    multiplies them) and has no ``model_name``: it is joined on ``(instance,
    job)`` to the selection's ``vllm:num_requests_running``, which lends it the
    grouping labels, kept unique per target by ``topk`` so the join is never
    many-to-many. Older vLLM, or an engine that has not profiled its memory
    yet (``num_gpu_blocks="None"``), states no size.
    """
    lent = [name for name in labels if name not in _CACHE_OWN_LABELS]
    one_per_target = (
        f"topk by (instance, job) (1, {_agg('count', ['instance', 'job', *lent], running)})"
    )
    joined = (
        f"vllm:cache_config_info * on (instance, job) group_left({', '.join(lent)}) "
        f"{one_per_target}"
    )
    by = list(dict.fromkeys([*per_instance, CACHE_BLOCKS_LABEL, CACHE_BLOCK_SIZE_LABEL]))
    return _agg("count", by, joined)
