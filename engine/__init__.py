"""A pure model of one vLLM replica, so scaling can be simulated without a GPU.

``engine.profiles`` says what a replica is (model, accelerator, vLLM
settings, price, cold start) and how long one scheduler iteration takes
(roofline step-time model, ``engine.steptime``) and how many KV tokens it
holds (``engine.kvcache_capacity``). The scheduler, replica and metric
modules build on it; ``engine.emulator`` puts a real clock and vLLM's HTTP
API around it. Nothing here imports the rest of the project (but
``prescaler_native.loader``, which picks compiled copies), and nothing but
the CLI, the emulator and the profile-file reader (``engine.profile_files``,
``engine.metrics_reader``) does I/O.
"""

from prescaler_native.loader import compiled_first

# the compiled replica model (``make native``) comes first while it matches these
# sources exactly (prescaler_native/loader.py); before any module of the package loads
__path__ = compiled_first(__path__, __file__)
