"""Where prediction pays: the regime sweep (``-m bench``; bench-results/regimes.json, .md, .png).

For each regime x lead time x node pre-warming setting, prescaler's trigger
tuned with the forecast on and off against the best tuned KEDA set-up
(queue, queue + KV cache, + a daily cron window, scale to zero on the
gateway's rate, and all of those at a floor of 0 in one ScaledObject),
each tuned the same way (:mod:`benchmarks.regimes`).
The budget and the grid are environment variables, so the same test runs a
reduced sweep on a shared machine and the full one elsewhere:

- ``PRESCALER_REGIMES_TRIALS`` (40): trials per side;
- ``PRESCALER_REGIMES`` (all): comma-separated regime names;
- ``PRESCALER_REGIMES_LEADS`` (2.5,5,10,15): lead times in minutes;
- ``PRESCALER_REGIMES_PREWARM`` (on,off);
- ``PRESCALER_REGIMES_KEDA`` (every KEDA side): comma-separated side names
  (set but empty: none, to rerun prescaler's columns alone);
- ``PRESCALER_REGIMES_FOCUS`` (0): 1 keeps only each regime's focus hours
  of each day (6 of 24), four times cheaper;
- ``PRESCALER_REGIMES_JOBS`` (2): cells run at once;
- ``PRESCALER_REGIMES_PRESCALER_SIDE`` (prescaler-gateway): the prescaler
  side tuned with the forecast on and off (or ``prescaler``, or
  ``prescaler-cron``: beside the cron window the KEDA cron side starts
  from);
- ``PRESCALER_REGIMES_TARGET`` (0.95): the attainment every side must meet,
  as a fraction of each part's idle-fleet ceiling (a lower one is another
  point on the cost-against-attainment frontier);
- ``PRESCALER_REGIMES_MARGIN`` (0): points of attainment above the tuning
  day's target a chosen setting must reach there, for every side
  (``prescaler tune --margin``);
- ``PRESCALER_REGIMES_BUSIER`` (0): percent more traffic on the tuning
  day than the trace holds, for every side (the choice holds on a day that
  grows; the held-back day is the trace's own);
- ``PRESCALER_REGIMES_SEEDS`` (0): comma-separated seeds (each draws the
  regime's days, the arrivals and the sampler's seed); with more than one,
  every seed's sweep runs in one pool and ``regimes-seeds.json`` and ``.md``
  say per cell what each seed gave and how many seeds each side's chosen
  setting held out under (:mod:`benchmarks.regime_seeds`); ``regimes.json``
  is then the first seed's sweep;
- ``PRESCALER_REGIMES_HISTORY_DAYS`` (3; 0 with focus): days before the
  tuning day, backfilled into prescaler's tracker; with focus and history
  each day's focus hours open with the fleet and backfill of the whole-day
  trace before them;
- ``PRESCALER_REGIMES_TUNING_DAYS`` (1; whole days only): days every side
  is tuned on, each of which a chosen setting must meet the target on, not
  only their sum (:mod:`simulations.tune.each_day`). They follow the
  history days (``PRESCALER_REGIMES_HISTORY_DAYS`` counts the days before
  the first), so to hold back the same day as with one tuning day, lower
  the history by one per extra tuning day (``TUNING_DAYS=2
  HISTORY_DAYS=2``: the same five days, the tuning part the days 2 and 3);
- ``PRESCALER_REGIMES_CAPACITY_ERROR`` (0): prescaler believes (1 + E) x
  each replica's capacity on every part (E < 0: headroom on the fleet it
  sizes from demand); KEDA's sides ignore it;
- ``PRESCALER_REGIMES_PRESCALER_SET`` (none): comma-separated ``KEY=VALUE``
  trigger keys held on every prescaler trial, forecast on and off (a
  default under test, e.g. ``seasonalSizeWanderSeconds=21600``); KEDA's
  sides ignore them;
- ``PRESCALER_REGIMES_FORECASTERS`` (none): comma-separated further
  forecasters, each tuned as one more prescaler variant beside forecast on
  and off (a ``forecast:`` method such as ``seasonal_naive``, or
  statsforecast's ``sf_autoets`` and the other ``sf_*``, simulation only);
  ``regimes-seeds.md`` then compares the cost each buys (with one seed,
  only the JSON's ``forecast-METHOD`` rows hold it);
- ``PRESCALER_REGIMES_SAMPLER_OFFSET`` (0): added to the seed for every
  study's sampler (the traces keep the seed): a second TPE path over the
  same parts, every side alike, to measure the tuner's own noise;
- ``PRESCALER_REGIMES_DIR`` (the test's temporary directory): where the
  regimes' traces and the studies' SQLite storage go. A later run given the
  same directory joins the studies it finds finished (the same side, space,
  grid point and budget) and only scores them, so a sweep can add sides
  (prescaler's alone first, the KEDA sides later) without repeating trials.
  A study of the same name started there for another space or another
  ScaledObject as written is refused, naming both fingerprints (delete it
  with ``optuna.delete_study`` or give another directory).

The test checks the sweep ran every cell and that the verdicts agree with
the figures; whether the targets are met is recorded (``targets``), not
asserted: it is the finding.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from benchmarks.regime_seeds import markdown_seeds, run_seeds
from benchmarks.regimes import (
    KEDA_SIDES,
    LEAD_TIMES,
    SweepConfig,
    markdown_table,
    plot_sweep,
    run_sweep,
    targets_met,
)
from simulations.regimes import REGIMES

pytestmark = [pytest.mark.bench, pytest.mark.timeout(12 * 3600)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def _list(name: str, default: str) -> list[str]:
    return [x.strip() for x in os.environ.get(name, default).split(",") if x.strip()]


def _config() -> SweepConfig:
    focus = os.environ.get("PRESCALER_REGIMES_FOCUS", "0") == "1"
    return SweepConfig(
        regimes=tuple(_list("PRESCALER_REGIMES", ",".join(REGIMES))),
        leads_min=tuple(float(x) for x in _list("PRESCALER_REGIMES_LEADS", "2.5,5,10,15")),
        prewarm=tuple(x == "on" for x in _list("PRESCALER_REGIMES_PREWARM", "on,off")),
        trials=int(os.environ.get("PRESCALER_REGIMES_TRIALS", "40")),
        jobs=int(os.environ.get("PRESCALER_REGIMES_JOBS", "2")),
        keda_sides=tuple(_list("PRESCALER_REGIMES_KEDA", ",".join(KEDA_SIDES))),
        focus=focus,
        history_days=int(os.environ.get("PRESCALER_REGIMES_HISTORY_DAYS", "0" if focus else "3")),
        prescaler_side=os.environ.get("PRESCALER_REGIMES_PRESCALER_SIDE", "prescaler-gateway"),
        target=float(os.environ.get("PRESCALER_REGIMES_TARGET", "0.95")),
        margin=float(os.environ.get("PRESCALER_REGIMES_MARGIN", "0")),
        busier=float(os.environ.get("PRESCALER_REGIMES_BUSIER", "0")),
        days=int(os.environ.get("PRESCALER_REGIMES_TUNING_DAYS", "1")) + 1,
        capacity_error=float(os.environ.get("PRESCALER_REGIMES_CAPACITY_ERROR", "0")),
        prescaler_set=tuple(_pair(x) for x in _list("PRESCALER_REGIMES_PRESCALER_SET", "")),
        forecasters=tuple(_list("PRESCALER_REGIMES_FORECASTERS", "")),
        sampler_offset=int(os.environ.get("PRESCALER_REGIMES_SAMPLER_OFFSET", "0")),
    )


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        pytest.fail(f"PRESCALER_REGIMES_PRESCALER_SET: {text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def _seeds() -> list[int]:
    seeds = [int(x) for x in _list("PRESCALER_REGIMES_SEEDS", "0")]
    if not seeds:
        pytest.fail("PRESCALER_REGIMES_SEEDS names no seed")
    return seeds


def test_regime_sweep(tmp_path: Path) -> None:
    config = _config()
    seeds = _seeds()
    RESULTS.mkdir(exist_ok=True)
    directory = Path(os.environ.get("PRESCALER_REGIMES_DIR") or tmp_path)
    if len(seeds) > 1:
        many = run_seeds(config, seeds, directory)
        (RESULTS / "regimes-seeds.json").write_text(json.dumps(many, indent=2) + "\n")
        (RESULTS / "regimes-seeds.md").write_text(markdown_seeds(many))
        docs = many["sweeps"]
        assert [d["config"]["seed"] for d in docs] == seeds
    else:
        docs = [run_sweep(dataclasses.replace(config, seed=seeds[0]), directory)]
    doc = docs[0]
    (RESULTS / "regimes.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot_sweep(doc, RESULTS / "regimes.png")
    (RESULTS / "regimes.md").write_text(markdown_table(doc))
    for one in docs:
        for regime in config.regimes:
            cells = one["regimes"][regime]["cells"]
            assert [c["lead_time_min"] for c in cells] == list(config.leads_min)
            for cell in cells:
                assert cell["lead_time_preset"] == LEAD_TIMES[cell["lead_time_min"]]
                assert set(cell["keda"]) == set(config.keda_sides)
                assert len(cell["prescaler"]) == len(config.prewarm)
                for side in cell["keda"].values():
                    assert side["trials"] == config.trials
        assert one["targets"] == targets_met(one)
