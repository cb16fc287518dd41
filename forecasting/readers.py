"""Thin file readers: detect the format from the header (``_FORMATS``, or
Mooncake JSON lines), parse, and hand raw samples to
:mod:`forecasting.series`, the one place that cleans them.

Per-request traces (Azure, BurstGPT, Mooncake) are binned at ``step_s``
(default 30 s); rate and count files keep their native step unless
``step_s`` is a whole multiple of it. Nothing is lost silently: an absent
row is a lost measurement in a rate file but zero requests in a count file;
an empty or ``NaN`` value cell is a missing sample, interpolated, never 0;
any unparsable, missing (in a per-request trace) or negative value is an
error naming file, row (from 1, header excluded) and column or field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from forecasting.forecast import MAX_DEMAND
from forecasting.series import SIGNALS, DemandSeries, bin_events, regularize

DEFAULT_EVENT_STEP_S = 30.0
_MISSING = {"", "nan", "na", "null", "none"}


@dataclass(frozen=True)
class Events:
    """Per-request arrivals: time (s) and token counts."""

    times_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def _norm(header: str) -> list[str]:
    return [c.strip().strip('"').lower() for c in header.lstrip("\ufeff").split(",")]


_FORMATS: dict[str, tuple[str, ...]] = {
    "azure": ("timestamp", "contexttokens", "generatedtokens"),
    "burstgpt": ("timestamp", "model", "request tokens", "response tokens"),
    "servegen_rate": ("window_start_s", "total_rps"),
    "minute_counts": ("minute_start_s", "requests"),
    "counts_10s": ("time", "timestamp"),
    "plain_rate": ("timestamp_s", "requests_per_s"),
}


def detect_format(path: Path) -> str:
    """Name of the format of ``path``, from its first non-empty line."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            first = ""
            for line in fh:
                if line.strip():
                    first = line.strip()
                    break
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from exc
    if not first:
        raise ValueError(f"{path}: file is empty")
    if first.startswith("{"):
        return "mooncake"
    cols = _norm(first)
    for name, required in _FORMATS.items():
        if tuple(cols[: len(required)]) == required:
            return name
    known = "; ".join(",".join(r) for r in _FORMATS.values())
    raise ValueError(
        f"{path}: unknown header {first[:120]!r}; expected one of: {known}; or Mooncake JSON lines"
    )


def _numeric(
    path: Path,
    frame: pd.DataFrame,
    col: str,
    *,
    allow_missing: bool,
    nonnegative: bool = False,
) -> np.ndarray:
    """Column ``col`` as floats (NaN where missing is allowed), or an error naming the row."""
    raw = frame[col].astype("string").str.strip()
    num = pd.to_numeric(raw, errors="coerce")
    bad = num.isna() & ~raw.fillna("").str.lower().isin(_MISSING)
    if not allow_missing:
        bad = num.isna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        value = frame[col].iloc[row]
        raise ValueError(f"{path}: row {row + 1}: column {col!r}: cannot parse {value!r}")
    out = num.to_numpy(dtype=float, na_value=np.nan)
    if not allow_missing and not np.all(np.isfinite(out)):
        row = int(np.flatnonzero(~np.isfinite(out))[0])
        value = frame[col].iloc[row]
        raise ValueError(f"{path}: row {row + 1}: column {col!r}: not finite: {value!r}")
    if nonnegative:
        neg = out < 0  # NaN compares False: a missing sample is not negative
        if neg.any():
            row = int(np.flatnonzero(neg)[0])
            value = frame[col].iloc[row]
            raise ValueError(f"{path}: row {row + 1}: column {col!r}: negative value {value!r}")
        huge = out > MAX_DEMAND
        if huge.any():
            row = int(np.flatnonzero(huge)[0])
            value = frame[col].iloc[row]
            raise ValueError(
                f"{path}: row {row + 1}: column {col!r}: {value!r} is above the largest "
                f"plausible demand {MAX_DEMAND:g}"
            )
    return out


def _datetime(path: Path, frame: pd.DataFrame, col: str) -> np.ndarray:
    raw = frame[col].astype("string").str.strip()
    parsed = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
    if parsed.isna().any():
        row = int(np.flatnonzero(parsed.isna().to_numpy())[0])
        raise ValueError(
            f"{path}: row {row + 1}: column {col!r}: cannot parse time {frame[col].iloc[row]!r}"
        )
    epoch = pd.Timestamp("1970-01-01", tz="UTC")
    return ((parsed - epoch).dt.total_seconds()).to_numpy(dtype=float)


