"""A profile checked against what a real server measured: the same load replayed, side by side.

Every figure prescaler gives is only as good as the replica model under it.
``check_profile`` replays the load of a ``vllm bench serve`` result (or
``prescaler engine load``'s) through the engine model
(``engine.serving_replay``: each request's own lengths and send time where
the file has them) and compares TTFT and ITL at p50, p90 and p99 and output
throughput. A long run is replayed for its first ``MAX_CHECK_REQUESTS``
requests, and every measured figure is then theirs (at a high rate the whole
run is another load). No measured figure, no verdict
(``NothingToCompareError``). Pure: the caller reads the file and prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.bench_result import BenchResultError, bench_measurement
from engine.percentile import percentile
from engine.profile_types import Profile
from engine.serving_replay import ServingLoad, replay_load

#: The percentiles compared (vLLM's ``p{N}_{metric}_ms`` keys; the median is ``median_``).
PERCENTILES: tuple[int, ...] = (50, 90, 99)
#: Requests replayed at most where the file lists each one (a long run stays quick; the
#: measured figures are then the replayed requests' own). A file without per-request
#: lists is replayed whole: its own percentiles are over every request.
MAX_CHECK_REQUESTS = 2000
#: Worst relative error a check may show and still count as passing, by default.
DEFAULT_TOLERANCE = 0.25


@dataclass(frozen=True)
class CheckRow:
    """One figure: measured by the server's clients, predicted by the engine model."""

    metric: str  # e.g. "ttft_p90_ms", "output_tokens_per_s"
    measured: float | None
    predicted: float

    @property
    def error(self) -> float | None:
        """Relative error of the prediction (0.1 = 10 % high); None when not measured."""
        if self.measured is None or self.measured <= 0:
            return None
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class ProfileCheck:
    """The replayed load and every compared figure.

    ``requests_in_run`` is how many requests succeeded in the measured run;
    when the replay was cut to fewer (``cut``), every measured figure is
    those replayed requests' own, never the whole run's.
    """

    profile: str
    load: ServingLoad
    rows: tuple[CheckRow, ...]
    requests_in_run: int

    @property
    def cut(self) -> bool:
        return self.load.num_requests < self.requests_in_run

    @property
    def worst(self) -> CheckRow | None:
        """The figure with the largest absolute error."""
        rated = [r for r in self.rows if r.error is not None]
        return max(rated, key=lambda r: abs(r.error or 0.0), default=None)

    @property
    def max_abs_error(self) -> float:
        worst = self.worst
        return 0.0 if worst is None or worst.error is None else abs(worst.error)


