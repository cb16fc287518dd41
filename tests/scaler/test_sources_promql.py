"""Grouped PromQL: golden text, escaping, and splitting answers per ScaledObject."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.settings import LabelMatcher, parse_selector
from scaler.sources.grouping import split_instant, split_range
from scaler.sources.model import Selection, SourceError
from scaler.sources.promql import SIGNALS, build_plan, group_labels_for

GOLDEN_ONE = {
    "waiting": "sum by (model_name, namespace) "
    '(vllm:num_requests_waiting_by_reason{namespace="llm",model_name="m\\"x",reason="capacity"} '
    'or ignoring(reason) vllm:num_requests_waiting{namespace="llm",model_name="m\\"x"})',
    "replicas": "count by (model_name, namespace) (count by (model_name, namespace, instance) "
    '(vllm:num_requests_running{namespace="llm",model_name="m\\"x"}))',
    "kv_sum": "sum by (model_name, namespace) "
    '(vllm:kv_cache_usage_perc{namespace="llm",model_name="m\\"x"} '
    'or vllm:gpu_cache_usage_perc{namespace="llm",model_name="m\\"x"})',
    "completions": "sum by (model_name, namespace) (rate(vllm:request_success_total"
    '{namespace="llm",model_name="m\\"x",finished_reason!="error"}[60s]))',
    "failed": "sum by (model_name, namespace) (rate(vllm:request_success_total"
    '{namespace="llm",model_name="m\\"x",finished_reason="error"}[60s]))',
    "rejections": "sum by (model_name, namespace) (rate(vllm:admission_rejections_total"
    '{namespace="llm",model_name="m\\"x"}[60s]))',
    "computed_prompt": "sum by (model_name, namespace) (rate(vllm:prompt_tokens_by_source_total"
    '{namespace="llm",model_name="m\\"x",source="local_compute"}[60s]))',
    "asleep": "count by (model_name, namespace) (max by (model_name, namespace, instance) "
    '(vllm:engine_sleep_state{namespace="llm",model_name="m\\"x",sleep_state="awake"}) <= 0)',
    "kv_cache": "count by (model_name, namespace, instance, num_gpu_blocks, block_size) "
    "(vllm:cache_config_info * on (instance, job) group_left(model_name, namespace) "
    "topk by (instance, job) (1, count by (instance, job, model_name, namespace) "
    '(vllm:num_requests_running{namespace="llm",model_name="m\\"x"})))',
    "health": "count(up)",
}

GOLDEN_MANY = {
    "waiting": "sum by (model_name, namespace) (vllm:num_requests_waiting_by_reason"
    '{reason="capacity"} or ignoring(reason) vllm:num_requests_waiting)',
    "in_system_delta": "sum by (model_name, namespace) (delta(vllm:num_requests_waiting[30s])) + "
    "sum by (model_name, namespace) (delta(vllm:num_requests_running[30s]))",
    "preemptions": "sum by (model_name, namespace) (rate(vllm:num_preemptions_total[30s]))",
}


def _sel(text: str, model: str | None = None) -> Selection:
    matchers = list(parse_selector(text))
    if model is not None:
        matchers.append(LabelMatcher("model_name", "=", model))
    return Selection(matchers=tuple(matchers))


def test_one_selection_puts_its_escaped_matchers_in_every_query() -> None:
    """A single selection filters in PromQL, with values escaped by LabelMatcher.promql()."""
    plan = build_plan([_sel('namespace="llm"', model='m"x')], 60)
    assert tuple(plan.queries) == SIGNALS
    for signal, text in GOLDEN_ONE.items():
        assert plan.queries[signal] == text


def test_many_selections_share_one_grouped_query_per_signal() -> None:
    """Different selections: no filter, grouped by the union of their label names."""
    plan = build_plan([_sel('namespace="a"'), _sel('model_name=~"x.*"'), _sel('namespace="b"')], 30)
    assert plan.group_labels == ("model_name", "namespace")
    for signal, text in GOLDEN_MANY.items():
        assert plan.queries[signal] == text
    assert len(plan.queries) == len(SIGNALS)


def test_query_count_does_not_depend_on_the_number_of_selections() -> None:
    """1 or 1,000 ScaledObjects: the same number of queries."""
    few = build_plan([_sel('namespace="a"')])
    many = build_plan([_sel(f'namespace="ns-{i}"', model=f"m{i}") for i in range(1000)])
    assert len(few.queries) == len(many.queries) == len(SIGNALS)
    assert all(len(q) < 300 for q in many.queries.values())


def test_injection_attempts_stay_inside_a_string_literal() -> None:
    """A hostile value cannot close the matcher: quotes and backslashes are escaped."""
    hostile = 'x"}) or vector(1) #\\'
    plan = build_plan([Selection((LabelMatcher("namespace", "=", hostile),))])
    assert 'namespace="x\\"}) or vector(1) #\\\\"' in plan.queries["waiting"]


def test_a_narrowed_plan_filters_to_the_batch_with_literal_values_escaped() -> None:
    """Range reads (``narrow``) ask only for the batch's groups; a value's
    regex metacharacters stay literal, and the live read is unchanged."""
    batch = [_sel('namespace="a.b"', model="m"), _sel('namespace=~"c|d"', model="m")]
    narrowed = build_plan(batch, 60, narrow=True)
    assert narrowed.queries["running"] == (
        "sum by (model_name, namespace) "
        '(vllm:num_requests_running{model_name=~"m",namespace=~"(?:c|d)|a\\\\.b"})'
    )
    assert build_plan(batch, 60).queries["running"] == (
        "sum by (model_name, namespace) (vllm:num_requests_running)"
    )
    hostile = 'x"}) or vector(1) #\\'
    one_hostile = [Selection((LabelMatcher("namespace", "=", hostile),)), _sel('namespace="y"')]
    assert (
        'namespace=~"x\\"\\\\}\\\\) or vector\\\\(1\\\\) #\\\\\\\\|y"'
        in (build_plan(one_hostile, narrow=True).queries["waiting"])
    )


_VALUES = st.sampled_from(["a", "b", "a.b", "axb", "x-1", ""])
_MATCHERS = st.one_of(
    st.builds(lambda v: LabelMatcher("namespace", "=", v), _VALUES),
    st.builds(lambda v: LabelMatcher("namespace", "=~", v), st.sampled_from(["a.*", "b|x-1"])),
    st.builds(lambda v: LabelMatcher("namespace", "!=", v), _VALUES),
    st.builds(lambda v: LabelMatcher("model_name", "=", v), _VALUES),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(_MATCHERS, max_size=2).map(lambda ms: Selection(tuple(ms))),
        min_size=1,
        max_size=4,
    ),
    st.fixed_dictionaries({"namespace": _VALUES, "model_name": _VALUES}),
)
def test_a_narrowed_plan_keeps_every_series_any_selection_matches(
    batch: list[Selection], labels: dict[str, str]
) -> None:
    """The narrowing filter never drops a series of the batch, so each
    selection's sums equal the unfiltered query's."""
    query = build_plan(batch, 60, narrow=True).queries["running"]
    inner = query[query.index("(") + 1 : -1]
    matchers = parse_selector(inner[inner.index("{") + 1 : -1]) if "{" in inner else ()
    if any(selection.matches(labels) for selection in batch):
        assert all(m.matches(labels) for m in matchers)


def test_no_selector_means_one_total() -> None:
    plan = build_plan([Selection()])
    assert plan.queries["waiting"] == (
        'sum (vllm:num_requests_waiting_by_reason{reason="capacity"} '
        "or ignoring(reason) vllm:num_requests_waiting)"
    )
    assert plan.queries["replicas"] == "count (count by (instance) (vllm:num_requests_running))"
    assert plan.queries["kv_cache"] == (
        "count by (instance, num_gpu_blocks, block_size) (vllm:cache_config_info * on "
        "(instance, job) group_left() topk by (instance, job) (1, count by (instance, job) "
        "(vllm:num_requests_running)))"
    )


def test_queries_per_refresh_stay_within_the_bench_budget() -> None:
    """The scaler bench allows at most 18 queries per refresh, whatever the
    number of ScaledObjects: the newer vLLM families cost one query each."""
    assert len(SIGNALS) <= 18


def test_reserved_label_names_are_refused() -> None:
    with pytest.raises(ValueError, match="label"):
        group_labels_for([Selection((_Fake("__name__"),))])


class _Fake:
    def __init__(self, name: str) -> None:
        self.name, self.op, self.value = name, "=", "x"

    def promql(self) -> str:  # pragma: no cover - never reached
        return ""


def _vector(labels: dict[str, str], value: str) -> dict[str, object]:
    return {"metric": labels, "value": [100.0, value]}


def _answers(groups: dict[tuple[str, str], dict[str, str]]) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {s: [] for s in SIGNALS}
    out["health"] = [_vector({}, "3")]
    for (ns, model), values in groups.items():
        for signal, value in values.items():
            out[signal].append(_vector({"namespace": ns, "model_name": model}, value))
    return out


def test_split_sums_the_groups_each_selection_matches() -> None:
    """Groups are split per selection with Prometheus matcher semantics."""
    a = _sel('namespace="a"')
    a_llama = _sel('namespace="a"', model="llama")
    regex = _sel('namespace=~"a|b"')
    plan = build_plan([a, a_llama, regex], 60)
    answers = _answers(
        {
            ("a", "llama"): {
                "waiting": "4",
                "running": "2",
                "replicas": "2",
                "kv_sum": "1.0",
                "kv_count": "2",
                "completions": "1.5",
                "in_system_delta": "30",
            },
            ("a", "mistral"): {
                "waiting": "1",
                "running": "1",
                "replicas": "1",
                "kv_sum": "0.2",
                "kv_count": "1",
                "completions": "0.5",
                "in_system_delta": "-6",
            },
            ("b", "llama"): {
                "waiting": "10",
                "running": "0",
                "replicas": "1",
                "kv_sum": "0.9",
                "kv_count": "1",
                "completions": "0",
                "in_system_delta": "0",
            },
        }
    )
    readings = split_instant(plan, answers, [a, a_llama, regex], 100.0)
    assert readings[a].waiting == 5 and readings[a].ready_replicas == 3
    assert readings[a].kv_usage == pytest.approx(1.2 / 3)
    assert readings[a_llama].waiting == 4 and readings[a_llama].running == 2
    assert readings[a_llama].kv_usage == pytest.approx(0.5)
    # arrivals = completions + growth of requests in the system over the window
    assert readings[a_llama].arrival_rate_rps == pytest.approx(1.5 + 30 / 60)
    assert readings[a].arrival_rate_rps == pytest.approx(2.0 + 24 / 60)
    assert readings[regex].waiting == 15 and readings[regex].ready_replicas == 4


def test_a_selection_with_no_series_reads_as_an_empty_fleet() -> None:
    """Scaled to zero: no series, zero replicas, zero demand (not an error)."""
    other = _sel('namespace="nobody"')
    plan = build_plan([other, _sel('namespace="a"')], 60)
    answers = _answers({("a", "llama"): {"waiting": "1", "replicas": "1"}})
    reading = split_instant(plan, answers, [other], 5.0)[other]
    assert (reading.ready_replicas, reading.waiting, reading.arrival_rate_rps) == (0, 0.0, 0.0)


def test_a_non_number_from_prometheus_is_a_source_error() -> None:
    """A value that is not a number at all is a broken answer, not data."""
    sel = _sel('namespace="a"')
    plan = build_plan([sel], 60)
    answers = _answers({("a", "llama"): {"waiting": "banana", "replicas": "1"}})
    with pytest.raises(SourceError):
        split_instant(plan, answers, [sel], 1.0)


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf"])
def test_a_non_finite_group_spoils_only_the_selections_that_match_it(bad: str) -> None:
    """team-b's NaN KV group must not stop team-a's reading (before:
    SourceError for every ScaledObject on that Prometheus)."""
    a, b = _sel('namespace="a"'), _sel('namespace="b"')
    plan = build_plan([a, b], 60)
    common = {"waiting": "2", "running": "1", "replicas": "1", "completions": "1"}
    answers = _answers(
        {
            ("a", "llama"): {**common, "kv_sum": "0.5", "kv_count": "1"},
            ("b", "llama"): {**common, "kv_sum": bad, "kv_count": "1", "waiting": bad},
        }
    )
    readings = split_instant(plan, answers, [a, b], 1.0)
    assert readings[a].kv_usage == 0.5 and readings[a].waiting == 2.0
    # team-b: its bad signals are unknown (never a number), the rest still reads;
    # with neither waiting nor KV known it gets no reading at all (hold)
    assert b not in readings
    answers["waiting"][1]["value"] = [100.0, "3"]
    got = split_instant(plan, answers, [a, b], 1.0)[b]
    assert got.waiting == 3.0 and got.kv_usage is None and got.completion_rate_rps == 1.0


def test_an_empty_health_answer_is_a_source_error() -> None:
    """Prometheus knowing no targets at all is 'down', not 'idle'."""
    sel = _sel('namespace="a"')
    plan = build_plan([sel], 60)
    answers = _answers({})
    answers["health"] = []
    with pytest.raises(SourceError, match="no targets"):
        split_instant(plan, answers, [sel], 1.0)


def test_split_range_gives_one_reading_per_evaluation_time() -> None:
    sel = _sel('namespace="a"')
    plan = build_plan([sel], 60)
    labels = {"namespace": "a", "model_name": "m"}
    answers: dict[str, list[Any]] = {s: [] for s in SIGNALS}
    answers["health"] = [{"metric": {}, "values": [[10, "1"], [15, "1"], [20, "1"]]}]
    answers["waiting"] = [{"metric": labels, "values": [[10, "2"], [15, "NaN"], [20, "7"]]}]
    answers["replicas"] = [{"metric": labels, "values": [[10, "1"], [15, "1"], [20, "2"]]}]
    out = split_range(plan, answers, [sel])[sel]
    # a NaN queue with no KV usage either is a gap (missing), never a zero
    assert [r.time_s for r in out] == [10.0, 20.0]
    assert [r.waiting for r in out] == [2.0, 7.0]
    assert [r.ready_replicas for r in out] == [1, 2]
    answers["kv_sum"] = [{"metric": labels, "values": [[10, "0.1"], [15, "0.2"], [20, "0.4"]]}]
    answers["kv_count"] = [{"metric": labels, "values": [[10, "1"], [15, "1"], [20, "2"]]}]
    out = split_range(plan, answers, [sel])[sel]
    assert [r.time_s for r in out] == [10.0, 15.0, 20.0]
    assert math.isnan(out[1].waiting) and out[1].kv_usage == 0.2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"]), st.integers(0, 50)
        ),
        min_size=0,
        max_size=6,
        unique_by=lambda t: (t[0], t[1]),
    ),
    st.sampled_from(['namespace="a"', 'namespace!="a"', 'namespace=~"a|b"', 'namespace!~"c"', ""]),
)
def test_split_equals_filtering_each_selection_alone(
    groups: list[tuple[str, str, int]], selector: str
) -> None:
    """Splitting the grouped answer gives what a per-object query would."""
    sel = _sel(selector)
    other = _sel('model_name="x"')
    plan = build_plan([sel, other], 60)
    answers = _answers({(ns, m): {"waiting": str(v)} for ns, m, v in groups})
    got = split_instant(plan, answers, [sel, other], 1.0)[sel].waiting
    expected = sum(v for ns, m, v in groups if sel.matches({"namespace": ns, "model_name": m}))
    assert got == expected


def test_history_arrays_match_range_readings() -> None:
    """The vectorised backfill computes what per-point readings would."""
    from scaler.sources.grouping import split_history

    a, b = _sel('namespace="a"'), _sel('namespace="b"')
    plan = build_plan([a, b], 10)
    la, lb = {"namespace": "a", "model_name": "m"}, {"namespace": "b", "model_name": "m"}

    def series(labels: dict[str, str], values: list[str]) -> dict[str, object]:
        return {"metric": labels, "values": [[10 + 5 * i, v] for i, v in enumerate(values)]}

    answers: dict[str, list[dict[str, object]]] = {s: [] for s in SIGNALS}
    answers["health"] = [series({}, ["1", "1", "1", "1"])]
    answers["replicas"] = [series(la, ["1", "2", "2", "0"]), series(lb, ["1", "1", "1", "1"])]
    answers["waiting"] = [series(la, ["3", "4", "0", "0"]), series(lb, ["0", "1", "2", "3"])]
    answers["completions"] = [series(la, ["1", "NaN", "2", "0"])]
    answers["in_system_delta"] = [series(la, ["10", "-5", "0", "0"])]
    answers["prompt_tokens"] = [series(la, ["100", "200", "300", "0"])]
    answers["generation_tokens"] = [series(lb, ["7", "8", "9", "10"])]
    readings = split_range(plan, answers, [a, b])
    history = split_history(plan, answers, [a, b])
    for sel in (a, b):
        h = history[sel]
        assert h.times.tolist() == [r.time_s for r in readings[sel]]
        for i, r in enumerate(readings[sel]):
            assert h.ready[i] == r.ready_replicas and h.waiting[i] == r.waiting
            for got, want in (
                (h.requests_per_s[i], r.arrival_rate_rps),
                (h.completions_per_s[i], r.completion_rate_rps),
                (h.tokens_per_s[i], _tokens_of(r)),
            ):
                assert (math.isnan(got) and want is None) or got == pytest.approx(want)


_SAMPLE = st.sampled_from(["0", "1.5", "2", "-1", "NaN", "+Inf", "1e-3"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=4),
    st.lists(st.lists(_SAMPLE, min_size=6, max_size=6), min_size=4, max_size=4),
    st.sampled_from([0.0, 0.5, 0.0004]),
    st.integers(0, 2),
)
def test_history_of_packed_answers_equals_that_of_parsed_ones(
    namespaces: list[str], rows: list[list[str]], offset: float, gap: int
) -> None:
    """A packed answer (what the Prometheus source hands over) is split into
    the same floats as the parsed JSON it came from, also where a series has
    times off the grid (``offset``: 0.0004 rounds onto it) or misses some."""
    from scaler.sources.grouping import split_history
    from scaler.sources.prometheus import pack_page

    a, b = _sel('namespace="a"'), _sel('namespace="b"')
    plan = build_plan([a, b], 10, narrow=True)
    answers: dict[str, list[dict[str, Any]]] = {s: [] for s in SIGNALS}
    answers["health"] = [{"metric": {}, "values": [[10.0 + 5 * i, "1"] for i in range(6)]}]
    for k, (ns, signal) in enumerate(
        zip(namespaces, ("replicas", "waiting", "completions", "prompt_tokens"), strict=False)
    ):
        samples = [[10.0 + 5 * i + offset, v] for i, v in enumerate(rows[k]) if i >= gap]
        labels = {"namespace": ns, "model_name": "m"}
        answers[signal] = [*answers[signal], {"metric": labels, "values": samples}]
        answers["replicas"] = [*answers["replicas"], {"metric": labels, "values": samples}]
    packed = {s: pack_page(series, s) for s, series in answers.items()}
    parsed = split_history(plan, answers, [a, b])
    fast = split_history(plan, packed, [a, b])
    for sel in (a, b):
        for field in ("times", "requests_per_s", "tokens_per_s", "ready", "waiting"):
            want, got = getattr(parsed[sel], field), getattr(fast[sel], field)
            assert np.array_equal(want, got, equal_nan=True), (sel, field)


def test_history_treats_lost_replicas_as_unknown_like_live_readings() -> None:
    """A backfill must not learn a failing scrape as a quiet spell: points with
    lost replicas are unknown (NaN) in history, as they are in live readings."""
    from scaler.sources.grouping import split_history

    a = _sel('namespace="a"')
    plan = build_plan([a], 10)
    la = {"namespace": "a", "model_name": "m"}

    def series(values: list[str], labels: dict[str, str] = la) -> dict[str, object]:
        return {"metric": labels, "values": [[10 + 5 * i, v] for i, v in enumerate(values)]}

    answers: dict[str, list[dict[str, object]]] = {s: [] for s in SIGNALS}
    answers["health"] = [series(["1", "1", "1", "1"], {})]
    answers["replicas"] = [series(["2", "1", "1", "2"])]
    answers["waiting"] = [series(["3", "0", "0", "1"])]
    answers["completions"] = [series(["2", "0.5", "0.5", "2"])]
    answers["in_system_delta"] = [series(["0", "0", "0", "0"])]
    answers["prompt_tokens"] = [series(["100", "20", "20", "100"])]
    answers["running"] = [series(["2", "1", "1", "2"])]
    answers["lost"] = [series(["0", "1", "1", "0"])]
    answers["kv_sum"] = [series(["0.2", "NaN", "0.1", "0.4"])]
    answers["kv_count"] = [series(["2", "1", "1", "2"])]
    # at 15 s the live reading knows nothing usable (no reading at all); at
    # 20 s it knows KV usage only (partial hold: waiting and rates unknown)
    readings = {r.time_s: r for r in split_range(plan, answers, [a])[a]}
    h = split_history(plan, answers, [a])[a]
    assert sorted(readings) == [10.0, 20.0, 25.0]

    def same(got: float, want: float | None) -> bool:
        if want is None or math.isnan(want):
            return math.isnan(got)
        return got == pytest.approx(want)

    for i, t in enumerate(h.times.tolist()):
        r = readings.get(t)
        if r is None:
            assert math.isnan(h.waiting[i]) and math.isnan(h.requests_per_s[i])
            continue
        assert same(h.waiting[i], r.waiting)
        assert same(h.requests_per_s[i], r.arrival_rate_rps)
        assert same(h.completions_per_s[i], r.completion_rate_rps)
        assert same(h.tokens_per_s[i], _tokens_of(r))
    # the two lost points are unknown, the others known
    assert np.isnan(h.requests_per_s).tolist() == [False, True, True, False]
    assert np.isnan(h.waiting).tolist() == [False, True, True, False]


def _tokens_of(r: object) -> float | None:
    parts = [r.prompt_tokens_per_s, r.generation_tokens_per_s]  # type: ignore[attr-defined]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


# ------------------------------------------------- missing data is never idle (review #1)


def _decide(reading: object) -> object:
    from decision.policy import Decision, ReplicaCapacity, decide
    from decision.settings import parse_settings
    from scaler.state import observation_from

    settings = parse_settings(
        {
            "prometheusAddress": "http://p:9090",
            "forecast": "off",
            "scaleDownStabilizationSeconds": "0",
        }
    )
    history = [Decision(90.0, 10, "queue", {"recommendation": 10.0})]
    obs = None if reading is None else observation_from(reading, 100.0)  # type: ignore[arg-type]
    return decide(obs, None, settings, history, ReplicaCapacity.unknown(), now=100.0)


def test_every_replica_lost_gives_no_reading_so_the_policy_holds() -> None:
    """every vLLM scrape fails (``up == 0``): the vLLM series are gone
    but ``lost`` counts the replicas still scraped. Before: ready 0, waiting 0
    -> decide said 0 'idle'. Now: no reading -> stale hold at 10."""
    sel = _sel('namespace="a"')
    plan = build_plan([sel], 60)
    answers = _answers({("a", "llama"): {"lost": "4"}})
    readings = split_instant(plan, answers, [sel], 100.0)
    assert sel not in readings
    decision = _decide(readings.get(sel))
    assert (decision.replicas, decision.reason) == (10, "stale_hold")  # type: ignore[attr-defined]


def test_some_replicas_lost_makes_the_reading_partial() -> None:
    """Two of four replicas unreadable: their queue is unknown, so waiting is NaN
    and rates unknown; the policy may raise, never lower (partial_hold)."""
    sel = _sel('namespace="a"')
    plan = build_plan([sel], 60)
    answers = _answers(
        {
            ("a", "llama"): {
                "lost": "2",
                "replicas": "2",
                "waiting": "0",
                "running": "3",
                "kv_sum": "0.2",
                "kv_count": "2",
                "completions": "0",
            }
        }
    )
    reading = split_instant(plan, answers, [sel], 100.0)[sel]
    assert reading.ready_replicas == 2 and math.isnan(reading.waiting)
    assert reading.arrival_rate_rps is None and reading.kv_usage == pytest.approx(0.1)
    assert reading.running == 3.0  # the readable replicas' sum: traffic seen keeps IsActive
    decision = _decide(reading)
    assert (decision.replicas, decision.reason) == (10, "partial_hold")  # type: ignore[attr-defined]


def test_replicas_without_the_waiting_gauge_read_waiting_as_unknown() -> None:
    """Replicas present but the vLLM queue gauge absent: unknown, not zero."""
    sel = _sel('namespace="a"')
    plan = build_plan([sel], 60)
    answers = _answers({("a", "llama"): {"replicas": "3", "kv_sum": "0.3", "kv_count": "3"}})
    reading = split_instant(plan, answers, [sel], 100.0)[sel]
    assert math.isnan(reading.waiting) and math.isnan(reading.running)
    assert reading.arrival_rate_rps is None
    assert _decide(reading).reason == "partial_hold"  # type: ignore[attr-defined]


def test_a_fleet_scaled_to_zero_still_reads_as_zero_demand() -> None:
    """No series and nothing lost (pods deleted, Prometheus healthy): zero, so
    scale-to-zero and forecast-driven scale-from-zero keep working."""
    sel = _sel('namespace="a"')
    plan = build_plan([sel, _sel('namespace="b"')], 60)
    answers = _answers({("b", "llama"): {"lost": "1"}})  # another tenant's trouble
    reading = split_instant(plan, answers, [sel], 100.0)[sel]
    assert (reading.ready_replicas, reading.waiting, reading.arrival_rate_rps) == (0, 0.0, 0.0)


def test_lost_query_counts_vanished_series_of_targets_still_scraped() -> None:
    plan = build_plan([_sel('namespace="llm"', model="m")], 60)
    assert plan.queries["lost"] == (
        "count by (model_name, namespace) (count by (model_name, namespace, instance) "
        '((last_over_time(vllm:num_requests_running{namespace="llm",model_name="m"}[3600s]) '
        'unless vllm:num_requests_running{namespace="llm",model_name="m"}) '
        "and on (instance, job) up))"
    )


# ------------------------------------------------------ tenancy and window (#2, #3)


def test_prometheus_selection_is_confined_to_the_scaledobject_namespace() -> None:
    """``model`` alone used to sum every namespace's queue."""
    from decision.settings import parse_settings
    from scaler.sources import selection_for

    prom = {"prometheusAddress": "http://p:9090", "model": "meta-llama/Meta-Llama-3-8B-Instruct"}
    _, selection = selection_for(parse_settings(prom), "team-a")
    plan = build_plan([selection], 120)
    team = '{namespace="team-a",model_name="meta-llama/Meta-Llama-3-8B-Instruct"'
    assert plan.queries["waiting"] == (
        f"sum by (model_name, namespace) (vllm:num_requests_waiting_by_reason{team}"
        f',reason="capacity"}} or ignoring(reason) vllm:num_requests_waiting{team}}})'
    )
    assert selection.matches({"namespace": "team-a", "model_name": prom["model"]})
    assert not selection.matches({"namespace": "team-b", "model_name": prom["model"]})
    # a selector that names namespace is the user's choice: nothing is added
    _, chosen = selection_for(parse_settings({**prom, "selector": 'namespace=~"a|b"'}), "team-a")
    assert [m.name for m in chosen.matchers] == ["namespace", "model_name"]
    assert chosen.matches({"namespace": "b", "model_name": prom["model"]})
    # direct scrapes carry no namespace label: not filtered on it
    _, scraped = selection_for(parse_settings({"metricsUrls": "http://v:8000/metrics"}), "team-a")
    assert scraped.matchers == ()


