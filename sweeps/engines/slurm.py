"""Slurm: a job array of ``sweeps worker`` tasks against the study's database
(``sweeps run SPEC --engine slurm [--partition P --time T --jobs N --gpus-per-job G --account A
--qos Q --sbatch-arg ARG ...]``, or the same keys in the spec's ``[engine]`` table).

Why plain ``sbatch``/``scontrol``/``squeue``/``scancel`` and not submitit: a task here is a
command line (``sweeps worker STUDY``), not a pickled Python function, so submitit's main
service (pickling a callable and its result through a shared folder) is unused; what is left is
writing a script and parsing one line per job, a few dozen lines, with no new dependency and
nothing that needs ``sacct`` (submitit reads job states from ``sacct``, which answers only where
the cluster runs slurmdbd). ``scontrol -o show job`` answers on any cluster for as long as the
controller keeps finished jobs (``MinJobAge``).

What each task asks for, from the prediction (``plan_requests``), never a guess:

- the largest point of the space that fits (``sweeps.plan.candidate_points``, each planned with
  ``preflight.plan_trial`` against the per-trial budget of the partition's largest node, as the
  Ray engine does with its largest node), calibrated by the study's factor;
- a CPU study: ``--mem`` = ``trials_per_task`` reservations of that point (its predicted peak
  times ``CALIBRATION_HEADROOM``, plus ``admission.ADMIT_MARGIN``) + ``WORKER_BYTES`` for the
  worker process itself;
  ``--cpus-per-task`` = ``trials_per_task`` x threads per trial (``SWEEPS_NUM_THREADS``, else 1);
- a GPU study: ``--gres=gpu:G`` (``--gpus-per-job``, default 1), trials packed on those GPUs by
  GPU memory inside the task; host ``--mem`` = per trial the point's predicted peak *on the CPU*
  (everything a trial holds, an upper bound of what it keeps on the host) times
  ``CALIBRATION_HEADROOM``, + ``WORKER_BYTES``.

The worker runs its trials with the subprocess launcher: ``scancel`` (and a preemption) sends
SIGTERM to every process of the task, and the fork server ends on SIGTERM, which would leave
its trial ``crashed`` (counted, never re-run) instead of ``interrupted`` and re-queued.

Inside the allocation (``allocation_pool``) the worker packs its trials like the local engine,
but on what Slurm gave it (``SLURM_MEM_PER_NODE``, ``SLURM_CPUS_PER_TASK``, the GPUs in
``CUDA_VISIBLE_DEVICES``), not on the whole node. Each trial records its Slurm job as the user
attribute ``slurm_job`` (``ARRAYJOB_TASK``, what ``squeue``/``scancel`` take).

Following (``follow``): the array's task states go to the board as they change (pending with
Slurm's reason, running, failed with its reason, exit code and the last line of its log); the run
ends when the study's ``n_trials`` are finished (tasks still pending are cancelled). Ctrl-C
cancels the array: each worker gets SIGTERM, its trials end ``interrupted`` and are re-queued, so
a second ``sweeps run`` resumes. A task killed without that (a preemption, a lost node) leaves its
trial RUNNING until the heartbeat grace, when any worker (or ``follow``) fails and re-queues it.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm import host
from lm.errors import SweepsError
from sweeps import admission, devices, plan
from sweeps.engines.base import EngineOptions, Hooks, Job
from sweeps.record import SLURM_JOB, TrialRecord, value_of

#: The ``sweeps worker`` process of a task (Python, Optuna, SQLAlchemy; measured ~250 MiB
#: resident), on top of its trials' reservations.
WORKER_BYTES = 512 * 2**20
#: Each reservation is for the prediction times this: the study's calibration factor grows as
#: trials finish (up to ``preflight.CALIBRATION_MAX``), and a task sized at the factor known at
#: submission turns its largest point ``predicted_oom`` once it grows at all (seen here: 1.0 ->
#: 1.014 after three tiny trials). A task's memory cannot grow after it starts.
CALIBRATION_HEADROOM = 1.25
#: How often ``follow`` asks Slurm and the database.
POLL_S = 2.0
#: Seconds ``follow`` waits for cancelled tasks to end (their workers re-queue their trials).
CANCEL_WAIT_S = 60.0
MiB = 2**20


@dataclass(frozen=True)
class SlurmOptions:
    """What to submit, from the CLI over the spec's ``[engine]`` table."""

    jobs: int = 1
    partition: str | None = None
    time: str | None = None
    gpus_per_job: int | None = None  # None: 1 for a GPU study, none for a CPU one
    account: str | None = None
    qos: str | None = None
    sbatch_args: tuple[str, ...] = ()
    trials_per_task: int = 1  # --max-concurrent: trials one task runs at once

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, int) or self.jobs < 1:
            raise SweepsError(f"--jobs (engine.jobs) must be an integer >= 1, got {self.jobs!r}")
        if self.gpus_per_job is not None and (
            not isinstance(self.gpus_per_job, int) or self.gpus_per_job < 0
        ):
            raise SweepsError(
                "--gpus-per-job (engine.gpus_per_job) must be an integer >= 0, "
                f"got {self.gpus_per_job!r}"
            )
        if self.trials_per_task < 1:
            raise SweepsError(f"--max-concurrent must be >= 1, got {self.trials_per_task}")
        for key in ("partition", "time", "account", "qos"):
            value = getattr(self, key)
            if value is not None and (
                not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value)
            ):
                raise SweepsError(f"--{key} (engine.{key}) must be one word, got {value!r}")
        if not all(isinstance(a, str) and a.startswith("--") for a in self.sbatch_args):
            raise SweepsError(
                "--sbatch-arg (engine.sbatch_args) takes sbatch options such as "
                f"--constraint=a100, got {list(self.sbatch_args)!r}"
            )


