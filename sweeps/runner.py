"""Run one Optuna trial as an isolated training process, from its parameters to ``tell``.

``run_trial`` is the whole life of a trial, in one worker:

1. suggest the parameters (``space.suggest``) and build the ``TrainConfig``;
2. plan its memory (``preflight.plan_trial``): a configuration that cannot fit the budget is
   never launched (``predicted_oom``); with ``oom_policy = "fit"`` the plan's fitted micro-batch
   is trained instead, and the sampled and fitted values are both recorded;
3. write ``<study dir>/trials/<number>/config.json`` (a CPU child gets the enforced memory
   limit ``cpu_memory_limit_bytes`` derived from the budget) and launch ``python -m lm.train
   RUN_DIR`` in its own session and process group (or fork it from the preloaded fork server:
   the same isolation, a faster start), with its worker's environment and CPU affinity;
4. watch the child (``sweeps.monitor``: ``metrics.jsonl`` by polling, the child's log is never
   parsed): store each evaluation and its samples in the project's tables and judge it
   (``sweeps.judge``: the project's verdicts, Optuna's pruner, halving on tokens); a verdict,
   the wall-clock limit or a stop request stops the child's group (SIGTERM, then SIGKILL after
   a grace period);
5. read ``result.json`` and classify the ending (``sweeps.monitor``); with ``oom_policy =
   "fit"`` a run that still ran out of memory is tried once more with the micro-batch halved;
6. record the trial's user attributes (its ``sweeps.record.TrialRecord``) and tell
   Optuna: COMPLETE with the objective values, PRUNED (with a constraint value: 1.0 for
   ``oom``/``predicted_oom``) or FAIL.

The trial's heartbeat is recorded while it runs (``liveness.heartbeat``), so a worker that dies is
noticed by the others after the grace period.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from lm import flops, host, outcomes
from lm.config import TrainConfig
from lm.corpus import MANIFEST_NAME
from lm.errors import SweepsError
from lm.run_files import (
    CHECKPOINT_FILE,
    LOG_FILE,
    RESUME_FILE,
    RESUME_INDEX_FILE,
    jsonable,
    keep_metrics_until,
    read_resume_index,
    record_verdict,
    write_config,
)
from sweeps import fidelity, liveness, optuna_compat, records, storage, verdicts
from sweeps.attempt_record import (
    attempt_fields,
    capped,
    compute_fields,
    objective_values,
    over_compute_limit,
)
from sweeps.devices import WorkerDevice as WorkerDevice  # engines and tests name it here
from sweeps.judge import Judge, StudyBoard
from sweeps.launchers import Launcher
from sweeps.monitor import (
    POLL_S,
    TERM_GRACE_S,
    Attempt,
    Monitor,
    StopFlags,
    environment_failed,
)
from sweeps.record import ESSENTIAL, OWN_RUN, STUDY_CALIBRATION, TrialRecord, outcome_of
from sweeps.slurm_job import trial_attrs as slurm_attrs
from sweeps.space import measured, suggest, trial_config
from sweeps.spec import FLOPS_BUDGET, StudySpec
from sweeps.verdicts import Verdict

if TYPE_CHECKING:
    from sweeps.preflight import Preflight

#: The name of the memory constraint (``Trial.set_constraint``).
CONSTRAINT_KEY = "memory"

Event = Callable[[str, dict[str, Any]], None]

# Optuna warns when a storage with heartbeats is used outside ``Study.optimize``; the runner
# records the heartbeats itself (``liveness.heartbeat``) around each ask/tell trial.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


# --- the context ---------------------------------------------------------------------------------


def child_env(device: WorkerDevice) -> dict[str, str]:
    """What a trial's child gets on top of this process's environment: ``lm.host.CHILD_ENV``
    (PCI device order), then its device's own (``CUDA_VISIBLE_DEVICES``, threads)."""
    return {**host.CHILD_ENV, **device.env}


