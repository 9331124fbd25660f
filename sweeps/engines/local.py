"""The local engine (the default, nothing to install): this machine's devices, each a memory
pool (``sweeps.admission``), worker threads in this process (``sweeps.workers``). Also what
``sweeps worker`` runs, on this host or, inside a task of the Slurm engine's array, on what
Slurm allocated to the task (``sweeps.engines.slurm.allocation_pool``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeps import admission, devices, plan
from sweeps import workers as wk
from sweeps.engines.base import EngineOptions, Hooks, Job

if TYPE_CHECKING:
    from sweeps.spec import StudySpec


@dataclass(frozen=True)
class LocalEngine:
    """Trials on this host, admitted to its GPUs or CPU by predicted memory. ``allocation``: in
    a Slurm task, pack what Slurm gave the task, not the whole node (``sweeps worker``)."""

    allocation: bool = False

    @classmethod
    def from_options(cls, options: EngineOptions) -> LocalEngine:
        return cls()

    def check(self, spec: StudySpec, cap: int | None) -> None:
        """The spec's device exists on this host."""
        devices.resolve(devices.wanted(spec))

    def pool(self, spec: StudySpec, cap: int | None) -> admission.MemoryPool:
        from sweeps.engines import slurm

        if self.allocation and slurm.in_allocation():
            return slurm.allocation_pool(spec, cap)
        return admission.host_pool(spec, cap)

    def describe(self, spec: StudySpec, cap: int | None, n_trials: int) -> plan.Placement:
        """This host's pools, worker threads, budget and CPU threads (``plan.host_placement``)."""
        return plan.host_placement(spec, cap, n_trials, self.pool)

    def run(self, job: Job, hooks: Hooks) -> list[Any]:
        options = wk.RunOptions(
            n_workers=job.cap,
            n_trials=job.n_trials,
            timeout=job.spec.study.timeout,
            launcher=job.launcher,
            on_event=hooks.on_event,
        )
        pool = self.pool(job.spec, job.cap)
        return wk.run_workers(
            job.spec,
            job.storage,
            job.study,
            job.study_dir,
            options,
            hooks.flags,
            pool=pool,
            tick=hooks.tick,
        )
