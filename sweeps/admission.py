"""Admission by predicted memory: the memory pools every engine shares (the local engine's
devices, ``sweeps worker``, a Slurm task's allocation, the Ray and Slurm engines' nodes, the dry
run). Below the engines (``sweeps.engines``): they import it, it imports none of them.

Each device of this host is a pool (``host_pool``): each visible GPU holds
``AUTO_GPU_FRACTION`` (90 %) of the memory free on it when the run starts, the CPU
``AUTO_CPU_FRACTION`` (80 %) of ``MemAvailable`` and its cores (``sweeps.preflight``'s
fractions: one fact, one place). A trial's reservation is its calibrated predicted peak
(``sweeps.preflight.plan_trial``) plus ``ADMIT_MARGIN`` (10 %). It is admitted to a device
when that fits what the running trials' reservations leave free and, on the CPU, when its
threads' cores are free (each CPU trial gets its own cores: ``SWEEPS_NUM_THREADS`` of them,
else one, else the cores split by ``--max-concurrent``); else it waits for room. Among the
devices it fits, the one running the fewest trials (then the most free memory) takes it, so
GPUs share the work.

Waiting is first come, first served (``Admission``): a large trial that waits is not overtaken
by small ones that keep arriving, and runs once enough room frees. A device with nothing running
admits any trial the plan said fits, so a planned trial never waits forever; one that would not
fit even an empty device of this host is ``predicted_oom``: the per-trial budget given to the
plan is ``limits.budget`` (``sweeps.spec.limits.MemoryBudget``, its one meaning) on the room of
the largest device (``trial_room``: its capacity less the margin; ``trial_budget``).

``MemoryPool`` is the bookkeeping alone (reserve/release; no threads, no clock), tested with a
fake device pool. ``Admission`` adds the waiting. The worker threads of ``sweeps.workers`` claim
a trial, plan it, then block in ``Admission.acquire`` (``sweeps.runner``) before launching: the
worker loop and the runner are the same as with one trial per worker. How many worker threads
(``concurrency``): ``--max-concurrent``/``--workers`` when given, else as many trials as the
devices could run at once (CPU: cores / threads per trial; GPU: one core to drive each trial).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from lm import host
from lm.errors import SweepsError
from sweeps import devices, preflight
from sweeps.devices import WorkerDevice
from sweeps.spec import Limits, StudySpec
from sweeps.spec.limits import MemoryBudget

#: A trial reserves its calibrated prediction plus this fraction of it.
ADMIT_MARGIN = 0.10


def reservation(predicted_bytes: int) -> int:
    """Bytes a trial predicted to peak at ``predicted_bytes`` holds while it runs."""
    return int(predicted_bytes) + math.ceil(int(predicted_bytes) * ADMIT_MARGIN)


@dataclass(frozen=True)
class PoolDevice:
    """One device's pool: ``capacity`` bytes shared by its trials; a CPU also hands out
    ``cores``, ``threads`` per trial. ``env``: what its children get (``CUDA_VISIBLE_DEVICES``)."""

    label: str
    kind: str  # cpu | cuda
    capacity: int
    env: dict[str, str] = field(default_factory=dict)
    cores: tuple[int, ...] = ()
    threads: int = 0

    @property
    def slots(self) -> int:
        """Trials this device could run at once, whatever their memory."""
        return max(1, len(self.cores) // self.threads) if self.kind == "cpu" else 1


@dataclass(frozen=True)
class Lease:
    """What an admitted trial holds until it ends."""

    index: int  # into MemoryPool.devices
    bytes: int
    cores: tuple[int, ...]
    device: WorkerDevice  # where its child runs


class MemoryPool:
    """Reservations on a host's devices: the sum on a device never exceeds its capacity (a
    device with nothing running takes one trial whatever its size: the plan said it fits)."""

    def __init__(self, devices: Sequence[PoolDevice]) -> None:
        if not devices:
            raise SweepsError("no device to run trials on")
        self.devices = list(devices)
        self.used = [0] * len(self.devices)
        self.running = [0] * len(self.devices)
        self.free_cores = [set(d.cores) for d in self.devices]

    @property
    def largest(self) -> int:
        return max(d.capacity for d in self.devices)

    def fits_empty(self, need: int) -> bool:
        """Whether a reservation of ``need`` bytes fits some device of this host when idle."""
        return need <= self.largest

    def _fits_now(self, i: int, need: int) -> bool:
        d = self.devices[i]
        if d.kind == "cpu" and len(self.free_cores[i]) < d.threads:
            return False
        if self.running[i] == 0:
            return need <= d.capacity or d.capacity == self.largest
        return self.used[i] + need <= d.capacity

    def try_reserve(self, need: int) -> Lease | None:
        """A lease on the best device where ``need`` bytes fit now, else None."""
        need = int(need)
        fitting = [i for i in range(len(self.devices)) if self._fits_now(i, need)]
        if not fitting:
            return None
        i = min(fitting, key=lambda j: (self.running[j], self.used[j] - self.devices[j].capacity))
        d = self.devices[i]
        cores: tuple[int, ...] = ()
        env = dict(d.env)
        label = d.label
        if d.kind == "cpu":
            cores = tuple(sorted(self.free_cores[i])[: d.threads])
            self.free_cores[i] -= set(cores)
            override = host.num_threads_override()
            env[host.NUM_THREADS_ENV] = str(min(d.threads, override or d.threads))
            label = f"cpu {_cores_text(cores)}"
        self.used[i] += need
        self.running[i] += 1
        worker = WorkerDevice(d.kind, env, list(cores) or None, label)
        return Lease(i, need, cores, worker)

    def release(self, lease: Lease) -> None:
        i = lease.index
        self.used[i] -= lease.bytes
        self.running[i] -= 1
        self.free_cores[i] |= set(lease.cores)


class Admission:
    """``MemoryPool`` behind a lock, for worker threads: ``acquire`` waits (first come, first
    served) until the trial fits, or returns None once ``stop`` is set."""

    def __init__(self, pool: MemoryPool, *, poll_s: float = 0.5) -> None:
        self.pool = pool
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()

    def acquire(self, predicted_bytes: int, stop: threading.Event) -> Lease | None:
        need = reservation(predicted_bytes)
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            try:
                while not stop.is_set():
                    if self._queue[0] is ticket:
                        lease = self.pool.try_reserve(need)
                        if lease is not None:
                            return lease
                    self._cond.wait(self.poll_s)  # woken by a release; the poll sees a stop
                return None
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def release(self, lease: Lease) -> None:
        with self._cond:
            self.pool.release(lease)
            self._cond.notify_all()


# --- this host's pools ---------------------------------------------------------------------------


def cpu_threads_per_trial(n_cores: int, cap: int | None) -> int:
    """Cores each CPU trial gets: all of them uncapped (CPU trials share cores and memory
    bandwidth: one at a time unless asked), else the cores split ``cap`` ways (as ``--workers``
    always did). ``SWEEPS_NUM_THREADS`` caps the threads a trial runs on its cores."""
    return max(1, n_cores if cap is None else n_cores // cap)


def host_pool(
    spec: StudySpec,
    cap: int | None = None,
    *,
    gpus: Sequence[str] | None = None,
    gpu_free: Sequence[int] | None = None,
    cpus: Sequence[int] | None = None,
    mem_available: int | None = None,
) -> MemoryPool:
    """The pools of this host for ``spec``'s device (``sweeps.devices.resolve``: the spec's
    ``cuda:N``, that GPU alone; ``auto``, every visible GPU, else the CPU). A GPU's pool is
    ``preflight.gpu_room`` of what is free on it now (``lm.host.gpu_memory``): memory other
    processes hold on a shared GPU is not there to give. The keyword arguments stand in for the
    host in tests (``gpu_free``: each GPU's free bytes)."""
    placed = devices.resolve(devices.wanted(spec), gpus)
    if placed[0].kind == "cuda":
        return MemoryPool(
            [
                PoolDevice(
                    d.label,
                    "cuda",
                    preflight.gpu_room(
                        gpu_free[d.index] if gpu_free is not None else _gpu_free(d.index)
                    ),
                    d.env,
                )
                for d in placed
                if d.index is not None
            ]
        )
    cores = tuple(host.cpu_ids() if cpus is None else cpus)
    available = host.mem_available_bytes() if mem_available is None else mem_available
    return MemoryPool(
        [
            PoolDevice(
                devices.CPU.label,
                "cpu",
                int(available * preflight.AUTO_CPU_FRACTION),
                dict(devices.CPU.env),
                cores,
                cpu_threads_per_trial(len(cores), cap),
            )
        ]
    )


def describe(pool: MemoryPool, threads: int) -> str:
    """What a run on ``pool`` with ``threads`` worker threads uses, in words (the dry run's)."""
    where = ", ".join(
        d.label
        if d.kind == "cuda"
        else f"{d.label} {_cores_text(d.cores)} ({d.threads} core{'s' * (d.threads > 1)} a trial)"
        for d in pool.devices
    )
    return (
        f"up to {threads} trial{'s' * (threads > 1)} at a time on {where}, placed by "
        "predicted memory"
    )


def _cores_text(cores: Sequence[int]) -> str:
    return f"{cores[0]}" if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"


def gpu_sharing_note(pool: MemoryPool) -> str | None:
    """What packing trials on a GPU of ``pool`` buys here, for ``sweeps run`` to say (None on
    the CPU): with MPS their kernels run at once; without it they take turns, and packing
    overlaps only their host-side work (start-up, data, evaluation, Python)."""
    if not any(d.kind == "cuda" for d in pool.devices):
        return None
    pipe = host.mps_pipe()
    if pipe is not None:
        return (
            f"MPS is running ({pipe}): the kernels of trials packed on one GPU run at the same time"
        )
    return (
        "MPS is not running: trials packed on one GPU share its memory, but their kernels "
        "take turns (each child also holds its own ~500 MiB CUDA context); packing "
        "overlaps their host-side work. `nvidia-cuda-mps-control -d` would run them at "
        "once (docs/engines.md: Packing trials on one GPU)"
    )


def _gpu_free(index: int) -> int:
    return host.device_gpu_memory(f"cuda:{index}")[0].free


def concurrency(pool: MemoryPool, cap: int | None, n_cores: int | None = None) -> int:
    """Worker threads: ``cap`` when given (more than the devices hold just wait), else what the
    devices could run at once: CPU trials by cores; GPU trials by the cores that drive them."""
    if cap is not None:
        return cap
    cores = len(host.cpu_ids()) if n_cores is None else n_cores
    gpus = [d for d in pool.devices if d.kind == "cuda"]
    per_gpu = max(1, cores // len(gpus)) if gpus else 0
    return sum(d.slots for d in pool.devices if d.kind == "cpu") + per_gpu * len(gpus)


def trial_room(capacity: int) -> int:
    """The largest prediction whose reservation fits ``capacity`` bytes: what one trial may have
    of an empty device of that capacity."""
    room = math.floor(capacity / (1 + ADMIT_MARGIN))
    while reservation(room) > capacity:  # rounding: a trial at the room must fit
        room -= 1
    return max(0, room)


def trial_budget(limits: Limits, pool: MemoryPool) -> int | None:
    """The per-trial budget the plan compares predictions with: ``limits.budget`` on what an
    empty device of ``pool`` takes (its largest device's room); None: no budget."""
    return limits.budget.per_trial(trial_room(pool.largest))


def device_budget(budget: MemoryBudget, device: str, sharing: int = 1) -> int | None:
    """``budget`` in bytes per trial on this host's ``device`` (``cpu``, ``cuda``, ``cuda:N``)
    with ``sharing`` trials on it at once (``sweeps estimate --workers``): a size as given (the
    estimate answers what fits that budget, wherever it is asked), ``"auto"`` the room of an
    ``sharing``-th of the device."""
    if not budget.auto:
        return budget.per_trial(None)
    if host.device_kind(device) == "cuda":
        capacity = preflight.gpu_room(host.device_gpu_memory(device)[0].free)
    else:
        capacity = int(host.mem_available_bytes() * preflight.AUTO_CPU_FRACTION)
    return budget.per_trial(trial_room(capacity // max(1, int(sharing))))
