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
4. follow ``metrics.jsonl`` by polling (the child's log is never parsed): store each evaluation
   and its samples in the project's tables, report the objective to Optuna (one objective) and
   apply Optuna's pruner and the project's rules (``sweeps.pruning``, any number of
   objectives); a prune, the wall-clock limit or a stop request stops the child's group (SIGTERM,
   then SIGKILL after a grace period);
5. read ``result.json`` and classify the ending; with ``oom_policy = "fit"`` a run that still
   ran out of memory is tried once more with the micro-batch halved;
6. record the trial's user attributes (the "Trial record" of the project's contract) and tell
   Optuna: COMPLETE with the objective values, PRUNED (with a constraint value: 1.0 for
   ``oom``/``predicted_oom``) or FAIL.

The trial's heartbeat is recorded while it runs (``liveness.heartbeat``), so a worker that dies is
noticed by the others after the grace period.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from lm import flops, host, memory, outcomes
from lm.config import TrainConfig
from lm.errors import SweepsError
from lm.run_files import (
    CHECKPOINT_FILE,
    LOG_FILE,
    METRICS_FILE,
    RESULT_FILE,
    RESUME_FILE,
    RESUME_INDEX_FILE,
    TOKENIZER_FILE,
    check_metrics_row,
    jsonable,
    keep_metrics_until,
    loads_child,
    read_progress_tokens,
    read_result_dict,
    read_resume_index,
    record_verdict,
    write_config,
)
from sweeps import fidelity, liveness, optuna_compat, pruning, records, storage
from sweeps.launchers import Launcher
from sweeps.pruning import Verdict
from sweeps.space import suggest, trial_config
from sweeps.spec import FLOPS_BUDGET, Limits, StudySpec

#: Final-evaluation keys copied into the trial's user attributes.
FINAL_METRICS = ("val_bpb", "val_loss", "accuracy", "unigram_entropy", "unigram_bpb",
                 "unigram_gap", "kl_mean_to_unigram", "mean_kl_to_mean", "top20_overlap",
                 "unk_rate_targets", "unk_argmax_rate", "unk_rate_samples")
#: The name of the memory constraint (``Trial.set_constraint``).
CONSTRAINT_KEY = "memory"
#: The user attribute noting what the database refused to store for a trial (its samples, an
#: evaluation's row, its notes): one line each; the trial is judged on its metrics regardless.
STORAGE_PROBLEMS = "storage_problems"
#: The attributes a trial cannot be read without: what ``finish`` still writes when the
#: database refuses the whole set (the others are notes and details).
ESSENTIAL_ATTRS = ("outcome", "reason", "constraint", "run_dir", "config", "host", "pid",
                   "started_at")

Event = Callable[[str, dict[str, Any]], None]

# Optuna warns when a storage with heartbeats is used outside ``Study.optimize``; the runner
# records the heartbeats itself (``liveness.heartbeat``) around each ask/tell trial.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


# --- the context ---------------------------------------------------------------------------------


@dataclass
class StopFlags:
    """``stop``: launch nothing more, stop running children (SIGTERM, grace, SIGKILL) and mark
    their trials interrupted; ``kill``: SIGKILL at once."""

    stop: threading.Event = field(default_factory=threading.Event)
    kill: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class WorkerDevice:
    """Where one worker's children run: ``cpu`` or ``cuda``, their extra environment
    (``CUDA_VISIBLE_DEVICES``, ``SWEEPS_NUM_THREADS``) and CPU affinity."""

    device: str = "cpu"
    env: dict[str, str] = field(default_factory=dict)
    cpus: list[int] | None = None
    label: str = "cpu"


def child_env(device: WorkerDevice) -> dict[str, str]:
    """What a trial's child gets on top of this process's environment: ``lm.host.CHILD_ENV``
    (PCI device order), then its device's own (``CUDA_VISIBLE_DEVICES``, threads)."""
    return {**host.CHILD_ENV, **device.env}


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
    poll_s: float = 0.2
    term_grace_s: float = 10.0
    preflight: Any = None
    on_event: Event | None = None
    #: ``sweeps.engines.local.Admission``: trials wait for room on a device before launching
    #: (None: each worker's device is its own, one trial at a time).
    admission: Any = None
    host: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        if self.preflight is None:
            self.preflight = load_preflight()

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


def load_preflight() -> Any:
    """``sweeps.preflight`` (memory planning)."""
    from sweeps import preflight

    return preflight


def hard_wall_s(limits: Limits) -> float | None:
    """When the parent stops a child itself: the child enforces ``max_wall_s`` on its training
    loop; start-up, the last evaluation and writing the result get a margin on top."""
    if limits.max_wall_s is None:
        return None
    return limits.max_wall_s * 1.25 + 60.0


# --- following a run -----------------------------------------------------------------------------


