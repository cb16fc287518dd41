"""A lab config's ``regimes`` section read into the sweep's config (``lab.regime_config``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.config import ConfigError, load_section, sections
from lab.efficiency import load_config as load_efficiency
from lab.fit_window import FitWindowConfig
from lab.forecast_ablation import AblationConfig
from lab.regime_config import RegimesRun, SweepConfig, load_run

DEFAULT = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


def _load(tmp_path: Path, text: str) -> RegimesRun:
    path = tmp_path / "lab.yaml"
    path.write_text(text, encoding="utf-8")
    return load_run(path)


def test_the_shipped_default_config_is_every_entry_points_defaults() -> None:
    assert load_run(DEFAULT) == RegimesRun(SweepConfig())
    assert AblationConfig.load(DEFAULT) == AblationConfig()
    assert FitWindowConfig.load(DEFAULT) == FitWindowConfig()


def test_an_empty_section_is_the_defaults_and_focus_drops_the_history(tmp_path: Path) -> None:
    assert _load(tmp_path, "regimes:\n") == RegimesRun(SweepConfig())
    run = _load(tmp_path, "regimes:\n  focus: true\n  tuning_days: 1\n")
    assert run.sweep.history_days == 0 and run.sweep.days == 2


def test_keys_read_into_the_sweep(tmp_path: Path) -> None:
    run = _load(
        tmp_path,
        "regimes:\n  regimes: [sparse-bursts]\n  leads_min: [15]\n  prewarm: [false]\n"
        "  seeds: [3, 4]\n  tuning_days: 2\n  prescaler_set:\n"
        "    seasonalSizeWanderSeconds: 21600\n    countStartingReplicas: false\n"
        "  directory: studies\n",
    )
    assert run.sweep.regimes == ("sparse-bursts",) and run.sweep.leads_min == (15.0,)
    assert run.sweep.prewarm == (False,) and run.sweep.days == 3
    assert run.sweep.prescaler_set == (
        ("seasonalSizeWanderSeconds", "21600"),
        ("countStartingReplicas", "false"),
    )
    assert run.seeds == (3, 4) and run.directory == Path("studies")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("regimes:\n  trails: 4\n", r"lab\.yaml: regimes\.trails: unknown key"),
        ("sweep: {}\n", r"lab\.yaml: sweep: unknown section"),
        ("", r"lab\.yaml: regimes: no such section in this config \(it has: none\)"),
        ("fit_window: {}\n", r"regimes: no such section .*\(it has: fit_window\)"),
        ("regimes:\n  trials: four\n", r"regimes\.trials: expected an integer"),
        ("regimes:\n  trials: 0\n", r"regimes\.trials: must be >= 1"),
        ("regimes:\n  leads_min: 15\n", r"regimes\.leads_min: expected a list"),
        ("regimes:\n  leads_min: [7]\n", r"regimes\.leads_min: lead time\(s\) \[7\.0\]"),
        ("regimes:\n  regimes: [weekly]\n", r"regimes\.regimes: unknown regime"),
        ("regimes:\n  focus: true\n  tuning_days: 2\n", r"regimes\.tuning_days: a focus sweep"),
        ("regimes:\n  tuning_days: 0\n", r"regimes\.tuning_days: must be >= 1"),
        ("regimes:\n  seeds: []\n", r"regimes\.seeds: names no seed"),
        ("regimes:\n  seeds: [1, 1]\n", r"regimes\.seeds: must be distinct"),
        ("regimes:\n  prescaler_set: {prewarm: true}\n", r"regimes\.prescaler_set: cannot hold"),
        ("regimes:\n  margin: .nan\n", r"regimes\.margin: expected a finite number"),
    ],
)
def test_every_error_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)


@pytest.mark.parametrize(
    "path",
    sorted((DEFAULT.parent).glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_every_shipped_config_loads_in_every_section_it_has(path: Path) -> None:
    """A record names its config: one that stops matching the schema fails here."""
    loaders = {"regimes": load_run, "forecast_ablation": AblationConfig.load,
               "fit_window": FitWindowConfig.load,
               "gateway_wake": lambda p: load_section(p, "gateway_wake", ()),
               "efficiency": load_efficiency}  # fmt: skip
    assert sections(path)
    for name in sections(path):
        loaders[name](path)
