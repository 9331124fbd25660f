"""A child never outlives its orchestrator: ``prctl(PR_SET_PDEATHSIG)`` (Linux), for the plain
subprocess launcher and the fork server alike.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1
_prctl: Any = None


def load_prctl() -> Any:
    """libc's prctl, looked up once in the parent: ``dlopen`` after ``fork`` (in a
    ``preexec_fn``) can deadlock when the parent has threads."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` for the calling process (Linux; False elsewhere). Call
    ``load_prctl()`` before forking when this runs in a ``preexec_fn``."""
    prctl = load_prctl()
    if not prctl:
        return False
    return bool(prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0)