class MetricsFollower:
    """Complete new lines of a growing JSON-lines file, by polling, each checked as a metrics row
    (``lm.run_files.check_metrics_row``): a line that is not a JSON object is skipped, a value of
    the wrong type dropped, and both noted in ``problems``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.problems: list[str] = []

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()  # an incomplete last line waits for the next poll
        rows = []
        for line in lines:
            if not line.strip():
                continue
            try:
                value = loads_child(line)
            except ValueError as exc:  # not JSON, or too deep (UnicodeDecodeError is one)
                self.problems.append(f"a {METRICS_FILE} line is not JSON ({str(exc)[:80]}): "
                                     f"{line[:60]!r}")
                continue
            row, problems = check_metrics_row(value)
            self.problems += problems
            if row is not None:
                rows.append(row)
        return rows


def _peak_rss(pid: int) -> int | None:
    """The child's peak resident set (VmHWM) from /proc, while it is alive."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


class StartTimes:
    """How long a child took to get going, from its own files (it records no timestamp of its
    first step).

    - ``setup_s``: launch -> ``tokenizer.json`` written (config read, imports done, token cache
      mapped; the child builds its model next).
    - ``cold_start_s``: launch -> first training step, plus the first evaluation: the mtime of
      ``metrics.jsonl`` when its first row is seen, minus the child's own time in its training
      loop up to that row (tokens / tokens_per_s). The tightest bound the files give; with a
      small evaluation it is the start-up cost of a trial.
    """

    def __init__(self, run_dir: Path, launched_at: float) -> None:
        self.run_dir = run_dir
        self.launched_at = launched_at
        self.setup_s: float | None = None
        self.cold_start_s: float | None = None

    def poll(self) -> None:
        if self.setup_s is None:
            with contextlib.suppress(OSError):
                mtime = (self.run_dir / TOKENIZER_FILE).stat().st_mtime
                self.setup_s = max(0.0, mtime - self.launched_at)

    def on_rows(self, rows: list[dict[str, Any]]) -> None:
        if self.cold_start_s is not None or not rows:
            return
        last = rows[-1]  # the file's mtime is that of the newest row read
        tokens, tps = last.get("tokens"), last.get("tokens_per_s")
        with contextlib.suppress(OSError, TypeError, ZeroDivisionError):
            written = (self.run_dir / METRICS_FILE).stat().st_mtime
            self.cold_start_s = max(0.0, written - self.launched_at - float(tokens) / float(tps))


@dataclass
class Attempt:
    """One launch of a trial's child and what came of it."""

    outcome: str
    reason: str
    result: dict[str, Any] | None
    history: list[dict[str, Any]]
    wall_s: float
    times: StartTimes
    peak_rss: int | None
    child_pid: int | None
    returncode: int | None
    #: What was wrong in the child's files (skipped lines, dropped values), for the record.
    problems: list[str] = field(default_factory=list)
    #: Why the run dir could not be written when the child left no result (a full disk): the
    #: environment's failure, whatever the child's exit code (``run_dir_unwritable``).
    unwritable: str | None = None


