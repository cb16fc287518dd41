"""The tuned fixture `prescaler demo` scores: what `prescaler demo --retune` writes.

Cheap checks on the shipped file (no tuning): its protocol is the documented
one, each side's manifest is its setting applied to the side's base exactly
as the tuner applies it, and every manifest is accepted by the simulator's
KEDA manifest reader and prescaler's trigger by the live scaler's parser.
Regenerating the fixture is a benchmark (``test_demo_retune_bench.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from decision.settings import parse_settings
from prescaler.demo_tuned import (
    FIXTURE,
    HOLDOUT,
    PRUNE,
    SEED,
    TRIALS,
    held_back_start,
    load_fixture,
    retune_request,
)
from simulations.autoscaling.scaledobject import parse_scaledobject
from simulations.cli import DEFAULT_PROFILE
from simulations.sim_inputs import SimInputs
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, load_workload
from simulations.tune.manifest import apply_to_manifest, triggers_of
from simulations.tune.sides import make_sides


def test_shipped_fixture_is_the_retune_protocols_output() -> None:
    """Every side was tuned with the same budget and seed on the shipped trace,
    and its manifest is its chosen setting applied to the side's base."""
    fixture = load_fixture(FIXTURE)
    assert (fixture.trace, fixture.profile) == (DEFAULT_TOKENS_TRACE.name, DEFAULT_PROFILE)
    assert (fixture.trials, fixture.holdout, fixture.seed) == (TRIALS, HOLDOUT, SEED)
    assert fixture.prune == PRUNE
    request = retune_request(str(DEFAULT_TOKENS_TRACE), fixture.profile, 1, "sqlite://")
    bases = {s.name: s for s in make_sides(request, fixture.profile, SimInputs().max_replicas)}
    names = [s.name for s in fixture.sides]
    assert set(names) <= set(bases), "a side the tuner no longer has: re-run --retune"
    assert "prescaler" in names and any(s.is_keda for s in fixture.sides)
    for side in fixture.sides:
        # the same budget; a parallel worker may finish one trial past it
        assert fixture.trials <= side.trials <= fixture.trials + 1, side.name
        assert side.manifest is not None and side.chosen_trial is not None, side.name
        assert side.manifest == apply_to_manifest(bases[side.name].manifest, side.setting)
        so = parse_scaledobject(yaml.safe_dump(dict(side.manifest)), side.name)
        for trigger in triggers_of(so):
            if trigger.kind == "prescaler":
                parse_settings(trigger.metadata)
        if side.met_target:  # tune scored the chosen setting on both parts
            assert side.tuning is not None and side.held_back is not None
            assert 0.0 < side.held_back.slo_attainment <= 1.0


def test_held_back_part_starts_where_tune_cuts() -> None:
    """70 % of the trace's span: the demo scores exactly the part tune held back."""
    workload = load_workload(str(DEFAULT_TOKENS_TRACE), TrafficOptions())
    start = held_back_start(str(DEFAULT_TOKENS_TRACE), HOLDOUT)
    assert start == pytest.approx(workload.duration_s * (1 - HOLDOUT))


def _broken(tmp_path: Path, edit: str) -> Path:
    doc = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
    if edit == "no-trials":
        del doc["trials"]
    elif edit == "bad-manifest":
        doc["sides"]["prescaler"]["manifest"]["spec"]["triggers"] = []
    elif edit == "holdout":
        doc["holdout"] = 1.5
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("edit", "named"),
    [("no-trials", "'trials'"), ("bad-manifest", "sides.prescaler.manifest"),
     ("holdout", "holdout")],
)  # fmt: skip
def test_a_bad_fixture_is_refused_by_name(tmp_path: Path, edit: str, named: str) -> None:
    """A hand-edited fixture the demo cannot run names its file and the key."""
    path = _broken(tmp_path, edit)
    with pytest.raises(ValueError, match=named) as err:
        load_fixture(path)
    assert str(path) in str(err.value)