def test_default_rate_window_is_two_minutes() -> None:
    """60 s dropped targets scraped every 60 s from rate()."""
    from scaler.sources.prometheus import PrometheusSource

    plan = build_plan([_sel('namespace="a"')])
    assert "[120s]" in plan.queries["completions"] and plan.rate_window_s == 120
    assert PrometheusSource("http://p:9090").rate_window_s == 120


def test_serve_rate_window_flag_reaches_the_prometheus_source() -> None:
    """``prescaler serve --rate-window-seconds`` configures the window."""
    import argparse
    import asyncio

    from scaler.cli import register, serve_command
    from scaler.sources import SourceSpec
    from scaler.sources.prometheus import PrometheusSource

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["serve"]).rate_window_seconds == 120.0
    assert serve_command(parser.parse_args(["serve", "--rate-window-seconds", "0.5"])) == 2

    class Captured(Exception):
        pass

    seen: dict[str, object] = {}

    def state_factory(**kwargs: object) -> object:
        seen.update(kwargs)
        raise Captured

    with pytest.raises(Captured):
        serve_command(
            parser.parse_args(["serve", "--rate-window-seconds", "300"]),
            state_factory=state_factory,
        )
    source = seen["source_factory"](SourceSpec("prometheus", "http://p:9090"))  # type: ignore[operator]
    assert isinstance(source, PrometheusSource) and source.rate_window_s == 300.0
    asyncio.run(source.close())


