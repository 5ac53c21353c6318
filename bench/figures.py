"""The figures every benchmark prints, in one place, so they read the same everywhere.

Wall, its bound, the ratio, CPU seconds (total and per call), the load average, and the
load-adjusted ratio: wall / max(bound, CPU / cores). On a busy machine the plain ratio
mixes "our code is slow" with "the machine is busy"; the adjusted one does not reward
waiting for a CPU, but it does not excuse CPU we spent either (CPU / cores is the fastest
that much work could have run on this machine).

    load = Load()            # before the measured run
    ...
    print_figures(wall=..., bound=..., cpu=..., calls=..., load=load, target=1.15)
"""

from __future__ import annotations

import compileall
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Load", "as_installed", "cpu_seconds", "print_figures"]


def _load_now() -> float:
    return os.getloadavg()[0]


@dataclass
class Load:
    """The 1-minute load average when the measured run began (and, on print, after it)."""

    before: float = field(default_factory=_load_now)

    def line(self) -> str:
        return f"{self.before:.2f} before, {_load_now():.2f} after"


def as_installed(env: Mapping[str, str], src: Path) -> dict[str, str]:
    """``env`` for a child process that runs ``src`` as an installed package would: its
    bytecode compiled beforehand and read from the cache. Without it (with
    ``PYTHONDONTWRITEBYTECODE`` set, as on some machines) every start compiles every
    module from source again, a quarter of a second that no user pays."""
    compileall.compile_dir(str(src), quiet=1)
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_seconds(*, children: bool = False) -> float:
    """User + system CPU seconds of this process (or of its waited-for children)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def print_figures(
    *,
    wall: float,
    bound: float,
    cpu: float,
    calls: int,
    load: Load,
    target: float | None,
    cores: int | None = None,
    bound_label: str = "critical-path bound",
    indent: str = "",
) -> float:
    """Print the shared figures; returns the load-adjusted ratio.

    ``cores``: how many CPUs the measured work could use (default: this machine's); a
    single-threaded run passes 1. ``calls`` 0 leaves out the per-call CPU; ``target`` None:
    the ratio has no target of its own."""
    cores = cores or os.cpu_count() or 1
    ratio = wall / bound if bound > 0 else float("nan")
    floor = max(bound, cpu / cores)
    adjusted = wall / floor if floor > 0 else float("nan")
    per_call = f"   ({cpu / calls * 1000:.2f} ms per call, {calls} calls)" if calls else ""
    print(f"{indent}wall time           {wall:8.2f} s")
    print(f"{indent}{bound_label:<19} {bound:8.2f} s")
    goal = f"   (target <= {target:g})" if target is not None else ""
    print(f"{indent}ratio               {ratio:8.2f}{goal}")
    print(f"{indent}load-adjusted ratio {adjusted:8.2f}   (wall / max(bound, CPU / {cores} cores))")
    print(f"{indent}CPU                 {cpu:8.2f} s{per_call}")
    print(f"{indent}load average        {load.line()}")
    return adjusted
