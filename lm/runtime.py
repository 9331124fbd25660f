"""What a run needs from the process it runs in: its device and precision, its memory (measured
peak, enforced CPU limit), its threads, and its signals and out-of-memory errors.

Everything here is torch or process state, not training: ``lm.train`` sets a run up with it.
"""

from __future__ import annotations

import errno
import resource
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch

from lm import host
from lm.errors import SweepsError
from lm.rss import peak_anon_bytes, status_bytes


def resolve_device(name: str) -> torch.device:
    """The torch device of a run. ``lm.host.device_kind`` decides cpu or cuda (``auto``: CUDA when
    a GPU is visible), as it does for the orchestrator's plans; torch then confirms CUDA really
    works here. A visible GPU that this torch cannot use (a CPU build) leaves ``auto`` on the CPU;
    a CUDA device that is not there is bad input."""
    if host.device_kind(name) == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        if name == "auto":
            return torch.device("cpu")
        raise SweepsError(f"device={name!r} but CUDA is not available; use device auto or cpu")
    if name == "auto":
        return torch.device("cuda", torch.cuda.current_device())
    index = host.cuda_index(name)
    if index >= torch.cuda.device_count():
        raise SweepsError(
            f"device={name!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
        )
    # An explicit index: torch.cuda.set_device and the memory statistics need one.
    return torch.device("cuda", index)


def autocast_for(device: torch.device, precision: str) -> Callable[[], AbstractContextManager[Any]]:
    """A factory of the autocast context of ``precision`` (fp32: none), one per forward pass."""
    if precision == "fp32":
        return nullcontext
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: peak allocated by tensors; CPU: the process's peak anonymous resident set (file-
    backed pages vary with the page cache and are not what the limit enforces: ``lm.rss``)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return peak_anon_bytes()


def _vm_data_bytes() -> int | None:
    """The process's data segment size (what RLIMIT_DATA limits), from /proc on Linux."""
    return status_bytes("VmData").get("VmData")


@contextmanager
def cpu_memory_limit(limit_bytes: int | None) -> Iterator[int | None]:
    """Limit what the process may allocate from here on to ``limit_bytes`` (RELATIVE).

    The soft RLIMIT_DATA is set to the current data size (torch imported, its thread pool
    started, tokens memory-mapped: file mappings do not count) plus ``limit_bytes``, so an
    allocation beyond it fails inside the process (``MemoryError`` or torch's "can't allocate
    memory" ``RuntimeError``: outcome ``oom``) instead of the kernel's OOM killer ending it with
    SIGKILL. Relative, because the start-up footprint is mostly virtual reservations unrelated
    to the memory the model will use. The previous soft limit is restored on exit (the hard
    limit is never touched, so an in-process run leaves the process as it found it).
    """
    base = _vm_data_bytes() if limit_bytes is not None else None
    if limit_bytes is None or base is None:
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    new = base + limit_bytes
    if hard != resource.RLIM_INFINITY:
        new = min(new, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (new, hard))
    try:
        yield new
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


#: The least share of the device a limited run may use: a limit at or below its context still
#: lets it start, and it ends ``oom`` at its first real allocation instead of failing to set up.
MIN_CUDA_FRACTION = 1e-3


def cuda_memory_fraction(limit_bytes: int, total_bytes: int, context_bytes: int) -> float:
    """The share of a device's memory the caching allocator may hold for a run allowed
    ``limit_bytes`` of it in all: the limit less the context (which the driver holds outside
    the allocator, so ``set_per_process_memory_fraction`` never counts it), over the total."""
    return min(1.0, max(MIN_CUDA_FRACTION, (limit_bytes - context_bytes) / total_bytes))


def cuda_memory_limit(device: torch.device, limit_bytes: int | None) -> float | None:
    """Cap what this process's caching allocator may hold on ``device`` at ``limit_bytes`` less
    the context (``lm.memory.CUDA_CONTEXT_BYTES``): a run that outgrows the reservation it was
    admitted with then gets ``torch.OutOfMemoryError`` itself (outcome ``oom``) instead of
    taking memory a neighbour on the same GPU was promised. The fraction set; None: no limit."""
    from lm.memory import CUDA_CONTEXT_BYTES

    if limit_bytes is None or device.type != "cuda":
        return None
    total = int(torch.cuda.get_device_properties(device).total_memory)
    fraction = cuda_memory_fraction(int(limit_bytes), total, CUDA_CONTEXT_BYTES)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


def lift_cuda_memory_limit(device: torch.device) -> None:
    """Undo ``cuda_memory_limit``: the allocator may hold the whole device again."""
    torch.cuda.set_per_process_memory_fraction(1.0, device)


class RunInterrupted(BaseException):
    """Raised by the SIGTERM handler. A BaseException, so no library's ``except Exception``
    swallows it on its way to ``run``."""


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Turn SIGTERM into ``RunInterrupted`` (once: a second signal while the result is being
    written is ignored). Only the main thread can install handlers; elsewhere this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        raise RunInterrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: How an allocation that failed reads in a ``RuntimeError``'s message (lowercased): the CPU
#: allocator under ``cpu_memory_limit``, and the CUDA libraries whose own allocations fail
#: outside the caching allocator (cuBLAS/cuBLASLt handles and workspaces, cuDNN, cuFFT,
#: cuSPARSE, cuSOLVER and the runtime: ``cudaErrorMemoryAllocation``), which torch raises as a
#: plain RuntimeError, not ``torch.OutOfMemoryError``.
OOM_MESSAGES = (
    "can't allocate memory",
    "cannot allocate memory",
    "out of memory",
    "failed to allocate",
    "status_alloc_failed",  # CUBLAS_/CUSPARSE_/CUSOLVER_STATUS_ALLOC_FAILED
    "cudnn_status_alloc_failed",
    "cufft_alloc_failed",
    "cudaerrormemoryallocation",
)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is running out of memory: CUDA's, a CUDA library's (``OOM_MESSAGES``), or
    an allocation refused under the CPU limit (``cpu_memory_limit``), which torch reports as a
    ``RuntimeError``."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return any(s in msg for s in OOM_MESSAGES)
    return False


#: OSError numbers that say the machine failed, not the run: no space, read-only, gone, refused.
ENVIRONMENT_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EIO,
        errno.EACCES,
        errno.EPERM,
        errno.ENOENT,
        errno.EFBIG,
    }
)


def environment_error(exc: BaseException) -> OSError | None:
    """The environment's failure behind ``exc`` (disk full, read-only, files deleted), if that
    is what it is: ``exc`` itself or what it was raised from (``torch.save`` turns a failed write
    into a RuntimeError raised while handling the OSError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in ENVIRONMENT_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None
