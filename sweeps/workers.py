"""N workers on one study: devices, the shared trial count, recovery, clean shutdown.

Each worker is a thread running the ask -> ``runner.run_trial`` -> tell loop. Trials are placed
by predicted memory (``sweeps.admission``): a worker claims a trial, plans it, and waits in
the host's pool until a device has room for its prediction; that device (one GPU:
``CUDA_VISIBLE_DEVICES``; on the CPU its own cores: the children's affinity, and
``SWEEPS_NUM_THREADS``) is where its child runs. So the workers are a cap on concurrency
(``--max-concurrent``, default what the devices hold), and memory decides below it.
How many worker threads (``worker_threads``) is what ``sweeps run --dry-run`` prints too.
Workers in other processes or on other machines (``sweeps worker``) run the same loop against
the same database.

How many trials: the study ends with exactly ``n_trials`` *counted* trials, whatever dies on the
way. A trial counts unless a later trial re-queued it (a failed run re-queued by a heartbeat,
``fail_and_requeue`` or an interruption: its parameters run again under a new number, which
counts instead). Counted trials are ranked by number (Optuna assigns numbers atomically, in
creation order); the first ``n_trials`` of them form the budget. A worker asks for a trial only
while the budget has room (fewer counted trials than ``n_trials``) or holds a WAITING trial, and
after ``ask`` checks that the trial it got is inside the budget: if a worker elsewhere asked at
the same moment, the one outside the budget hands its trial back (RUNNING -> WAITING, never
run, never counted). The study is done when every trial of the budget is finished
(COMPLETE, PRUNED or FAIL). Trials re-queued beyond ``max_retries`` stay FAIL and count.

Recovery: on start, RUNNING trials whose owner (``sweeps_trial_hosts``) is a process of this
host that no longer exists are failed and re-queued at once; trials of dead workers elsewhere are
failed by the heartbeat after the grace period (``fail_stale_trials`` before each ask and while
waiting). Stopping: ``StopFlags.stop`` (first Ctrl-C / SIGTERM) launches nothing more and stops
the running children; their trials end ``interrupted`` (FAIL) and are re-queued, so a resumed
run trains them again; ``StopFlags.kill`` (second Ctrl-C) kills the children at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from lm import outcomes
from lm.errors import SweepsError
from sweeps import admission, liveness, optuna_compat, records
from sweeps import record as rc
from sweeps import storage as st
from sweeps.claims import claim_lock
from sweeps.launchers import Launcher, make_launcher
from sweeps.monitor import POLL_S, TERM_GRACE_S
from sweeps.monitor import StopFlags as StopFlags  # the CLI stops workers with it
from sweeps.record import TrialRecord
from sweeps.runner import (
    RunnerContext,
    TrialReport,
    WorkerDevice,
    constraints_from_attrs,
    finish,
    run_trial,
)
from sweeps.space import make_pruner, make_sampler
from sweeps.spec import StudySpec, read_spec
from sweeps.spec.values import MAX_SAMPLER_SEED
from sweeps.warm_start import CarryPlan, add_once, is_carried

#: How often a worker with nothing to launch looks again.
IDLE_S = 1.0

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


# --- counting ------------------------------------------------------------------------------------


def superseded_numbers(trials: Sequence[FrozenTrial]) -> set[int]:
    """Numbers of trials that were re-queued (their parameters run again as another trial)."""
    out: set[int] = set()
    for t in trials:
        out.update(int(n) for n in t.system_attrs.get("retry_history", ()))
    return out


@dataclass(frozen=True)
class BudgetState:
    """Where a study stands against its ``n_trials``."""

    n_trials: int
    counted: tuple[FrozenTrial, ...]  # every counted trial, by number
    in_budget: tuple[FrozenTrial, ...]  # the first n_trials of them

    @property
    def finished(self) -> int:
        return sum(t.state in FINISHED for t in self.in_budget)

    @property
    def running(self) -> int:
        return sum(t.state == TrialState.RUNNING for t in self.in_budget)

    @property
    def done(self) -> bool:
        """Every trial of the budget finished, and no trial beyond it still RUNNING (one asked
        by a worker that died before handing it back: it is failed once its heartbeat is
        stale, so the study is never left with a RUNNING trial)."""
        beyond = self.counted[self.n_trials :]
        return (
            len(self.in_budget) >= self.n_trials
            and self.finished == len(self.in_budget)
            and not any(t.state == TrialState.RUNNING for t in beyond)
        )

    @property
    def can_ask(self) -> bool:
        return len(self.counted) < self.n_trials or any(
            t.state == TrialState.WAITING for t in self.in_budget
        )

    def holds(self, number: int) -> bool:
        return any(t.number == number for t in self.in_budget)


def budget_state(trials: Sequence[FrozenTrial], n_trials: int) -> BudgetState:
    gone = superseded_numbers(trials)
    # Trials carried from another study (``sweeps run --from``) inform the sampler only.
    counted = tuple(
        sorted(
            (t for t in trials if t.number not in gone and not is_carried(t)),
            key=lambda t: t.number,
        )
    )
    return BudgetState(n_trials, counted, counted[:n_trials])


def trial_outcome(t: FrozenTrial, superseded: set[int] | None = None) -> str:
    """The outcome shown for a trial: its recorded one, else its state (a FAIL without one was
    failed by a heartbeat: its worker died)."""
    return outcomes.shown(rc.outcome_of(t), t.state.name)


# --- the study -----------------------------------------------------------------------------------


SPEC_ATTR = rc.STUDY_SPEC
N_TRIALS_ATTR = rc.STUDY_N_TRIALS
ENQUEUED_ATTR = rc.STUDY_ENQUEUED
#: The per-trial budget in bytes a run planned with (``run_threads`` records it; the report).
MEMORY_BUDGET_ATTR = rc.STUDY_MEMORY_BUDGET
#: Parts of a spec that must not change under a running study (its trials would not compare).
_IDENTITY_KEYS = ("fixed", "space", "ablation", "scaling", "transfer", "corpus")


def create_or_resume(
    spec: StudySpec,
    storage: RDBStorage,
    *,
    n_trials: int | None = None,
    carry: CarryPlan | None = None,
) -> tuple[optuna.Study, bool]:
    """The study named by the spec: created (spec stored, its objectives named, ``carry``'s
    trials of an older study added and ``[[enqueue]]``/ablation trials queued, each once), or
    resumed after checking the stored spec agrees. Returns (study, created)."""
    name = spec.name
    # The creator is the process whose create_study succeeded: of several started at once, the
    # others see DuplicatedStudyError and resume.
    try:
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            directions=spec.study.directions,  # type: ignore[arg-type]  # minimize/maximize: checked
        )
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage)
        created = False
    directions = [d.name.lower() for d in study.directions]
    if directions != spec.study.directions:
        raise SweepsError(
            f"study {name!r} already exists with directions {directions}, but the "
            f"spec says {spec.study.directions}; rename the study or restore its "
            "objectives"
        )
    stored = study.user_attrs.get(SPEC_ATTR)
    current = spec.to_dict()
    if stored is not None:
        for key in _IDENTITY_KEYS:
            if _canon(stored.get(key)) != _canon(current.get(key)):
                raise SweepsError(
                    f"study {name!r} was started with a different [{key}] than "
                    f"{spec.source or 'this spec'}; restore it, or give the study "
                    "a new name"
                )
    study.set_user_attr(SPEC_ATTR, current)
    optuna_compat.set_metric_names(study, spec.study.metrics)  # "val_bpb", not "Objective 0"
    # The latest run's target, so workers joining later stop at the same count.
    study.set_user_attr(
        N_TRIALS_ATTR, int(n_trials if n_trials is not None else spec.study.n_trials)
    )
    if carry is not None:
        add_once(storage, study, carry, created=created)
    if ENQUEUED_ATTR not in study.user_attrs:
        # Exactly once, whoever gets there first (a marker written with the trials).
        optuna_compat.enqueue_once(
            storage, storage.get_study_id_from_name(name), ENQUEUED_ATTR, spec.initial_trials()
        )
    return study, created


def _canon(value: Any) -> Any:
    """JSON-like value with lists and tuples alike (a spec read back from storage)."""
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    return value


def spec_from_study(study: optuna.Study) -> StudySpec:
    """The spec stored by ``sweeps run`` (for ``sweeps worker``)."""
    data = study.user_attrs.get(SPEC_ATTR)
    if not isinstance(data, dict):
        raise SweepsError(
            f"study {study.study_name!r} has no stored spec (it was not created by "
            "`sweeps run`); start it with `sweeps run SPEC` first"
        )
    from sweeps.lifecycle import renamed_spec

    # The database's name is the study's: a spec naming another (a study renamed outside
    # sweeps) made every later lookup by the spec's name a KeyError 'Record does not exist.'
    return read_spec(
        renamed_spec(data, study.study_name),
        source=f"study {study.study_name!r}",
        check_paths=False,
    )


def target_trials(spec: StudySpec, study: optuna.Study, override: int | None) -> int:
    if override is not None:
        return override
    stored = study.user_attrs.get(N_TRIALS_ATTR)
    return int(stored) if isinstance(stored, int) else spec.study.n_trials


def offset_seed(seed: int, offset: int) -> int:
    """A resumed or joining process's sampler seed: the spec's plus ``offset``, kept in the
    range samplers take."""
    return (seed + offset) % (MAX_SAMPLER_SEED + 1)


def load_for_workers(spec: StudySpec, storage: RDBStorage, *, seed_offset: int = 0) -> optuna.Study:
    """The study with the spec's sampler and pruner, its objectives named as the spec names them
    (Optuna's metric names); ``seed_offset`` keeps a resumed or joining process from replaying
    the random draws of the first one."""
    if spec.study.seed is not None and seed_offset:
        seed = offset_seed(spec.study.seed, seed_offset)
        spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, seed=seed))
    from optuna.trial import Trial

    constraints = None if hasattr(Trial, "set_constraint") else constraints_from_attrs
    study = optuna.load_study(
        study_name=spec.name,
        storage=storage,
        sampler=make_sampler(spec, constraints),
        pruner=make_pruner(spec),
    )
    # A study created before the tool named its metrics gets them from any process that runs it.
    optuna_compat.set_metric_names(study, spec.study.metrics)
    return study


def recover_local(storage: RDBStorage, study: optuna.Study, max_retries: int) -> list[int]:
    """Fail and re-queue RUNNING trials whose process on this host is gone; their numbers."""
    numbers = []
    for t in liveness.stale_local_trials(storage, study):
        if liveness.fail_and_requeue(
            storage,
            study,
            t,
            max_retries=max_retries,
            reason="its worker process ended without finishing it (found on restart)",
        ):
            numbers.append(t.number)
    return numbers


def requeue_interrupted(study: optuna.Study, number: int, max_retries: int | None) -> bool:
    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None or trial.state != TrialState.FAIL:
        return False
    return liveness.requeue(study, trial, max_retries=max_retries)


def claim_trial(
    study: optuna.Study, storage: RDBStorage, n_trials: int, max_retries: int | None = 2
) -> tuple[bool, optuna.Trial | None]:
    """(done, trial): the next trial of the budget for this worker, if there is room.

    ``done`` when every trial of the budget is finished. Otherwise ``ask`` (a WAITING trial
    first), then check the trial is inside the budget: a worker elsewhere may have asked at the
    same moment, and the one outside hands its trial back (RUNNING -> WAITING, not counted).
    ``(False, None)``: nothing to start now (the budget is full of running trials). Under the
    study's claim lock (``sweeps.claims``), so on PostgreSQL and SQLite the hand-back is only a
    fallback.
    """
    with claim_lock(storage, study.study_name) as exclusive:  # never ask past n_trials
        if exclusive:  # no live claimer is between its ask and its owner row
            for t in liveness.unowned_running_trials(storage, study):
                liveness.fail_and_requeue(
                    storage,
                    study,
                    t,
                    max_retries=max_retries,
                    reason="its worker ended between asking for it and recording itself as "
                    "its owner",
                )
        return _claim(study, storage, n_trials)


def _claim(
    study: optuna.Study, storage: RDBStorage, n_trials: int
) -> tuple[bool, optuna.Trial | None]:
    state = budget_state(study.get_trials(deepcopy=False), n_trials)
    if state.done:
        return True, None
    if not state.can_ask:
        return False, None
    trial = study.ask()
    # At once, so a worker killed right after the ask leaves a trial that can be failed: its
    # owner (a restart on this host fails it at once) and its heartbeat (others fail it once
    # stale; Optuna fails only trials whose heartbeat went stale).
    records.record_host(storage, study.study_name, trial.number, optuna_compat.trial_id(trial))
    if storage.get_heartbeat_interval() is not None:
        storage.record_heartbeat(optuna_compat.trial_id(trial))
    state = budget_state(study.get_trials(deepcopy=False), n_trials)
    if state.holds(trial.number):
        return False, trial
    storage.set_trial_state_values(optuna_compat.trial_id(trial), TrialState.WAITING)
    return False, None


# --- the loop ------------------------------------------------------------------------------------

#: A worker stops after this many trials in a row that the environment failed (a full disk, a
#: read-only runs dir, a deleted corpus): each is re-queued, and one clear line says why.
ENVIRONMENT_FAILURES_TO_STOP = 3


@dataclass
class WorkerOptions:
    n_trials: int
    deadline: float | None = None  # time.monotonic() after which nothing more is launched
    idle_s: float = IDLE_S


@dataclass
class WorkerResult:
    reports: list[TrialReport] = field(default_factory=list)
    #: Why the worker stopped early, one line (a database error without its SQL).
    error: str | None = None
    #: The exception behind ``error``, whole, for ``--debug``.
    exception: BaseException | None = None


def worker_loop(
    ctx: RunnerContext,
    device: WorkerDevice,
    options: WorkerOptions,
    ask_lock: threading.Lock | None = None,
    run: Callable[[RunnerContext, WorkerDevice, optuna.Trial], TrialReport] | None = None,
    out: WorkerResult | None = None,
) -> WorkerResult:
    """Ask, run and tell trials until the budget is done, time is up, or a stop is requested;
    ``run`` runs one trial (default ``runner.run_trial``; the Ray engine's runs it on a node).
    ``out`` collects the reports, and the error line even when the loop raises."""
    out = out if out is not None else WorkerResult()
    study, spec = ctx.study, ctx.spec
    lock = ask_lock or threading.Lock()
    in_a_row = 0  # trials the environment failed one after another
    while not ctx.stop.stop.is_set():
        if options.deadline is not None and time.monotonic() > options.deadline:
            break
        liveness.fail_stale_trials(study)
        with lock:
            done, trial = claim_trial(study, ctx.storage, options.n_trials, spec.limits.max_retries)
        if done:
            break
        if trial is None:
            ctx.stop.stop.wait(options.idle_s)
            continue
        try:
            report = (run or run_trial)(ctx, device, trial)
        except Exception as exc:
            line = st.describe_error(exc)
            out.error, out.exception = f"trial {trial.number}: {line}", exc
            with contextlib.suppress(Exception):
                finish(
                    ctx,
                    trial,
                    outcomes.CRASHED,
                    f"orchestrator error: {line}",
                    TrialRecord(traceback=traceback.format_exc()[-4000:]),
                )
            raise
        out.reports.append(report)
        if report.outcome == outcomes.INTERRUPTED and report.told:
            requeue_interrupted(study, trial.number, spec.limits.max_retries)
        in_a_row = in_a_row + 1 if report.environment else 0
        if report.environment and report.told:
            # Not the configuration's fault: queued again whatever max_retries says (a worker
            # stops after a few in a row, so this cannot loop).
            requeue_interrupted(study, trial.number, None)
        if in_a_row >= ENVIRONMENT_FAILURES_TO_STOP:
            out.error = (
                f"{in_a_row} trials in a row failed for the environment, not their "
                f"configuration (last: {report.reason}); they were re-queued: fix "
                "the cause and run again to resume"
            )
            ctx.stop.stop.set()  # the environment is every worker's
            break
    return out


# --- a whole run ---------------------------------------------------------------------------------


@dataclass
class RunOptions:
    #: A cap on the trials running at once (``--max-concurrent``/``--workers``); None: as many as
    #: this host's devices hold (``sweeps.admission.concurrency``).
    n_workers: int | None = 1
    n_trials: int | None = None
    timeout: float | None = None
    launcher: str = "auto"  # auto | fork | subprocess
    poll_s: float = POLL_S
    term_grace_s: float = TERM_GRACE_S
    on_event: Callable[[str, dict[str, Any]], None] | None = None


#: Worker threads per trial slot of this host (``sweeps.admission.concurrency`` without a
#: cap) at most: a few per slot keep the devices full as trials start and end; more only wait.
HOST_THREADS_PER_SLOT = 4


def host_threads(pool: Any) -> int:
    """The most worker threads a run on ``pool`` starts: ``HOST_THREADS_PER_SLOT`` per slot of
    its devices (more would only wait for room: ``--max-concurrent 100000`` on a 2-trial study
    started, and kept, 100,000 threads)."""

    return HOST_THREADS_PER_SLOT * admission.concurrency(pool, None)


def worker_threads(pool: Any, cap: int | None, trials_left: int) -> int:
    """Worker threads a run on ``pool`` starts: ``cap`` (default: what the devices run at once,
    ``admission.concurrency``), no more than the trials left (a thread per trial is the most that
    can ever run) nor ``host_threads``."""

    return max(1, min(admission.concurrency(pool, cap), trials_left, host_threads(pool)))


def run_workers(
    spec: StudySpec,
    storage: RDBStorage,
    study: optuna.Study,
    study_dir: Path,
    options: RunOptions,
    flags: StopFlags | None = None,
    *,
    launcher: Launcher | None = None,
    pool: Any = None,
    tick: Callable[[], None] | None = None,
) -> list[WorkerResult]:
    """Run worker threads on ``study`` until it is done, its time is up or ``flags.stop`` is
    set; ``tick`` is called every half second from this thread (progress).

    Trials are admitted by predicted memory (``sweeps.admission``): each worker claims a
    trial, plans it against the per-trial budget (what an empty device of this host takes),
    then waits for room in ``pool`` (default: this host's devices) before launching."""
    from sweeps import preflight

    flags = flags or StopFlags()
    n_trials = target_trials(spec, study, options.n_trials)
    pool = pool or admission.host_pool(spec, options.n_workers)
    note = admission.gpu_sharing_note(pool)
    if note is not None and options.on_event is not None:
        options.on_event("note", {"text": note})
    budget = admission.trial_budget(spec.limits, pool)
    recover_local(storage, study, spec.limits.max_retries)
    n_threads = admission.concurrency(pool, options.n_workers)
    state = budget_state(study.get_trials(deepcopy=False), n_trials)
    if state.done:
        return [WorkerResult() for _ in range(n_threads)]  # nothing to run: no launcher to start
    host_cap = host_threads(pool)
    if options.on_event is not None and n_threads > host_cap < n_trials - state.finished:
        options.on_event(
            "note",
            {
                "text": f"--max-concurrent {n_threads} is more than this "
                f"host can run; {host_cap} workers"
            },
        )
    n_threads = worker_threads(pool, options.n_workers, n_trials - state.finished)
    own_launcher = launcher is None
    launcher = launcher or make_launcher(options.launcher)
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=study_dir,
        launcher=launcher,
        budget_bytes=budget,
        stop=flags,
        poll_s=options.poll_s,
        term_grace_s=options.term_grace_s,
        preflight=preflight,
        on_event=options.on_event,
        admission=admission.Admission(pool),
    )
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    worker_options = WorkerOptions(n_trials=n_trials, deadline=deadline)
    # Each thread plans for its kind of device; admission says which device of that kind.
    kind = WorkerDevice(pool.devices[0].kind, {}, None, pool.devices[0].kind)
    return run_threads(ctx, kind, worker_options, n_threads, flags, tick, launcher, own_launcher)


def run_threads(
    ctx: RunnerContext,
    device: WorkerDevice,
    worker_options: WorkerOptions,
    n_threads: int,
    flags: StopFlags,
    tick: Callable[[], None] | None,
    launcher: Launcher | None,
    own_launcher: bool,
    run: Callable[[RunnerContext, WorkerDevice, optuna.Trial], TrialReport] | None = None,
) -> list[WorkerResult]:
    """``n_threads`` worker loops on ``ctx`` until they end; the launcher closed if owned. The
    per-trial budget they plan with is recorded on the study here, for every engine."""
    ctx.study.set_user_attr(MEMORY_BUDGET_ATTR, ctx.budget_bytes)
    results = [WorkerResult() for _ in range(n_threads)]
    lock = threading.Lock()

    def target(i: int) -> None:
        try:
            worker_loop(ctx, device, worker_options, lock, run, out=results[i])
        except BaseException as exc:
            if results[i].error is None:  # else worker_loop's own line, naming the trial
                results[i].error = st.describe_error(exc)
            results[i].exception = results[i].exception or exc
            flags.stop.set()  # one broken worker stops the others cleanly

    threads = [
        threading.Thread(target=target, args=(i,), name=f"sweeps-worker-{i}")
        for i in range(n_threads)
    ]
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            if tick is not None:
                with contextlib.suppress(Exception):
                    tick()
            for t in threads:
                t.join(timeout=0.5 / len(threads))
    finally:
        if any(t.is_alive() for t in threads):
            flags.stop.set()
            for t in threads:
                t.join()
        if own_launcher and launcher is not None:
            launcher.close()
    return results


@contextlib.contextmanager
def stop_on_signals(
    flags: StopFlags, say: Callable[[str], None] | None = None
) -> Iterator[StopFlags]:
    """First Ctrl-C or SIGTERM: ``flags.stop``; a second one: ``flags.kill``. Main thread only
    (elsewhere a no-op); the previous handlers are restored on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield flags
        return

    def handler(signum: int, frame: object) -> None:
        if flags.stop.is_set():
            flags.kill.set()
            if say:
                say("stopping now: killing the running trials")
        else:
            flags.stop.set()
            if say:
                say(
                    "stopping: no new trials; running trials are being stopped and marked "
                    "interrupted (press Ctrl-C again to kill them at once)"
                )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flags
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
