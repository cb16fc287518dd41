"""Profile files: the shipped built-ins, the schema's errors, paths and mounted directories."""

from __future__ import annotations

import dataclasses
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.profile_catalogue import code_catalogue
from engine.profile_files import (
    BUILTIN_DIR,
    PROFILE_DIR_ENV,
    parse_profile_text,
    profile_yaml,
    read_profile_file,
    write_profile_file,
)
from engine.profile_schema import ProfileFileError, profile_to_document
from engine.profiles import (
    PROFILES,
    get_profile,
    profile_names,
    profile_summary,
)
from prescaler.cli import main

BASE = "llama-3-8b@g5.xlarge"


def test_shipped_files_load_into_the_code_catalogue_bit_for_bit() -> None:
    """Every built-in read from its file equals the code-built one, field for field
    (floats compared exactly, the notes too), and no file is missing or extra."""
    code = code_catalogue()
    assert sorted(PROFILES) == sorted(code)
    assert sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")) == sorted(code)
    for name, built in code.items():
        loaded = PROFILES[name]
        assert loaded == built
        assert loaded.notes == built.notes
        assert dataclasses.astuple(loaded) == dataclasses.astuple(built)
        assert loaded.kv_blocks == built.kv_blocks
        assert loaded.step_time_s(512, 8, 4096) == built.step_time_s(512, 8, 4096)


def test_engine_profiles_json_is_what_the_code_catalogue_gives() -> None:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["engine", "profiles", "--json"]) == 0
    expected = [profile_summary(p) for _, p in sorted(code_catalogue().items())]
    assert json.loads(buf.getvalue()) == json.loads(json.dumps(expected))


@pytest.mark.parametrize("name", sorted(code_catalogue()))
def test_every_built_in_round_trips_through_yaml(name: str) -> None:
    profile = PROFILES[name]
    assert parse_profile_text(profile_yaml(profile), "x.yaml") == profile


@settings(max_examples=60, deadline=None)
@given(
    eta_mem=st.floats(1e-3, 1.0),
    eta_compute=st.floats(1e-3, 1.0),
    overhead=st.floats(0.0, 0.1),
    bandwidth=st.floats(1.0, 1e5),
    blocks=st.one_of(st.none(), st.integers(512, 10**6)),
    price=st.floats(0.0, 1e3),
)
def test_any_profile_round_trips_exactly(
    eta_mem: float,
    eta_compute: float,
    overhead: float,
    bandwidth: float,
    blocks: int | None,
    price: float,
) -> None:
    """Whatever floats a fit writes, reading the file back gives the very same object."""
    base = PROFILES[BASE]
    hw = dataclasses.replace(
        base.hardware,
        eta_mem=eta_mem,
        eta_compute=eta_compute,
        step_overhead_s=overhead,
        bandwidth_gbps=bandwidth,
    )
    profile = dataclasses.replace(
        base,
        name="custom@gpu",
        hardware=hw,
        vllm=dataclasses.replace(base.vllm, num_gpu_blocks=blocks),
        price_on_demand_per_hour=price,
    )
    assert parse_profile_text(profile_yaml(profile), "x.yaml") == profile


def _doc() -> dict[str, object]:
    return profile_to_document(PROFILES[BASE])


def _set(doc: dict[str, object], dotted: str, value: object) -> None:
    *path, last = dotted.split(".")
    node: dict[str, object] = doc
    for part in path:
        node = node[part]  # type: ignore[assignment]
    node[last] = value


def _drop(doc: dict[str, object], dotted: str) -> None:
    *path, last = dotted.split(".")
    node: dict[str, object] = doc
    for part in path:
        node = node[part]  # type: ignore[assignment]
    del node[last]