class NothingToCompareError(ValueError):
    """A run with no measured figure the replay can be compared with: no verdict at all."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _as_float(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def _list_of(doc: Mapping[str, Any], key: str, n: int) -> list[Any] | None:
    value = doc.get(key)
    return value if isinstance(value, list) and len(value) == n else None


def _ok_indices(doc: Mapping[str, Any], n: int) -> list[int]:
    """The requests that succeeded: no error and, where TTFTs are listed, a first token
    (an older ``engine load`` file kept a stream that carried no token as a success
    with TTFT 0, which would pull the measured TTFT down)."""
    errors = _list_of(doc, "errors", n)
    ok = list(range(n)) if errors is None else [i for i, e in enumerate(errors) if not e]
    ttfts = _list_of(doc, "ttfts", n)
    if ttfts is not None:
        ok = [i for i in ok if _is_number(ttfts[i]) and ttfts[i] > 0]
    return ok


def _int_list(doc: Mapping[str, Any], key: str, source: str) -> list[int] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise BenchResultError(source, key, "expected a list of integers")
    return value


@dataclass(frozen=True)
class _Selection:
    """Which of the run's requests are replayed: ``indices`` into its per-request lists
    (None: the file has none, every completed request is replayed alike), of
    ``in_run`` that succeeded."""

    indices: list[int] | None
    in_run: int
    n: int  # the per-request lists' length (0 without them)


def _select(doc: Mapping[str, Any], source: str, max_requests: int) -> _Selection:
    inputs = _int_list(doc, "input_lens", source)
    outputs = _int_list(doc, "output_lens", source)
    if inputs is None or outputs is None or len(inputs) != len(outputs):
        bench_measurement(doc, source)  # the fields every replay needs, or one clear error
        return _Selection(None, max(1, int(doc["completed"])), 0)
    ok = _ok_indices(doc, len(inputs))
    starts = _list_of(doc, "start_times", len(inputs))
    if starts is not None and all(_is_number(starts[i]) for i in ok):
        ok.sort(key=lambda i: float(starts[i]))  # the first sent are the ones kept
    if not ok:
        return _Selection(None, 0, len(inputs))
    return _Selection(ok[:max_requests], len(ok), len(inputs))


def _load(doc: Mapping[str, Any], source: str, sel: _Selection) -> ServingLoad:
    """The load a result file describes, as exactly as it says: the selected
    requests' own lengths and send times when saved, else the mean lengths
    and the file's rate (its Poisson draws are not saved) for every request."""
    base = bench_measurement(doc, source).load
    if sel.indices is None:
        return ServingLoad(
            num_requests=max(1, int(doc["completed"])),
            prompt_tokens=base.prompt_tokens,
            output_tokens=base.output_tokens,
            max_concurrency=base.max_concurrency,
            request_rate=base.request_rate,
        )
    inputs, outputs = doc["input_lens"], doc["output_lens"]
    keep = sel.indices
    lengths = tuple((max(1, inputs[i]), max(1, outputs[i])) for i in keep)
    offsets: tuple[float, ...] | None = None
    starts = _list_of(doc, "start_times", sel.n)
    if starts is not None and all(_is_number(starts[i]) for i in keep):
        first = min(float(starts[i]) for i in keep)
        offsets = tuple(float(starts[i]) - first for i in keep)
    n = len(lengths)
    return ServingLoad(
        num_requests=n,
        prompt_tokens=max(1, round(sum(p for p, _ in lengths) / n)),
        output_tokens=max(1, round(sum(o for _, o in lengths) / n)),
        max_concurrency=base.max_concurrency,
        request_rate=base.request_rate,
        lengths=lengths,
        send_offsets=offsets,
    )


def _measured(doc: Mapping[str, Any], metric: str, p: int, sel: _Selection) -> float | None:
    """A percentile (ms) over the replayed requests from the per-request lists when
    saved, else the file's own key (over the whole run, which is then replayed whole)."""
    key = {"ttft": "ttfts", "itl": "itls"}[metric]
    listed = doc.get(key)
    if isinstance(listed, list):
        if sel.indices is not None and len(listed) == sel.n:
            rows = [listed[i] for i in sel.indices]
        elif sel.indices is None or sel.in_run <= len(sel.indices):
            rows = [listed[i] for i in _ok_indices(doc, len(listed))]
        else:
            return None  # cut, and this list does not line up with the replayed requests
        if metric == "ttft":
            values = [float(v) for v in rows if _is_number(v)]
        else:
            values = [
                float(g) for gaps in rows if isinstance(gaps, list) for g in gaps if _is_number(g)
            ]
        return percentile(values, p) * 1e3 if values else None
    if sel.indices is not None and sel.in_run > len(sel.indices):
        return None  # the file's own percentile is over requests that were not replayed
    return _as_float(doc.get(f"median_{metric}_ms" if p == 50 else f"p{p}_{metric}_ms"))


def _measured_throughput(doc: Mapping[str, Any], sel: _Selection) -> float | None:
    """Output tokens/s: the file's own, or when the replay was cut, the replayed
    requests' tokens over the time from the first send to the last token
    (which needs ``start_times``; None without them)."""
    if sel.indices is None or sel.in_run <= len(sel.indices):
        return _as_float(doc.get("output_throughput"))
    starts = _list_of(doc, "start_times", sel.n)
    ttfts = _list_of(doc, "ttfts", sel.n)
    itls = _list_of(doc, "itls", sel.n)
    if starts is None or ttfts is None or itls is None:
        return None
    keep = sel.indices
    try:
        ends = [float(starts[i]) + float(ttfts[i]) + sum(map(float, itls[i])) for i in keep]
        first = min(float(starts[i]) for i in keep)
    except (TypeError, ValueError):
        return None
    span = max(ends) - first
    tokens = sum(int(doc["output_lens"][i]) for i in keep)
    return tokens / span if span > 0 else None


