"""What this host has, in one place: the devices a run may use, GPU and CPU memory, CPU cores and
threads. ``sweeps estimate``, ``sweeps run --dry-run``, the workers and the training child all ask
here, so they cannot disagree on one machine.

- ``device_kind("auto")`` is ``cuda`` when a GPU is visible (``CUDA_VISIBLE_DEVICES`` when set,
  else what ``nvidia-smi -L`` lists), else ``cpu``. No torch import: the orchestrator stays
  fast, and a GPU hidden by ``CUDA_VISIBLE_DEVICES=""`` is not there for the child either.
- ``SWEEPS_NUM_THREADS`` (a positive integer) caps the intra-op threads of a CPU run; the
  orchestrator sets it for each child (its own value, when set, caps theirs). A bad value is a
  one-line error wherever it is read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache

from lm.errors import SweepsError

#: The environment variable that caps a CPU run's threads.
NUM_THREADS_ENV = "SWEEPS_NUM_THREADS"
#: The environment variable that says which GPUs a process may use (CUDA's own).
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
DEVICE_KINDS = ("cpu", "cuda")


# --- CPU -----------------------------------------------------------------------------------------


def num_threads_override() -> int | None:
    """``SWEEPS_NUM_THREADS`` as a positive integer; None when unset or empty."""
    env = os.environ.get(NUM_THREADS_ENV, "").strip()
    if not env:
        return None
    if not env.isdigit() or int(env) < 1:
        raise SweepsError(f"{NUM_THREADS_ENV} must be a positive integer, got {env!r}; "
                          f"unset it or give a number of threads such as 1")
    return int(env)


def cpu_ids() -> list[int]:
    """The cores this process may run on (its affinity), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_threads() -> int:
    """Threads for a CPU run: ``SWEEPS_NUM_THREADS`` when set, else every core it may use."""
    return num_threads_override() or len(cpu_ids())


def mem_available_bytes() -> int:
    """``MemAvailable`` from /proc/meminfo (Linux), else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        raise SweepsError("cannot read the available memory; set limits.memory_budget to a "
                          "size such as 8GiB") from None


# --- GPUs ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _nvidia_smi_gpus() -> tuple[str, ...]:
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(str(i) for i, line in enumerate(out.stdout.splitlines())
                 if line.startswith("GPU "))


def visible_gpus() -> list[str]:
    """GPU ids this process may use, without importing torch: ``CUDA_VISIBLE_DEVICES`` when
    set, else what ``nvidia-smi -L`` lists (none when it is missing)."""
    env = os.environ.get(VISIBLE_DEVICES_ENV)
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    return list(_nvidia_smi_gpus())


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` for a device name (``auto``, ``cpu``, ``cuda`` or ``cuda:N``)."""
    if device == "auto":
        return "cuda" if visible_gpus() else "cpu"
    kind = str(device).split(":")[0]
    if kind not in DEVICE_KINDS:
        raise SweepsError(f"device must be auto, cpu, cuda or cuda:N, got device={device!r}")
    return kind


def cuda_index(device: str) -> int:
    """The index of a CUDA device name (``cuda`` is the first)."""
    return int(device.split(":")[1]) if ":" in device else 0


def gpu_total_bytes(device: str) -> tuple[int, int]:
    """(total memory of the CUDA device, number of CUDA devices); torch imported lazily."""
    import torch

    if not torch.cuda.is_available():
        raise SweepsError(f"memory_budget auto on device {device!r}, but CUDA is not available; "
                          "use device cpu or give memory_budget as a size")
    index = cuda_index(device if device != "auto" else "cuda")
    return int(torch.cuda.get_device_properties(index).total_memory), torch.cuda.device_count()


@lru_cache(maxsize=16)
def gpu_name(gpu: str) -> str | None:
    """The product name of GPU ``gpu`` (an index or UUID as ``CUDA_VISIBLE_DEVICES`` names it),
    from ``nvidia-smi``; None when it cannot tell. For the device peaks of ``lm.flops``."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader",
                              "-i", gpu], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = out.stdout.strip().splitlines()[0].strip() if out.stdout.strip() else ""
    return name if out.returncode == 0 and name else None
