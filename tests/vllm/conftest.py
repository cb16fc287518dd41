"""Fixtures for the tests against a real vLLM (marker ``vllm``; ``make vllm-test``).

One vLLM server serves the whole session (but the profile-fit bench, which
starts its own and runs in a session of its own): ``--api-server-count 2`` (the
multiprocess metrics registry of a data-parallel or multi-front-end
deployment), ``--max-num-seqs 4`` (so a burst queues) and
``--max-num-queued-reqs 100`` (so a bigger one is partly turned away). Its first /metrics
page and the scrape source's first reading are taken before any request,
while the replica is fresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from decision.reading import Reading
from decision.settings import LabelMatcher
from scaler.sources.model import Selection
from scaler.sources.scrape import ScrapeSource
from tests.vllm.real_vllm import get, home, tiny_model, vllm_python, vllm_server

MODEL_NAME = "tiny"
MAX_NUM_SEQS = 4
#: Admission limit on requests in the system: above one burst (64), below two.
MAX_NUM_QUEUED_REQS = 100


@dataclass
class RealVllm:
    url: str
    python: Path
    first_page: str
    first_content_type: str
    first_reading: Reading | None

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    @property
    def selection(self) -> Selection:
        return Selection((LabelMatcher("model_name", "=", MODEL_NAME),), urls=(self.metrics_url,))


@pytest.fixture(scope="session")
def vllm_python_path() -> Path:
    return vllm_python()


@pytest.fixture(scope="session")
def real_vllm(vllm_python_path: Path) -> Iterator[RealVllm]:
    model = tiny_model(vllm_python_path)
    args = (
        "--api-server-count", "2", "--max-num-seqs", str(MAX_NUM_SEQS),
        "--max-num-queued-reqs", str(MAX_NUM_QUEUED_REQS),
    )  # fmt: skip
    with vllm_server(
        vllm_python_path, model, *args, name=MODEL_NAME, log=home() / "server-tests.log"
    ) as url:
        page, kind = get(url + "/metrics")
        server = RealVllm(url, vllm_python_path, page, kind, None)

        async def first_read() -> Reading | None:
            source = ScrapeSource(timeout_s=5)
            try:
                return (await source.read([server.selection], 1.0)).get(server.selection)
            finally:
                await source.close()

        server.first_reading = asyncio.run(first_read())
        yield server