# ------------------------------------- newer vLLM families (sleep, errors, admission, cache)


def _cache(ns: str, instance: str, blocks: str, size: str, engines: str) -> dict[str, object]:
    """One ``kv_cache`` answer series: ``engines`` engines of ``instance`` with this config."""
    labels = {"namespace": ns, "model_name": "llama", "instance": instance,
              "num_gpu_blocks": blocks, "block_size": size}  # fmt: skip
    return _vector(labels, engines)


def test_newer_families_read_as_the_direct_scrape_reads_them() -> None:
    """As ``scaler.sources.scrape.aggregate``: a sleeping replica
    (``engine_sleep_state{sleep_state="awake"}`` 0 on every engine) is no
    ready replica; ``error`` finishes and admission rejections are arrivals
    but not completions; computed prompt tokens are the ``local_compute``
    source; the KV cache size is each replica's ``num_gpu_blocks x
    block_size`` summed over its engines, averaged over the replicas that
    state it (an unprofiled engine, ``num_gpu_blocks="None"``, states none).
    Metric names: vLLM 0.33, vllm/v1/metrics/loggers.py."""
    a = _sel('namespace="a"')
    plan = build_plan([a, _sel('namespace="b"')], 60)
    answers = _answers(
        {
            ("a", "llama"): {
                "waiting": "4", "running": "2", "replicas": "3", "asleep": "1",
                "completions": "2", "failed": "0.5", "rejections": "1.5",
                "in_system_delta": "60", "computed_prompt": "300", "prompt_tokens": "900",
            },
        }
    )  # fmt: skip
    answers["kv_cache"] = [
        _cache("a", "p1:8000", "1000", "16", "2"),  # two engines: 32,000 tokens
        _cache("a", "p2:8000", "500", "32", "1"),  # 16,000 tokens
        _cache("a", "p3:8000", "None", "16", "1"),  # not profiled yet: states nothing
        _cache("b", "p9:8000", "9999", "16", "1"),  # another ScaledObject's replica
    ]
    reading = split_instant(plan, answers, [a], 100.0)[a]
    assert reading.ready_replicas == 2
    assert reading.completion_rate_rps == 2.0
    assert reading.rejections_per_s == 1.5
    assert reading.arrival_rate_rps == pytest.approx(2.0 + 0.5 + 1.5 + 60 / 60)
    assert reading.computed_prompt_tokens_per_s == 300.0
    assert reading.prompt_tokens_per_s == 900.0
    assert reading.kv_cache_tokens == (32_000 + 16_000) / 2