class _TrialRun:
    """The state of one trial while its child runs."""

    def __init__(self, ctx: RunnerContext, device: WorkerDevice, trial: optuna.Trial) -> None:
        self.ctx = ctx
        self.device = device
        self.trial = trial
        self.trial_id = optuna_compat.trial_id(trial)
        self.spec = ctx.spec
        self.reported: set[int] = set()
        objective = self.spec.study.metrics[0]
        # Intermediate values go to Optuna only with one objective it can compare.
        self.report_metric = objective if (not self.spec.study.multi_objective
                                           and objective in ("val_bpb", "val_loss")) else None
        # Multi-fidelity on tokens (``sweeps.fidelity``): the study's rungs, the ones this trial
        # is judged at (set per attempt, from its config), and its values at those it passed.
        self.study_rungs = fidelity.rungs(self.spec) if self.spec.study.pruner.by_tokens else ()
        self.my_rungs: tuple[int, ...] = ()
        self.rung_values: dict[str, list[float]] = {}
        self.judged: set[int] = set()
        self.static: dict[str, float] = {}
        self.max_tokens = 0  # the attempt's budget: its last evaluation is its final one
        #: What the database refused to store (``record``), one line each, for the record.
        self.storage_problems: list[str] = []

    def attempt(self, cfg: TrainConfig, run_dir: Path, attempt_no: int) -> Attempt:
        ctx, trial = self.ctx, self.trial
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a previous attempt of this trial number
        run_dir.mkdir(parents=True)
        write_config(run_dir, cfg)
        self.start_attempt(cfg)
        earlier = ctx.storage.get_trial_system_attrs(self.trial_id).get("retry_history", [])
        resume_from_earlier(ctx.study_dir, earlier, cfg, run_dir)
        launched_at = time.time()
        started = time.monotonic()
        child = ctx.launcher.launch(run_dir, log_path=run_dir / LOG_FILE,
                                    env=child_env(self.device), cpus=self.device.cpus)
        follower = MetricsFollower(run_dir / METRICS_FILE)
        history: list[dict[str, Any]] = []
        verdict: Verdict | None = None
        stopped: Verdict | None = None
        term_at: float | None = None
        killed = False
        times = StartTimes(run_dir, launched_at)
        peak: int | None = None
        wall_limit = hard_wall_s(self.spec.limits)
        rc: int | None = None
        progress_tokens: int | None = None
        ctx.event("launch", number=trial.number, pid=child.pid, run_dir=str(run_dir))
        try:
            with liveness.heartbeat(ctx.storage, self.trial_id):
                while True:
                    rc = child.poll()
                    if verdict is None:
                        rows = follower.read()
                        times.on_rows(rows)
                        for row in rows:
                            history.append(row)
                            verdict = self.on_eval(row, history, attempt_no)
                            if verdict is not None:
                                break
                    if rc is not None:
                        break
                    now = time.monotonic()
                    if stopped is None:
                        if verdict is not None:
                            stopped = verdict
                        elif ctx.stop.stop.is_set():
                            stopped = Verdict(outcomes.INTERRUPTED, "stopped by the user "
                                              "(Ctrl-C or SIGTERM) before it finished")
                        elif wall_limit is not None and now - started > wall_limit:
                            stopped = Verdict(outcomes.TIMEOUT, f"still running {wall_limit:g} s "
                                              "after launch (limits.max_wall_s "
                                              f"{self.spec.limits.max_wall_s:g} plus a margin)")
                        if stopped is not None:
                            child.signal(signal.SIGTERM)
                            term_at = now
                    if not killed and (ctx.stop.kill.is_set() or (
                            term_at is not None and now - term_at > ctx.term_grace_s)):
                        child.signal(signal.SIGKILL)
                        killed = True
                    times.poll()
                    seen = read_progress_tokens(run_dir)
                    if seen is not None and seen != progress_tokens:
                        progress_tokens = seen
                        ctx.event("progress", number=trial.number, tokens=seen)
                    rss = _peak_rss(child.pid)
                    if rss is not None:
                        peak = max(peak or 0, rss)
                    time.sleep(ctx.poll_s)
        finally:
            child.close()  # kills it if we leave early (an exception)
        wall_s = time.monotonic() - started
        if stopped is None and getattr(child, "lost", False) and not (
                run_dir / RESULT_FILE).exists():
            stopped = Verdict(outcomes.CRASHED, "the fork server ended while the trial ran")
        if stopped is None and verdict is not None and verdict.outcome != outcomes.PRUNED:
            # The last evaluation broke a project rule as the child finished: the rule says how
            # it ended (a collapsed model that completes its budget is still collapsed). An
            # Optuna prune at that moment is moot: the trial is complete.
            stopped = verdict
        result, problems = read_result_dict(run_dir)
        # No result and no SIGKILL (the OOM killer's): was there room to write one?
        unwritable = run_dir_unwritable(run_dir) if result is None and stopped is None and \
            rc not in (-signal.SIGKILL, 128 + signal.SIGKILL) else None
        outcome, reason = classify(rc, result, stopped, run_dir, unwritable=unwritable)
        if result is not None and outcome != result.get("outcome"):
            with contextlib.suppress(OSError):  # the database has it; the run dir is a copy
                record_verdict(run_dir, outcome, reason)
        times.poll()
        return Attempt(outcome, reason, result, history, wall_s, times, peak, child.pid, rc,
                       follower.problems + problems, unwritable=unwritable)

    def on_eval(self, row: dict[str, Any], history: list[dict[str, Any]],
                attempt_no: int) -> Verdict | None:
        ctx, trial = self.ctx, self.trial
        metrics = {k: v for k, v in row.items() if k != "samples"}
        if attempt_no > 1:  # a fitted retry: its evaluations follow the first attempt's
            metrics["attempt"] = attempt_no
        where = f"step {row.get('step')}"
        self.record(f"the evaluation at {where}", lambda: records.record_eval(
            ctx.storage, ctx.spec.name, trial.number, self.trial_id, metrics))
        samples = row.get("samples") or []
        if samples:
            self.record(f"the samples at {where}", lambda: records.record_samples(
                ctx.storage, ctx.spec.name, trial.number, self.trial_id, samples,
                tokens=row.get("tokens"), step=row.get("step")))
        ctx.event("eval", number=trial.number, tokens=row.get("tokens"),
                  val_bpb=row.get("val_bpb"))
        index = len(history) - 1
        tokens = row.get("tokens")
        final = isinstance(tokens, int) and tokens >= self.max_tokens
        metric = self.report_metric
        value = row.get(metric) if metric else None
        reported = False
        if metric and isinstance(value, (int, float)) and math.isfinite(value) \
                and index not in self.reported:
            # Reported before the project's rules: Optuna's value of a trial told PRUNED is its
            # last intermediate value, which must be this evaluation's, not the one before.
            self.reported.add(index)
            trial.report(float(value), step=index)
            reported = True
        verdict = pruning.project_rules(history, ctx.spec.limits, final=final)
        if verdict is not None:
            return verdict
        if reported and trial.should_prune():
            return Verdict(outcomes.PRUNED, pruning.optuna_prune_reason(
                ctx.spec.study.pruner.name, metric, value, index, row))
        return self.halving(row, history)

    def record(self, what: str, write: Callable[[], None]) -> None:
        """Store something that is not the trial's result (an evaluation's row for the report,
        its samples): a database that refuses it costs one noted line (``storage_problems``),
        never the trial or the worker. The trial is judged on its metrics, which the parent
        holds in memory; a database that is really gone fails the next Optuna call anyway."""
        try:
            write()
        except Exception as exc:  # whatever the driver raises: a note, not a crash
            self.storage_problems.append(f"{what} not stored: {storage.describe_error(exc)}")

    def start_attempt(self, cfg: TrainConfig) -> None:
        """An attempt's budget and rungs: judged afresh (a fitted retry trains from token 0
        again)."""
        self.max_tokens = cfg.max_tokens
        if not self.study_rungs:
            return
        self.my_rungs = fidelity.decision_rungs(self.spec, self.study_rungs, self.trial.number,
                                                cfg.max_tokens)
        self.rung_values, self.judged = {}, set()
        estimate = flops.estimate(cfg)
        self.static = {"params": float(estimate.params), "flops": float(estimate.flops)}

    def halving(self, row: dict[str, Any], history: list[dict[str, Any]]) -> Verdict | None:
        """Successive halving / Hyperband at the rungs this evaluation passed: record the
        trial's values there (other workers rank against them), then rank it."""
        tokens = row.get("tokens")
        if not self.my_rungs or not isinstance(tokens, int):
            return None
        before = history[-2] if len(history) > 1 else None
        spec, number = self.spec, self.trial.number
        for rung in (r for r in self.my_rungs if r <= tokens and r not in self.judged):
            self.judged.add(rung)
            own = fidelity.rung_vector(spec.study.objectives, before, row, rung, self.static)
            if own is None:
                continue  # an objective it cannot be ranked on: not judged at this rung
            self.rung_values[str(rung)] = own
            optuna_compat.write_user_attrs(self.ctx.storage, self.trial_id,
                                           {fidelity.RUNGS_ATTR: dict(self.rung_values)})
            trials = self.ctx.study.get_trials(deepcopy=False, states=fidelity.COMPETING_STATES)
            others = fidelity.competitors(trials, spec, self.study_rungs, number, rung)
            verdict = fidelity.judge(spec, self.study_rungs, number, rung, own, others, row)
            if verdict is not None:
                return verdict
        return None


