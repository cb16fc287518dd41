"""The tuned set-ups `prescaler demo` scores, kept in a fixture.

Tuning takes minutes and the demo must stay under two, so it scores settings
tuned ahead of time; `prescaler demo --retune` regenerates them with
:func:`simulations.tune.run.tune`, every side under the same optimizer,
budget, seed and protocol. The fixture also records what tune measured, so a
reader sees the figures the choice was made on.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import yaml

if TYPE_CHECKING:
    from simulations.tune.held_back import TuneResult
    from simulations.tune.request import TuneRequest
    from simulations.tune.study import StudyResult, TrialRecord

__all__ = [
    "FIXTURE",
    "HOLDOUT",
    "PRUNE",
    "RETUNE_COMMAND",
    "SEED",
    "TRIALS",
    "PartScore",
    "TunedFixture",
    "TunedSide",
    "fixture_document",
    "held_back_start",
    "load_fixture",
    "retune",
    "retune_request",
    "side_entry",
]

FIXTURE = Path(__file__).parent / "data" / "demo_tuned.yaml"
"""The shipped fixture: what ``prescaler demo`` scores by default."""

TRIALS = 100
"""Trials per side: tune's default budget."""

HOLDOUT = 0.3
"""The held-back share of the trace (tune's default): the demo scores on it."""

SEED = 0

PRUNE: Literal["exact"] = "exact"
"""Only the exact stop rules, which never stop a trial that could have been
the answer: the pace rules are a bet measured on one synthetic day, and on
this short trace they could decide a side's answer instead of its settings
(docs/demo.md)."""

RETUNE_COMMAND = "prescaler demo --retune"
"""The command that regenerates the fixture (written into its header)."""

TUNED_SUFFIX = "-tuned"
"""Appended to a side's name for the ScaledObject the demo runs."""


@dataclass(frozen=True)
class PartScore:
    """A chosen setting's figures on one part of the trace, as tune measured them."""

    slo_attainment: float
    cost_per_month_usd: float


@dataclass(frozen=True)
class TunedSide:
    """One side's tune: the setting chosen on the tuning part and its manifest."""

    name: str
    description: str
    trials: int
    met_target: bool
    """Whether a trial met the target on the tuning part; when none did, the
    setting is the closest trial's."""
    chosen_trial: int | None
    """The trial the setting comes from (None: the study holds no trial)."""
    setting: Mapping[str, str]
    manifest: Mapping[str, Any] | None
    tuning: PartScore | None
    held_back: PartScore | None

    @property
    def is_keda(self) -> bool:
        """A plain-KEDA side (no prescaler trigger): what prescaler is compared with."""
        return self.name.startswith("keda-")

    @property
    def run_name(self) -> str:
        """The ScaledObject name the demo runs it under (one per side)."""
        return f"{self.name}{TUNED_SUFFIX}"


@dataclass(frozen=True)
class TunedFixture:
    """What ``prescaler demo --retune`` wrote: the protocol and every side."""

    trace: str
    """The trace's file name (the shipped trace)."""
    profile: str
    slo_ttft_s: float
    target: float
    trials: int
    holdout: float
    seed: int
    prune: str
    """The tuner's stop rules (``exact``: :data:`PRUNE`)."""
    sides: tuple[TunedSide, ...]
    warnings: tuple[str, ...] = ()

    def side(self, name: str) -> TunedSide | None:
        return next((s for s in self.sides if s.name == name), None)


def retune_request(
    trace: str, profile: str, jobs: int, storage: str, trials: int = TRIALS
) -> TuneRequest:
    """The one tune request every side of the fixture comes from."""
    from simulations.tune.request import tune_request

    return tune_request(
        trace=trace,
        profile=profile,
        trials=trials,
        holdout=HOLDOUT,
        jobs=jobs,
        seed=SEED,
        storage=storage,
        study="prescaler-demo",
        short_history="warn",
        prune=PRUNE,
    )


def _part(summary: Mapping[str, Any] | None) -> dict[str, float] | None:
    if summary is None:
        return None
    return {
        "slo_attainment": float(summary["slo_attainment"]),
        "cost_per_month_usd": float(summary["cost_per_month_usd"]),
    }


def fixture_document(request: TuneRequest, result: TuneResult) -> dict[str, Any]:
    """The fixture's YAML document for ``result`` (every side but the user's)."""
    sides = {
        s.side.name: side_entry(s.side.description, s.side.manifest, s.study, s.tuned, s.holdout,
                                result.months[0])
        for s in result.sides
        if s.side.name != "user"
    }  # fmt: skip
    return {
        "trace": Path(result.trace if request.source.trace is None else request.source.trace).name,
        "profile": request.replay.profile,
        "slo_ttft_s": result.slo_ttft_s,
        "target": result.target,
        "trials": request.study.trials,
        "holdout": request.protocol.holdout,
        "seed": request.replay.seed,
        "prune": request.study.prune,
        "warnings": list(result.warnings),
        "sides": sides,
    }


def side_entry(
    description: str,
    base_manifest: Mapping[str, Any],
    study: StudyResult,
    tuned: Mapping[str, Any] | None,
    held_back: Mapping[str, Any] | None,
    tuning_months: float,
) -> dict[str, Any]:
    """One side of the fixture. A side none of whose trials met the target
    while tuning keeps its closest trial (the highest attainment, finished
    ones first), marked ``met_target: false``: the demo still scores the
    best that side found instead of leaving its row empty."""
    from simulations.tune.manifest import apply_to_manifest

    best = study.best
    trial: TrialRecord | None = best
    if best is not None:
        part, held = _part(tuned), _part(held_back)
    else:
        trial, part, held = study.closest, None, None
        if trial is not None and trial.finished and math.isfinite(trial.cost_usd):
            part = {"slo_attainment": float(trial.attainment),
                    "cost_per_month_usd": float(trial.cost_usd) / tuning_months}  # fmt: skip
    setting = {} if trial is None else dict(trial.metadata)
    return {
        "description": description,
        "trials": len(study.trials),
        "met_target": best is not None,
        "chosen_trial": None if trial is None else trial.number,
        "setting": setting,
        "tuning": part,
        "held_back": held,
        "manifest": None if trial is None else apply_to_manifest(base_manifest, setting),
    }