def _csv(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    frame.columns = [c.strip().strip('"') for c in frame.columns]
    frame.columns = [c.lower() for c in frame.columns]
    if frame.empty:
        raise ValueError(f"{path}: header only, no data rows")
    return frame


def read_events(path: str | Path) -> Events:
    """Arrivals from a per-request trace (Azure, BurstGPT, Mooncake)."""
    p = Path(path)
    kind = detect_format(p)
    if kind == "mooncake":
        return _read_mooncake(p)
    if kind == "azure":
        frame = _csv(p)
        times = _datetime(p, frame, "timestamp")
        prompt = _numeric(p, frame, "contexttokens", allow_missing=False, nonnegative=True)
        output = _numeric(p, frame, "generatedtokens", allow_missing=False, nonnegative=True)
    elif kind == "burstgpt":
        frame = _csv(p)
        times = _numeric(p, frame, "timestamp", allow_missing=False)
        prompt = _numeric(p, frame, "request tokens", allow_missing=False, nonnegative=True)
        output = _numeric(p, frame, "response tokens", allow_missing=False, nonnegative=True)
    else:
        raise ValueError(f"{p}: format {kind!r} holds rates, not per-request events")
    return Events(times, prompt, output)


_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")


def _mooncake_field(path: Path, lineno: int, rec: dict[str, object], key: str) -> float:
    """One required numeric field of a Mooncake record; a precise error otherwise."""
    if key not in rec:
        raise ValueError(f"{path}: row {lineno}: Mooncake record has no {key!r}")
    value = rec[key]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{path}: row {lineno}: {key!r} is not a number: {value!r}")
    try:
        num = float(value)
    except ValueError as exc:
        raise ValueError(f"{path}: row {lineno}: {key!r} is not a number: {value!r}") from exc
    if not np.isfinite(num):
        raise ValueError(f"{path}: row {lineno}: {key!r} is not finite: {value!r}")
    if num < 0 and key != "timestamp":
        raise ValueError(f"{path}: row {lineno}: {key!r} is negative: {value!r}")
    return num


def _read_mooncake(path: Path) -> Events:
    times: list[float] = []
    prompt: list[float] = []
    output: list[float] = []
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}: row {lineno}: bad Mooncake record ({exc})") from exc
            if not isinstance(rec, dict):
                raise ValueError(f"{path}: row {lineno}: a Mooncake record must be a JSON object")
            t, i, o = (_mooncake_field(path, lineno, rec, k) for k in _MOONCAKE_FIELDS)
            times.append(t / 1000.0)
            prompt.append(i)
            output.append(o)
    if not times:
        raise ValueError(f"{path}: no records")
    return Events(np.array(times), np.array(prompt), np.array(output))


def _native_step(path: Path, times: np.ndarray) -> float:
    t = np.unique(times[np.isfinite(times)])
    if t.size < 2:
        raise ValueError(f"{path}: need at least two distinct timestamps to know the step")
    # The most common spacing (ties: the smaller): gaps make spacings longer,
    # so a median would be fooled by a file with many missing windows.
    diffs = np.round(np.diff(t), 6)
    values, counts = np.unique(diffs, return_counts=True)
    return float(values[np.flatnonzero(counts == counts.max())[0]])


def _rate_file(path: Path, kind: str) -> tuple[np.ndarray, np.ndarray, float, str]:
    """(times, rates per second, native step, missing policy)."""
    frame = _csv(path)
    if kind == "servegen_rate":
        t = _numeric(path, frame, "window_start_s", allow_missing=False)
        v = _numeric(path, frame, "total_rps", allow_missing=True, nonnegative=True)
        return t, v, _native_step(path, t), "interpolate"
    if kind == "plain_rate":
        t = _numeric(path, frame, "timestamp_s", allow_missing=False)
        v = _numeric(path, frame, "requests_per_s", allow_missing=True, nonnegative=True)
        return t, v, _native_step(path, t), "interpolate"
    if kind == "minute_counts":
        t = _numeric(path, frame, "minute_start_s", allow_missing=False)
        v = _numeric(path, frame, "requests", allow_missing=True, nonnegative=True)
        return t, v / 60.0, 60.0, "zero"
    if kind == "counts_10s":
        centre = _datetime(path, frame, "time")
        v = _numeric(path, frame, "timestamp", allow_missing=True, nonnegative=True)
        step = _native_step(path, centre)
        # A bin labelled T covers [T - step/2, T + step/2).
        return centre - step / 2.0, v / step, step, "zero"
    raise ValueError(f"{path}: format {kind!r} is not a rate file")


_EVENT_SIGNALS: dict[str, Callable[[Events], np.ndarray | None]] = {
    "requests_per_s": lambda e: None,
    "prompt_tokens_per_s": lambda e: e.prompt_tokens,
    "output_tokens_per_s": lambda e: e.output_tokens,
}


def read_series(
    path: str | Path, step_s: float | None = None, signal: str = "requests_per_s"
) -> DemandSeries:
    """Any supported file -> a clean :class:`DemandSeries` of ``signal``."""
    p = Path(path)
    if signal not in SIGNALS:
        raise ValueError(f"unknown signal {signal!r}; known: {', '.join(SIGNALS)}")
    if step_s is not None and not step_s > 0:
        raise ValueError(f"step must be > 0 seconds, got {step_s}")
    kind = detect_format(p)
    if kind in ("azure", "burstgpt", "mooncake"):
        events = read_events(p)
        weights = _EVENT_SIGNALS[signal](events)
        return bin_events(
            events.times_s,
            step_s or DEFAULT_EVENT_STEP_S,
            weights=weights,
            signal=signal,
            source=str(p),
        )
    if signal != "requests_per_s":
        raise ValueError(f"{p}: a {kind} file carries request rates only, not {signal}")
    times, rates, native, missing = _rate_file(p, kind)
    series = regularize(
        times,
        rates,
        native,
        signal=signal,
        source=str(p),
        missing=missing,  # type: ignore[arg-type]
    )
    if step_s is not None and abs(step_s - native) > 1e-9:
        series = series.resample(step_s)
    return series
