"""The gateway texts' batching: packing, bisection and what is remembered.

Against a real Prometheus these paths run in tests/scaler/test_sources_prometheus.py;
here the invariants are checked over many cases, with an in-memory
evaluator that answers a batch as Prometheus does (one labelled series per
wrapped text) and refuses any batch holding a bad text, as Prometheus
refuses a query any part of which fails to parse.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_api_client.exceptions import PrometheusApiClientException

from scaler.sources.gateway_batch import (
    ALONE_PER_REFRESH,
    BATCH_SIZE,
    INDEX_LABEL,
    GatewayBatches,
    GatewayGroup,
    read_gateways,
    self_contained,
    split_answer,
    wrapped,
)

_WRAPPED = re.compile(
    r'label_replace\((?:vector)?\(\n(.*?)\n\), "' + INDEX_LABEL + r'", "(\d+)", "", ""\)'
)


class Evaluator:
    """Answers a query like Prometheus for texts ``t<i>`` (value i) and
    refuses every query holding a text in ``bad`` (HTTP 400)."""

    def __init__(self, bad: set[str]) -> None:
        self.bad = bad
        self.queries: list[str] = []

    async def fetch(self, query: str) -> Any:
        self.queries.append(query)
        parts = _WRAPPED.findall(query) or [(query, None)]
        if any(text in self.bad for text, _ in parts):
            raise PrometheusApiClientException(
                'HTTP Status Code 400 (b\'{"errorType":"bad_data"}\')'
            )
        return [
            {
                "metric": {} if index is None else {INDEX_LABEL: index},
                "value": [0.0, text.removeprefix("t")],
            }
            for text, index in parts
        ]


def _read(batches: GatewayBatches, texts: list[str], evaluator: Evaluator) -> dict[str, object]:
    got = asyncio.run(read_gateways(batches, texts, evaluator.fetch, deadline=None, live=True))
    return got.answers


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), bad_indexes=st.sets(st.integers(0, 299), max_size=6))
def test_each_text_gets_its_own_answer_and_bad_ones_cost_only_themselves(
    n: int, bad_indexes: set[int]
) -> None:
    """Any number of texts, a few bad: every good text gets its own value in
    the first refresh, every bad one an error; from the next refresh on the
    texts cost ceil(good / BATCH_SIZE) queries plus the bad ones retried
    alone, at most ALONE_PER_REFRESH of them."""
    texts = [f"t{i}" for i in range(n)]
    bad = {f"t{i}" for i in bad_indexes if i < n}
    evaluator, batches = Evaluator(bad), GatewayBatches()
    for _ in range(2):
        evaluator.queries.clear()
        answers = _read(batches, texts, evaluator)
        for text in texts:
            answer = answers[text]
            if text in bad:
                assert isinstance(answer, Exception)
            else:
                assert isinstance(answer, list)
                assert [series["value"][1] for series in answer] == [text[1:]]
    good = n - len(bad)
    assert len(evaluator.queries) == math.ceil(good / BATCH_SIZE) + min(len(bad), ALONE_PER_REFRESH)
    assert batches.alone == frozenset(bad)


@settings(max_examples=40, deadline=None)
@given(n_alone=st.integers(0, 30), n=st.integers(0, 200))
def test_plan_bounds_the_queries_and_tries_every_alone_text_in_turn(n_alone: int, n: int) -> None:
    batches = GatewayBatches()
    unbalanced = [f"sum(t{i}" for i in range(n_alone)]  # never wrapped: always alone
    texts = [f"t{i}" for i in range(n)] + unbalanced
    tried: list[str] = []
    rounds = max(1, math.ceil(n_alone / ALONE_PER_REFRESH))
    for _ in range(rounds):
        groups, skipped = batches.plan(texts, live=True)
        assert len(groups) <= math.ceil(n / BATCH_SIZE) + ALONE_PER_REFRESH
        sent = [t for g in groups for t in g.members]
        assert sorted(sent + skipped) == sorted(texts)
        assert all(len(g.members) <= BATCH_SIZE for g in groups)
        tried += [g.members[0] for g in groups if g.alone]
    assert set(tried) == set(unbalanced)  # each within ceil(n_alone / ALONE_PER_REFRESH)
    assert len(tried) == rounds * min(n_alone, ALONE_PER_REFRESH)


def test_a_refused_text_is_bisected_then_tried_as_a_scalar_then_sent_alone() -> None:
    batches = GatewayBatches()
    group = GatewayGroup(("a", "b", "c"))
    assert batches.refused(group) == [GatewayGroup(("a", "b")), GatewayGroup(("c",))]
    assert batches.refused(GatewayGroup(("c",))) == [GatewayGroup(("c",))]
    assert "vector(\nc\n)" in batches.query(GatewayGroup(("c",)))
    assert batches.refused(GatewayGroup(("c",))) == [GatewayGroup(("c",), alone=True)]
    assert batches.query(GatewayGroup(("c",), alone=True)) == "c"
    assert batches.alone == {"c"}
    batches.answered_alone("c", [{"metric": {}, "value": [0.0, "1"]}])
    assert batches.alone == set()  # a vector answer: it rejoins the batches


def test_a_timed_out_batch_is_halved_until_the_slow_text_stands_alone() -> None:
    batches = GatewayBatches(batch_size=8)
    texts = [f"t{i}" for i in range(8)]
    sizes = []
    for _ in range(4):
        groups, _skipped = batches.plan(texts, live=True)
        slow = next(g for g in groups if "t0" in g.members)
        sizes.append(len(slow.members))
        batches.timed_out([slow])
        for group in groups:
            if group is not slow:
                batches.answered(group)
    assert sizes == [8, 4, 2, 1]
    groups, _skipped = batches.plan(texts, live=True)
    # the slow text alone, the others growing back (doubled on each answer)
    assert [g.members for g in groups] == [("t0",), ("t1", "t2"), ("t3", "t4", "t5", "t6", "t7")]


def test_a_range_read_splits_a_timed_out_batch_at_once_so_only_the_slow_text_is_lost() -> None:
    """In a range read a batch that times out is bisected at once, down to
    the slow text, which alone is lost; the live batch limits are left as
    they were (a backfill's timeout says little of a refresh's)."""
    texts = [f"t{i}" for i in range(8)]
    evaluator, batches = Evaluator(set()), GatewayBatches()

    async def fetch(query: str) -> Any:
        if any(text == "t5" for text, _ in _WRAPPED.findall(query)):
            evaluator.queries.append(query)
            raise TimeoutError("slower than the timeout")
        return await evaluator.fetch(query)

    got = asyncio.run(read_gateways(batches, texts, fetch, deadline=None, live=False))
    for text in texts:
        answer = got.answers[text]
        if text == "t5":
            assert isinstance(answer, TimeoutError)
        else:
            assert isinstance(answer, list)
            assert [series["value"][1] for series in answer] == [text[1:]]
    assert len(evaluator.queries) == 1 + 2 * 3  # the batch, then both halves at each level
    groups, _skipped = batches.plan(texts, live=True)
    assert [g.members for g in groups] == [tuple(texts)]


def test_a_range_read_stops_splitting_when_both_halves_time_out() -> None:
    """When Prometheus itself is slow every half times out too: the batch is
    split once (its halves are what tell a slow text from a slow
    Prometheus), not down to every text, one timeout after another."""
    queries: list[str] = []

    async def fetch(query: str) -> Any:
        queries.append(query)
        raise TimeoutError("slower than the timeout")

    texts = [f"t{i}" for i in range(8)]
    got = asyncio.run(read_gateways(GatewayBatches(), texts, fetch, deadline=None, live=False))
    assert all(isinstance(got.answers[text], TimeoutError) for text in texts)
    assert len(queries) == 3


def test_answered_alone_twice_is_harmless() -> None:
    """Two overlapping refreshes may both send a text alone and both see it
    answer."""
    batches = GatewayBatches()
    for _ in range(3):
        batches.refused(GatewayGroup(("c",)))
    assert batches.alone == {"c"}
    vector = [{"metric": {}, "value": [0.0, "1"]}]
    batches.answered_alone("c", vector)
    batches.answered_alone("c", vector)
    assert batches.alone == set()


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        ('sum(rate(gateway_requests_total{route="/v1/chat"}[1m]))', True),
        ('sum(x{a=")"})', True),
        (r'sum(x{a="\")"})', True),
        ("sum(x{a=`\\`})", True),
        ("sum(x) # a comment )", True),
        ("sum(rate(", False),
        ("x) or (y", False),
        ('sum(x{a="})', False),
        ("sum(x]", False),
    ],
)
def test_self_contained(text: str, closed: bool) -> None:
    assert self_contained(text) is closed


def _reference_closed(text: str) -> bool:
    """An independent check: drop strings and comments, then brackets must pair."""
    rest = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`|#[^\n]*', "", text, flags=re.S)
    if re.search(r"[\"'`]", rest):
        return False
    rest = re.sub(r"[^()\[\]{}]", "", rest)
    while True:
        shorter = rest.replace("()", "").replace("[]", "").replace("{}", "")
        if shorter == rest:
            return not rest
        rest = shorter


@settings(max_examples=300)
@given(st.text(alphabet="()[]{}\"'`#\\a \n", max_size=24))
def test_self_contained_agrees_with_a_reference(text: str) -> None:
    """A text is wrapped only if nothing in it can close the wrapper."""
    assert self_contained(text) is _reference_closed(text)


def test_split_answer_routes_series_by_index() -> None:
    answer = [
        {"metric": {INDEX_LABEL: "1", "pod": "a"}, "value": [0, "2"]},
        {"metric": {INDEX_LABEL: "1", "pod": "b"}, "value": [0, "3"]},
        {"metric": {INDEX_LABEL: "7"}, "value": [0, "9"]},  # not a member: dropped
    ]
    parts = split_answer(["a", "b"], answer)
    assert parts == {"a": [], "b": answer[:2]}
    assert isinstance(split_answer(["a"], "garbage")["a"], ValueError)
    assert (
        wrapped("up", 3, scalar=False)
        == 'label_replace((\nup\n), "' + INDEX_LABEL + '", "3", "", "")'
    )


def test_a_full_batch_of_the_longest_texts_fits_a_proxys_default_body_limit() -> None:
    """BATCH_SIZE ASCII texts of the key's longest, every character one that
    percent-encoding triples, make a POST body under 1 MiB (nginx's default
    ``client_max_body_size``); a larger body's 413 is bisected."""
    from urllib.parse import urlencode

    from decision.settings import SettingsError, parse_settings

    texts = [f'x{{a="{i:02d}' + "&" * 2039 + '"}' for i in range(BATCH_SIZE)]
    assert {len(t) for t in texts} == {2048}
    address = {"prometheusAddress": "http://prometheus:9090"}
    parse_settings({**address, "gatewayRateQuery": texts[0]})  # the key admits it
    with pytest.raises(SettingsError, match="gatewayRateQuery"):
        parse_settings({**address, "gatewayRateQuery": texts[0] + "&"})
    batches = GatewayBatches()
    (group,), _ = batches.plan(texts, live=True)
    body = urlencode({"query": batches.query(group), "time": "1796245677.712"})
    assert len(group.members) == BATCH_SIZE
    assert len(body) < 1024 * 1024
    print(f"a full batch of the longest texts: {len(body)} bytes")
