"""Make file permissions bite in a child process, also when the tests run as root.

Root ignores a folder's mode bits through two capabilities (``CAP_DAC_OVERRIDE``,
``CAP_DAC_READ_SEARCH``); :func:`drop_file_override` removes them from the calling process's
bounding set, so a program it then executes never has them: use it as
``subprocess.run(..., preexec_fn=drop_file_override)``. Without root it does nothing.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["drop_file_override"]

_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def drop_file_override() -> None:
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