#: Bytes the parent writes to see whether a child without ``result.json`` had room for one: a
#: result with its traceback and final metrics is a few KiB; a few times that, to be sure.
PROBE_BYTES = 64 * 1024


def run_dir_unwritable(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot take a file of ``PROBE_BYTES`` now (a full disk or quota, a
    read-only or vanished dir), or None when it can. A child on a nearly full disk dies as it
    writes (exit 1, and its traceback lost with the log it could not write): without this, that
    looked like a bug in its configuration, and the trial was counted instead of re-queued."""
    probe = Path(run_dir) / f".sweeps-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            left = memoryview(b"\0" * PROBE_BYTES)
            while left:  # a nearly full disk takes part of a write, then refuses the rest
                left = left[os.write(fd, left):]
            os.fsync(fd)  # where space is allocated late, the shortage shows here
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def classify(returncode: int | None, result: dict[str, Any] | None, stopped: Verdict | None,
             run_dir: Path | None = None, *, unwritable: str | None = None) -> tuple[str, str]:
    """A run's outcome and reason: the parent's own decision (prune, timeout, stop) first, then
    the child's ``result.json``, then its exit code (no result: a SIGKILL nobody here sent is
    the kernel's OOM killer)."""
    if stopped is not None:
        return stopped.outcome, stopped.reason
    if result is not None:
        outcome = str(result["outcome"])
        if outcome not in outcomes.ENDINGS:
            return outcomes.CRASHED, f"the child reported an unknown outcome {outcome!r}"
        return outcome, str(result.get("reason") or outcome)
    if returncode in (-signal.SIGTERM, -signal.SIGINT):
        # Sent from outside, before the child could write its result (a Slurm scancel or
        # preemption signals every process of the job): not the configuration's fault, so
        # interrupted, which is re-queued.
        return outcomes.INTERRUPTED, (f"stopped by signal {-returncode} from outside its "
                                      f"worker (scancel, a preemption, a shutdown) before it "
                                      f"wrote {RESULT_FILE}")
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return outcomes.OOM, (f"killed by SIGKILL (exit {returncode}) without writing "
                              f"{RESULT_FILE}: the kernel's out-of-memory killer")
    if unwritable is not None:
        return outcomes.CRASHED, (f"environment: the child exited with code {returncode} "
                                  f"without {RESULT_FILE}, and its run dir {run_dir} cannot be "
                                  f"written ({unwritable})")
    if returncode == outcomes.BAD_INPUT_EXIT_CODE:
        return outcomes.CRASHED, "environment: the child rejected its input (exit 2; its " \
            "config was checked here, so its corpus or token cache changed): " + \
            _last_log_line(run_dir)
    if returncode == outcomes.ENVIRONMENT_EXIT_CODE:
        return outcomes.CRASHED, "environment: " + _last_log_line(run_dir)
    known = outcomes.outcome_for_exit_code(returncode) if returncode is not None else None
    if known is not None and known != outcomes.COMPLETE:
        return known, (f"exit code {returncode} ({known}) without {RESULT_FILE}: "
                       + _last_log_line(run_dir))
    return outcomes.CRASHED, (f"exited with code {returncode} without writing {RESULT_FILE}: "
                              + _last_log_line(run_dir))


def environment_failed(attempt: Attempt) -> bool:
    """Whether the environment, not the configuration, ended the attempt: the child said so
    (``result.json`` or its exit code), or refused an input the parent had checked (its corpus
    or token cache changed under it). Such a trial is re-queued, not counted."""
    if attempt.result is not None:
        return bool(attempt.result.get("environment"))
    if attempt.unwritable is not None:
        return True
    return attempt.returncode in (outcomes.BAD_INPUT_EXIT_CODE, outcomes.ENVIRONMENT_EXIT_CODE)


def _last_log_line(run_dir: Path | None) -> str:
    """For a human reading the reason only (the outcome never depends on log text)."""
    if run_dir is None:
        return "see its log"
    try:
        lines = (run_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "see its log"
    lines = [line.strip() for line in lines if line.strip()]
    return lines[-1][:300] if lines else f"see {run_dir / LOG_FILE}"


def resume_from_earlier(study_dir: Path, earlier: list[int], cfg: TrainConfig,
                        run_dir: Path) -> int:
    """Give a re-queued trial's fresh ``run_dir`` the latest resume checkpoint of ``cfg``'s
    computation among its ``earlier`` trials' run dirs (their ``retry_history``), with the
    ``metrics.jsonl`` rows it covers and their ``best.pt``: the child then continues it, and
    the trial's evaluations are followed from the first. Its tokens; 0 when there is none."""
    found = [(index["tokens"], src) for src in (study_dir / "trials" / str(n) for n in earlier)
             if (index := read_resume_index(src)) is not None
             and index["resume_fingerprint"] == cfg.resume_fingerprint()]
    if not found:
        return 0
    tokens, src = max(found)
    for name in (RESUME_INDEX_FILE, RESUME_FILE, CHECKPOINT_FILE):
        if (src / name).is_file():
            shutil.copyfile(src / name, run_dir / name)
    keep_metrics_until(src, tokens, into=run_dir)
    return tokens


# --- a whole trial -------------------------------------------------------------------------------


def run_trial(ctx: RunnerContext, device: WorkerDevice, trial: optuna.Trial,
              calibration: float | None = None) -> TrialReport:
    """Run ``trial`` (already asked, RUNNING) to its end and tell Optuna. Never raises for a
    trial's own failure (that is an outcome); an exception here is the orchestrator's (e.g. the
    database went away): its child is killed, and the worker marks the trial crashed if it can
    (else the heartbeat fails and re-queues it)."""
    spec = ctx.spec
    attrs: dict[str, Any] = {"host": ctx.host, "pid": os.getpid(), "started_at": time.time()}
    records.record_host(ctx.storage, spec.name, trial.number, optuna_compat.trial_id(trial),
                        host=ctx.host)
    try:
        params = suggest(trial, spec)
        cfg = trial_config(spec, params)
    except SweepsError as exc:
        return finish(ctx, trial, outcomes.CRASHED, f"invalid configuration: {exc}", attrs)
    attrs["sampled"] = dict(params)
    if FLOPS_BUDGET in params:  # an IsoFLOP cell ([scaling]): the budget its fit groups it by
        attrs["flops_budget"] = float(params[FLOPS_BUDGET])
    pre = ctx.preflight
    if calibration is None:  # given: the plan that placed the trial was made with it (Ray)
        calibration = float(pre.calibration_factor(ctx.study))
    plan = pre.plan_trial(cfg, spec.limits, device=device.device, budget_bytes=ctx.budget_bytes,
                          calibration=calibration)
    attrs.update(predicted_mem_bytes=int(plan.predicted_bytes),
                 predicted_mem_raw_bytes=int(plan.predicted_raw_bytes),
                 predicted_peak_mem_raw_bytes=int(plan.predicted_measured_raw_bytes),
                 predicted_peak_mem_kind=plan.measured_kind,
                 memory_budget_bytes=plan.budget_bytes, calibration_factor=calibration)
    if plan.fitted:
        attrs["fitted"] = dict(plan.fitted)
    cfg = plan.cfg
    attrs["planned_steps"] = pruning.planned_steps(cfg.max_tokens, cfg.tokens_per_step)
    note = pruning.under_trained_note(attrs["planned_steps"], spec.limits.collapse)
    if note is not None:
        attrs["under_trained"] = note
    attrs["predicted_flops"] = predicted_flops = flops.estimate(cfg).flops
    over = over_compute_limit(predicted_flops, spec.limits)
    if over is not None:
        return _not_launched(ctx, trial, device, params, cfg, outcomes.PRUNED, over, attrs)
    if not plan.fits:
        return _not_launched(ctx, trial, device, params, cfg, outcomes.PREDICTED_OOM,
                             plan.reason, attrs)
    with _admitted(ctx, trial, device, plan.predicted_bytes) as placed:
        if placed is None:
            return finish(ctx, trial, outcomes.INTERRUPTED, "stopped by the user (Ctrl-C or "
                          "SIGTERM) while it waited for room on a device", attrs)
        device, budget = placed
        return _launch(ctx, trial, device, params, cfg, plan.predicted_bytes, budget, attrs)


@contextlib.contextmanager
def _admitted(ctx: RunnerContext, trial: optuna.Trial, device: WorkerDevice,
              predicted: int) -> Any:
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
    from sweeps.engines.slurm import trial_attrs as slurm_attrs  # the engines import this

    try:
        optuna_compat.write_user_attrs(ctx.storage, optuna_compat.trial_id(trial), {
            "placed_on": lease.device.label, "reserved_mem_bytes": int(lease.bytes),
            "admitted_at": time.time(), **slurm_attrs()})
        yield lease.device, (None if ctx.budget_bytes is None else int(lease.bytes))
    finally:
        ctx.admission.release(lease)


def _launch(ctx: RunnerContext, trial: optuna.Trial, device: WorkerDevice,
            params: dict[str, Any], cfg: TrainConfig, predicted: int, budget: int | None,
            attrs: dict[str, Any]) -> TrialReport:
    """Launch an admitted trial's child (and its fitted retry), classify the ending, tell."""
    spec = ctx.spec
    run = _TrialRun(ctx, device, trial)
    # Absolute: the child, the fork server and a report elsewhere all read it.
    run_dir = Path(os.path.abspath(ctx.study_dir / "trials" / str(trial.number)))
    attrs["run_dir"] = str(run_dir)
    ctx.event("start", number=trial.number, params=params, max_tokens=cfg.max_tokens,
              worker=device.label)
    try:
        attempt, cfg, attempt_no = _attempts(run, cfg, run_dir, predicted, attrs, budget)
    except OSError as exc:  # the run dir cannot be made or written, or the child not started
        return _environment_failure(ctx, trial, attrs, "environment: cannot prepare or launch "
                                    f"the trial in {run_dir}: {type(exc).__name__}: {exc}")
    attrs["config"] = cfg.to_dict()
    if attempt_no > 1:
        attrs["attempts"] = attempt_no
    attrs.update(_attempt_attrs(attempt, device.device))
    if run.storage_problems:
        attrs[STORAGE_PROBLEMS] = capped(run.storage_problems)
    attrs.update(_compute_attrs(cfg, attempt, device))
    if environment_failed(attempt):
        return _environment_failure(ctx, trial, attrs, attempt.reason)
    values = None
    outcome, reason = attempt.outcome, attempt.reason
    if outcome == outcomes.COMPLETE:
        values, missing = objective_values(spec, attempt, attrs)
        if missing:
            outcome, reason = outcomes.DIVERGED, f"{missing} is not finite at the end of training"
            values = None
            with contextlib.suppress(OSError):  # the run dir says what the database says
                record_verdict(run_dir, outcome, reason)
    return finish(ctx, trial, outcome, reason, attrs, values)


def _not_launched(ctx: RunnerContext, trial: optuna.Trial, device: WorkerDevice,
                  params: dict[str, Any], cfg: TrainConfig, outcome: str, reason: str,
                  attrs: dict[str, Any]) -> TrialReport:
    """End a trial the plan refused (memory or compute) without launching it."""
    attrs["config"] = cfg.to_dict()
    ctx.event("start", number=trial.number, params=params, max_tokens=cfg.max_tokens,
              worker=device.label)
    return finish(ctx, trial, outcome, reason, attrs)


def _attempts(run: _TrialRun, cfg: TrainConfig, run_dir: Path, predicted: int,
              attrs: dict[str, Any], budget: int | None) -> tuple[Attempt, TrainConfig, int]:
    """Run the trial's child; with ``oom_policy = "fit"``, once more with the micro-batch halved
    after an OOM. (The last attempt, its config, how many attempts.)"""
    ctx, attempt_no = run.ctx, 1
    while True:
        cfg = _with_memory_limit(ctx, run.device, cfg, predicted, budget)
        attempt = run.attempt(cfg, run_dir, attempt_no)
        if attempt.outcome == outcomes.OOM and run.spec.limits.oom_policy == "fit" \
                and attempt_no == 1 and not ctx.stop.stop.is_set():
            halved = ctx.preflight.halve_batch(cfg)
            if halved is not None:
                attrs["fitted"] = {"batch_size": halved.batch_size,
                                   "grad_accum": halved.grad_accum}
                attrs["fit_retry_reason"] = attempt.reason
                cfg, attempt_no = halved, attempt_no + 1
                continue
        return attempt, cfg, attempt_no


def _environment_failure(ctx: RunnerContext, trial: optuna.Trial, attrs: dict[str, Any],
                         reason: str) -> TrialReport:
    """Fail a trial the environment ended (the worker re-queues it: it is not counted)."""
    report = finish(ctx, trial, outcomes.CRASHED, reason, {**attrs, "environment_failure": True})
    report.environment = True
    return report


def _with_memory_limit(ctx: RunnerContext, device: WorkerDevice, cfg: TrainConfig,
                       predicted: int, budget: int | None) -> TrainConfig:
    """A child's enforced limit, derived from its budget (the study's, or its reservation
    under admission: packed children cannot outgrow the room they were admitted to by much);
    a value fixed in the spec is kept when it is tighter. CPU: ``cpu_memory_limit_bytes``
    (``preflight.cpu_child_limit``); CUDA: ``cuda_memory_limit_bytes``, the budget itself, which
    the child turns into its caching allocator's share of the device (``lm.runtime``)."""
    if budget is None:
        return cfg
    if device.device == "cuda":
        limit = int(budget) if cfg.cuda_memory_limit_bytes is None \
            else min(int(budget), cfg.cuda_memory_limit_bytes)
        return replace(cfg, cuda_memory_limit_bytes=limit)
    if device.device != "cpu":
        return cfg
    limit = int(ctx.preflight.cpu_child_limit(budget, int(predicted)))
    if cfg.cpu_memory_limit_bytes is not None:
        limit = min(limit, cfg.cpu_memory_limit_bytes)
    return replace(cfg, cpu_memory_limit_bytes=limit)


def peak_measured(result: dict[str, Any], last: dict[str, Any], peak_rss: int | None,
                  device: str = "cpu") -> tuple[int | None, str | None]:
    """The trial's measured peak and what it measures (``lm.memory.peak_kind``): the child's
    own (``result.json``, else its last metrics row, measured the same way on its device), else
    the parent's poll of its resident set, which on a GPU is not device memory at all."""
    ran_on = str(result.get("device") or device).split(":")[0]
    own_kind = result.get("peak_mem_kind") or memory.peak_kind(ran_on)
    if result.get("peak_mem_bytes"):
        return int(result["peak_mem_bytes"]), own_kind
    if last.get("peak_mem_bytes"):
        return int(last["peak_mem_bytes"]), own_kind
    if peak_rss:
        return int(peak_rss), memory.PEAK_HOST_RSS
    return None, None


def _attempt_attrs(a: Attempt, device: str = "cpu") -> dict[str, Any]:
    out: dict[str, Any] = {"wall_s": round(a.wall_s, 3), "child_pid": a.child_pid,
                           "returncode": a.returncode}
    if a.times.cold_start_s is not None:
        out["cold_start_s"] = round(a.times.cold_start_s, 3)
    if a.times.setup_s is not None:
        out["setup_s"] = round(a.times.setup_s, 3)
    if a.problems:  # the trial is judged on what was valid; what was not is kept, in short
        out["child_file_problems"] = capped(a.problems)
    r = a.result or {}
    last = a.history[-1] if a.history else {}
    final = r.get("final_metrics") or last
    peak, kind = peak_measured(r, last, a.peak_rss, device)
    if peak:
        out["peak_mem_bytes"], out["peak_mem_kind"] = int(peak), kind
    tokens = r.get("tokens_seen", last.get("tokens"))
    if tokens is not None:
        out["tokens_seen"] = int(tokens)
    tps = r.get("tokens_per_s", last.get("tokens_per_s"))
    if tps is not None:
        out["tokens_per_s"] = float(tps)
        # The child reports tokens / (time in its training loop): invert it.
        out["train_s"] = float(tokens) / float(tps) if tps and tokens else 0.0
    params = r.get("params") or {}
    if params:
        out["params"] = params
        out["params_total"] = int(params.get("total", 0))
    for key in ("bytes_per_token", "unk_rate", "best_val_bpb", "steps", "device",
                "resumed_from_tokens"):
        if r.get(key) is not None:
            out[key] = r[key]
    for key in FINAL_METRICS:
        if final.get(key) is not None:
            out[key] = final[key]
    if isinstance(last.get("step"), int):  # the evaluation a verdict was reached at
        out["last_eval_step"] = last["step"]
    if "best_val_bpb" not in out:
        finite = [h["val_bpb"] for h in a.history if isinstance(h.get("val_bpb"), (int, float))]
        if finite:
            out["best_val_bpb"] = min(finite)
    return out


def capped(problems: list[str], keep: int = 10) -> list[str]:
    """A list of noted problems as kept on a trial: the first ``keep``, then how many more."""
    return problems[:keep] + ([f"... and {len(problems) - keep} more"]
                              if len(problems) > keep else [])


def over_compute_limit(predicted_flops: int, limits: Limits) -> str | None:
    """The reason a trial is not launched for its compute (``limits.max_flops``), else None.

    Told as ``pruned``: no outcome says "over the compute limit", and this one says nothing
    about memory (``predicted_oom`` would teach the sampler a false memory constraint). A spec
    whose every trial is over the limit is refused when it is read (``sweeps.spec``)."""
    if limits.max_flops is None or predicted_flops <= limits.max_flops:
        return None
    return (f"over the compute limit, not launched: {predicted_flops:.3g} training FLOPs "
            f"predicted > limits.max_flops = {limits.max_flops:.3g}")


def _compute_attrs(cfg: TrainConfig, a: Attempt, device: WorkerDevice) -> dict[str, Any]:
    """FLOPs of the tokens actually trained (``lm.flops``) and, on a known GPU, the MFU."""
    r = a.result or {}
    tokens = r.get("tokens_seen", a.history[-1].get("tokens") if a.history else None)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return {}
    vocab = r.get("vocab_size") if isinstance(r.get("vocab_size"), int) else None
    n_evals = r.get("n_evals") if isinstance(r.get("n_evals"), int) else len(a.history)
    f = flops.estimate(cfg, tokens, n_evals=n_evals, vocab_size=vocab)
    out: dict[str, Any] = {"flops": f.flops, "flops_per_token": f.flops_per_token,
                           "params_non_embedding": f.params_non_embedding,
                           "params_embedding": f.params_embedding, "eval_flops": f.eval_flops}
    tps = r.get("tokens_per_s")
    name = _gpu_name(device, str(r.get("device") or ""))
    peak = flops.device_peak(name, cfg.precision) if name else None
    if peak and isinstance(tps, (int, float)) and tps > 0 and tokens:
        out["gpu_name"] = name
        out["mfu"] = flops.mfu(f.flops, tokens / tps, peak)
    return out


def _gpu_name(device: WorkerDevice, ran_on: str) -> str | None:
    """The product name of the GPU a CUDA child ran on (None on the CPU)."""
    if device.device != "cuda" or not ran_on.startswith("cuda"):
        return None
    visible = device.env.get(host.VISIBLE_DEVICES_ENV, os.environ.get(host.VISIBLE_DEVICES_ENV))
    ids = [g.strip() for g in (visible or "").split(",") if g.strip()]
    index = host.cuda_index(ran_on)
    return host.gpu_name(ids[index] if index < len(ids) else str(index))


def objective_values(spec: StudySpec, attempt: Attempt,
                     recorded: dict[str, Any]) -> tuple[list[float], str | None]:
    """The study's objective values of a finished run, and the first one that is missing;
    ``recorded`` is the trial's attributes (``flops`` is computed once, there)."""
    r = attempt.result or {}
    final = r.get("final_metrics") or (attempt.history[-1] if attempt.history else {})
    source = {
        "val_bpb": final.get("val_bpb"),
        "val_loss": final.get("val_loss"),
        "peak_mem": r.get("peak_mem_bytes") or attempt.peak_rss,
        "wall_s": attempt.wall_s,
        "tokens_per_s": r.get("tokens_per_s"),
        "params": (r.get("params") or {}).get("total"),
        "flops": recorded.get("flops"),
    }
    values = []
    for metric in spec.study.metrics:
        v = source.get(metric)
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return [], metric
        values.append(float(v))
    return values, None


def finish(ctx: RunnerContext, trial: optuna.Trial, outcome: str, reason: str,
           attrs: dict[str, Any], values: list[float] | None = None) -> TrialReport:
    """Record the trial's user attributes and tell Optuna its state."""
    state = TrialState[outcomes.state_name(outcome)]
    attrs = {**attrs, "outcome": outcome, "reason": reason}
    if state != TrialState.FAIL:
        attrs["constraint"] = outcomes.constraint_value(outcome)
    told = True
    try:
        write_trial_attrs(ctx.storage, optuna_compat.trial_id(trial), attrs)
        if state != TrialState.FAIL and hasattr(trial, "set_constraint"):
            trial.set_constraint(CONSTRAINT_KEY, attrs["constraint"])
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


def write_trial_attrs(rdb: RDBStorage, trial_id: int, attrs: dict[str, Any]) -> None:
    """The trial's attributes in one transaction. When the database refuses them (a value it
    cannot hold; not when it is unreachable or locked, which is the worker's error), the
    essential ones alone and a ``storage_problems`` line: a note never costs a trial its
    result."""
    values = {k: jsonable(v) for k, v in attrs.items()}
    try:
        optuna_compat.write_user_attrs(rdb, trial_id, values)
    except sa.exc.SQLAlchemyError as exc:
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            raise
        kept = {k: values[k] for k in ESSENTIAL_ATTRS if k in values}
        kept[STORAGE_PROBLEMS] = [*values.get(STORAGE_PROBLEMS, []),
                                  "the trial's other attributes not stored: "
                                  + storage.describe_error(exc)]
        optuna_compat.write_user_attrs(rdb, trial_id, kept)


def _update_study_attrs(ctx: RunnerContext) -> None:
    with contextlib.suppress(Exception):  # informational only
        factor = float(ctx.preflight.calibration_factor(ctx.study))
        ctx.study.set_user_attr("calibration_factor", factor)


def constraints_from_attrs(trial: optuna.trial.FrozenTrial) -> list[float]:
    """``constraints_func`` for Optuna versions without ``Trial.set_constraint``."""
    return [float(trial.user_attrs.get("constraint", 0.0))]
