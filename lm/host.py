"""What this host has, in one place: the devices a run may use, GPU and CPU memory, CPU cores and
threads. ``sweeps estimate``, ``sweeps run --dry-run``, the workers and the training child all ask
here, so they cannot disagree on one machine.

- ``device_kind("auto")`` is ``cuda`` when a GPU is visible (``CUDA_VISIBLE_DEVICES`` when set,
  else what ``nvidia-smi -L`` lists), else ``cpu``. No torch import: the orchestrator stays
  fast, and a GPU hidden by ``CUDA_VISIBLE_DEVICES=""`` is not there for the child either.
- A CPU run's intra-op threads (``trial_threads``): a thread for each ``FLOPS_PER_THREAD`` of
  its micro-step, at most the cores of its own that no other work keeps busy (``busy_cores``,
  measured from /proc/stat when it starts), at least one. ``SWEEPS_NUM_THREADS`` (a positive
  integer) overrides the choice; the orchestrator makes it for each trial and sets it for the
  child (``sweeps.runner``). A GPU run uses it too, else ``GPU_RUN_THREADS`` (``run_threads``).
  A bad value is a one-line error wherever it is read.
- ``cpu_time_text``: a run's CPU time against its wall time on its threads, in words: what a
  ``timeout`` says, so a busy machine is told apart from a slow configuration.
- ``pid_alive``: whether a process recorded here (a trial's worker, a file's writer) still runs.
- Trial children get ``CHILD_ENV``: PCI bus order for CUDA's device numbers, as ``nvidia-smi``
  and ``visible_gpus`` number them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from lm.errors import SweepsError

#: The environment variable that caps a CPU run's threads.
NUM_THREADS_ENV = "SWEEPS_NUM_THREADS"
#: A GPU run's intra-op threads unless ``SWEEPS_NUM_THREADS`` says otherwise (``run_threads``):
#: one, as the local engine counts one core to drive each GPU trial.
GPU_RUN_THREADS = 1
#: The environment variable that says which GPUs a process may use (CUDA's own).
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
DEVICE_KINDS = ("cpu", "cuda")
#: CUDA numbers GPUs fastest first unless told otherwise, ``nvidia-smi`` in PCI bus order: on a
#: host with mixed GPUs, index 0 of ``visible_gpus`` (and of a spec's ``cuda:N``) would be
#: another device in the child. Every trial child gets PCI order (``CHILD_ENV``), so one index
#: names one device everywhere.
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"
CHILD_ENV = {DEVICE_ORDER_ENV: "PCI_BUS_ID"}


# --- CPU -----------------------------------------------------------------------------------------


def num_threads_override() -> int | None:
    """``SWEEPS_NUM_THREADS`` as a positive integer; None when unset or empty."""
    env = os.environ.get(NUM_THREADS_ENV, "").strip()
    if not env:
        return None
    if not env.isdigit() or int(env) < 1:
        raise SweepsError(
            f"{NUM_THREADS_ENV} must be a positive integer, got {env!r}; "
            f"unset it or give a number of threads such as 1"
        )
    return int(env)


def cpu_ids() -> list[int]:
    """The cores this process may run on (its affinity), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_threads() -> int:
    """The most threads a CPU run may take: ``SWEEPS_NUM_THREADS`` when set, else every core it
    may use (what the memory estimate counts: a run never takes more)."""
    return num_threads_override() or len(cpu_ids())


#: FLOPs of a micro-step (forward and backward of one micro-batch) that make one more CPU thread
#: pay. Below it the threads' hand-offs cost more than splitting the matrices saves: on 2 cores
#: (tests/bench/bench_threads.py, both cores idle) 2 threads trained a 0.4 GFLOP step at 0.86x
#: the speed of one thread and a 0.14 GFLOP one at 1.12x, an 8 GFLOP step at 1.55x and a 12 to
#: 64 GFLOP one at 1.8x.
FLOPS_PER_THREAD = 2e9
#: How long ``busy_cores`` watches the cores (a trial's start is seconds; this is a blink).
LOAD_SAMPLE_S = 0.25