def child_threads(device: WorkerDevice) -> int:
    """The intra-op threads ``device``'s child runs: what its environment says (``with_threads``
    sets it), else this host's most for its kind."""
    given = child_env(device).get(host.NUM_THREADS_ENV, "")
    return int(given) if given.isdigit() else host.run_threads(device.kind)


def load_preflight() -> Preflight:
    """``sweeps.preflight`` (memory planning), imported when first needed."""
    from sweeps import preflight

    return preflight


class Lease(Protocol):
    """What an admitted trial holds until it ends (``sweeps.engines.local.Lease``): the device
    its child runs on and the bytes reserved there."""

    @property
    def bytes(self) -> int: ...

    @property
    def device(self) -> WorkerDevice: ...


LeaseT = TypeVar("LeaseT", bound=Lease)


class Admission(Protocol[LeaseT]):
    """Where a planned trial waits for room on a device (``sweeps.engines.local.Admission``):
    ``acquire`` blocks until its predicted bytes fit, or returns None once ``stop`` is set."""

    def acquire(self, predicted_bytes: int, stop: threading.Event) -> LeaseT | None: ...

    def release(self, lease: LeaseT) -> None: ...


@dataclass
class RunnerContext:
    """What every trial of one study in one process shares."""

    spec: StudySpec
    study: optuna.Study
    storage: RDBStorage
    study_dir: Path
    launcher: Launcher
    budget_bytes: int | None = None
    stop: StopFlags = field(default_factory=StopFlags)
    poll_s: float = POLL_S
    term_grace_s: float = TERM_GRACE_S
    #: Memory planning: ``sweeps.preflight`` unless a test gives another.
    preflight: Preflight = field(default_factory=load_preflight)
    on_event: Event | None = None
    #: Trials wait for room on a device before launching (None: each worker's device is its
    #: own, one trial at a time).
    admission: Admission[Any] | None = None
    host: str = field(default_factory=socket.gethostname)

    def event(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a display problem never stops a trial
                self.on_event(kind, data)


@dataclass
class TrialReport:
    """How a trial ended, for the worker loop and the progress display."""

    number: int
    outcome: str
    reason: str
    values: list[float] | None = None
    told: bool = True
    #: The environment failed the trial (``environment_failed``): the worker re-queues it.
    environment: bool = False


class TrialRun:
    """The state of one trial while its child runs."""

    def __init__(self, ctx: RunnerContext, device: WorkerDevice, trial: optuna.Trial) -> None:
        self.ctx = ctx
        self.device = device
        self.trial = trial
        self.trial_id = optuna_compat.trial_id(trial)
        self.spec = ctx.spec
        self.judge = Judge(ctx.spec, trial, StudyBoard(ctx.storage, ctx.study, self.trial_id))
        #: What the database refused to store (``record``), one line each, for the record.
        self.storage_problems: list[str] = []

    def attempt(self, cfg: TrainConfig, run_dir: Path, attempt_no: int) -> Attempt:
        ctx, trial = self.ctx, self.trial
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a previous attempt of this trial number
        run_dir.mkdir(parents=True)
        write_config(run_dir, cfg)
        self.judge.start(cfg)
        earlier = ctx.storage.get_trial_system_attrs(self.trial_id).get("retry_history", [])
        resume_from_earlier(ctx.study_dir, earlier, cfg, run_dir)
        launched_at = time.time()
        started = time.monotonic()
        child = ctx.launcher.launch(
            run_dir, log_path=run_dir / LOG_FILE, env=child_env(self.device), cpus=self.device.cpus
        )
        monitor = Monitor(
            child,
            run_dir,
            launched_at=launched_at,
            started=started,
            flags=ctx.stop,
            limits=self.spec.limits,
            poll_s=ctx.poll_s,
            term_grace_s=ctx.term_grace_s,
            threads=child_threads(self.device),
        )
        ctx.event("launch", number=trial.number, pid=child.pid, run_dir=str(run_dir))
        try:
            with liveness.heartbeat(ctx.storage, self.trial_id):
                monitor.run(
                    lambda row, history: self.on_eval(row, history, attempt_no),
                    lambda tokens: ctx.event("progress", number=trial.number, tokens=tokens),
                )
        finally:
            child.close()  # kills it if we leave early (an exception)
        return monitor.ending()

    def on_eval(
        self, row: dict[str, Any], history: list[dict[str, Any]], attempt_no: int
    ) -> Verdict | None:
        """Store an evaluation and its samples, then judge it (``sweeps.judge``). A cooldown
        read is judged only: its values are the trial's at a rung (user attribute ``rungs``),
        not a point of its learning curve."""
        ctx, trial = self.ctx, self.trial
        if row.get("read") is not None:
            return self.judge(row, history)
        metrics = {k: v for k, v in row.items() if k != "samples"}
        if attempt_no > 1:  # a fitted retry: its evaluations follow the first attempt's
            metrics["attempt"] = attempt_no
        where = f"step {row.get('step')}"
        self.record(
            f"the evaluation at {where}",
            lambda: records.record_eval(
                ctx.storage, ctx.spec.name, trial.number, self.trial_id, metrics
            ),
        )
        samples = row.get("samples") or []
        if samples:
            self.record(
                f"the samples at {where}",
                lambda: records.record_samples(
                    ctx.storage,
                    ctx.spec.name,
                    trial.number,
                    self.trial_id,
                    samples,
                    tokens=row.get("tokens"),
                    step=row.get("step"),
                ),
            )
        ctx.event("eval", number=trial.number, tokens=row.get("tokens"), val_bpb=row.get("val_bpb"))
        return self.judge(row, history)

    def record(self, what: str, write: Callable[[], None]) -> None:
        """Store something that is not the trial's result (an evaluation's row for the report,
        its samples): a database that refuses it costs one noted line (``storage_problems``),
        never the trial or the worker. The trial is judged on its metrics, which the parent
        holds in memory; a database that is really gone fails the next Optuna call anyway."""
        try:
            write()
        except Exception as exc:  # whatever the driver raises: a note, not a crash
            self.storage_problems.append(f"{what} not stored: {storage.describe_error(exc)}")


def resume_from_earlier(
    study_dir: Path, earlier: list[int], cfg: TrainConfig, run_dir: Path
) -> int:
    """Give a re-queued trial's fresh ``run_dir`` the latest resume checkpoint of ``cfg``'s
    computation among its ``earlier`` trials' run dirs (their ``retry_history``), with the
    ``metrics.jsonl`` rows it covers and their ``best.pt``: the child then continues it, and
    the trial's evaluations are followed from the first. Its tokens; 0 when there is none."""
    found: list[tuple[int, Path]] = [
        (index["tokens"], src)
        for src in (study_dir / "trials" / str(n) for n in earlier)
        if (index := read_resume_index(src)) is not None
        and index["resume_fingerprint"] == cfg.resume_fingerprint()
    ]
    if not found:
        return 0
    tokens, src = max(found)
    for name in (RESUME_INDEX_FILE, RESUME_FILE, CHECKPOINT_FILE):
        if (src / name).is_file():
            shutil.copyfile(src / name, run_dir / name)
    keep_metrics_until(src, tokens, into=run_dir)
    return tokens


# --- a whole trial -------------------------------------------------------------------------------


def run_trial(
    ctx: RunnerContext, device: WorkerDevice, trial: optuna.Trial, calibration: float | None = None
) -> TrialReport:
    """Run ``trial`` (already asked, RUNNING) to its end and tell Optuna. Never raises for a
    trial's own failure (that is an outcome); an exception here is the orchestrator's (e.g. the
    database went away): its child is killed, and the worker marks the trial crashed if it can
    (else the heartbeat fails and re-queues it)."""
    spec = ctx.spec
    rec = TrialRecord(host=ctx.host, pid=os.getpid(), started_at=time.time())
    records.record_host(
        ctx.storage, spec.name, trial.number, optuna_compat.trial_id(trial), host=ctx.host
    )
    try:
        params = suggest(trial, spec)
        cfg = fidelity.bracket_reads(spec, trial.number, trial_config(spec, params, measured))
    except SweepsError as exc:
        if not (spec.corpus.dir / MANIFEST_NAME).is_file():  # its bytes per token unreadable
            return _environment_failure(ctx, trial, rec, f"environment: {exc}")
        return finish(ctx, trial, outcomes.CRASHED, f"invalid configuration: {exc}", rec)
    rec.sampled = dict(params)
    earlier = duplicate_of(ctx.study, trial.number, params)
    if earlier is not None:
        return copied(ctx, trial, device, params, cfg, earlier, rec)
    rec.budget_unit = cfg.budget_unit()
    if FLOPS_BUDGET in params:  # an IsoFLOP cell ([scaling]): the budget its fit groups it by
        rec.flops_budget = float(params[FLOPS_BUDGET])
    pre = ctx.preflight
    if calibration is None:  # given: the plan that placed the trial was made with it (Ray)
        calibration = float(pre.calibration_factor(ctx.study))
    # Planned for the launcher that starts the child: a forked child's baseline is its own.
    plan = pre.plan_trial(
        cfg,
        spec.limits,
        device=device.kind,
        budget_bytes=ctx.budget_bytes,
        calibration=calibration,
        launcher=ctx.launcher.kind,
    )
    rec.update(
        predicted_mem_bytes=int(plan.predicted_bytes),
        predicted_mem_raw_bytes=int(plan.predicted_raw_bytes),
        predicted_peak_mem_raw_bytes=int(plan.predicted_measured_raw_bytes),
        predicted_peak_mem_kind=plan.measured_kind,
        memory_budget_bytes=plan.budget_bytes,
        calibration_factor=calibration,
    )
    if plan.fitted:
        rec.fitted = dict(plan.fitted)
    cfg = plan.cfg
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    rec.planned_steps = verdicts.planned_steps(cfg.max_tokens, cfg.tokens_per_step)
    note = verdicts.under_trained_note(cfg, spec.limits.collapse)
    if note is not None:
        rec.under_trained = note
    if cfg.tokenizer == "word":  # what a capped vocabulary drops, from its token cache
        with contextlib.suppress(SweepsError):  # a note: a corpus gone is the child's to report
            rate = measured(cfg)
            unk = verdicts.unk_note(rate.unk_tokens, rate.unk_bytes)
            if unk is not None:
                rec.unk_note = unk
    rec.predicted_flops = predicted_flops = flops.count(cfg).flops
    over = over_compute_limit(predicted_flops, spec.limits)
    if over is not None:
        return _not_launched(ctx, trial, device, params, cfg, outcomes.PRUNED, over, rec)
    if not plan.fits:
        return _not_launched(
            ctx, trial, device, params, cfg, outcomes.PREDICTED_OOM, plan.reason, rec
        )
    with _admitted(ctx, trial, device, plan.predicted_bytes) as placed:
        if placed is None:
            return finish(
                ctx,
                trial,
                outcomes.INTERRUPTED,
                "stopped by the user (Ctrl-C or SIGTERM) while it waited for room on a device",
                rec,
            )
        device, budget = placed
        device = with_threads(device, cfg, rec)
        return _launch(ctx, trial, device, params, cfg, plan.predicted_bytes, budget, rec)


def with_threads(device: WorkerDevice, cfg: TrainConfig, rec: TrialRecord) -> WorkerDevice:
    """``device`` with the threads its CPU child runs (``lm.host.trial_threads``: by the
    micro-step's FLOPs and the cores of its own that other work leaves free, measured now),
    recorded in ``rec`` (``threads``, ``threads_reason``). A GPU trial, or one without cores
    of its own, is left as it is (its child chooses by the same rule on the cores it has)."""
    if device.kind != "cpu" or not device.cpus:
        return device
    choice = host.trial_threads(device.cpus, flops.step_flops(cfg))
    rec.threads, rec.threads_reason = choice.threads, choice.reason
    return dataclasses.replace(
        device, env={**device.env, host.NUM_THREADS_ENV: str(choice.threads)}
    )


@contextlib.contextmanager
def _admitted(
    ctx: RunnerContext, trial: optuna.Trial, device: WorkerDevice, predicted: int
) -> Iterator[tuple[WorkerDevice, int | None] | None]:
    """(the device, the budget of its child) once the trial may launch; None when a stop came
    first. Without admission: the worker's own device and the study's budget. With it: the
    device the trial was admitted to and its reservation, held (and heartbeats recorded: a
    waiting trial is alive) until the trial ends."""
    if ctx.admission is None:
        yield device, ctx.budget_bytes
        return
    with liveness.heartbeat(ctx.storage, optuna_compat.trial_id(trial)):
        lease = ctx.admission.acquire(predicted, ctx.stop.stop)
    if lease is None:
        yield None
        return
    try:
        optuna_compat.write_user_attrs(
            ctx.storage,
            optuna_compat.trial_id(trial),
            TrialRecord(
                placed_on=lease.device.label,
                reserved_mem_bytes=int(lease.bytes),
                admitted_at=time.time(),
            )
            .merge(TrialRecord.from_attrs(slurm_attrs()))  # which Slurm job, under Slurm
            .to_attrs(),
        )
        yield lease.device, (None if ctx.budget_bytes is None else int(lease.bytes))
    finally:
        ctx.admission.release(lease)


def _launch(
    ctx: RunnerContext,
    trial: optuna.Trial,
    device: WorkerDevice,
    params: dict[str, Any],
    cfg: TrainConfig,
    predicted: int,
    budget: int | None,
    rec: TrialRecord,
) -> TrialReport:
    """Launch an admitted trial's child (and its fitted retry), classify the ending, tell."""
    spec = ctx.spec
    run = TrialRun(ctx, device, trial)
    # Absolute: the child, the fork server and a report elsewhere all read it.
    run_dir = Path(os.path.abspath(ctx.study_dir / "trials" / str(trial.number)))
    rec.run_dir = str(run_dir)
    ctx.event(
        "start", number=trial.number, params=params, max_tokens=cfg.max_tokens, worker=device.label
    )
    try:
        attempt, cfg, attempt_no = _attempts(run, cfg, run_dir, predicted, rec, budget)
    except OSError as exc:  # the run dir cannot be made or written, or the child not started
        return _environment_failure(
            ctx,
            trial,
            rec,
            "environment: cannot prepare or launch "
            f"the trial in {run_dir}: {type(exc).__name__}: {exc}",
        )
    rec.config = cfg.to_dict()
    if attempt_no > 1:
        rec.attempts = attempt_no
    rec.merge(attempt_fields(attempt, device.kind))
    if run.storage_problems:
        rec.storage_problems = capped(run.storage_problems)
    rec.merge(compute_fields(cfg, attempt, device.kind, device.env))
    if environment_failed(attempt):
        return _environment_failure(ctx, trial, rec, attempt.reason)
    values = None
    outcome, reason = attempt.outcome, attempt.reason
    if outcome == outcomes.COMPLETE and rec.unk_note:
        reason = f"{reason}; {rec.unk_note}"  # not a plain complete
    if outcome == outcomes.COMPLETE:
        values, missing = objective_values(spec, attempt, rec)
        if missing:
            outcome, reason = outcomes.DIVERGED, f"{missing} is not finite at the end of training"
            values = None
            with contextlib.suppress(OSError):  # the run dir says what the database says
                record_verdict(run_dir, outcome, reason)
    return finish(ctx, trial, outcome, reason, rec, values)


def _not_launched(
    ctx: RunnerContext,
    trial: optuna.Trial,
    device: WorkerDevice,
    params: dict[str, Any],
    cfg: TrainConfig,
    outcome: str,
    reason: str,
    rec: TrialRecord,
) -> TrialReport:
    """End a trial the plan refused (memory or compute) without launching it."""
    rec.config = cfg.to_dict()
    ctx.event(
        "start", number=trial.number, params=params, max_tokens=cfg.max_tokens, worker=device.label
    )
    return finish(ctx, trial, outcome, reason, rec)


#: Endings a copy may not stand in for: the machine's, not the configuration's (a trial that ran
#: out of wall-clock time may finish on a quieter one), and failures (re-queued anyway).
NOT_COPIED = (outcomes.TIMEOUT, outcomes.CRASHED, outcomes.INTERRUPTED)


def duplicate_of(
    study: optuna.Study, number: int, params: dict[str, Any]
) -> optuna.trial.FrozenTrial | None:
    """The earliest finished trial with exactly ``params`` (every parameter, the seed among them
    when it is one), whose ending says something about the configuration: its result is this
    trial's too, since the same configuration trains the same weights. Samplers repeat points in
    small categorical spaces (TPE proposed the starter's trial 2 again as trial 3: 126 s spent
    twice). Points meant to differ differ in their seed (``seed`` in the space, an ablation's
    seeds, ``sweeps confirm``)."""
    if not params:
        return None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        outcome = outcome_of(t)
        if t.number == number or outcome is None or outcome in NOT_COPIED:
            continue
        if set(t.params) == set(params) and all(
            type(t.params[k]) is type(v) and t.params[k] == v for k, v in params.items()
        ):
            return t
    return None


def copied(
    ctx: RunnerContext,
    trial: optuna.Trial,
    device: WorkerDevice,
    params: dict[str, Any],
    cfg: TrainConfig,
    earlier: optuna.trial.FrozenTrial,
    rec: TrialRecord,
) -> TrialReport:
    """End ``trial`` with ``earlier``'s result, copied and said so: no training, and the sampler
    sees the value (its intermediate values too, for a pruner)."""
    old = TrialRecord.from_trial(earlier)
    source = earlier.number if old.copy_of is None else old.copy_of
    rec.merge(old.without(OWN_RUN)).update(copy_of=source, wall_s=0.0, train_s=0.0)
    outcome = str(old.outcome)
    reason = (
        f"copy of trial {source}: the same parameters and seed, so the same "
        f"configuration; its result is recorded, not trained again "
        f"({old.reason if old.reason is not None else outcome})"
    )
    ctx.event(
        "start", number=trial.number, params=params, max_tokens=cfg.max_tokens, worker=device.label
    )
    for step, value in sorted(earlier.intermediate_values.items()):
        with contextlib.suppress(Exception):  # a value Optuna refuses is not the copy's end
            trial.report(value, step)
    values = (
        list(earlier.values) if earlier.state == TrialState.COMPLETE and earlier.values else None
    )
    return finish(ctx, trial, outcome, reason, rec, values)


def _attempts(
    run: TrialRun,
    cfg: TrainConfig,
    run_dir: Path,
    predicted: int,
    rec: TrialRecord,
    budget: int | None,
) -> tuple[Attempt, TrainConfig, int]:
    """Run the trial's child; with ``oom_policy = "fit"``, once more with the micro-batch halved
    after an OOM. (The last attempt, its config, how many attempts.)"""
    ctx, attempt_no = run.ctx, 1
    while True:
        cfg = _with_memory_limit(ctx, run.device, cfg, predicted, budget)
        attempt = run.attempt(cfg, run_dir, attempt_no)
        if (
            attempt.outcome == outcomes.OOM
            and run.spec.limits.oom_policy == "fit"
            and attempt_no == 1
            and not ctx.stop.stop.is_set()
        ):
            halved = ctx.preflight.halve_batch(cfg)
            if halved is not None:
                rec.fitted = {"batch_size": halved.batch_size, "grad_accum": halved.grad_accum}
                rec.fit_retry_reason = attempt.reason
                cfg, attempt_no = halved, attempt_no + 1
                continue
        return attempt, cfg, attempt_no


def _environment_failure(
    ctx: RunnerContext, trial: optuna.Trial, rec: TrialRecord, reason: str
) -> TrialReport:
    """Fail a trial the environment ended (the worker re-queues it: it is not counted)."""
    failed = dataclasses.replace(rec, environment_failure=True)
    report = finish(ctx, trial, outcomes.CRASHED, reason, failed)
    report.environment = True
    return report


def _with_memory_limit(
    ctx: RunnerContext, device: WorkerDevice, cfg: TrainConfig, predicted: int, budget: int | None
) -> TrainConfig:
    """A child's enforced limit, derived from its budget (the study's, or its reservation
    under admission: packed children cannot outgrow the room they were admitted to by much);
    a value fixed in the spec is kept when it is tighter. CPU: ``cpu_memory_limit_bytes``
    (``preflight.cpu_child_limit``); CUDA: ``cuda_memory_limit_bytes``, the budget itself, which
    the child turns into its caching allocator's share of the device (``lm.runtime``)."""
    if budget is None:
        return cfg
    if device.kind == "cuda":
        limit = (
            int(budget)
            if cfg.cuda_memory_limit_bytes is None
            else min(int(budget), cfg.cuda_memory_limit_bytes)
        )
        return replace(cfg, cuda_memory_limit_bytes=limit)
    if device.kind != "cpu":
        return cfg
    limit = int(ctx.preflight.cpu_child_limit(budget, int(predicted)))
    if cfg.cpu_memory_limit_bytes is not None:
        limit = min(limit, cfg.cpu_memory_limit_bytes)
    return replace(cfg, cpu_memory_limit_bytes=limit)


def finish(
    ctx: RunnerContext,
    trial: optuna.Trial,
    outcome: str,
    reason: str,
    rec: TrialRecord | None = None,
    values: list[float] | None = None,
) -> TrialReport:
    """Record the trial's record (``rec`` with its ending) and tell Optuna its state."""
    state = TrialState[outcomes.state_name(outcome)]
    rec = dataclasses.replace(rec or TrialRecord(), outcome=outcome, reason=reason)
    constraint = outcomes.constraint_value(outcome)
    if state != TrialState.FAIL:
        rec.constraint = constraint
    told = True
    try:
        write_trial_attrs(ctx.storage, optuna_compat.trial_id(trial), rec)
        if state != TrialState.FAIL and hasattr(trial, "set_constraint"):
            trial.set_constraint(CONSTRAINT_KEY, constraint)
        if state == TrialState.COMPLETE:
            ctx.study.tell(trial, values)
        else:
            ctx.study.tell(trial, state=state)
    except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError) as exc:
        # Another worker failed it first (this worker looked dead: its heartbeat stopped).
        told = False
        reason = f"{reason} (not recorded: {exc})"
    ctx.event("end", number=trial.number, outcome=outcome, reason=reason, values=values)
    _update_study_attrs(ctx)
    return TrialReport(trial.number, outcome, reason, values, told)


