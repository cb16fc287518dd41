"""``prescaler tune``: the search space and scoring (``search``), the optuna
study (``study``, ``storage``), the sides tuned alike (``sides``,
``manifest``), the run as a library call (``run``), its command (``cli``) and
its pictures (``plot``)."""
