"""Ray: trials placed across the nodes of a cluster by their predicted memory
(``pip install -e .[ray]``; ``sweeps run SPEC --engine ray [--address ADDR]``).

Optuna's storage stays the single source of truth: worker threads in this process ask trials
(the same ``claim_trial`` and budget as every worker), plan them (``sweeps.preflight``: the
calibrated prediction against the per-trial budget of the largest node) and submit each as a
Ray task whose resource request is that prediction plus ``admission.ADMIT_MARGIN``:

- a CPU trial asks for ``memory`` = its reservation in bytes and ``num_cpus`` = its threads
  (``SWEEPS_NUM_THREADS``, else 1), so Ray runs it only on a node with that much memory free;
- a GPU trial asks for ``num_gpus`` = its reservation / the room of one GPU
  (``AUTO_GPU_FRACTION`` of its memory, read on a GPU node), a fraction Ray packs; Ray sets the
  task's ``CUDA_VISIBLE_DEVICES``, and the child gets it: each trial is pinned to its GPU. GPU
  memory is read on one GPU node (``nvidia-smi``, by a task that asks for no resources): the
  cluster's GPUs are taken to be alike.

The task runs ``runner.run_trial`` on its node (the child, its metrics, heartbeats and ``tell``
go to the database from there, so the database must be reachable from every node, as for
``sweeps worker``; the trial's files are written under the same runs dir path on that node).
A trial that fits no node is ``predicted_oom``, recorded here without a task; one that fits
some nodes only waits for those. The node's runner plans the trial again with the factor the
driver planned it with (``calibration`` in the task), so both plans agree. A node lost
mid-trial (the task's worker or node dies): the trial is failed and re-queued here
(``limits.max_retries``); Ray itself never retries a task. Ctrl-C cancels the tasks; their
trials end ``interrupted`` and are re-queued as with the local engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import optuna

from lm import host, outcomes
from lm.errors import SweepsError
from sweeps import admission, devices, liveness, optuna_compat, plan, preflight
from sweeps import storage as st
from sweeps.engines.base import EngineOptions, Hooks, Job
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S
from sweeps.monitor import StopFlags
from sweeps.runner import (
    RunnerContext,
    TrialReport,
    WorkerDevice,
    finish,
    run_trial,
)
from sweeps.space import suggest, trial_config
from sweeps.spec import StudySpec, read_spec

#: Ray's resource quantities are kept to this many decimals.
_RAY_DECIMALS = 4


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepsError(
            "--engine ray needs Ray; install it with pip install -e '.[ray]' "
            "(or pip install 'ray>=2.9')"
        ) from None
    return ray


@dataclass(frozen=True)
class Node:
    """An alive node as Ray declares it."""

    node_id: str
    address: str
    cpus: float
    gpus: float
    memory: int


@dataclass
class Cluster:
    """The cluster this process is connected to."""

    address: str
    dashboard: str | None
    log_dir: str | None
    nodes: list[Node] = field(default_factory=list)

    def describe(self) -> str:
        kinds = ", ".join(
            f"{n.address}: {n.cpus:g} CPU, {n.gpus:g} GPU, {n.memory / 2**30:.1f} GiB"
            for n in self.nodes
        )
        dash = f"http://{self.dashboard}" if self.dashboard else "not running"
        return (
            f"ray cluster {self.address}: {len(self.nodes)} node(s) ({kinds}); "
            f"dashboard {dash}; logs {self.log_dir or 'unknown'}"
        )


def alive_nodes(ray: Any) -> list[Node]:
    return [
        Node(
            n["NodeID"],
            n["NodeManagerAddress"],
            float(n["Resources"].get("CPU", 0)),
            float(n["Resources"].get("GPU", 0)),
            int(n["Resources"].get("memory", 0)),
        )
        for n in ray.nodes()
        if n.get("Alive")
    ]


@contextlib.contextmanager
def connect(address: str | None) -> Iterator[Cluster]:
    """Connect to ``address`` (None: ``$RAY_ADDRESS``, a cluster started on this machine with
    ``ray start``, else a new one here); a connection made here is closed on exit."""
    ray = import_ray()
    made_here = not ray.is_initialized()
    info = ray.init(address=address, log_to_driver=False) if made_here else None
    try:
        yield describe(ray, info)
    finally:
        if made_here:
            ray.shutdown()


def describe(ray: Any, info: Any = None) -> Cluster:
    dashboard = getattr(info, "dashboard_url", None) or None
    log_dir = None
    with contextlib.suppress(Exception):  # Ray's private API: informational only
        node = ray._private.worker.global_worker.node
        log_dir = str(Path(node.get_session_dir_path()) / "logs")
    address = getattr(info, "address_info", {}).get("gcs_address") if info else None
    return Cluster(address or "(connected)", dashboard, log_dir, alive_nodes(ray))


# --- requests ------------------------------------------------------------------------------------


#: Where the Ray engine counts GPUs, as its errors say.
RAY_PLACE = devices.cluster("the Ray cluster", "the GPUs its nodes declare to Ray")


def device_kind(spec: StudySpec, nodes: list[Node]) -> str:
    """``cpu`` or ``cuda`` for the spec on these nodes (``sweeps.devices.resolve`` against the
    largest node's GPUs: Ray places each trial on one node)."""
    most = max((n.gpus for n in nodes), default=0)
    return devices.resolve(devices.wanted(spec), devices.gpu_ids(most), RAY_PLACE)[0].kind


def cluster_pool(
    nodes: list[Node], kind: str, threads: int, gpu_bytes: int | None
) -> admission.MemoryPool:
    """The nodes as pools (for the per-trial budget: what the largest takes)."""
    if kind == "cuda":
        room = int((gpu_bytes or 0) * preflight.AUTO_GPU_FRACTION)
        return admission.MemoryPool(
            [admission.PoolDevice(n.address, "cuda", room) for n in nodes if n.gpus > 0]
        )
    return admission.MemoryPool(
        [
            admission.PoolDevice(n.address, "cpu", n.memory, {}, tuple(range(int(n.cpus))), threads)
            for n in nodes
            if n.cpus >= threads
        ]
    )


def request(kind: str, predicted: int, threads: int, gpu_room: int | None) -> dict[str, Any]:
    """Ray's resource request for a trial predicted to peak at ``predicted`` bytes."""
    need = admission.reservation(predicted)
    if kind == "cuda":
        share = math.ceil(need / max(1, gpu_room or 1) * 10**_RAY_DECIMALS) / 10**_RAY_DECIMALS
        return {"num_cpus": 1, "num_gpus": min(1.0, share)}
    return {"num_cpus": threads, "memory": need}


def _plan(ctx: RunnerContext, kind: str, trial: optuna.Trial) -> tuple[int | None, float]:
    """(the trial's calibrated prediction when it will launch, else None; the calibration it
    was planned with: the node plans again with that same factor, so the two plans agree)."""
    calibration = float(preflight.calibration_factor(ctx.study))
    try:
        cfg = trial_config(ctx.spec, suggest(trial, ctx.spec))
    except SweepsError:
        return None, calibration  # run_trial records the invalid configuration
    plan = preflight.plan_trial(
        cfg, ctx.spec.limits, device=kind, budget_bytes=ctx.budget_bytes, calibration=calibration
    )
    return (plan.predicted_bytes if plan.fits else None), calibration


# --- on a node -----------------------------------------------------------------------------------


class _Placed:
    """The admission of a trial Ray already placed: its device and reservation, at once."""

    def __init__(self, lease: admission.Lease) -> None:
        self.lease = lease

    def acquire(self, predicted_bytes: int, stop: Any) -> admission.Lease:
        return self.lease

    def release(self, lease: admission.Lease) -> None:
        pass


def run_on_node(job: dict[str, Any]) -> dict[str, Any]:
    """A Ray task: ``runner.run_trial`` for one planned trial, on the node Ray chose."""
    import ray

    from sweeps.launchers import make_launcher
    from sweeps.space import make_pruner

    spec = read_spec(job["spec"], source=f"study {job['study']!r}", check_paths=False)
    storage = st.open_storage(
        job["url"],
        heartbeat_interval=job["heartbeat"],
        grace_period=job["grace"],
        max_retries=spec.limits.max_retries,
    )
    # The trial's parameters are set already: the sampler is never asked.
    study = optuna.load_study(
        study_name=spec.name,
        storage=storage,
        sampler=optuna.samplers.RandomSampler(),
        pruner=make_pruner(spec),
    )
    trial = optuna.trial.Trial(study, job["trial_id"])
    where = ray.get_runtime_context().get_node_id()[:8]
    if job["kind"] == "cuda":
        gpus = ",".join(str(g) for g in ray.get_gpu_ids())
        device = WorkerDevice(
            "cuda", {host.VISIBLE_DEVICES_ENV: gpus}, None, f"node {where} gpu {gpus}"
        )
    else:
        device = WorkerDevice(
            "cpu",
            {**devices.CPU.env, host.NUM_THREADS_ENV: str(job["threads"])},
            None,
            f"node {where} cpu",
        )
    launcher = make_launcher("subprocess")
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=Path(job["study_dir"]),
        launcher=launcher,
        budget_bytes=job["budget"],
        stop=StopFlags(),
        admission=_Placed(admission.Lease(0, job["reserve"], (), device)),
    )
    try:
        report = run_trial(ctx, WorkerDevice(job["kind"]), trial, job["calibration"])
    finally:
        launcher.close()
        storage.engine.dispose()
    return dataclasses.asdict(report)


