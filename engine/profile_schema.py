"""The profile file schema: a plain mapping (parsed YAML) to a ``Profile`` and back.

Pure: no file is read here (``engine.profile_files`` does that). Every check
happens once, in ``profile_from_document``, and every error is a
``ProfileFileError`` naming the file and the dotted key at fault, so a team
writing its own profile is told exactly which line to fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.hardware import HardwareSpec
from engine.models import ModelSpec
from engine.profile_types import (
    NO_OVERHEAD,
    NO_STALLS,
    CheckRecord,
    EngineStalls,
    Profile,
    RequestOverhead,
    StartupTimes,
    VllmSettings,
)

#: The value of the ``format`` key; a later incompatible layout gets a new one.
PROFILE_FORMAT = "prescaler-profile/1"

_TOP_LEVEL: tuple[str, ...] = (
    "format",
    "name",
    "notes",
    "instance_type",
    "tp",
    "precision",
    "price_on_demand_per_hour",
    "price_spot_per_hour",
    "model",
    "hardware",
    "vllm",
    "startup",
    "request_overhead",
    "stalls",
    "checked",
)
_SECTIONS: dict[str, type[Any]] = {
    "model": ModelSpec,
    "hardware": HardwareSpec,
    "vllm": VllmSettings,
    "startup": StartupTimes,
}
#: Sections a file may leave out (their dataclass's defaults), with the Profile default.
_OPTIONAL_SECTIONS: dict[str, tuple[type[Any], Any]] = {
    "request_overhead": (RequestOverhead, NO_OVERHEAD),
    "stalls": (EngineStalls, NO_STALLS),
    "checked": (CheckRecord, None),
}


class ProfileFileError(ValueError):
    """A profile file that cannot be used: which file, which key, and why."""

    def __init__(self, source: str, key: str, message: str) -> None:
        super().__init__(f"{source}: key {key!r}: {message}")
        self.source = source
        self.key = key
        self.message = message


@dataclass(frozen=True)
class _FieldType:
    """What one key accepts: ``kind`` is int, float, str or bool; ``optional`` allows null."""

    kind: type
    optional: bool


def _field_types(
    cls: type[Any], skip: frozenset[str] = frozenset()
) -> dict[str, tuple[_FieldType, bool]]:
    """Each scalar dataclass field's accepted type and whether it may be left out."""
    out: dict[str, tuple[_FieldType, bool]] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        text = str(f.type).replace(" ", "")
        optional = "None" in text
        base = text.replace("|None", "")
        kind = {"int": int, "float": float, "str": str, "bool": bool}[base]
        has_default = f.default is not dataclasses.MISSING
        out[f.name] = (_FieldType(kind, optional), has_default)
    return out


def _check_value(source: str, key: str, value: Any, expected: _FieldType) -> Any:
    """The value converted to the field's type (an int is a float where a float is due)."""
    if value is None:
        if expected.optional:
            return None
        raise ProfileFileError(source, key, f"must not be null (expected {expected.kind.__name__})")
    kind = expected.kind
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(value, str):
        return value
    raise ProfileFileError(
        source, key, f"expected {kind.__name__}, got {type(value).__name__} {value!r}"
    )


def _mapping(source: str, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProfileFileError(source, key, f"expected a mapping, got {type(value).__name__}")
    return value


def _fields_of(
    source: str, prefix: str, raw: Mapping[str, Any], types: dict[str, tuple[_FieldType, bool]]
) -> dict[str, Any]:
    """Checked keyword arguments for one section (unknown and missing keys refused)."""
    unknown = sorted(str(k) for k in raw if k not in types)
    if unknown:
        raise ProfileFileError(
            source,
            f"{prefix}{unknown[0]}",
            f"unknown key; expected some of {', '.join(types)}",
        )
    kwargs: dict[str, Any] = {}
    for name, (expected, has_default) in types.items():
        key = f"{prefix}{name}"
        if name not in raw:
            if has_default:
                continue
            raise ProfileFileError(source, key, "missing")
        kwargs[name] = _check_value(source, key, raw[name], expected)
    return kwargs


def _blame(section: str, names: tuple[str, ...], message: str) -> str:
    """The dotted key a constructor's error message is about (the section if none is named)."""
    for name in sorted(names, key=len, reverse=True):
        if name in message:
            return f"{section}.{name}" if section else name
    return section or "name"


_PROFILE_BLAME: tuple[tuple[str, str], ...] = (
    ("KV cache", "vllm.num_gpu_blocks"),
    ("max_model_len", "vllm.max_model_len"),
    ("static KV", "vllm.max_num_seqs"),
    ("prices", "price_on_demand_per_hour"),
    ("precision", "precision"),
    ("fp8", "precision"),
    ("tp", "tp"),
    ("weights", "tp"),
)


def _section(source: str, section: str, cls: Any, raw: Any) -> Any:
    """One section of a profile file built as ``cls``, every error naming
    the file and the key it blames."""
    types = _field_types(cls)
    kwargs = _fields_of(source, f"{section}.", _mapping(source, section, raw), types)
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ProfileFileError(source, _blame(section, tuple(types), str(exc)), str(exc)) from None


def profile_from_document(doc: Any, source: str) -> Profile:
    """The validated ``Profile`` a parsed profile file describes.

    ``source`` names the file in every error. Unknown keys are refused (a
    misspelt key would otherwise silently keep a default).
    """
    top = _mapping(source, "(document)", doc)
    unknown = sorted(str(k) for k in top if k not in _TOP_LEVEL)
    if unknown:
        raise ProfileFileError(
            source, unknown[0], f"unknown key; expected some of {', '.join(_TOP_LEVEL)}"
        )
    fmt = top.get("format")
    if fmt != PROFILE_FORMAT:
        raise ProfileFileError(source, "format", f"expected {PROFILE_FORMAT!r}, got {fmt!r}")
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        if section not in top:
            raise ProfileFileError(source, section, "missing")
        sections[section] = _section(source, section, cls, top[section])
    for section, (cls, _default) in _OPTIONAL_SECTIONS.items():
        if section in top:
            sections[section] = _section(source, section, cls, top[section])
    scalar_types = _field_types(Profile, skip=frozenset({*_SECTIONS, *_OPTIONAL_SECTIONS}))
    raw_scalars = {k: v for k, v in top.items() if k in scalar_types}
    scalars = _fields_of(source, "", raw_scalars, scalar_types)
    try:
        return Profile(**scalars, **sections)
    except ValueError as exc:
        message = str(exc)
        key = next((k for word, k in _PROFILE_BLAME if word in message), "name")
        raise ProfileFileError(source, key, message) from None


def profile_to_document(profile: Profile) -> dict[str, Any]:
    """The mapping a profile file holds for ``profile`` (loads back into an equal object)."""
    doc: dict[str, Any] = {"format": PROFILE_FORMAT}
    for f in dataclasses.fields(Profile):
        value = getattr(profile, f.name)
        if f.name in _OPTIONAL_SECTIONS:
            if value != _OPTIONAL_SECTIONS[f.name][1]:  # left out at its default
                doc[f.name] = dataclasses.asdict(value)
            continue
        doc[f.name] = dataclasses.asdict(value) if f.name in _SECTIONS else value
    return doc
