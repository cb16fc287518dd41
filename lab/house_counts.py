"""The house's size and shape, counted the same way every time.

What the product/lab line is held to: product lines (everything outside
``tests/``, ``docs/`` and ``lab/``), import loops among product modules,
modules over 600 lines, docstrings over 15 lines, the ``PRESCALER_*``
environment variable names the product spells (a string literal
``PRESCALER_...``: every variable it can read), and each decision record's length.
Run from the repository root: ``python -m lab.house_counts`` (``--json``).
Duplicate pairs come from the ``duplicates`` tool, not from here.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import grimp

PRODUCT_PACKAGES = (
    "prescaler",
    "engine",
    "forecasting",
    "decision",
    "scaler",
    "simulations",
    "stack",
    "protos",
    "prescaler_native",
)
OUTSIDE_PRODUCT = ("tests/", "docs/", "lab/")
LONG_MODULE = 600
LONG_DOCSTRING = 15
ENV_NAME = re.compile(r"PRESCALER_[A-Z0-9_]+")


def product_files(root: Path) -> list[Path]:
    """The tracked Python files of the product."""
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    return [root / f for f in out.split() if not f.startswith(OUTSIDE_PRODUCT)]


def import_loops(packages: tuple[str, ...] = PRODUCT_PACKAGES) -> list[list[str]]:
    """Strongly connected groups of two or more product modules (any import,
    function-level and TYPE_CHECKING ones included)."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    for start in modules:  # Tarjan's algorithm, iterative
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    loops.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return loops


def counts(root: Path) -> dict[str, object]:
    """Every count, by name."""
    files = product_files(root)
    lines = 0
    long_modules: list[str] = []
    long_docstrings: list[str] = []
    env: set[str] = set()
    defined: set[str] = set()  # a constant's own name in __all__ is not a variable
    for path in files:
        text = path.read_text(encoding="utf-8")
        n = text.count("\n")
        lines += n
        rel = str(path.relative_to(root))
        if n > LONG_MODULE:
            long_modules.append(f"{rel} ({n})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and ENV_NAME.fullmatch(str(node.value)):
                env.add(str(node.value))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc and doc.count("\n") + 1 > LONG_DOCSTRING:
                    long_docstrings.append(f"{rel}:{getattr(node, 'name', '<module>')}")
    records = {
        str(p.relative_to(root)): p.read_text(encoding="utf-8").count("\n")
        for p in sorted((root / "docs" / "decisions").glob("*.md"))
    }
    return {
        "product_files": len(files),
        "product_lines": lines,
        "import_loops": import_loops(),
        "modules_over_600_lines": long_modules,
        "docstrings_over_15_lines": long_docstrings,
        "prescaler_env_names": sorted(env - defined),
        "decision_record_lines": records,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.house_counts", description=__doc__)
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))
    c = counts(Path.cwd())
    if args.json:
        print(json.dumps(c, indent=2))
        return 0
    for key, value in c.items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}" + "".join(f"\n  {v}" for v in value))
        elif isinstance(value, dict):
            print(f"{key}: max {max(value.values(), default=0)}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
