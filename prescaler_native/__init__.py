"""Compiled copies of the hot pure-Python modules (mypyc), and when to use them.

``prescaler_native.build`` compiles them (``make native``); ``prescaler_native.loader`` decides,
per package, whether its compiled folder goes first on the package's
``__path__``. It imports nothing from the project, so the lowest layers
(``engine``, ``forecasting``) may use it.
"""
