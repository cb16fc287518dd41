"""The ``prescaler`` command: one entry point, a subcommand per job.

Each subcommand lives in the package it drives (``engine.cli``,
``forecasting.cli``, ``scaler.cli``, ``simulations.cli``); this package only
wires them together.
"""

import os as _os

# One BLAS thread per process unless the user chose otherwise: the
# forecasters' matrices are small, so a second thread adds CPU time, not
# speed, and with ``--jobs`` or beside the scaler it takes a core another
# process needed (measured in docs/decisions/simulator-speed.md). Set before
# any subcommand loads numpy, which reads these once.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")
