"""The stack's terminal shows no gRPC ``fork_posix`` lines.

The stack forks its children while its own gRPC client has calls in flight;
gRPC then prints ``fork_posix.cc ... skipping fork() handlers`` for each
fork. The same conditions are built here in a fresh process (a gRPC server
and client busy in other tasks, children started with a ``preexec_fn``, as
``stack.processes.Child`` starts them), with and without
:func:`stack.processes.quiet_grpc_forks`: the lines appear without it, so
their absence with it is the fix and not luck.

The suite's own process runs the stack tests, so it forks the same way
(tests/conftest.py quiets it); a test builds the conditions in it. The
last checks what the fork is for: a child dies with the process that
started it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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


def _without_fork_setting() -> dict[str, str]:
    """This environment less the suite's own fork setting (tests/conftest.py
    turns it off for the stack tests), so each script starts as a user's would."""
    return {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}


def _fork_lines(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env=_without_fork_setting(),
    )
    assert done.returncode == 0, done.stderr
    return sum("fork_posix" in line for line in done.stderr.splitlines())


def test_forks_beside_busy_grpc_print_nothing_once_quieted() -> None:
    if _fork_lines("loud") == 0:
        pytest.skip("this gRPC build prints nothing on fork: nothing to quiet")
    assert _fork_lines("quiet") == 0


CHILD_ENV_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from stack.processes import Child, quiet_grpc_forks
    quiet_grpc_forks()
    import os
    assert os.environ["GRPC_ENABLE_FORK_SUPPORT"] == "false"
    log = Path(sys.argv[1])
    probe = "import os; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT', 'unset'))"
    for env in (None, {"EXTRA": "1"}):
        child = Child("probe", [sys.executable, "-c", probe], log, env=env)
        child.start()
        assert child.process is not None and child.process.wait(60) == 0
    """
)


def test_the_children_keep_grpc_s_own_fork_setting(tmp_path: Path) -> None:
    """The setting is the stack's own: ``prescaler serve`` and the other
    children run with gRPC's settings as production has them."""
    log = tmp_path / "probe.log"
    done = subprocess.run(
        [sys.executable, "-c", CHILD_ENV_SCRIPT, str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_without_fork_setting(),
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text().split() == ["unset", "unset"]


async def _fork_beside_busy_grpc(log: Path) -> None:
    """Children started by ``Child`` while a gRPC client has calls in flight."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from stack.processes import Child

    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            done: list[bool] = []

            async def calls() -> None:
                while not done:
                    await stub.Check(health_pb2.HealthCheckRequest())

            tasks = [asyncio.create_task(calls()) for _ in range(4)]
            for _ in range(20):
                await asyncio.sleep(0.01)
                child = Child("true", ["true"], log)
                await asyncio.to_thread(child.start)
                assert child.process is not None
                assert await asyncio.to_thread(child.process.wait, 60) == 0
            done.append(True)
            await asyncio.gather(*tasks)
    finally:
        await server.stop(None)


async def test_the_suite_forks_as_the_stack_does(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The stack tests fork from this process as ``prescaler stack`` does: no
    gRPC fork handlers, whose run in a child forked beside a busy client once
    aborted that child before its program started."""
    if _fork_lines("loud") == 0:
        pytest.skip("this gRPC build prints nothing on fork: nothing to quiet")
    setting = os.environ.get("GRPC_ENABLE_FORK_SUPPORT")
    assert setting == "false", (
        f"GRPC_ENABLE_FORK_SUPPORT is {setting!r}: tests/conftest.py turns it off unless "
        "the environment already sets it"
    )
    await _fork_beside_busy_grpc(tmp_path / "children.log")
    assert "fork_posix" not in capfd.readouterr().err


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from stack.processes import Child
    child = Child("sleeper", ["sleep", "60"], Path(sys.argv[1]))
    child.start()
    print(child.process.pid, flush=True)
    os._exit(0)  # killed outright: no stop, no cleanup
    """
)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper has died)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


def test_a_child_dies_with_the_stack_that_started_it(tmp_path: Path) -> None:
    """``PR_SET_PDEATHSIG``, set between fork and exec with the libc looked up
    beforehand: a stack killed outright leaves no child behind."""
    done = subprocess.run(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path / "sleeper.log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    for _ in range(200):
        if not _alive(pid):
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail(f"the child {pid} outlived the process that started it by 10 s")
