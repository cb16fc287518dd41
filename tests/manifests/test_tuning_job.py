"""``manifests/tuning``: the indexed Job that runs one ``prescaler tune``
study on N workers through PostgreSQL renders, validates, parses as a
``prescaler tune`` command line, and (integration) two copies of its command
on one real PostgreSQL fill one study together (``docs/tuning-at-scale.md``)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.manifests.conftest import MANIFESTS, ROOT, find, kustomize
from tests.manifests.validate import CrdIndex, cross_check, report, validate_objects

TUNING = MANIFESTS / "tuning"


@pytest.fixture(scope="module")
def objs() -> list[dict[str, Any]]:
    return kustomize(TUNING)


def _container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = find(objs, "Job", "prescaler-tune")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container["env"]}


def test_the_tuning_job_renders_and_validates(objs: list[dict[str, Any]], crds: CrdIndex) -> None:
    problems = validate_objects(objs, crds) + cross_check(objs, crds)
    assert not problems, report(problems)
    assert {(o["kind"], o["metadata"]["name"]) for o in objs} == {
        ("Namespace", "prescaler-tuning"),
        ("Job", "prescaler-tune"),
    }


def test_one_study_on_n_indexed_workers(objs: list[dict[str, Any]]) -> None:
    spec = find(objs, "Job", "prescaler-tune")["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] > 1
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    c = _container(objs)
    assert c["image"] == "registry.example.com/prescaler-tune:0.1.0"
    assert c["command"] == ["prescaler", "tune"]
    assert "--storage=$(DATABASE_URL)" in c["args"] and "--study=$(STUDY)" in c["args"]
    env = _env(c)
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "prescaler-tune-db",
        "key": "url",
    }
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    # a usage error (exit 2) or a full study where no setting met the SLO:
    # fail the Job, do not retry
    from simulations.tune.cli import EXIT_SLO_UNMET

    (fail,) = [r for r in spec["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    assert fail["onExitCodes"] == {
        "containerName": c["name"],
        "operator": "In",
        "values": [2, EXIT_SLO_UNMET],
    }
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # the trace argument is a file on the mounted trace volume
    (trace_mount,) = [m for m in c["volumeMounts"] if m["name"] == "trace"]
    assert c["args"][0] == f"{trace_mount['mountPath']}/trace.csv"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["trace"]["configMap"]["name"] == "prescaler-tune-trace"
    assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"])  # matplotlib, HOME


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' ``$(VAR)`` expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def test_the_job_args_are_a_prescaler_tune_command_line(objs: list[dict[str, Any]]) -> None:
    from prescaler.cli import build_parser

    c = _container(objs)
    env = {
        "DATABASE_URL": "postgresql+psycopg2://u@db:5432/tune",
        "STUDY": _env(c)["STUDY"]["value"],
    }
    args = build_parser().parse_args([c["command"][1], *_expand(c["args"], env)])
    assert args.storage == env["DATABASE_URL"] and args.study == env["STUDY"]
    assert args.only_sides == ("prescaler",)  # one side: one study
    assert args.trials > 1 and args.jobs == 1  # the pods are the workers


def test_the_tuning_image_is_the_repository_image_plus_a_postgresql_driver() -> None:
    text = (TUNING / "Dockerfile").read_text(encoding="utf-8")
    assert "ARG BASE=registry.example.com/prescaler:0.1.0" in text
    assert "psycopg2" in text
    assert "USER 10001:10001" in text  # the Job's runAsUser


def test_the_page_and_the_readme_exist() -> None:
    page = (ROOT / "docs" / "tuning-at-scale.md").read_text(encoding="utf-8")
    assert "manifests/tuning" in page
    assert "docs/tuning-at-scale.md" in (TUNING / "README.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ integration


@pytest.mark.integration
def test_two_copies_of_the_job_command_fill_one_postgresql_study(
    objs: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The Job's own command line, twice, on one real PostgreSQL: the study
    holds --trials trials in all, from both workers."""
    import optuna

    from tests.simulations.tune.test_storage import running_postgres

    trace = tmp_path / "trace.csv"
    rng = np.random.default_rng(3)
    rows = [f"{60 * i},{int(c)}" for i, c in enumerate(rng.integers(200, 500, 20))]
    trace.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    c = _container(objs)
    trials = 4
    with running_postgres() as url:
        env = {"DATABASE_URL": url, "STUDY": "job"}
        args = [a for a in _expand(c["args"], env) if not a.startswith("--trials=")]
        args = [str(trace), *args[1:], f"--trials={trials}", "--target=0.8", "--holdout-seeds=1"]
        procs = []
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "prescaler", *c["command"][1:], *args],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )
            time.sleep(0.5)  # the first one creates the study
        outs = [p.communicate(timeout=300)[0].decode() for p in procs]
        for p, out in zip(procs, outs, strict=True):
            assert p.returncode == 0, out
        study = optuna.load_study(study_name="job-prescaler", storage=url)
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == trials
    workers = {str(t.user_attrs["worker"]).rsplit(":", 1)[0] for t in done}
    assert len(workers) == 2, workers
    # every worker prints the same chosen trial
    chosen = [re.findall(r"chosen trial (\d+)", out) for out in outs]
    assert chosen[0] and chosen[0] == chosen[1], outs