# --- here ----------------------------------------------------------------------------------------


def _trial_runner(
    ray: Any, job: dict[str, Any], kind: str, threads: int, gpu_room: int | None
) -> Callable[..., TrialReport]:
    """``worker_loop``'s ``run``: plan here, run on a node, re-queue what a lost node held."""
    remote = ray.remote(run_on_node)

    def run(ctx: RunnerContext, device: WorkerDevice, trial: optuna.Trial) -> TrialReport:
        trial_id = optuna_compat.trial_id(trial)
        predicted, calibration = _plan(ctx, kind, trial)
        if predicted is None:
            # Not launched (predicted_oom, over the compute limit, invalid): recorded here, with
            # the plan's own factor. As a task it would have had no CPU and no GPU, and a node
            # that planned it afresh could have launched it there.
            return run_trial(ctx, WorkerDevice(kind), trial, calibration)
        task = {
            **job,
            "trial_id": trial_id,
            "reserve": admission.reservation(predicted),
            "calibration": calibration,
        }
        ref = remote.options(max_retries=0, **request(kind, predicted, threads, gpu_room)).remote(
            task
        )
        ctx.event(
            "start",
            number=trial.number,
            params=dict(trial.params),
            max_tokens=ctx.spec.base_values().get("max_tokens"),
            worker="ray",
        )
        with liveness.heartbeat(ctx.storage, trial_id):  # alive while Ray queues it
            lost = _wait(ray, ref, ctx.stop)
        if isinstance(lost, dict):
            report = TrialReport(**lost)
            ctx.event(
                "end",
                number=report.number,
                outcome=report.outcome,
                reason=report.reason,
                values=report.values,
            )
            return report
        if ctx.stop.stop.is_set():
            return finish(
                ctx,
                trial,
                outcomes.INTERRUPTED,
                "stopped by the user (Ctrl-C or SIGTERM): its Ray task was cancelled",
            )
        reason = f"its Ray node or worker was lost mid-trial ({lost})"
        frozen = ctx.storage.get_trial(trial_id)
        liveness.fail_and_requeue(
            ctx.storage, ctx.study, frozen, max_retries=ctx.spec.limits.max_retries, reason=reason
        )
        ctx.event("end", number=trial.number, outcome=outcomes.CRASHED, reason=reason, values=None)
        return TrialReport(trial.number, outcomes.CRASHED, reason, None, told=False)

    return run