def test_older_vllm_without_the_newer_families_reads_them_as_unknown() -> None:
    """Replicas that export none of the newer families (vLLM <= 0.31): every
    one is ready, the arrival balance is completions + queue growth, and
    rejections, computed prompt tokens and the KV size are unknown (``None``),
    never zero; an empty fleet reads zero rejections, as the scrape does."""
    a, empty = _sel('namespace="a"'), _sel('namespace="nobody"')
    plan = build_plan([a, empty], 60)
    answers = _answers(
        {("a", "llama"): {"waiting": "1", "running": "1", "replicas": "2", "completions": "3",
                          "in_system_delta": "0"}}
    )  # fmt: skip
    readings = split_instant(plan, answers, [a, empty], 100.0)
    reading = readings[a]
    assert reading.ready_replicas == 2 and reading.arrival_rate_rps == 3.0
    assert reading.rejections_per_s is None
    assert reading.computed_prompt_tokens_per_s is None
    assert reading.kv_cache_tokens is None
    assert readings[empty].rejections_per_s == 0.0
    assert readings[empty].computed_prompt_tokens_per_s == 0.0
    assert readings[empty].kv_cache_tokens is None


def test_an_unknown_rejection_rate_makes_arrivals_unknown() -> None:
    """A NaN rejection rate is unknown demand: arrivals are unknown too, not
    completions alone (missing is never read as zero)."""
    a = _sel('namespace="a"')
    plan = build_plan([a], 60)
    answers = _answers({("a", "llama"): {"waiting": "1", "replicas": "1", "completions": "3",
                                         "rejections": "NaN"}})  # fmt: skip
    reading = split_instant(plan, answers, [a], 100.0)[a]
    assert reading.arrival_rate_rps is None and reading.rejections_per_s is None


