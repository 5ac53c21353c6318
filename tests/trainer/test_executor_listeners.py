"""The private local Ray instance listens on loopback only, outside any network namespace.

Each test starts the executor the way a run does (``open_ray_executor`` in a fresh interpreter,
so Ray is imported by skillopt) and asks ``ss`` which addresses its processes listen on.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from skillopt.executor.listeners import (
    is_loopback,
    listeners_supported,
    new_listeners,
    tree_listeners,
)

# A run's executor: one Ray task (a worker and the relay actor start), then it waits for stdin.
DRIVER = """
import sys, anyio
from skillopt.executor.ray_exec import open_ray_executor
from skillopt.executor.settings import ExecutorSettings

async def answer(completer):
    return 42

async def main():
    async with open_ray_executor(ExecutorSettings(kind="ray", num_cpus=1)) as ex:
        assert await ex.call(answer, completer=None) == 42
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)

anyio.run(main)
"""

_SS_PROCESS = re.compile(r'\("([^"]+)",pid=(\d+)')


def descendants(root: int) -> set[int]:
    rows = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=True)
    children: dict[int, list[int]] = {}
    for row in rows.stdout.splitlines():
        pid, parent = map(int, row.split())
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def ss_listeners(pids: set[int]) -> list[tuple[str, str]]:
    """(process, local address) of every TCP/UDP socket ``pids`` listen on, as ss shows them."""
    shown = subprocess.run(["ss", "-ltunpH"], capture_output=True, text=True, check=True)
    found = []
    for line in shown.stdout.splitlines():
        fields = line.split()
        for name, pid in _SS_PROCESS.findall(line):
            if int(pid) in pids:
                found.append((name, fields[4]))
    return found


def host_of(local: str) -> str:
    host = local.rsplit(":", 1)[0].strip("[]")
    return "::" if host == "*" else host.split("%", 1)[0]  # ss shows a dual-stack "any" as *


@pytest.fixture
def driver(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    pytest.importorskip("ray")
    if shutil.which("ss") is None or shutil.which("ps") is None:
        pytest.skip("ss (iproute2) and ps are needed")
    env = dict(os.environ)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.update(getattr(request, "param", {}))
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.communicate("", timeout=120)


@pytest.mark.slow
def test_every_server_of_the_local_instance_listens_on_loopback(
    driver: subprocess.Popen[str],
) -> None:
    assert driver.stdout is not None
    for line in driver.stdout:  # the log goes to stdout too
        if line.strip() == "ready":
            break
    else:
        pytest.fail(driver.communicate("", timeout=120)[1][-3000:])
    listening = ss_listeners(descendants(driver.pid))
    names = {name for name, _ in listening}
    # the driver, the GCS, the raylet and a worker at least
    assert {"gcs_server", "raylet"} <= names and len(listening) >= 4, listening
    assert [(n, a) for n, a in listening if not is_loopback(host_of(a))] == []


def _has_a_lan_address() -> bool:
    """Whether a route leaves the machine (Ray would pick that interface's address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # nothing is sent: a UDP connect only routes
        except OSError:
            return False
        return not is_loopback(probe.getsockname()[0])


@pytest.mark.slow
@pytest.mark.parametrize("driver", [{"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}], indirect=True)
def test_a_local_instance_that_would_listen_elsewhere_is_refused_before_it_starts(
    driver: subprocess.Popen[str],
) -> None:
    if not _has_a_lan_address():
        pytest.skip("this machine has no address but loopback: Ray cannot pick another")
    out, err = driver.communicate("", timeout=120)
    assert driver.returncode != 0 and "ready" not in out
    assert "ConfigError" in err and "refusing to run a private local Ray instance" in err
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in err


def test_listeners_name_the_addresses_this_process_tree_listens_on() -> None:
    if not listeners_supported():
        pytest.skip("no /proc/net/tcp")
    before = tree_listeners()
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with (
        socket.create_server(("127.0.0.1", 0)) as v4,
        socket.create_server(("::1", 0), family=socket.AF_INET6) as v6,
    ):
        found = {(s.address, s.port) for s in new_listeners(before)}
        assert found == {("127.0.0.1", v4.getsockname()[1]), ("::1", v6.getsockname()[1])}
    assert new_listeners(before) == []
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("127.0.0.2")
    assert not is_loopback("::") and not is_loopback("0.0.0.0") and not is_loopback("192.0.2.2")