def _wait(ray: Any, ref: Any, stop: StopFlags) -> dict[str, Any] | str:
    """The task's report, or why it has none (its node died, it was cancelled)."""
    cancelled = False
    while True:
        ready, _ = ray.wait([ref], timeout=0.5)
        if ready:
            try:
                return cast("dict[str, Any]", ray.get(ref))  # the task's report
            except ray.exceptions.RayError as exc:
                return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if stop.stop.is_set() and not cancelled:
            ray.cancel(ref, force=stop.kill.is_set())
            cancelled = True


def run_on_cluster(
    spec: StudySpec,
    storage: Any,
    study: optuna.Study,
    url: str,
    study_dir: Path,
    options: Any,
    flags: StopFlags | None = None,
    *,
    tick: Callable[[], None] | None = None,
    beats: tuple[int, int] = (HEARTBEAT_INTERVAL_S, GRACE_PERIOD_S),
) -> list[Any]:
    """``sweeps.workers.run_workers`` on a Ray cluster this process is connected to."""
    import time

    from sweeps import workers as wk
    from sweeps.launchers import SubprocessLauncher

    ray = import_ray()
    flags = flags or StopFlags()
    nodes = alive_nodes(ray)
    kind = device_kind(spec, nodes)
    threads = host.num_threads_override() or 1
    gpu_bytes = _gpu_bytes(ray, nodes) if kind == "cuda" else None
    pool = cluster_pool(nodes, kind, threads, gpu_bytes)
    budget = admission.trial_budget(spec.limits, pool)
    n_trials = wk.target_trials(spec, study, options.n_trials)
    job = {
        "spec": spec.to_dict(),
        "study": spec.name,
        "url": url,
        "kind": kind,
        "threads": threads,
        "budget": budget,
        "heartbeat": beats[0],
        "grace": beats[1],
        "study_dir": str(study_dir.resolve()),
    }
    gpu_room = int(gpu_bytes * preflight.AUTO_GPU_FRACTION) if gpu_bytes else None
    run = _trial_runner(ray, job, kind, threads, gpu_room)
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=study_dir,
        # Never launches here: a trial no node can take is planned and recorded by the driver,
        # for the launcher the nodes start children with (run_on_node's).
        launcher=SubprocessLauncher(),
        budget_bytes=budget,
        stop=flags,
        on_event=options.on_event,
    )
    n_threads = options.n_workers or max(1, int(sum(n.cpus for n in nodes)))
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    return wk.run_threads(
        ctx,
        WorkerDevice(kind),
        wk.WorkerOptions(n_trials, deadline),
        n_threads,
        flags,
        tick,
        None,
        False,
        run,
    )


