"""Kill a real adopting process part-way, for the recovery tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path


def killed_adoption(
    run_dir: Path, roots: Sequence[Path], *, die_at: int, replaced: bool = False
) -> None:
    """A process adopting everything in ``run_dir`` dies (``os._exit(9)``, no clean-up) at
    its ``die_at``-th file replacement: just before it, or just after it with ``replaced``."""
    script = textwrap.dedent(
        f"""
        import os
        from skillopt_sleep.adopt import adopt
        calls = []
        def replace(src, dst):
            calls.append(dst)
            if len(calls) == {die_at} and not {replaced!r}:
                os._exit(9)
            os.replace(src, dst)
            if len(calls) == {die_at}:
                os._exit(9)
        adopt({str(run_dir)!r}, skill_roots={[str(r) for r in roots]!r}, replace_fn=replace)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 9, proc.stderr.decode()
