"""Family-by-family shape of a /metrics page: what the emulator must share with vLLM.

The shape of a family is its type, the label names of its samples (``le``
aside) and, for a histogram, its bucket boundaries: what a dashboard, a
PromQL query or the scaler's parser depends on. Values are compared
separately, where a test can make them equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class Shape:
    type: str
    label_names: frozenset[str]
    buckets: tuple[float, ...]


def shapes(text: str, prefix: str = "vllm:") -> dict[str, Shape]:
    """Each ``prefix`` family's shape (families without samples: type only)."""
    out: dict[str, Shape] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(prefix) or fam.name.endswith("_created"):
            continue  # ``_created``: a family of its own on some pages, none on others
        names: set[str] = set()
        les: list[float] = []
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            names.update(k for k in s.labels if k != "le")
            if s.name.endswith("_bucket") and not les_done(les, s.labels.get("le")):
                les.append(float(s.labels["le"]))
        out[fam.name] = Shape(fam.type, frozenset(names), tuple(les))
    return out


def les_done(les: list[float], le: str | None) -> bool:
    """Whether ``le`` repeats (the next series' buckets start again)."""
    return le is None or (bool(les) and float(le) <= les[-1])


def series(text: str, prefix: str = "vllm:") -> Series:
    """Every sample of ``prefix`` families by (name, sorted labels)."""
    out: Series = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(prefix):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def mismatches(emulated: dict[str, Shape], real: dict[str, Shape]) -> list[str]:
    """Each emulated family missing from ``real`` or shaped differently (empty: same)."""
    problems = []
    for name, shape in sorted(emulated.items()):
        other = real.get(name)
        if other is None:
            problems.append(f"{name}: not on the real page")
        elif shape.type != other.type:
            problems.append(f"{name}: type {shape.type} != {other.type}")
        elif shape.label_names and other.label_names and shape.label_names != other.label_names:
            problems.append(f"{name}: labels {sorted(shape.label_names)} != "
                            f"{sorted(other.label_names)}")  # fmt: skip
        elif shape.buckets != other.buckets:
            problems.append(f"{name}: buckets {shape.buckets} != {other.buckets}")
    return problems