def write_trial_attrs(rdb: RDBStorage, trial_id: int, rec: TrialRecord) -> None:
    """The trial's record in one transaction. When the database refuses it (a value it cannot
    hold; not when it is unreachable or locked, which is the worker's error), the essential
    fields alone (``record.ESSENTIAL``) and a ``storage_problems`` line: a note never costs a
    trial its result."""
    values = {k: jsonable(v) for k, v in rec.to_attrs().items()}
    try:
        optuna_compat.write_user_attrs(rdb, trial_id, values)
    except sa.exc.SQLAlchemyError as exc:
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            raise
        kept = TrialRecord.from_attrs({k: values[k] for k in ESSENTIAL if k in values})
        kept.storage_problems = [
            *(rec.storage_problems or []),
            "the trial's other attributes not stored: " + storage.describe_error(exc),
        ]
        optuna_compat.write_user_attrs(rdb, trial_id, kept.to_attrs())


def _update_study_attrs(ctx: RunnerContext) -> None:
    with contextlib.suppress(Exception):  # informational only
        factor = float(ctx.preflight.calibration_factor(ctx.study))
        ctx.study.set_user_attr(STUDY_CALIBRATION, factor)


def constraints_from_attrs(trial: optuna.trial.FrozenTrial) -> list[float]:
    """``constraints_func`` for Optuna versions without ``Trial.set_constraint``."""
    return [float(TrialRecord.from_trial(trial).constraint or 0.0)]
