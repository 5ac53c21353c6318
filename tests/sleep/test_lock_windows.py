"""The lock's Windows branch, run on Linux with stand-ins for ``msvcrt`` and ``kernel32``
(tests/support/fake_windows.py): real processes holding real byte-range locks. The real
``msvcrt`` and ``kernel32`` calls need Windows and are not run here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skillopt.errors import LockHeldError
from skillopt_sleep.lock import FileLock, lock_is_held, read_holder
from skillopt_sleep.oslock import PosixLock, WindowsLock, primitives
from support.fake_windows import FakeKernel32, windows_lock

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from skillopt_sleep.lock import FileLock
    from support.fake_windows import windows_lock
    lock = FileLock(Path(sys.argv[1]), command="windows night", os_lock=windows_lock()).acquire()
    print("held", flush=True)
    time.sleep(60)
    """
)


def _hold(path: Path) -> subprocess.Popen[str]:
    tests = Path(__file__).resolve().parents[1]  # for support.fake_windows
    search = os.pathsep.join(filter(None, [str(tests), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": search},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_the_platform_picks_the_primitives() -> None:
    assert isinstance(primitives("linux"), PosixLock)
    if not sys.platform.startswith("win"):
        with pytest.raises(ModuleNotFoundError, match="msvcrt"):
            primitives("win32")  # the Windows branch asks for Windows' own modules


def test_a_windows_lock_refuses_a_second_process_and_names_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    child = _hold(path)
    try:
        probe = lock_is_held(path, os_lock=windows_lock())
        assert probe is not None and probe.pid == child.pid  # the record stays readable
        with pytest.raises(LockHeldError, match=f"pid {child.pid}"):
            FileLock(path, command="second", os_lock=windows_lock()).acquire()
    finally:
        child.kill()
        child.wait()
    # The OS dropped the lock with its holder: the next starter takes it over.
    with FileLock(path, command="next", os_lock=windows_lock()) as lock:
        assert lock.held and read_holder(path) is not None
        assert read_holder(path).command == "next"  # type: ignore[union-attr]
    assert read_holder(path) is None and lock_is_held(path, os_lock=windows_lock()) is None


def test_windows_liveness_asks_kernel32_and_closes_its_handles() -> None:
    kernel32 = FakeKernel32(denied=frozenset({4}))
    lock = WindowsLock(msvcrt=None, kernel32=kernel32)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert lock.pid_alive(os.getpid())
    assert not lock.pid_alive(done.pid)
    assert lock.pid_alive(4)  # another user's process: exists, may not be looked at
    assert not lock.pid_alive(0) and not lock.pid_alive(-1)
    assert kernel32.open_handles == set()  # every handle closed
