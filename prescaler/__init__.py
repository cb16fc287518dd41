"""The ``prescaler`` command: one entry point, a subcommand per job.

Each subcommand lives in the package it drives (``engine.cli``,
``forecasting.cli``, ``scaler.cli``, ``simulations.cli``); this package only
wires them together.
"""
