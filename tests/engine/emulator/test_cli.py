"""`prescaler emulate`: the command starts a replica on a port with the given flags."""

from __future__ import annotations

import json
import urllib.request

import pytest

from prescaler.cli import build_parser, main
from tests.support.emulator import emulator_process


def test_emulate_serves_with_overrides_in_a_process() -> None:
    """The CLI serves /metrics with the chosen generation and model name."""
    with emulator_process(
        "llama-3-8b@g6.xlarge", metrics_version="v0", served_model_name="tiny", max_num_seqs=2
    ) as url:
        with urllib.request.urlopen(url + "/metrics") as resp:
            text = resp.read().decode()
        with urllib.request.urlopen(url + "/v1/models") as resp:
            models = json.load(resp)
    assert 'vllm:gpu_cache_usage_perc{model_name="tiny"}' in text
    assert models["data"][0]["id"] == "tiny"


def test_emulate_flags_parse() -> None:
    """Every documented flag is accepted."""
    args = build_parser().parse_args(
        ["emulate", "--profile", "mistral-7b@g5.xlarge", "--port", "0", "--host", "127.0.0.1",
         "--served-model-name", "m", "--metrics-version", "v0", "--max-num-seqs", "4",
         "--num-gpu-blocks", "2000", "--max-model-len", "4096"]
    )  # fmt: skip
    assert (args.profile, args.port, args.metrics_version, args.max_num_seqs) == (
        "mistral-7b@g5.xlarge", 0, "v0", 4
    )  # fmt: skip
    assert (args.num_gpu_blocks, args.max_model_len, args.served_model_name) == (2000, 4096, "m")


def test_emulate_refuses_a_bad_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown profile exits 2 with the reason on stderr, before binding a port."""
    assert main(["emulate", "--profile", "no-such-model@g5.xlarge", "--port", "0"]) == 2
    assert "prescaler emulate:" in capsys.readouterr().err


def test_emulate_refuses_a_bad_metrics_version() -> None:
    """--metrics-version only takes v1 or v0."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["emulate", "--metrics-version", "v3"])


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_emulate_refuses_a_port_out_of_range(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "--port", port]) == 2
    assert "--port must be 0-65535" in capsys.readouterr().err


def test_emulate_reports_a_taken_port_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A port another socket holds is a one-line error (exit 1), not a traceback."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["emulate", "--host", "127.0.0.1", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"cannot serve on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_emulate_with_two_api_servers_serves_a_fresh_multiprocess_page() -> None:
    """``prescaler emulate --api-server-count 2 --metrics-version v0.32``: before
    the first request /metrics declares the scheduler gauges without samples
    (as vLLM's multiprocess registry does), in text format 1.0.0; after one
    request they have samples."""
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "prescaler.cli", "emulate", "--port", "0",
           "--profile", "llama-3-8b@p5.48xlarge", "--served-model-name", "m",
           "--metrics-version", "v0.32", "--api-server-count", "2"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "2 API servers" in line, line
        url = line.rsplit(" on ", 1)[1].strip()
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/metrics", timeout=2) as resp:
                    text = resp.read().decode()
                    kind = resp.headers["Content-Type"]
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert kind == "text/plain; version=1.0.0; charset=utf-8"
        assert "# TYPE vllm:num_requests_running gauge" in text
        assert "\nvllm:num_requests_running{" not in text
        request = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps({"prompt": [1, 2], "max_tokens": 1}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(url + "/metrics", timeout=2) as resp:
            assert 'vllm:num_requests_running{engine="0",model_name="m"}' in resp.read().decode()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_emulate_refuses_zero_api_servers(capsys: pytest.CaptureFixture[str]) -> None:
    """--api-server-count below 1 exits 2 before binding a port."""
    assert main(["emulate", "--api-server-count", "0", "--port", "0"]) == 2
    assert "api_server_count" in capsys.readouterr().err
