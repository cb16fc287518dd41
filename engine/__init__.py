"""A pure model of one vLLM replica, so scaling can be simulated without a GPU.

``engine.profiles`` says what a replica is (model, accelerator, vLLM
settings, price, cold start) and how long one scheduler iteration takes
(roofline step-time model, ``engine.steptime``) and how many KV tokens it
holds (``engine.kvcache_capacity``). The scheduler, replica and metric
modules build on it; ``engine.emulator`` puts a real clock and vLLM's HTTP
API around it. Nothing here imports the rest of the project, and nothing but
the CLI and the emulator does I/O.
"""

from pathlib import Path as _Path

from engine._native import native_dir as _native_dir

# compiled copies of the hot modules (``make native``) come first, while
# they match these sources exactly (see engine/_native.py)
_compiled = _native_dir(_Path(__file__).resolve().parent)
if _compiled is not None:
    __path__.insert(0, str(_compiled))
