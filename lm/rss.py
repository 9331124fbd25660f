"""A process's memory as the kernel reports it, split into what the CPU memory limit enforces
(anonymous pages: tensors, the heap, thread stacks) and what it does not (file-backed pages:
shared libraries, the token memmaps). No torch: the trial child calls it, tests read it.

Why: the peak resident set counts file-backed pages, and how many of torch's library pages a
process maps depends on the page cache, not on the run (the same small child held 165-190 MiB
of them on one machine, about 90 MiB less on another). They are clean and shared, so the kernel
reclaims them under pressure: neither what RLIMIT_DATA limits nor what runs a machine out of
memory. And ``ru_maxrss`` is not even the process's own: see ``peak_rss_bytes``. The
measurements are in ``lm/memory.py`` beside ``CPU_BASELINE_BYTES``.
"""

from __future__ import annotations

import resource
import sys

#: A process's status file: ``self`` (this process) or a process id.
STATUS_FILE = "/proc/{pid}/status"


def status_bytes(*keys: str, pid: int | str = "self") -> dict[str, int]:
    """Fields of ``/proc/<pid>/status`` (kB lines) in bytes, of this process by default; the
    ones not there are left out (not Linux, a kernel without them, or a process gone)."""
    out: dict[str, int] = {}
    try:
        with open(STATUS_FILE.format(pid=pid), encoding="ascii") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in keys:
                    out[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def peak_rss_bytes() -> int:
    """The process's own peak resident set, file-backed pages included: VmHWM.

    Not ``ru_maxrss`` where VmHWM exists: Linux carries the high-water mark of the address
    space an ``execve`` replaces into ``ru_maxrss``, so a child started from a big process
    (a pytest session that trained models in-process, an orchestrator) reports its parent's
    peak when that is higher than its own. ``ru_maxrss`` is the fallback (not Linux).
    """
    hwm = status_bytes("VmHWM").get("VmHWM")
    if hwm is not None:
        return hwm
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB


def child_peak_rss_bytes(pid: int) -> int | None:
    """Another process's peak resident set (VmHWM) while it is alive, for a parent that samples
    its child (``sweeps.monitor``); None when it cannot be read (not Linux, or it has exited).
    No ``ru_maxrss`` fallback: that would be this process's own peak, not the child's."""
    return status_bytes("VmHWM", pid=int(pid)).get("VmHWM")


def peak_anon_bytes() -> int:
    """The peak resident set less the file-backed and shared pages resident now.

    The kernel keeps no high-water mark of anonymous memory alone, so this takes VmHWM minus
    RssFile and RssShmem read at the call. Library pages are mapped during start-up and stay,
    so for a training run, read at an evaluation or at the end, it is the anonymous peak (at
    most the token pages touched after the peak low). Without those fields (not Linux): the
    whole peak resident set.
    """
    status = status_bytes("VmHWM", "RssFile", "RssShmem")
    if "VmHWM" not in status or "RssFile" not in status:
        return peak_rss_bytes()
    return max(0, status["VmHWM"] - status["RssFile"] - status.get("RssShmem", 0))
