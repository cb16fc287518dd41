"""The NVIDIA device plugin's config (time-slicing), found inside ConfigMaps.

Why: the device plugin reads its config from a ConfigMap entry as YAML text,
which no schema sees; an old-format or misspelled config is ignored by the
plugin and the GPUs are silently not shared. Only the current format
(``version: v1``, ``sharing.timeSlicing.resources``) is accepted.
"""

from __future__ import annotations

import yaml

from tests.manifests.problems import Obj, Problem, ref

__all__ = ["check_device_plugin_config"]

_DP_TOP_KEYS = frozenset({"version", "flags", "resources", "sharing", "imex"})


def check_device_plugin_config(obj: Obj) -> list[Problem]:
    """A ConfigMap whose entries are NVIDIA device-plugin configs: check the
    current format (``version: v1``, ``sharing.timeSlicing.resources``).

    ConfigMaps that do not look like device-plugin configs are ignored.
    """
    out: list[Problem] = []
    who = ref(obj)
    for name, text in (obj.get("data") or {}).items():
        if not isinstance(text, str) or "version:" not in text:
            continue
        try:
            cfg = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            out.append(Problem(who, f"data.{name}", "device-plugin", f"not YAML: {exc}"))
            continue
        if not isinstance(cfg, dict) or "version" not in cfg or not set(cfg) <= _DP_TOP_KEYS:
            continue
        p = f"data.{name}"
        if cfg.get("version") != "v1":
            out.append(Problem(who, f"{p}.version", "device-plugin", "version must be 'v1'"))
        sharing = cfg.get("sharing")
        if sharing is None:
            continue
        if not isinstance(sharing, dict) or not set(sharing) <= {"timeSlicing", "mps"}:
            out.append(
                Problem(
                    who, f"{p}.sharing", "device-plugin", "sharing takes 'timeSlicing' (or 'mps')"
                )
            )
            continue
        ts = sharing.get("timeSlicing") or {}
        allowed = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
        for extra in sorted(set(ts) - allowed):
            out.append(
                Problem(who, f"{p}.sharing.timeSlicing.{extra}", "device-plugin", "unknown field")
            )
        resources = ts.get("resources")
        if not isinstance(resources, list) or not resources:
            out.append(
                Problem(
                    who,
                    f"{p}.sharing.timeSlicing.resources",
                    "device-plugin",
                    "needs a non-empty list of {name, replicas}",
                )
            )
            continue
        for i, res in enumerate(resources):
            rp = f"{p}.sharing.timeSlicing.resources[{i}]"
            if not isinstance(res, dict) or not set(res) <= {
                "name",
                "replicas",
                "rename",
                "devices",
            }:
                out.append(Problem(who, rp, "device-plugin", "unknown fields"))
                continue
            if not str(res.get("name", "")).startswith("nvidia.com/"):
                out.append(
                    Problem(
                        who,
                        f"{rp}.name",
                        "device-plugin",
                        "resource must be nvidia.com/gpu (or nvidia.com/mig-*)",
                    )
                )
            reps = res.get("replicas")
            if not isinstance(reps, int) or isinstance(reps, bool) or reps < 2:
                out.append(
                    Problem(
                        who, f"{rp}.replicas", "device-plugin", "replicas must be an integer >= 2"
                    )
                )
    return out