def _header(request: TuneRequest) -> str:
    study, seed, holdout = request.study, request.replay.seed, request.protocol.holdout
    return (
        "# The tuned set-ups `prescaler demo` scores. Do not edit by hand: regenerate with\n"
        f"#   {RETUNE_COMMAND} --jobs {study.jobs}\n"
        f"# (every side: optuna TPE, {study.trials} trials, seed {seed}, stop rules\n"
        f"# --prune {study.prune}, tuned on the first {1 - holdout:.0%} of the trace,\n"
        "# scored on the held-back rest).\n"
    )


def retune(
    trace: str, profile: str, jobs: int, path: Path, out: TextIO, trials: int = TRIALS
) -> TunedFixture:
    """Tune every side on the trace and write the fixture to ``path``.

    The study lives in a fresh temporary SQLite file, so a run never resumes
    trials from an earlier tuner."""
    from simulations.tune.report import print_event
    from simulations.tune.run import tune

    with tempfile.TemporaryDirectory(prefix="prescaler-demo-tune-") as tmp:
        request = retune_request(trace, profile, jobs, f"sqlite:///{tmp}/tune.db", trials)
        result = tune(request, lambda event: print_event(event, out))
    doc = fixture_document(request, result)
    text = _header(request) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return parse_fixture(doc, str(path))


def load_fixture(path: str | Path = FIXTURE) -> TunedFixture:
    """The fixture at ``path``, validated (errors name the file and the key)."""
    source = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML ({exc})") from exc
    return parse_fixture(doc, source)


def parse_fixture(doc: Any, source: str) -> TunedFixture:
    """:class:`TunedFixture` from its YAML document; each tuned manifest is
    read by the simulator's ScaledObject reader, so a fixture the demo
    cannot run is refused here."""
    from simulations.autoscaling.scaledobject import parse_scaledobject

    if not isinstance(doc, Mapping):
        raise ValueError(f"{source}: expected a mapping at the top level")
    sides_doc = _field(doc, "sides", Mapping, source)
    sides: list[TunedSide] = []
    for name, raw in sides_doc.items():
        where = f"{source}: sides.{name}"
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: expected a mapping")
        manifest = raw.get("manifest")
        if manifest is not None:
            if not isinstance(manifest, Mapping):
                raise ValueError(f"{where}.manifest: expected a ScaledObject mapping")
            parse_scaledobject(yaml.safe_dump(dict(manifest)), f"{where}.manifest")
        setting = raw.get("setting") or {}
        if not isinstance(setting, Mapping):
            raise ValueError(f"{where}.setting: expected a mapping")
        chosen = raw.get("chosen_trial")
        sides.append(
            TunedSide(
                name=str(name),
                description=str(raw.get("description", "")),
                trials=int(_field(raw, "trials", int, where)),
                met_target=bool(raw.get("met_target", chosen is not None)),
                chosen_trial=None if chosen is None else int(chosen),
                setting={str(k): str(v) for k, v in setting.items()},
                manifest=manifest,
                tuning=_part_score(raw.get("tuning"), f"{where}.tuning"),
                held_back=_part_score(raw.get("held_back"), f"{where}.held_back"),
            )
        )
    if not any(s.name == "prescaler" for s in sides):
        raise ValueError(f"{source}: sides: no prescaler side")
    holdout = float(_field(doc, "holdout", (int, float), source))
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"{source}: holdout: must lie in (0, 1), got {holdout!r}")
    return TunedFixture(
        trace=str(_field(doc, "trace", str, source)),
        profile=str(_field(doc, "profile", str, source)),
        slo_ttft_s=float(_field(doc, "slo_ttft_s", (int, float), source)),
        target=float(_field(doc, "target", (int, float), source)),
        trials=int(_field(doc, "trials", int, source)),
        holdout=holdout,
        seed=int(_field(doc, "seed", int, source)),
        prune=str(_field(doc, "prune", str, source)),
        sides=tuple(sides),
        warnings=tuple(str(w) for w in doc.get("warnings") or ()),
    )


def _field(doc: Mapping[str, Any], key: str, kind: Any, where: str) -> Any:
    if key not in doc:
        raise ValueError(f"{where}: missing key {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}: {key}: unexpected value {value!r}")
    return value


def _part_score(raw: Any, where: str) -> PartScore | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    try:
        score = PartScore(float(raw["slo_attainment"]), float(raw["cost_per_month_usd"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: needs slo_attainment and cost_per_month_usd ({exc})") from None
    if not (math.isfinite(score.slo_attainment) and math.isfinite(score.cost_per_month_usd)):
        raise ValueError(f"{where}: figures must be finite")
    return score


def held_back_start(trace: str, holdout: float) -> float:
    """Where the held-back part starts, in seconds into the trace: the cut
    tune makes (:func:`simulations.tune.search.split_workload`)."""
    from simulations.traffic import TrafficOptions, load_workload
    from simulations.tune.search import split_workload

    workload = load_workload(trace, TrafficOptions(seed=SEED))
    first, _ = split_workload(workload, holdout)
    return first.duration_s
