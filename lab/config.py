"""Reading a lab config: one YAML file, a section per lab entry point.

A sweep's grid and budget are a file, not environment variables, so a
recorded result names the file that made it and a typo fails before the
first trial. Each entry point reads its own section (:data:`SECTIONS`) into
a frozen dataclass; every error names the file and the key at fault, as
:class:`decision.settings.SettingsError` names a trigger's key.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SECTIONS", "ConfigError", "Section", "load_section", "sections"]

SECTIONS = ("regimes", "forecast_ablation", "fit_window", "gateway_wake", "efficiency")
"""The sections a lab config may hold: each read by ``python -m lab.NAME``
(``gateway_wake``, which has no keys, by its bench test alone)."""


class ConfigError(ValueError):
    """A bad lab config; ``key`` is the key at fault (``section.key`` once read
    from a file)."""

    def __init__(self, key: str, message: str, source: Path | None = None) -> None:
        super().__init__(f"{source}: {key}: {message}" if source else f"{key}: {message}")
        self.key = key
        self.detail = message
        self.source = source


def _what(raw: object) -> str:
    return f"{type(raw).__name__} {raw!r}"


class Section:
    """One section's keys, read by type; an unknown key is an error at once."""

    def __init__(
        self, name: str, raw: Mapping[str, Any], keys: Sequence[str], source: Path | None = None
    ) -> None:
        self.name = name
        self.raw = raw
        self.source = source
        for key in raw:
            if key not in keys:
                raise self.error(key, f"unknown key (known: {', '.join(keys)})")

    def __contains__(self, key: str) -> bool:
        return key in self.raw

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.name}.{key}", message, self.source)

    @contextmanager
    def fields(self, renamed: Mapping[str, str] | None = None) -> Iterator[None]:
        """Re-raise a dataclass's :class:`ConfigError` (keyed by its field)
        under this section's key, ``renamed`` mapping a field to the key
        that sets it."""
        try:
            yield
        except ConfigError as exc:
            if exc.source is not None:  # a key this section read: named already
                raise
            key = (renamed or {}).get(exc.key, exc.key)
            raise self.error(key, exc.detail) from None

    def _int(self, key: str, raw: object) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.error(key, f"expected an integer, got {_what(raw)}")
        return raw

    def _float(self, key: str, raw: object) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise self.error(key, f"expected a finite number, got {_what(raw)}")
        return float(raw)

    def _str(self, key: str, raw: object) -> str:
        if not isinstance(raw, str) or not raw.strip():
            raise self.error(key, f"expected a non-empty string, got {_what(raw)}")
        return raw.strip()

    def _bool(self, key: str, raw: object) -> bool:
        if not isinstance(raw, bool):
            raise self.error(key, f"expected true or false, got {_what(raw)}")
        return raw

    def _list(self, key: str) -> list[object]:
        raw = self.raw[key]
        if not isinstance(raw, list):
            raise self.error(key, f"expected a list, got {_what(raw)}")
        return raw

    def get_int(self, key: str, default: int) -> int:
        return self._int(key, self.raw[key]) if key in self.raw else default

    def get_float(self, key: str, default: float) -> float:
        return self._float(key, self.raw[key]) if key in self.raw else default

    def get_str(self, key: str, default: str) -> str:
        return self._str(key, self.raw[key]) if key in self.raw else default

    def get_bool(self, key: str, default: bool) -> bool:
        return self._bool(key, self.raw[key]) if key in self.raw else default

    def ints(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        if key not in self.raw:
            return default
        return tuple(self._int(key, x) for x in self._list(key))

    def floats(self, key: str, default: tuple[float, ...]) -> tuple[float, ...]:
        if key not in self.raw:
            return default
        return tuple(self._float(key, x) for x in self._list(key))

    def strs(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if key not in self.raw:
            return default
        return tuple(self._str(key, x) for x in self._list(key))

    def bools(self, key: str, default: tuple[bool, ...]) -> tuple[bool, ...]:
        if key not in self.raw:
            return default
        return tuple(self._bool(key, x) for x in self._list(key))

    def pairs(self, key: str) -> tuple[tuple[str, str], ...]:
        """A mapping of strings (``KEY: VALUE``), in the file's order; numbers
        and booleans are written back as the trigger metadata's text."""
        raw = self.raw.get(key) or {}
        if not isinstance(raw, dict):
            raise self.error(key, f"expected a mapping of KEY: VALUE, got {_what(raw)}")
        out: list[tuple[str, str]] = []
        for k, v in raw.items():
            if not isinstance(k, str) or isinstance(v, dict | list) or v is None:
                raise self.error(key, f"{k!r}: expected a string, number or boolean value")
            out.append((k, str(v).lower() if isinstance(v, bool) else str(v)))
        return tuple(out)

    def path(self, key: str) -> Path | None:
        raw = self.raw.get(key)
        return None if raw is None else Path(self._str(key, raw))


def sections(path: Path) -> tuple[str, ...]:
    """The sections the lab config at ``path`` holds, in the file's order."""
    return tuple(_read(path))


def load_section(path: Path, name: str, keys: Sequence[str]) -> Section:
    """Section ``name`` of the lab config at ``path`` (an empty one: every key
    at its default). A file without the section is an error, not the defaults:
    an entry point given another's config would otherwise run its full grid."""
    doc = _read(path)
    if name not in doc:
        has = ", ".join(doc) or "none"
        raise ConfigError(name, f"no such section in this config (it has: {has})", path)
    raw = doc[name] or {}
    if not isinstance(raw, dict):
        raise ConfigError(name, f"expected a mapping of keys, got {_what(raw)}", path)
    return Section(name, raw, keys, path)


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), f"cannot read a YAML config: {exc}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise ConfigError(str(path), f"expected a mapping of sections, got {_what(doc)}")
    for section in doc:
        if section not in SECTIONS:
            known = ", ".join(SECTIONS)
            raise ConfigError(str(section), f"unknown section (known: {known})", path)
    return doc