def test_a_fully_asleep_fleet_is_present_but_has_no_ready_replica() -> None:
    """Every replica asleep: zero ready replicas, yet its series are data (the
    queue is known), unlike a lost replica; its counters still read."""
    a = _sel('namespace="a"')
    plan = build_plan([a], 60)
    answers = _answers({("a", "llama"): {"waiting": "0", "running": "0", "replicas": "2",
                                         "asleep": "2", "completions": "0"}})  # fmt: skip
    reading = split_instant(plan, answers, [a], 100.0)[a]
    assert (reading.ready_replicas, reading.waiting, reading.completion_rate_rps) == (0, 0.0, 0.0)
    assert reading.rejections_per_s is None  # present replicas without the family


def test_range_and_history_read_the_newer_families_like_live_reads() -> None:
    """Backfill sees what a live scaler saw: ready replicas leave sleeping ones
    out, arrivals count error finishes and rejections, the KV size comes from
    the cache-config series at each time."""
    from scaler.sources.grouping import split_history

    a = _sel('namespace="a"')
    plan = build_plan([a], 10)
    la = {"namespace": "a", "model_name": "m"}

    def series(values: list[str], labels: dict[str, str] = la) -> dict[str, object]:
        return {"metric": labels, "values": [[10 + 5 * i, v] for i, v in enumerate(values)]}

    answers: dict[str, list[dict[str, object]]] = {s: [] for s in SIGNALS}
    answers["health"] = [series(["1", "1", "1"], {})]
    answers["replicas"] = [series(["2", "2", "2"])]
    answers["asleep"] = [series(["0", "1", "2"])]
    answers["waiting"] = [series(["3", "0", "1"])]
    answers["completions"] = [series(["2", "1", "0"])]
    answers["failed"] = [series(["1", "0", "0"])]
    answers["rejections"] = [series(["4", "2", "0"])]
    answers["in_system_delta"] = [series(["10", "0", "-10"])]
    cache = {**la, "instance": "p1", "num_gpu_blocks": "100", "block_size": "16"}
    answers["kv_cache"] = [series(["1", "1", "2"], cache)]
    readings = split_range(plan, answers, [a])[a]
    assert [r.ready_replicas for r in readings] == [2, 1, 0]
    assert [r.arrival_rate_rps for r in readings] == [8.0, 3.0, 0.0]
    assert [r.kv_cache_tokens for r in readings] == [1600.0, 1600.0, 3200.0]
    h = split_history(plan, answers, [a])[a]
    assert h.ready.tolist() == [r.ready_replicas for r in readings]
    assert h.requests_per_s.tolist() == [r.arrival_rate_rps for r in readings]
    assert h.completions_per_s.tolist() == [r.completion_rate_rps for r in readings]
