"""The stack's terminal shows no gRPC ``fork_posix`` lines.

The stack forks its children while its own gRPC client has calls in flight;
gRPC then prints ``fork_posix.cc ... skipping fork() handlers`` for each
fork. The same conditions are built here in a fresh process (a gRPC server
and client busy in other tasks, children started with a ``preexec_fn``, as
``stack.processes.Child`` starts them), with and without
:func:`stack.processes.quiet_grpc_forks`: the lines appear without it, so
their absence with it is the fix and not luck.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, subprocess, sys
    if sys.argv[1] == "quiet":
        from stack.processes import quiet_grpc_forks
        quiet_grpc_forks()
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    async def main():
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            done = []
            async def calls():
                while not done:
                    await stub.Check(health_pb2.HealthCheckRequest())
            tasks = [asyncio.create_task(calls()) for _ in range(4)]
            for _ in range(40):
                await asyncio.sleep(0.01)
                subprocess.run(["true"], preexec_fn=lambda: None, check=False)
            done.append(True)
            await asyncio.gather(*tasks)
        await server.stop(None)

    asyncio.run(main())
    """
)


def _fork_lines(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return sum("fork_posix" in line for line in done.stderr.splitlines())


def test_forks_beside_busy_grpc_print_nothing_once_quieted() -> None:
    if _fork_lines("loud") == 0:
        pytest.skip("this gRPC build prints nothing on fork: nothing to quiet")
    assert _fork_lines("quiet") == 0
