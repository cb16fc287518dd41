"""KEDA's ``cron`` trigger: a fixed replica count inside a daily (or weekly) window.

The rules are KEDA's ``cron_scaler.go`` over robfig/cron's five-field parser
(docs/simulator.md): inside ``[start, end)``, in whole minutes and possibly
across midnight, the value is ``desiredReplicas`` and the trigger is active;
outside, 0 and inactive. The caller gives the Unix time of simulated t = 0
(:data:`DEFAULT_EPOCH`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["DEFAULT_EPOCH", "CronSchedule", "CronWindow", "parse_cron"]

DEFAULT_EPOCH: dt.datetime = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
"""Simulated t = 0 unless the ScaledObject says otherwise: Monday 2024-01-01 00:00 UTC."""

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12))
_DOW = ("day of week", 0, 6)
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_SEARCH_DAYS = 366 * 5


@dataclass(frozen=True)
class CronSchedule:
    """A parsed five-field schedule (sets of allowed values)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday, as cron counts."""
    dom_star: bool
    dow_star: bool

    def _day_matches(self, day: dt.date) -> bool:
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.dom_star or self.dow_star:  # robfig: AND when either is '*'
            return dom and dow
        return dom or dow  # both restricted: either matches (standard cron)

    def next_after(self, local: dt.datetime) -> dt.datetime:
        """The first matching minute strictly after ``local`` (naive local wall time)."""
        t = (local + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
        day = t.date()
        for _ in range(_SEARCH_DAYS):
            if day.month in self.months and self._day_matches(day):
                start = dt.time(t.hour, t.minute) if day == t.date() else dt.time(0, 0)
                for hour in sorted(h for h in self.hours if h >= start.hour):
                    lo = start.minute if hour == start.hour else 0
                    minute = min((m for m in self.minutes if m >= lo), default=None)
                    if minute is not None:
                        return dt.datetime.combine(day, dt.time(hour, minute))
            day += dt.timedelta(days=1)
        raise ValueError(f"cron schedule {self.text!r} never fires")


def _field(text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        stepped = "/" in part
        if stepped:
            part, _, step_text = part.partition("/")
            step = _int(step_text, name, text)
            if step <= 0:
                raise ValueError(f"{name} {text!r}: step must be > 0")
        if part in ("*", "?"):
            first, last = lo, hi
        elif "-" in part:
            a, _, b = part.partition("-")
            first, last = _value(a, name, text, names), _value(b, name, text, names)
        else:
            first = _value(part, name, text, names)
            last = hi if stepped else first  # robfig: "N/step" means N-max/step
        if not (lo <= first <= hi and lo <= last <= hi) or first > last:
            raise ValueError(f"{name} {text!r}: values must lie in {lo}-{hi}")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _value(text: str, name: str, whole: str, names: dict[str, int]) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    return _int(text, name, whole)


def _int(text: str, name: str, whole: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{name} {whole!r}: {text!r} is not a number")
    return int(text)


def parse_cron(text: str) -> CronSchedule:
    """A standard five-field cron expression; a ``ValueError`` naming the bad field."""
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(
            f"cron {text!r}: expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(parts)}"
        )
    try:
        sets = [
            _field(p, name, lo, hi, _MONTHS if name == "month" else {})
            for p, (name, lo, hi) in zip(parts[:4], _FIELDS, strict=True)
        ]
        weekdays = _field(parts[4], _DOW[0], _DOW[1], _DOW[2], _DAYS)
    except ValueError as exc:
        raise ValueError(f"cron {text!r}: {exc}") from None
    return CronSchedule(
        text,
        sets[0],
        sets[1],
        sets[2],
        sets[3],
        weekdays,
        dom_star=parts[2] in ("*", "?"),
        dow_star=parts[4] in ("*", "?"),
    )


@dataclass
class CronWindow:
    """One cron trigger: inside ``[start, end)`` in ``timezone``, from simulated seconds.

    Caches each schedule's next firing: robfig's ``Next`` is the same for
    every ``now`` before it, so a poll is a comparison, not a search.
    """

    start: CronSchedule
    end: CronSchedule
    timezone: str
    desired_replicas: int
    epoch_s: float = DEFAULT_EPOCH.timestamp()
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _next: dict[str, tuple[float, float]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            self._zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"cron timezone {self.timezone!r} is not an IANA zone") from None
        if self.start.text == self.end.text:
            raise ValueError("cron start and end can not have exactly same time input")
        if self.desired_replicas == 0:
            raise ValueError("cron desiredReplicas must not be 0")
        self._next = {}

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_zone", None)
        state["_next"] = {}
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._zone = ZoneInfo(self.timezone)

    def _next_s(self, key: str, schedule: CronSchedule, now_unix: float) -> float:
        cached = self._next.get(key)
        if cached is not None and cached[0] <= now_unix < cached[1]:
            return cached[1]
        local = dt.datetime.fromtimestamp(now_unix, self._zone).replace(tzinfo=None)
        nxt = schedule.next_after(local).replace(tzinfo=self._zone).timestamp()
        self._next[key] = (now_unix, nxt)
        return nxt

    def inside(self, t_s: float) -> bool:
        """Whether simulated time ``t_s`` is inside the window (KEDA's IsActive)."""
        now = self.epoch_s + t_s
        return self._next_s("end", self.end, now) <= self._next_s("start", self.start, now)

    def value(self, t_s: float) -> float:
        """The metric KEDA reports: ``desiredReplicas`` inside, 0 outside."""
        return float(self.desired_replicas) if self.inside(t_s) else 0.0
