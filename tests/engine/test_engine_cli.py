"""`prescaler engine profiles [--json]`: output contract."""

from __future__ import annotations

import json

import pytest

from engine.profiles import profile_names
from prescaler.cli import main

KEYS = {
    "name", "model", "hardware", "instance_type", "tp", "itl_ms", "prefill_tokens_per_s",
    "kv_tokens", "max_model_len", "price_on_demand_per_hour", "price_spot_per_hour",
}  # fmt: skip


def test_profiles_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "profiles", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list)
    assert [d["name"] for d in data] == profile_names()
    for d in data:
        assert set(d) == KEYS
        assert set(d["itl_ms"]) == {"1", "8", "32", "64", "128"}
        assert isinstance(d["itl_ms"]["1"], float)
        present = [v for v in d["itl_ms"].values() if v is not None]
        assert present == sorted(present)
        assert d["prefill_tokens_per_s"] > 0
        assert isinstance(d["kv_tokens"], int) and d["kv_tokens"] >= d["max_model_len"]
        assert isinstance(d["tp"], int)
        assert 0 < d["price_spot_per_hour"] < d["price_on_demand_per_hour"]
    by_name = {d["name"]: d for d in data}
    # Inferentia2 is compiled for batch 8: larger batches are null.
    assert by_name["llama-3-8b@inf2.xlarge"]["itl_ms"]["32"] is None
    assert by_name["llama-3-8b@inf2.xlarge"]["itl_ms"]["8"] is not None
    # 128 x 1024 tokens fit easily on an H100.
    assert by_name["llama-3-8b@p5.48xlarge"]["itl_ms"]["128"] is not None
    # ... but not in the ~25k tokens of an A10G.
    assert by_name["llama-3-8b@g5.xlarge"]["itl_ms"]["32"] is None


def test_profiles_table_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "profiles"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("profile")
    assert "itl@128 ms" in lines[0]
    for name in profile_names():
        assert any(line.startswith(name + " ") for line in lines)
    # Aligned: every row of the table has the header's width or less.
    table = lines[: 2 + len(profile_names())]
    assert max(len(line) for line in table) == len(lines[1])


def test_engine_without_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["engine"])
    assert exit_info.value.code == 2
    assert "profiles" in capsys.readouterr().err
