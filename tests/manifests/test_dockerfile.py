"""Static checks of the Dockerfile (no Docker engine runs in CI): pinned slim
Python 3.11 base, protos generated at build, non-root user matching the
Deployment, `prescaler serve` as entrypoint."""

from __future__ import annotations

import json
import re

import pytest

from tests.manifests.conftest import ROOT, find

DOCKERFILE = ROOT / "Dockerfile"
PROTOC = (
    "python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. protos/externalscaler.proto"
)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_base_images_are_pinned_slim_python_311() -> None:
    froms = [args.split()[0] for ins, args in instructions() if ins == "FROM"]
    assert froms, "no FROM"
    for image in froms:
        assert "$" not in image, "base image must be literal, not an ARG"
        if "@sha256:" in image:
            assert re.search(r"@sha256:[0-9a-f]{64}$", image)
            continue
        name, _, tag = image.partition(":")
        assert name in ("python", "docker.io/library/python"), image
        assert re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), f"{image}: pin an exact 3.11.x tag"


def test_protos_are_generated_at_build() -> None:
    runs = [args for ins, args in instructions() if ins == "RUN"]
    assert any(PROTOC in " ".join(r.split()) for r in runs)
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    # Generated code is never copied in: the build makes it.
    assert "protos/*_pb2.py" in ignore and "protos/*_pb2_grpc.py" in ignore
    assert ".venv" in ignore and ".git" in ignore


def test_runs_as_the_deployments_non_root_user(rendered: dict[str, list[dict]]) -> None:
    ins = instructions()
    users = [args for i, args in ins if i == "USER"]
    assert users, "no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    last_from = max(i for i, (name, _) in enumerate(ins) if name == "FROM")
    assert any(name == "USER" for name, _ in ins[last_from:]), "USER must be in the final stage"
    deploy = find(rendered["base"], "Deployment", "prescaler")
    run_as = deploy["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert user == str(run_as)


def test_entrypoint_is_prescaler_serve() -> None:
    entry = [args for ins, args in instructions() if ins == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["prescaler", "serve"]
    cmd = [args for ins, args in instructions() if ins == "CMD"]
    assert json.loads(cmd[-1]) == ["--port", "9090", "--metrics-port", "9091"]


@pytest.mark.parametrize("port", ["9090", "9091"])
def test_ports_exposed(port: str) -> None:
    exposed = " ".join(args for ins, args in instructions() if ins == "EXPOSE").split()
    assert port in exposed


def test_the_image_builds_without_go() -> None:
    """Python gRPC serves KEDA (``docs/decisions/front.md``): two stages, no
    Go toolchain installed in either."""
    ins = instructions()
    assert len([args for name, args in ins if name == "FROM"]) == 2
    runs = " ".join(args for name, args in ins if name == "RUN")
    assert "golang" not in runs and "go build" not in runs


def test_the_runtime_loads_the_compiled_modules_or_the_build_fails() -> None:
    """The build stage compiles the hot modules (``prescaler_native.build``)
    after installing the wheel they will be checked against; the runtime
    stage names the build with ``PRESCALER_NATIVE_DIR`` and refuses to
    finish when the loader would not use it (stale against the installed
    sources), instead of shipping the pure-Python speed unnoticed."""
    ins = instructions()
    last_from = max(i for i, (name, _) in enumerate(ins) if name == "FROM")
    build_runs = " ".join(args for name, args in ins[:last_from] if name == "RUN")
    assert "gcc" in build_runs
    assert build_runs.index("pip install /wheels/") < build_runs.index(
        "python -m prescaler_native.build /native"
    )
    final = ins[last_from:]
    copies = [args.split() for name, args in final if name == "COPY"]
    assert ["--from=build", "/native", "/opt/prescaler/native"] in copies
    envs = " ".join(args for name, args in final if name == "ENV")
    assert "PRESCALER_NATIVE_DIR=/opt/prescaler/native" in envs
    runs = [args for name, args in final if name == "RUN"]
    assert any("assert n.is_native(f)" in r for r in runs)
