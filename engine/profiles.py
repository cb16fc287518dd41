"""Replica profiles: a model on an instance type, with vLLM settings, prices and start-up.

A profile is all the simulator, the emulator and the scaler know of one
replica: a scheduler step's time for a batch, its KV capacity, its hourly
prices and its cold start. It is data, a YAML file (``engine.profile_schema``);
``get_profile`` resolves a path, a built-in name, a name given this process
(``use_profile``), a name in ``PRESCALER_PROFILE_DIR`` or a name of the
catalogue's form ``<model>[-<precision>][-tp<N>]@<instance type>``, built on
demand so that an impossible one fails with the reason (docs/profiles.md).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from engine.hardware import INSTANCES
from engine.models import MODELS
from engine.profile_catalogue import build_profile
from engine.profile_files import (
    PROFILE_DIR_ENV,
    PROFILE_SUFFIXES,
    builtin_profiles,
    profile_dirs_from_env,
    profiles_in_directory,
    read_profile_file,
)
from engine.profile_schema import ProfileFileError
from engine.profile_types import Profile, StartupTimes, VllmSettings

__all__ = [
    "PROFILES",
    "PROFILE_DIR_ENV",
    "Profile",
    "ProfileFileError",
    "StartupTimes",
    "VllmSettings",
    "all_profile_summaries",
    "build_profile",
    "directory_profiles",
    "get_profile",
    "is_profile_path",
    "profile_names",
    "profile_summary",
    "use_profile",
]

#: The built-in catalogue, read from the files shipped in the package.
PROFILES: dict[str, Profile] = builtin_profiles()

_NAME_RE = re.compile(
    r"^(?P<model>[a-z0-9.]+(?:-[a-z0-9.]+)*?)(?:-(?P<precision>bf16|fp8|awq))?"
    r"(?:-tp(?P<tp>\d+))?@(?P<instance>[a-z0-9.]+)$"
)


def is_profile_path(value: str) -> bool:
    """Whether ``value`` names a profile file rather than a profile."""
    return value.endswith(PROFILE_SUFFIXES) or "/" in value


def directory_profiles() -> dict[str, Profile]:
    """The profiles the ``PRESCALER_PROFILE_DIR`` directories add (read now; cached per file).

    A name that is already built in, or that two files share, is refused with
    both places named: a mounted profile must never shadow another silently.
    """
    out: dict[str, Profile] = {}
    for directory in profile_dirs_from_env():
        for name, profile in profiles_in_directory(directory).items():
            if name in PROFILES:
                raise ProfileFileError(
                    str(directory), "name", f"{name!r} is a built-in profile; choose another name"
                )
            if name in out:
                raise ProfileFileError(
                    str(directory), "name", f"{name!r} is also defined in an earlier directory"
                )
            out[name] = profile
    return out


#: Profiles this process was handed as objects (``use_profile``), by name.
_GIVEN: dict[str, Profile] = {}


def use_profile(value: Profile | str) -> Profile:
    """The profile ``value`` is (or names, or points to), known by its name in
    this process from now on.

    The simulator and the tuner read ``--profile`` once and hand the object
    down; the scaler's trigger metadata inside them names it as a string (the
    live contract), and that name must find this very object, as a file
    mounted in ``PRESCALER_PROFILE_DIR`` does in a cluster. A name that is
    already built in, mounted or given with other figures is refused: two
    profiles under one name would let the replicas and the scaler's belief
    about them differ silently.
    """
    profile = value if isinstance(value, Profile) else get_profile(value)
    name = profile.name
    places = (
        ("a built-in profile", PROFILES),
        ("another profile this run was given", _GIVEN),
        (f"a profile in {PROFILE_DIR_ENV}", directory_profiles()),
    )
    for where, table in places:
        known = table.get(name)
        if known is None:
            continue
        if known != profile:
            raise ValueError(
                f"profile {name!r} is also the name of {where}, with other figures; "
                "give this one a name of its own (the file's 'name:' key)"
            )
        return known
    _GIVEN[name] = profile
    return profile


def profile_names() -> list[str]:
    """Every named profile, sorted: the built-ins and those of ``PRESCALER_PROFILE_DIR``."""
    return sorted([*PROFILES, *directory_profiles()])


def get_profile(name: str) -> Profile:
    """The profile called ``name``, or the one in the file ``name`` points to.

    Paths (see ``is_profile_path``) are read and validated (errors name the
    file and key). Catalogued, given (``use_profile``) and mounted names are
    returned as they are.
    Other names of the form ``<model>[-<precision>][-tp<N>]@<instance>``
    with a known model and instance are built on the fly (and fail with the
    reason if they cannot run, e.g. ``llama-3-70b@g5.12xlarge``). Anything
    else is a ValueError listing every known name and the nearest ones.
    """
    if is_profile_path(name):
        return read_profile_file(name)
    if name in PROFILES:
        return PROFILES[name]
    if name in _GIVEN:
        return _GIVEN[name]
    mounted = directory_profiles()
    if name in mounted:
        return mounted[name]
    match = _NAME_RE.match(name)
    if match and match["model"] in MODELS and match["instance"] in INSTANCES:
        precision = match["precision"] or "bf16"
        tp = int(match["tp"]) if match["tp"] else None
        return build_profile(
            match["model"], match["instance"], precision=precision, tp=tp, tp_suffix=tp is not None
        )
    known = sorted([*PROFILES, *mounted])
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
    raise ValueError(
        f"unknown profile {name!r}; {hint}known profiles: {', '.join(known)} "
        "(or give a path to a profile file ending in .yaml)"
    )


# -- derived figures (the CLI prints these) --------------------------------------

SUMMARY_BATCHES: tuple[int, ...] = (1, 8, 32, 64, 128)
# Each decoding sequence is assumed to hold this much context for the ITL figures.
SUMMARY_CONTEXT_TOKENS = 1024
# Prefill throughput is quoted for one prompt of this length (or the step budget
# if smaller), attention over the prompt included.
SUMMARY_PREFILL_TOKENS = 2048


def profile_summary(profile: Profile) -> dict[str, Any]:
    """The figures ``prescaler engine profiles`` shows for one profile.

    ``itl_ms[b]`` is the decode inter-token latency with ``b`` sequences of
    ``SUMMARY_CONTEXT_TOKENS`` context each, or None where the replica cannot
    run that batch (more than ``max_num_seqs``, or more KV blocks than it has).
    """
    v = profile.vllm
    blocks_per_seq = -(-SUMMARY_CONTEXT_TOKENS // v.block_size)
    itl: dict[str, float | None] = {}
    for batch in SUMMARY_BATCHES:
        if batch > v.max_num_seqs or batch * blocks_per_seq > profile.kv_blocks:
            itl[str(batch)] = None
        else:
            itl[str(batch)] = round(1e3 * profile.decode_itl_s(batch, SUMMARY_CONTEXT_TOKENS), 3)
    chunk = min(SUMMARY_PREFILL_TOKENS, v.max_num_batched_tokens, v.max_model_len)
    prefill_rate = chunk / profile.step_time_s(chunk, 0, chunk)
    return {
        "name": profile.name,
        "model": profile.model.name,
        "hardware": profile.hardware.name,
        "instance_type": profile.instance_type,
        "tp": profile.tp,
        "itl_ms": itl,
        "prefill_tokens_per_s": round(prefill_rate, 1),
        "kv_tokens": profile.kv_tokens,
        "max_model_len": v.max_model_len,
        "price_on_demand_per_hour": profile.price_on_demand_per_hour,
        "price_spot_per_hour": profile.price_spot_per_hour,
    }


def all_profile_summaries() -> list[dict[str, Any]]:
    """``profile_summary`` of every catalogued profile, in name order."""
    return [profile_summary(get_profile(name)) for name in profile_names()]
