"""``python -m prescaler``: the same command as the ``prescaler`` console script."""

from prescaler.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