def check_profile(
    profile: Profile,
    doc: Mapping[str, Any],
    source: str,
    *,
    max_requests: int = MAX_CHECK_REQUESTS,
) -> ProfileCheck:
    """Replay the load of result ``doc`` through ``profile``; every figure side by side.

    At most ``max_requests`` are replayed (the first sent); the measured
    figures are then those requests' own. Raises ``NothingToCompareError``
    when no figure was measured: a check that compared nothing has no verdict.
    """
    if not isinstance(doc, Mapping):
        raise BenchResultError(source, "(document)", "expected a JSON object")
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests}")
    sel = _select(doc, source, max_requests)
    if sel.in_run == 0:
        raise NothingToCompareError(
            f"{source}: nothing to compare: no request in the run succeeded "
            "(each has an error or no first token)"
        )
    load = _load(doc, source, sel)
    out = replay_load(profile, load)
    rows: list[CheckRow] = []
    for metric, values in (("ttft", out.ttfts), ("itl", out.itls)):
        for p in PERCENTILES:
            predicted = percentile(values, p) * 1e3 if values else 0.0
            rows.append(CheckRow(f"{metric}_p{p}_ms", _measured(doc, metric, p, sel), predicted))
    rows.append(
        CheckRow("output_tokens_per_s", _measured_throughput(doc, sel), out.output_throughput)
    )
    check = ProfileCheck(profile.name, load, tuple(rows), requests_in_run=sel.in_run)
    if check.worst is None:
        raise NothingToCompareError(f"{source}: nothing to compare: {_why_nothing(check, sel)}")
    return check


def _why_nothing(check: ProfileCheck, sel: _Selection) -> str:
    what = "no TTFT, ITL or output tokens/s above 0 was measured"
    if check.cut:
        return (
            f"{what} on the {check.load.num_requests} replayed requests of {sel.in_run} "
            "(output tokens/s needs the file's start_times when the replay is cut)"
        )
    return (
        f"{what} (the file has neither --save-detailed's ttfts/itls nor "
        "median_/p90_/p99_ ttft and itl keys, nor output_throughput)"
    )


def check_document(check: ProfileCheck, *, source: str, tolerance: float) -> dict[str, Any]:
    """The JSON report (docs/contracts.md)."""
    worst = check.worst
    load = check.load
    return {
        "profile": check.profile,
        "source": source,
        "load": {
            "requests": load.num_requests,
            "mean_prompt_tokens": load.prompt_tokens,
            "mean_output_tokens": load.output_tokens,
            "max_concurrency": load.max_concurrency,
            "request_rate": load.request_rate,
            "per_request_lengths": load.lengths is not None,
            "send_times": load.send_offsets is not None,
            "requests_in_run": check.requests_in_run,
            "cut": check.cut,
        },
        "rows": [
            {"metric": r.metric, "measured": r.measured, "predicted": r.predicted, "error": r.error}
            for r in check.rows
        ],
        "max_abs_error": check.max_abs_error,
        "worst_metric": None if worst is None else worst.metric,
        "tolerance": tolerance,
        "passed": worst is not None and check.max_abs_error <= tolerance,
    }


def check_reminder(profile: Profile, given: str) -> str | None:
    """One line for a result built on ``profile`` (named ``given``) that was never
    checked against a real server, or whose last check failed; None otherwise."""
    how = f"`prescaler engine check --profile {given} --bench-result RUN.json --record`"
    record = profile.checked
    if record is None:
        return (
            f"note: profile {profile.name} was never checked against your server; run "
            f"{how} before trusting this result (docs/profiles.md)"
        )
    if not record.passed:
        return (
            f"note: profile {profile.name} failed its last check ({record.at}: "
            f"{record.worst_metric} off by {100 * record.max_abs_error:.0f} %); refit it "
            "(`prescaler engine fit-profile`) before trusting this result"
        )
    return None
