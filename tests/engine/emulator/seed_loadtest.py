# ruff: noqa
# Test fixture, NOT project code: the load-test script of one of the two public
# write-ups of the EKS + vLLM + KEDA + Karpenter recipe that prescaler starts
# from (tests/manifests/data/seeds/README.md), copied verbatim
# except URL (the emulator's address; tests overwrite it with the real port)
# and nothing else (the emulator serves the seed's model name). Its licence is
# unknown, so it stays a test fixture and is not shipped with the package.
import asyncio
import time
import json
import aiohttp
import numpy as np

URL = "http://127.0.0.1:8000/v1/completions"
HEADERS = {"Content-Type": "application/json"}
PAYLOAD = {
    "model": "mistralai/Mistral-7B-Instruct-v0.2",
    "prompt": "Explain Quantum Entanglement to a Senior Cloud Architect in 500 words.",
    "max_tokens": 256,
    "stream": True,
}


async def send_request(session):
    start_time = time.time()
    ttft = None
    tokens = 0

    async with session.post(URL, headers=HEADERS, json=PAYLOAD) as response:
        async for chunk in response.content:
            if chunk:
                if ttft is None:
                    ttft = time.time() - start_time
                tokens += 1

    total_time = time.time() - start_time
    tpot = (total_time - ttft) / max(1, tokens - 1) if tokens > 1 else 0
    return ttft, tpot, total_time


async def main(concurrency=50):
    async with aiohttp.ClientSession() as session:
        tasks = [send_request(session) for _ in range(concurrency)]
        results = await asyncio.gather(*tasks)

    ttfts = [r[0] for r in results]
    tpots = [r[1] for r in results]

    print(f"--- Benchmark Results (Concurrency: {concurrency}) ---")
    print(
        f"TTFT  - P50: {np.percentile(ttfts, 50) * 1000:.2f}ms | P99: {np.percentile(ttfts, 99) * 1000:.2f}ms"
    )
    print(
        f"TPOT  - P50: {np.percentile(tpots, 50) * 1000:.2f}ms | P99: {np.percentile(tpots, 99) * 1000:.2f}ms"
    )


if __name__ == "__main__":
    asyncio.run(main(concurrency=50))