#: Seconds the probe of a GPU node's memory may take (it asks for no CPU or GPU: it never
#: waits for one to free up on a busy cluster).
GPU_PROBE_TIMEOUT_S = 120


def _gpu_bytes(ray: Any, nodes: list[Node]) -> int:
    """One GPU's total memory, read with ``nvidia-smi`` by a task pinned to a GPU node that asks
    for no CPU and no GPU (Ray's per-node resource ``node:<address>``), so it runs at once
    even when every GPU is busy, and makes no CUDA context there."""
    node = next(n for n in nodes if n.gpus > 0)
    probe = ray.remote(num_cpus=0, num_gpus=0, resources={f"node:{node.address}": 0.001})(
        _probe_gpu
    )
    try:
        total = ray.get(probe.remote(), timeout=GPU_PROBE_TIMEOUT_S)
    except ray.exceptions.RayError as exc:
        raise SweepsError(
            f"cannot read the GPU memory of Ray node {node.address} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from None
    if total is None:
        raise SweepsError(
            f"cannot read the GPU memory of Ray node {node.address}: nvidia-smi "
            "is missing there or reports no memory (a MIG instance?)"
        )
    return int(total)


def _probe_gpu() -> int | None:
    read = host.gpu_memory("0")
    return None if read is None else read.total


# --- the engine ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayEngine:
    """Trials as Ray tasks on the cluster at ``address`` (None: ``$RAY_ADDRESS``, a cluster
    started on this machine, else a new one here)."""

    address: str | None = None

    @classmethod
    def from_options(cls, options: EngineOptions) -> RayEngine:
        return cls(options.address)

    def check(self, spec: StudySpec, cap: int | None) -> None:
        """Ray is installed (its cluster is read when the run connects)."""
        import_ray()

    def describe(self, spec: StudySpec, cap: int | None, n_trials: int) -> plan.Placement:
        """Where the trials would go, without connecting (a connection can start a cluster):
        the device kind as this host sees the spec's device, the budget the spec gives."""
        try:
            kind = devices.resolve(devices.wanted(spec))[0].kind
        except SweepsError:
            kind = "cuda"  # a GPU spec planned on a host without one: the cluster has them
        budget = spec.limits.budget.per_trial(None)
        where = self.address or "$RAY_ADDRESS, else a cluster on this machine"
        return plan.Placement(
            kind,
            f"{cap or 'as many as the cluster holds'} at a time on the Ray cluster ({where}), "
            "each trial a Ray task asking for its predicted memory",
            budget,
            "auto: what the largest node takes, read when the run connects"
            if spec.limits.budget.auto
            else plan.budget_text(budget, spec.limits.memory_budget),
        )

    def run(self, job: Job, hooks: Hooks) -> list[Any]:
        from sweeps import workers as wk

        options = wk.RunOptions(
            n_workers=job.cap,
            n_trials=job.n_trials,
            timeout=job.spec.study.timeout,
            on_event=hooks.on_event,
        )
        with connect(self.address) as cluster:
            hooks.say(cluster.describe())
            return run_on_cluster(
                job.spec,
                job.storage,
                job.study,
                job.url,
                job.study_dir,
                options,
                hooks.flags,
                tick=hooks.tick,
                beats=job.beats,
            )
