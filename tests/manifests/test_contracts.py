"""The manifests against the code they configure: every ScaledObject
trigger's metadata goes through the scaler's real ``parse_settings``, and the
scaler container's command line through the real ``prescaler`` CLI parser."""

from __future__ import annotations

from typing import Any

import pytest

from decision.settings import SettingsError, parse_settings
from tests.manifests.conftest import OVERLAYS, find_all

Objs = list[dict[str, Any]]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_trigger_metadata_is_accepted_by_the_scaler(
    overlay: str, rendered: dict[str, Objs]
) -> None:
    triggers = [
        (so["metadata"]["name"], t)
        for so in find_all(rendered[overlay], "ScaledObject")
        for t in so["spec"]["triggers"]
        if t["type"] in ("external", "external-push")
    ]
    if overlay == "base":
        assert triggers == []
        return
    assert triggers
    for name, trigger in triggers:
        try:
            settings = parse_settings(trigger["metadata"])
        except SettingsError as exc:
            raise AssertionError(f"{overlay} ScaledObject {name}: {exc}") from exc
        assert settings.prometheus_address is not None
        assert settings.model == trigger["metadata"]["model"]
        if trigger["metadata"].get("prewarm") == "true":
            assert settings.prewarm and settings.prewarm_deployment == "prescaler-balloon"


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_scaler_command_line_parses(overlay: str, rendered: dict[str, Objs]) -> None:
    from prescaler.cli import build_parser

    (deploy,) = [
        d for d in find_all(rendered[overlay], "Deployment") if d["metadata"]["name"] == "prescaler"
    ]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    argv = [*container["command"], *container["args"]]
    assert argv[:2] == ["prescaler", "serve"]
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as exc:
        raise AssertionError(f"`{' '.join(argv)}` is rejected by the prescaler CLI") from exc
    assert callable(args.func)
    assert getattr(args, "port", None) == 9090
    assert getattr(args, "metrics_port", None) == 9091