def options_from(table: Mapping[str, Any] | None, cli: Mapping[str, Any]) -> SlurmOptions:
    """``SlurmOptions`` from a spec's ``[engine]`` table, the CLI's values (not None) winning."""
    values: dict[str, Any] = {k: v for k, v in (table or {}).items() if k != "name"}
    values.update({k: v for k, v in cli.items() if v is not None and v != ()})
    if "sbatch_args" in values:
        args = values["sbatch_args"]
        values["sbatch_args"] = (args,) if isinstance(args, str) else tuple(args)
    return SlurmOptions(**values)


# --- the cluster ---------------------------------------------------------------------------------


def _slurm(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> str:
    """A Slurm command's output; its own error line as a ``SweepsError``."""
    if shutil.which(args[0]) is None:
        raise SweepsError(
            f"--engine slurm needs Slurm's {args[0]} on PATH (run it on a Slurm login node)"
        )
    try:
        done = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        raise SweepsError(f"{args[0]} did not answer in {timeout:g} s; is slurmctld up?") from None
    if done.returncode != 0:
        lines = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise SweepsError(f"{args[0]} failed: {lines.splitlines()[-1]}")
    return done.stdout


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory: int  # bytes
    gpus: int


def parse_sinfo(text: str) -> list[Node]:
    """``sinfo -h -N -o '%N|%c|%m|%G'`` lines -> nodes (one per name)."""
    nodes: dict[str, Node] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4:
            continue
        name, cpus, mem, gres = parts
        gpus = 0
        for item in gres.split(","):
            bits = item.split("(")[0].split(":")
            if bits[0] == "gpu" and bits[-1].isdigit():
                gpus += int(bits[-1])
        nodes[name] = Node(name, int(cpus.rstrip("+")), int(mem.rstrip("+")) * MiB, gpus)
    return list(nodes.values())


def partition_nodes(partition: str | None) -> list[Node]:
    args = ["sinfo", "-h", "-N", "-o", "%N|%c|%m|%G"] + (["-p", partition] if partition else [])
    nodes = parse_sinfo(_slurm(*args))
    if not nodes:
        where = f"partition {partition!r}" if partition else "the default partition"
        raise SweepsError(f"Slurm lists no node in {where}; check --partition (sinfo)")
    return nodes


# --- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requests:
    """What every task of the array asks for, and why (``why``: for the script's comments)."""

    mem_bytes: int
    cpus: int
    gpus: int
    threads: int
    trials_per_task: int
    kind: str  # cpu | cuda
    predicted_bytes: int  # the largest fitting point's calibrated predicted peak
    point: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None  # the per-trial budget the point was planned against

    @property
    def mem_mib(self) -> int:
        return math.ceil(self.mem_bytes / MiB)


def study_kind(spec: Any, nodes: Sequence[Node], partition: str | None = None) -> str:
    """``cpu`` or ``cuda`` for the spec on the partition's nodes (``sweeps.devices.resolve``
    against the largest node's GPUs: a task runs on one node)."""
    where = f"partition {partition!r}" if partition else "the default partition"
    most = max((n.gpus for n in nodes), default=0)
    return devices.resolve(
        devices.wanted(spec), devices.gpu_ids(most), devices.cluster(where, "sinfo's gres")
    )[0].kind


def largest_fitting(
    spec: Any, device: str, budget: int | None, calibration: float = 1.0
) -> tuple[int, dict[str, Any]]:
    """(calibrated predicted peak, point) of the largest point of the space whose plan fits
    ``budget`` (fitted points at their fitted size); a ``SweepsError`` when none does."""
    from sweeps import preflight
    from sweeps.space import trial_config

    best: tuple[int, dict[str, Any]] | None = None
    for point in plan.candidate_points(spec):
        try:
            cfg = trial_config(spec, point)
        except SweepsError:
            continue
        p = preflight.plan_trial(
            cfg, spec.limits, device=device, budget_bytes=budget, calibration=calibration
        )
        if p.fits and (best is None or p.predicted_bytes > best[0]):
            best = (p.predicted_bytes, point)
    if best is None:
        raise SweepsError(
            f"no point of study {spec.name!r} fits a node of this partition "
            f"(budget {budget} bytes per trial); `sweeps estimate SPEC` shows "
            "each point's prediction"
        )
    return best


def plan_requests(
    spec: Any, nodes: Sequence[Node], options: SlurmOptions, calibration: float = 1.0
) -> Requests:
    """Each task's ``--mem``, ``--cpus-per-task`` and GPUs from the largest fitting point."""
    kind = study_kind(spec, nodes, options.partition)
    threads = host.num_threads_override() or 1
    k = options.trials_per_task
    gpus = (
        options.gpus_per_job if options.gpus_per_job is not None else (1 if kind == "cuda" else 0)
    )
    if kind == "cpu":
        biggest = max(nodes, key=lambda n: n.memory)
        pool = admission.MemoryPool(
            [admission.PoolDevice(biggest.name, "cpu", biggest.memory - WORKER_BYTES)]
        )
        budget = admission.trial_budget(spec.limits, pool)
        predicted, point = largest_fitting(spec, "cpu", budget, calibration)
        mem = k * admission.reservation(math.ceil(predicted * CALIBRATION_HEADROOM)) + WORKER_BYTES
        return Requests(mem, k * threads, gpus, threads, k, kind, predicted, point, budget)
    if gpus < 1:
        raise SweepsError(f"study {spec.name!r} trains on GPUs; --gpus-per-job must be >= 1")
    # The GPUs' memory is read by the worker on its node: here the budget is the spec's own.
    budget = spec.limits.budget.per_trial(None)
    predicted, point = largest_fitting(spec, "cuda", budget, calibration)
    from sweeps import preflight
    from sweeps.space import trial_config

    on_host, _ = preflight.predict(trial_config(spec, point), device="cpu")
    mem = k * math.ceil(on_host * CALIBRATION_HEADROOM) + WORKER_BYTES
    return Requests(mem, k * threads, gpus, threads, k, kind, predicted, point, budget)


def check_fits(requests: Requests, nodes: Sequence[Node], partition: str | None) -> None:
    """Some node of the partition can hold one task (else it would pend forever)."""
    if any(
        n.memory >= requests.mem_bytes and n.cpus >= requests.cpus and n.gpus >= requests.gpus
        for n in nodes
    ):
        return
    where = f"partition {partition!r}" if partition else "the default partition"
    raise SweepsError(
        f"no node of {where} has {requests.mem_mib} MiB, {requests.cpus} CPUs and "
        f"{requests.gpus} GPUs for one task (the largest point's predicted peak "
        f"is {requests.predicted_bytes // MiB} MiB); use fewer --max-concurrent, "
        "another --partition or a smaller space"
    )


def requests_for(
    spec: Any, values: Mapping[str, Any], cap: int | None, calibration: float = 1.0
) -> tuple[SlurmOptions, Requests]:
    """The options (the flags given over the spec's ``[engine]``) and each task's requests on
    the partition's nodes, checked to fit one of them."""
    options = options_from(spec.raw.get("engine"), {**values, "trials_per_task": cap})
    nodes = partition_nodes(options.partition)
    requests = plan_requests(spec, nodes, options, calibration)
    check_fits(requests, nodes, options.partition)
    return options, requests


# --- the script ----------------------------------------------------------------------------------


def script(
    spec: Any,
    requests: Requests,
    options: SlurmOptions,
    *,
    runs_dir: Path,
    beats: tuple[int, int],
    workdir: Path | None = None,
    python: str | None = None,
) -> str:
    """The batch script of the array: the exact text ``sweeps slurm-script`` prints."""
    workdir = (workdir or Path.cwd()).resolve()
    runs = Path(os.path.abspath(runs_dir))
    logs = runs / spec.name / "slurm"
    directives = [
        f"--job-name=sweeps-{spec.name}",
        f"--array=0-{options.jobs - 1}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={requests.cpus}",
        f"--mem={requests.mem_mib}M",
    ]
    if requests.gpus:
        directives.append(f"--gres=gpu:{requests.gpus}")
    for key in ("partition", "time", "account", "qos"):
        if getattr(options, key):
            directives.append(f"--{key}={getattr(options, key)}")
    directives += [
        f"--chdir={workdir}",
        f"--output={logs}/%A_%a.out",
        "--open-mode=append",
        *options.sbatch_args,
    ]
    point = " ".join(f"{k}={v}" for k, v in requests.point.items()) or "(fixed only)"
    worker = [
        python or sys.executable,
        "-m",
        "sweeps",
        "worker",
        spec.name,
        "--runs-dir",
        str(runs),
        "--max-concurrent",
        str(requests.trials_per_task),
        "--launcher",
        "subprocess",  # see the module's docstring
        "--heartbeat",
        str(beats[0]),
        "--grace",
        str(beats[1]),
    ]
    lines = [
        "#!/bin/bash",
        f"# sweeps: {options.jobs} worker task(s) of study {spec.name}, each running up to "
        f"{requests.trials_per_task} trial(s) at once.",
        f"# The largest point that fits ({point}) is predicted to peak at "
        f"{requests.predicted_bytes // MiB} MiB on {requests.kind}; --mem holds "
        f"{requests.trials_per_task} x (that x {CALIBRATION_HEADROOM:g} for the calibration "
        f"to grow, + {int(admission.ADMIT_MARGIN * 100)} %) + "
        f"{WORKER_BYTES // MiB} MiB for the worker"
        if requests.kind == "cpu"
        else f"# The largest point that fits ({point}) is predicted to peak at "
        f"{requests.predicted_bytes // MiB} MiB of GPU memory; --mem holds "
        f"{requests.trials_per_task} x its predicted peak on the CPU x "
        f"{CALIBRATION_HEADROOM:g} + "
        f"{WORKER_BYTES // MiB} MiB for the worker",
        *(f"#SBATCH {d}" for d in directives),
        "# The database URL is $SWEEPS_STORAGE of the submitting shell (sbatch exports it); it",
        "# is not written here because it may hold a password.",
        ': "${SWEEPS_STORAGE:?export SWEEPS_STORAGE=<the study database URL> before sbatch}"',
        f"export {host.NUM_THREADS_ENV}={requests.threads}",
        'echo "sweeps: slurm task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} on $(hostname)'
        ' CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-}"',
        "exec " + shlex.join(worker),
        "",
    ]
    return "\n".join(lines)


def submit(text: str, url: str, logs: Path) -> str:
    """``sbatch`` the script (the URL in its environment only); the array's job id."""
    logs.mkdir(parents=True, exist_ok=True)  # Slurm does not create --output's directory
    path = logs / "array.sbatch"
    path.write_text(text, encoding="utf-8")
    out = _slurm("sbatch", "--parsable", str(path), env={"SWEEPS_STORAGE": url})
    return out.strip().split(";")[0]


def cancel(job: str) -> None:
    _slurm("scancel", job)


# --- in a task -----------------------------------------------------------------------------------


def in_allocation() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def allocation_pool(spec: Any, cap: int | None) -> admission.MemoryPool:
    """This task's devices as the local engine's pools, sized by what Slurm allocated: its
    GPUs (Slurm's ``CUDA_VISIBLE_DEVICES``), else ``SLURM_MEM_PER_NODE`` less ``WORKER_BYTES``
    and ``SLURM_CPUS_PER_TASK`` cores (with ``task/none`` the affinity is the whole node)."""
    env = os.environ
    cores = host.cpu_ids()
    per_task = int(env.get("SLURM_CPUS_PER_TASK") or 0)
    if per_task:
        cores = cores[:per_task]
    pool = admission.host_pool(spec, cap, cpus=cores)
    mem_mib = int(env.get("SLURM_MEM_PER_NODE") or 0)
    if pool.devices[0].kind != "cpu" or not mem_mib:
        return pool
    d = pool.devices[0]
    room = max(0, mem_mib * MiB - WORKER_BYTES)
    return admission.MemoryPool(
        [admission.PoolDevice(d.label, d.kind, min(d.capacity, room), d.env, d.cores, d.threads)]
    )


# --- following the array -------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One array task as ``scontrol -o show job`` reports it (a pending range is one)."""

    id: str  # 12_0, or 12_[1-3] while pending together
    state: str
    reason: str
    exit_code: str
    log: str | None

    @property
    def ended(self) -> bool:
        return self.state not in (
            "PENDING",
            "RUNNING",
            "CONFIGURING",
            "COMPLETING",
            "SUSPENDED",
            "REQUEUED",
            "RESIZING",
            "SIGNALING",
            "STAGE_OUT",
        )

    def describe(self) -> str:
        text = f"task {self.id} {self.state.lower()}"
        if self.reason and self.reason != "None":
            text += f" ({self.reason})"
        if self.ended and self.state != "COMPLETED":
            text += f", exit {self.exit_code}"
            last = _last_line(self.log)
            if last:
                text += f": {last}"
        return text


def parse_jobs(text: str) -> list[Task]:
    """``scontrol -o show job ARRAY`` -> its tasks."""
    tasks = []
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "JobState" not in fields:
            continue
        array, index = fields.get("ArrayJobId"), fields.get("ArrayTaskId")
        ident = f"{array}_{index}" if array and index else fields.get("JobId", "?")
        tasks.append(
            Task(
                ident,
                fields["JobState"],
                fields.get("Reason", ""),
                fields.get("ExitCode", ""),
                fields.get("StdErr"),
            )
        )
    return tasks


def array_tasks(job: str) -> list[Task] | None:
    """The array's tasks; None when the controller no longer knows the job (purged)."""
    try:
        return parse_jobs(_slurm("scontrol", "-o", "show", "job", job))
    except SweepsError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise


def _last_line(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = [x for x in fh.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _trial_events(
    study: Any, seen: dict[int, str], on_event: Callable[[str, dict[str, Any]], None]
) -> None:
    """The board's start and end events, read from the database (the trials run in the tasks):
    a trial RUNNING in a task starts, a started one that finished ends."""
    from lm import outcomes

    for t in study.get_trials(deepcopy=False):
        job = value_of(t, SLURM_JOB)
        if t.state.name == "RUNNING" and t.number not in seen and job:
            seen[t.number] = job
            on_event(
                "start",
                {"number": t.number, "params": dict(t.params), "worker": f"slurm {seen[t.number]}"},
            )
        elif t.state.is_finished() and seen.pop(t.number, None) is not None:
            rec = TrialRecord.from_trial(t)
            on_event(
                "end",
                {
                    "number": t.number,
                    "values": t.values,
                    "outcome": outcomes.shown(rec.outcome, t.state.name),
                    "reason": rec.reason,
                },
            )


def follow(
    job: str,
    study: Any,
    n_trials: int,
    stop: Any,
    say: Callable[[str], None],
    tick: Callable[[], None] | None = None,
    *,
    poll_s: float = POLL_S,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
) -> None:
    """Until the study's ``n_trials`` are finished (pending tasks are then cancelled), ``stop``
    is set (the array is cancelled) or every task has ended (a ``SweepsError`` saying why);
    ``on_event`` gets each trial's start and end (the board's events)."""
    from sweeps import workers as wk
    from sweeps.liveness import fail_stale_trials

    shown: dict[str, str] = {}
    started: dict[int, str] = {}
    next_poll = 0.0
    while True:
        if tick is not None:
            tick()
        if stop.is_set():
            say(f"cancelling Slurm job {job} (scancel); its trials are re-queued")
            cancel(job)
            _wait_ended(job)
            return
        if time.monotonic() < next_poll:
            time.sleep(0.25)
            continue
        next_poll = time.monotonic() + poll_s
        fail_stale_trials(study)  # the trials of a task killed without a word
        if on_event is not None:
            _trial_events(study, started, on_event)
        if wk.budget_state(study.get_trials(deepcopy=False), n_trials).done:
            # Nothing is left for tasks that have not started; running ones are ending on
            # their own (their workers see the study done): cancelled only if they do not.
            with contextlib.suppress(SweepsError):  # scancel fails when none is pending
                _slurm("scancel", "--state=PENDING", job)
            if not _wait_ended(job):
                cancel(job)
            return
        tasks = array_tasks(job)
        for t in tasks or []:
            text = t.describe()
            if shown.get(t.id) != text:
                shown[t.id] = text
                say(f"slurm {text}")
        if tasks is None or (tasks and all(t.ended for t in tasks)):
            state = wk.budget_state(study.get_trials(deepcopy=False), n_trials)
            if state.done:
                return
            why = "; ".join(t.describe() for t in tasks or []) or "the controller forgot it"
            raise SweepsError(
                f"Slurm job {job} ended with study {study.study_name!r} at "
                f"{state.finished}/{n_trials} finished: {why}; `sweeps run` "
                "again submits a new array and resumes"
            )


def _wait_ended(job: str) -> bool:
    """Whether every task of the array ended within ``CANCEL_WAIT_S``."""
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        tasks = array_tasks(job)
        if tasks is None or all(t.ended for t in tasks):
            return True
        time.sleep(0.5)
    return False


# --- the engine ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmEngine:
    """Trials in a job array of ``sweeps worker`` tasks; ``values``: the Slurm flags given
    (None where not: the spec's ``[engine]`` table, else the defaults)."""

    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: EngineOptions) -> SlurmEngine:
        return cls(dict(options.slurm))

    def check(self, spec: Any, cap: int | None) -> None:
        """The options, the partition and a node that holds one task, before a study exists."""
        requests_for(spec, self.values, cap)

    def describe(self, spec: Any, cap: int | None, n_trials: int) -> plan.Placement:
        """The tasks' requests on the partition; off the cluster (no ``sinfo`` here: a spec
        checked on a laptop), what the spec alone says."""
        if shutil.which("sinfo") is None:
            options = options_from(spec.raw.get("engine"), {**self.values, "trials_per_task": cap})
            budget = spec.limits.budget.per_trial(None)
            wanted = devices.wanted(spec)
            return plan.Placement(
                "cuda" if wanted.startswith("cuda") else "cpu",
                f"{options.jobs} Slurm task(s), each up to {options.trials_per_task} trial(s) "
                "at once (no sinfo here: their requests are planned on the cluster)",
                budget,
                "auto: decided on the partition's nodes"
                if spec.limits.budget.auto
                else plan.budget_text(budget, spec.limits.memory_budget),
            )
        options, requests = requests_for(spec, self.values, cap)
        where = f"partition {options.partition}" if options.partition else "the default partition"
        gres = f", --gres=gpu:{requests.gpus}" if requests.gpus else ""
        point = " ".join(f"{k}={v}" for k, v in requests.point.items()) or "(fixed only)"
        return plan.Placement(
            requests.kind,
            f"{options.jobs} Slurm task(s) on {where}, each up to {requests.trials_per_task} "
            "trial(s) at once",
            requests.budget,
            plan.budget_text(requests.budget, spec.limits.memory_budget),
            (
                (
                    "slurm task",
                    f"--mem {requests.mem_mib}M --cpus-per-task {requests.cpus}{gres}: the "
                    f"largest point that fits ({point}) is predicted to peak at "
                    f"{requests.predicted_bytes // MiB} MiB",
                ),
            ),
        )

    def run(self, job: Job, hooks: Hooks) -> list[Any]:
        """Submit the array of workers and follow it until the study is done (Ctrl-C cancels).
        The trials run in the tasks: their errors are the tasks' (``follow`` raises them)."""
        from sweeps import preflight
        from sweeps import workers as wk

        spec, study = job.spec, job.study
        calibration = preflight.calibration_factor(study)
        options, requests = requests_for(spec, self.values, job.cap, calibration)
        target = wk.target_trials(spec, study, job.n_trials)
        if wk.budget_state(study.get_trials(deepcopy=False), target).done:
            return []
        text = script(spec, requests, options, runs_dir=job.runs_dir, beats=job.beats)
        logs = Path(job.runs_dir).resolve() / spec.name / "slurm"
        array = submit(text, job.url, logs)
        gres = f", gres gpu:{requests.gpus}" if requests.gpus else ""
        hooks.say(
            f"submitted Slurm job {array}: {options.jobs} task(s), each --mem "
            f"{requests.mem_mib}M --cpus-per-task {requests.cpus}{gres}; logs in {logs}"
        )
        follow(
            array, study, target, hooks.flags.stop, hooks.say, hooks.tick, on_event=hooks.on_event
        )
        return []
