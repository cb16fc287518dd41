#!/usr/bin/env python3
"""Generate prescaler's two Grafana dashboards as JSON, with Grafana's own SDK.

A script because the dashboards share variables and styling and must match
the scaler's metric names (docs/contracts.md) exactly; the SDK's types,
generated from Grafana's schema, check what hand-written JSON would not.
The committed JSON is checked against this script by a test; the
dashboards are built by ``prescaler_dashboards`` beside it.

    python manifests/grafana/generate.py          # rewrite dashboards/*.json
    python manifests/grafana/generate.py --check  # exit 1 if they differ
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"

# The package sits beside this script, which is run by path (and loaded by
# path in the tests), not installed: make it importable either way.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from prescaler_dashboards import DASHBOARDS, Json  # noqa: E402

__all__ = ["DASHBOARDS", "main", "render"]


def render(dashboard: Json) -> str:
    """Stable text form (keys sorted): what is committed and what the test compares."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, exit 1 on drift")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = OUT_DIR / name
        text = render(build())
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run {Path(__file__).name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