@pytest.mark.parametrize(
    ("edit", "key", "needle"),
    [
        (lambda d: _set(d, "hardware.eta_mem", 1.5), "hardware.eta_mem", "(0, 1]"),
        (lambda d: _set(d, "hardware.eta_mem", "fast"), "hardware.eta_mem", "expected float"),
        (lambda d: _set(d, "tp", 1.0), "tp", "expected int"),
        (lambda d: _set(d, "tp", True), "tp", "expected int"),
        (lambda d: _set(d, "vllm.block_size", 12), "vllm.block_size", "block_size"),
        (lambda d: _set(d, "vllm.max_model_len", 65536), "vllm.max_model_len", "context"),
        (lambda d: _set(d, "vllm.num_gpu_blocks", 10), "vllm.num_gpu_blocks", "KV cache"),
        (lambda d: _set(d, "model.layres", 32), "model.layres", "unknown key"),
        (lambda d: _set(d, "speed", 3), "speed", "unknown key"),
        (lambda d: _drop(d, "model.hidden"), "model.hidden", "missing"),
        (lambda d: _drop(d, "startup"), "startup", "missing"),
        (lambda d: _set(d, "startup", [1, 2]), "startup", "mapping"),
        (lambda d: _set(d, "precision", "fp8"), "precision", "fp8"),
        (lambda d: _set(d, "price_spot_per_hour", -1.0), "price_on_demand_per_hour", "prices"),
        (lambda d: _set(d, "format", "v0"), "format", "prescaler-profile/1"),
        (lambda d: _set(d, "hardware.fp8_tflops", None), None, None),
    ],
)
def test_schema_errors_name_the_file_and_the_key(
    tmp_path: Path, edit: object, key: str | None, needle: str | None
) -> None:
    doc = _doc()
    edit(doc)  # type: ignore[operator]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    if key is None:  # a legal edit: loads
        assert read_profile_file(path).hardware.fp8_tflops is None
        return
    with pytest.raises(ProfileFileError) as err:
        read_profile_file(path)
    assert err.value.source == str(path)
    assert err.value.key == key
    assert str(path) in str(err.value) and repr(key) in str(err.value)
    assert needle is not None and needle in str(err.value)


def test_unreadable_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileFileError, match=r"nope\.yaml.*cannot read"):
        read_profile_file(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ProfileFileError, match=r"bad\.yaml: key '\(yaml\)'"):
        read_profile_file(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ProfileFileError, match="expected a mapping"):
        read_profile_file(bad)


def test_a_path_is_accepted_wherever_a_name_is(tmp_path: Path) -> None:
    mine = dataclasses.replace(PROFILES[BASE], name="my-model@my-gpu")
    path = write_profile_file(mine, tmp_path / "mine.yaml")
    assert get_profile(str(path)) == mine
    # an edit is seen (the cache follows the file)
    faster = dataclasses.replace(mine, price_on_demand_per_hour=0.5)
    write_profile_file(faster, path, header="edited")
    assert get_profile(str(path)).price_on_demand_per_hour == 0.5


def test_a_mounted_directory_adds_named_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = dataclasses.replace(PROFILES[BASE], name="my-model@my-gpu")
    write_profile_file(mine, tmp_path / "mine.yml")
    (tmp_path / "README.txt").write_text("not a profile")
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    assert get_profile("my-model@my-gpu") == mine
    assert "my-model@my-gpu" in profile_names() and BASE in profile_names()
    # a mounted file may not shadow a built-in
    write_profile_file(PROFILES[BASE], tmp_path / "clash.yaml")
    with pytest.raises(ProfileFileError, match="built-in"):
        get_profile("my-model@my-gpu")


def test_unknown_name_lists_every_name_and_suggests_the_nearest() -> None:
    with pytest.raises(ValueError) as err:
        get_profile("llama-3-8b@g5.xlarg")
    message = str(err.value)
    assert "did you mean 'llama-3-8b@g5.xlarge'" in message
    for name in profile_names():
        assert name in message


def test_simulate_accepts_a_profile_file(tmp_path: Path) -> None:
    """``prescaler simulate --profile path.yaml`` runs with the file's profile: a
    file identical to a built-in gives the very same summary as the name."""
    rng = np.random.default_rng(0)
    trace = tmp_path / "counts.csv"
    rows = [f"{60 * i},{int(c)}" for i, c in enumerate(rng.integers(60, 120, 10))]
    trace.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    path = write_profile_file(PROFILES[BASE], tmp_path / "copy.yaml")
    docs = []
    for profile in (BASE, str(path)):
        out = tmp_path / "s.json"
        argv = ["simulate", str(trace), "--policy", "static", "--static-replicas", "2"]
        argv += ["--duration", "300", "--quiet", "--json", str(out), "--profile", profile]
        assert main(argv) == 0
        static = json.loads(out.read_text())["policies"]["static"]
        docs.append({k: v for k, v in static.items() if "wall" not in k})  # timings differ
    assert docs[0] == docs[1] and docs[0]["requests_total"] > 0