def useful_threads(step_flops: float) -> int:
    """Threads a micro-step of ``step_flops`` FLOPs can use (``FLOPS_PER_THREAD`` each), at
    least one."""
    return max(1, int(step_flops // FLOPS_PER_THREAD))


def _cpu_times() -> dict[int, tuple[int, int]] | None:
    """Each core's (busy, all) jiffies from /proc/stat; None where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    times = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    return times or None


def busy_cores(cores: Sequence[int], sample_s: float = LOAD_SAMPLE_S) -> float | None:
    """How many of ``cores`` other work keeps busy, summed over them (0 idle, ``len(cores)``
    all taken), watched over ``sample_s`` seconds; None where /proc/stat cannot be read (not
    Linux). The caller is not running on them yet: what it sees is somebody else's work."""
    before = _cpu_times()
    if before is None:
        return None
    time.sleep(sample_s)
    after = _cpu_times() or {}
    busy = 0.0
    for core in cores:
        if core in before and core in after:
            spent = after[core][1] - before[core][1]
            busy += (after[core][0] - before[core][0]) / spent if spent > 0 else 0.0
    return busy


class ThreadChoice(NamedTuple):
    """A CPU run's threads and why, in words (the trial's record and the dry run say it)."""

    threads: int
    reason: str


def trial_threads(
    cores: Sequence[int], step_flops: float, busy: float | None = None
) -> ThreadChoice:
    """Threads for a CPU run on ``cores`` whose micro-step is ``step_flops`` FLOPs:
    ``SWEEPS_NUM_THREADS`` when set (at most the cores); else ``useful_threads``, at most the
    cores other work leaves free (``busy``: ``busy_cores`` of them, measured here when not
    given), at least one. Beside busy work one thread is the fast choice for every size
    bench_threads measured (two threads ran at 0.35x to 0.95x of one with two CPU-bound
    processes beside them): the threads of one step wait for each other, so one descheduled
    thread stalls them all."""
    override = num_threads_override()
    if override is not None:
        n = max(1, min(override, len(cores)))
        return ThreadChoice(n, f"{NUM_THREADS_ENV}={override}")
    useful = min(useful_threads(step_flops), len(cores))
    if useful == 1:
        return ThreadChoice(
            1,
            f"1 thread: a micro-step of {step_flops / 1e9:.2g} GFLOP is under "
            f"the {2 * FLOPS_PER_THREAD / 1e9:g} that make a second one pay",
        )
    if busy is None:
        busy = busy_cores(cores)
    free = len(cores) - round(busy) if busy is not None else len(cores)
    n = max(1, min(useful, free))
    load = "" if busy is None else f"; {busy:.1f} of its {len(cores)} cores busy with other work"
    return ThreadChoice(
        n,
        f"{n} thread{'s' * (n > 1)}: a micro-step of "
        f"{step_flops / 1e9:.2g} GFLOP uses {useful}{load}",
    )


def run_threads(kind: str, step_flops: float | None = None) -> int:
    """Intra-op threads of a training run on a device kind: a CPU run, ``trial_threads`` on the
    cores it may use (``cpu_threads`` when its step is not known); a GPU run,
    ``SWEEPS_NUM_THREADS`` when set, else ``GPU_RUN_THREADS``, at most the cores it may use.
    A GPU run's CPU work is launching kernels and cutting batches: with every core each, the
    dozen children packed on one GPU would oversubscribe the host many times over."""
    if kind == "cuda":
        return min(num_threads_override() or GPU_RUN_THREADS, len(cpu_ids()))
    if step_flops is None:
        return cpu_threads()
    return trial_threads(cpu_ids(), step_flops).threads


#: Below this share of its threads' wall time on a CPU, a run was kept off its cores by others.
BUSY_SHARE = 0.7


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system, all threads) process ``pid`` has used; None when it cannot
    be read (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def cpu_time_text(cpu_s: float | None, wall_s: float, threads: int) -> str:
    """A run's CPU time against its wall time on ``threads`` threads, in words: under
    ``BUSY_SHARE`` of what the threads could use, the machine was busy (other processes held
    the cores), else the run had its cores and was slow on them."""
    if cpu_s is None or wall_s <= 0:
        return "its CPU time could not be read"
    share = cpu_s / (wall_s * max(1, threads))
    said = (
        f"{cpu_s:,.0f} s of CPU in {wall_s:,.0f} s on {threads} thread"
        f"{'s' * (threads > 1)} ({share:.0%} of what they could use)"
    )
    if share < BUSY_SHARE:
        return f"{said}: the machine was busy, other work held its cores"
    return f"{said}: it had its cores; the configuration is slow here"


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
        raise SweepsError(
            "cannot read the available memory; set limits.memory_budget to a size such as 8GiB"
        ) from None


# --- GPUs ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _nvidia_smi_gpus() -> tuple[str, ...]:
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(
        str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")
    )


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


class GpuMemory(NamedTuple):
    """One GPU's memory in bytes: what is free now (other processes' use taken off) and all."""

    free: int
    total: int


def parse_gpu_memory(text: str) -> GpuMemory | None:
    """``nvidia-smi --query-gpu=memory.free,memory.total --format=csv,noheader,nounits``'s line
    (MiB) as bytes; None for anything else ("[N/A]" on a MIG instance, an error)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    fields = [f.strip() for f in lines[0].split(",")]
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    free, total = (int(f) * 2**20 for f in fields)
    return GpuMemory(min(free, total), total)


def gpu_memory(gpu: str) -> GpuMemory | None:
    """Free and total memory of GPU ``gpu`` (an index or UUID as ``CUDA_VISIBLE_DEVICES``
    names it) from ``nvidia-smi``: no CUDA context is made in this process (one would hold
    ~500 MiB of every GPU it reads for as long as the orchestrator runs). None when it cannot
    tell."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=memory.free,memory.total",
                "--format=csv,noheader,nounits",
                "-i",
                gpu,
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_gpu_memory(out.stdout) if out.returncode == 0 else None


def device_gpu_memory(device: str) -> tuple[GpuMemory, int]:
    """(the memory of the GPU ``device`` names, the number of visible GPUs): ``nvidia-smi``'s
    free and total; without it, torch's total taken as free (it cannot tell what others use
    without a context)."""
    gpus = visible_gpus()
    index = cuda_index(device if device != "auto" else "cuda")
    if index < len(gpus):
        read = gpu_memory(gpus[index])
        if read is not None:
            return read, len(gpus)
    total, count = gpu_total_bytes(device)
    return GpuMemory(total, total), count


def gpu_total_bytes(device: str) -> tuple[int, int]:
    """(total memory of the CUDA device, number of CUDA devices); torch imported lazily."""
    import torch

    if not torch.cuda.is_available():
        raise SweepsError(
            f"memory_budget auto on device {device!r}, but CUDA is not available; "
            "use device cpu or give memory_budget as a size"
        )
    index = cuda_index(device if device != "auto" else "cuda")
    return int(torch.cuda.get_device_properties(index).total_memory), torch.cuda.device_count()


#: Where CUDA's Multi-Process Service listens (its clients find it there), as the daemon's
#: own variable says, else its default.
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"


def mps_pipe() -> str | None:
    """The pipe directory of a running MPS daemon (``nvidia-cuda-mps-control -d``), None when
    none runs: without MPS, kernels of different processes on one GPU take turns
    (time-slicing); with it they run at once. Read, never started: it changes the GPU for
    every user of the host."""
    pipe = os.environ.get(MPS_PIPE_ENV) or MPS_DEFAULT_PIPE
    return pipe if os.path.exists(os.path.join(pipe, "control")) else None


@lru_cache(maxsize=16)
def gpu_name(gpu: str) -> str | None:
    """The product name of GPU ``gpu`` (an index or UUID as ``CUDA_VISIBLE_DEVICES`` names it),
    from ``nvidia-smi``; None when it cannot tell. For the device peaks of ``lm.flops``."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", gpu],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = out.stdout.strip().splitlines()[0].strip() if out.stdout.strip() else ""
    return name if out.returncode == 0 and name else None


def pid_alive(pid: int, started_at: float | None = None) -> bool:
    """Whether process ``pid`` on this host still exists and is the one that was recorded (on
    Linux a pid reused by a process started after ``started_at`` counts as gone; a zombie is
    gone). The one answer for a trial's worker (``sweeps.liveness``) and a temporary file's
    writer (``lm.files``)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False  # no such process (or a number no process can have)
    except PermissionError:
        pass  # exists, owned by someone else
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc: trust the signal check
    state, start_ticks = stat
    if state in ("Z", "X"):
        return False  # a zombie is a finished process whose parent has not reaped it
    if started_at is not None:
        boot = _boot_time()
        if boot is not None:
            process_start = boot + start_ticks / os.sysconf("SC_CLK_TCK")
            if process_start > started_at + 2.0:
                return False  # the recorded process is gone; its pid now names another one
    return True


def _proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None
