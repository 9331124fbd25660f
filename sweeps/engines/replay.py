"""The replay engine (``sweeps run SPEC --engine replay --table FILE``): a study run on a table of
recorded trials (``sweeps.table``, written by ``sweeps table export``) instead of training.

The same study, sampler, pruners, verdicts and judge as a real run; only the child is replaced.
Each asked trial's point (``space.suggest``, as ``runner.run_trial`` asks it) is looked up in the
table (a point it does not hold is one line naming the nearest it does), and its recorded rows,
evaluations and cooldown reads, go one by one through the runner's own per-evaluation path
(``runner.TrialRun.on_eval``: stored in ``sweeps_evals``, then ``sweeps.judge``: the verdicts,
Optuna's pruner, halving), so a trial is stopped where a real run would stop it. Its ending is
told through ``runner.finish`` with a ``TrialRecord`` as a real trial's, marked ``replayed``.

Time is simulated: ``N`` workers (``--max-concurrent``, default 1) on one clock, an event queue
of each running trial's next row at its recorded time (the trial's start plus its start-up,
``wall_s`` less the training loop's ``elapsed_s``, plus the row's ``elapsed_s``). A trial ends at
its last row's time (its recorded ``wall_s`` when it ran to the end), and only then is Optuna
told and does its worker ask again: the order in which the sampler learns of trials, and in
which the pruners see the others' values, follows the simulated clock, as a real run's follows
the wall clock. ``wall_s`` of a replayed trial is its simulated seconds; the study's ``timeout``
is on that clock. A repeated point is copied as a real run copies it (``runner.copied``: 0 s).
Not replayed: memory planning and admission (the table's outcome stands: a point recorded
``predicted_oom`` is one here, at 0 s), and retries of the environment's failures; the seconds
of a table's cooldown reads are in its rows' times whether the replayed pruner reads them or
not. A study with trained trials is never replayed into (``Replay.check_study``).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lm import outcomes
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import optuna_compat, plan, records
from sweeps import record as rc
from sweeps import table as tb
from sweeps import workers as wk
from sweeps.attempt_record import objective_values
from sweeps.devices import WorkerDevice
from sweeps.engines.base import EngineOptions, Hooks, Job
from sweeps.monitor import Attempt, StartTimes
from sweeps.runner import RunnerContext, TrialRun, copied, duplicate_of, finish
from sweeps.space import suggest
from sweeps.verdicts import Verdict

if TYPE_CHECKING:
    import optuna

    from sweeps.spec import StudySpec

#: The device a replayed trial is shown on (no child runs anywhere).
REPLAY_DEVICE = WorkerDevice("cpu", {}, None, "replay")
#: [fixed] keys a replayed spec may set otherwise than the table: reads do not change a run.
FREE_FIXED = ("cooldown_reads", "cooldown_fraction")
#: How often the board is drawn while a replay runs (wall seconds).
TICK_S = 0.5


class NoLauncher:
    """The runner context's launcher in a replay: a replayed trial starts no child."""

    kind = "replay"

    def launch(self, run_dir: Path, **_: Any) -> Any:
        raise SweepsError("a replayed trial starts no child: its evaluations are the table's")

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class ReplayEngine:
    """Trials read from ``table`` on a simulated clock."""

    table: Path | None = None

    @classmethod
    def from_options(cls, options: EngineOptions) -> ReplayEngine:
        return cls(options.table)

    def load(self) -> tb.Table:
        """The table, read once (the checks, the dry run and the run all ask for it)."""
        return self.loaded

    @functools.cached_property
    def loaded(self) -> tb.Table:
        if self.table is None:
            raise SweepsError(
                "--engine replay needs --table FILE (a table written by `sweeps table export`)"
            )
        return tb.read(self.table)

    def check(self, spec: StudySpec, cap: int | None) -> None:
        """The table is readable, trained what the spec's [fixed] says, and holds cooldown
        reads when the spec's halving reads its rungs after a cooldown."""
        table = self.load()
        check_fixed(spec, table)
        if spec.study.pruner.read == "cooldown" and not any(t.reads for t in table.trials):
            raise SweepsError(
                f"{spec.source or 'the spec'} reads its rungs after a cooldown (pruner.read = "
                f'"cooldown"), but {table.source} holds no cooldown reads; export a study run '
                'with cooldown_reads at the rungs, or read them as they are (read = "loss")'
            )

    def describe(self, spec: StudySpec, cap: int | None, n_trials: int) -> plan.Placement:
        table = self.load()
        studies = ", ".join(table.header.get("studies") or ()) or "none"
        return plan.Placement(
            device="cpu",
            workers=f"{cap or 1} simulated (one clock; no process trains)",
            budget=None,
            budget_text="none: every trial is read from the table",
            rows=(("table", f"{self.table}: {len(table.trials)} trials of {studies}"),),
        )

    def run(self, job: Job, hooks: Hooks) -> list[Any]:
        return [Replay(job, self.load(), hooks, source=str(self.table)).run()]


def check_fixed(spec: StudySpec, table: tb.Table) -> None:
    """A [fixed] value the table's studies did not train with is one line: its values would be
    another configuration's."""
    mine = {k: v for k, v in (spec.raw.get("fixed") or {}).items() if k not in FREE_FIXED}
    for study in table.header.get("studies") or ():
        theirs = {
            k: v for k, v in (table.grid(study).get("fixed") or {}).items() if k not in FREE_FIXED
        }
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                raise SweepsError(
                    f"[fixed] {key} = {mine.get(key)!r} in {spec.source or 'the spec'}, but the "
                    f"table's study {study!r} trained with {theirs.get(key)!r}; replay a spec "
                    "of the table's grid"
                )


# --- one trial on the clock ----------------------------------------------------------------------


def ordered_rows(entry: tb.TableTrial) -> list[dict[str, Any]]:
    """A trial's evaluations and cooldown reads in the order its child wrote them: by their
    seconds (a read's are after the evaluation at its tokens: the child evaluates, then
    branches), an evaluation first where they tie."""
    rows = [*entry.reads, *entry.evals]

    def when(row: Mapping[str, Any]) -> tuple[float, int, int]:
        elapsed = row.get("elapsed_s")
        seconds = float(elapsed) if isinstance(elapsed, (int, float)) else 0.0
        return (seconds, int(row.get("tokens") or 0), 1 if row.get("read") else 0)

    return sorted(rows, key=when)


def row_seconds(entry: tb.TableTrial, rows: list[dict[str, Any]]) -> list[float]:
    """Each row's time from the trial's start: its start-up (``wall_s`` less the last row's
    ``elapsed_s``) plus its own ``elapsed_s``."""
    elapsed = [float(r.get("elapsed_s") or 0.0) for r in rows]
    wall = float(entry.record.get("wall_s") or (elapsed[-1] if elapsed else 0.0))
    startup = max(0.0, wall - (elapsed[-1] if elapsed else 0.0))
    return [startup + e for e in elapsed]


@dataclass
class Running:
    """A trial on the simulated clock: its rows, where it is, what its judge said."""

    trial: optuna.Trial
    entry: tb.TableTrial
    run: TrialRun
    started: float
    rows: list[dict[str, Any]]
    at: list[float]
    rec: rc.TrialRecord
    index: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    verdict: Verdict | None = None

    @property
    def wall_s(self) -> float:
        return float(self.entry.record.get("wall_s") or (self.at[-1] if self.at else 0.0))

    def step(self) -> None:
        """Feed the next row to the runner's per-evaluation path (``TrialRun.on_eval``)."""
        row = dict(self.rows[self.index])
        if row.get("read") is None:  # a cooldown read is no point of the run (``Monitor.run``)
            self.history.append(row)
        self.verdict = self.run.on_eval(row, self.history, 1)
        self.index += 1

    def stopped(self) -> bool:
        """Whether the judge stopped it before its end (a prune at the last evaluation is moot:
        it has finished, ``Monitor.ending``)."""
        if self.verdict is None:
            return False
        return self.ended_early() or self.verdict.outcome != outcomes.PRUNED

    def next_time(self) -> float:
        """When its next row comes, or, once they are all read, when it ends."""
        if self.index < len(self.rows):
            return self.started + self.at[self.index]
        return self.started + max(self.wall_s, self.at[-1] if self.at else 0.0)

    def ended_early(self) -> bool:
        return self.index < len(self.rows)


class Replay:
    """One replayed study: ask, replay on the clock, tell, until its budget is done."""

    def __init__(self, job: Job, table: tb.Table, hooks: Hooks, *, source: str) -> None:
        self.job, self.table, self.hooks, self.source = job, table, hooks, source
        self.spec = job.spec
        self.ctx = RunnerContext(
            spec=job.spec,
            study=job.study,
            storage=job.storage,
            study_dir=job.study_dir,
            launcher=NoLauncher(),
            stop=hooks.flags,
            on_event=hooks.on_event,
        )
        self.n_trials = wk.target_trials(job.spec, job.study, job.n_trials)
        self.n_workers = max(1, job.cap or 1)
        self.clock = 0.0
        self.queue: list[tuple[float, int, Running]] = []
        self.order = itertools.count()
        self.result = wk.WorkerResult()
        self.left: int | None = None  # trials the budget has room for (``claim``)
        self.running: dict[int, Running] = {}  # by trial number: each holds a worker
        self.ticked = time.monotonic()

    def run(self) -> wk.WorkerResult:
        self.check_study()
        try:
            self.loop()
        except BaseException:
            self.interrupt("the replay stopped on an error before it finished")
            raise
        self.interrupt("stopped by the user (Ctrl-C or SIGTERM) before it finished")
        return self.result

    def check_study(self) -> None:
        """A study with trained trials is not replayed into: its values would mix a real run's
        with a replay's (carried trials, ``sweeps run --from``, inform the sampler only)."""
        for t in self.ctx.study.get_trials(deepcopy=False):
            rec = rc.TrialRecord.from_trial(t)
            if rec.outcome is not None and rec.replayed is None and rec.carried_from is None:
                raise SweepsError(
                    f"study {self.spec.name!r} holds trials that were trained (trial "
                    f"{t.number}); replay into a new study: another [study] name or --storage"
                )

    def loop(self) -> None:
        """Start trials while a worker is free, then take the earliest event: a row judged, or
        a trial's end told (which frees its worker)."""
        while not self.ctx.stop.stop.is_set():
            while len(self.running) < self.n_workers and self.may_ask():
                trial = self.claim()
                if trial is None:
                    break
                self.start(trial)
            if not self.queue:
                return
            when, _, running = heapq.heappop(self.queue)
            self.clock = when
            if running.index < len(running.rows) and running.verdict is None:
                running.step()
            done = running.index >= len(running.rows) and when >= running.next_time()
            if running.stopped() or done:
                self.end(running)
            else:  # its next row, or its end once they are read
                heapq.heappush(self.queue, (running.next_time(), next(self.order), running))
            self.tick()

    def interrupt(self, reason: str) -> None:
        """End the trials still running (a stop, an error) as ``interrupted``, re-queued as a
        worker re-queues them (``workers.worker_loop``)."""
        for running in list(self.running.values()):
            self.running.pop(running.trial.number, None)
            with contextlib.suppress(Exception):  # the error being raised is the one to see
                self.told(
                    finish(self.ctx, running.trial, outcomes.INTERRUPTED, reason, running.rec)
                )
                wk.requeue_interrupted(
                    self.ctx.study, running.trial.number, self.spec.limits.max_retries
                )

    def may_ask(self) -> bool:
        timeout = self.spec.study.timeout
        return timeout is None or self.clock < timeout

    def claim(self) -> optuna.Trial | None:
        """The next trial of the budget, or None when it is full: counted once from the study
        (``workers.budget_state``), then by the asks (a replay is the study's one process, so
        nothing else asks; each ask takes a queued trial first, else adds one)."""
        if self.left is None:
            state = wk.budget_state(self.ctx.study.get_trials(deepcopy=False), self.n_trials)
            waiting = sum(t.state.name == "WAITING" for t in state.in_budget)
            self.left = max(0, self.n_trials - len(state.counted)) + waiting
        if self.left <= 0:
            return None
        self.left -= 1
        return self.ctx.study.ask()

    def start(self, trial: optuna.Trial) -> None:
        """Begin ``trial`` at the clock's time (a copy of a repeated point ends at once)."""
        ctx = self.ctx
        rec = rc.TrialRecord(host=ctx.host, pid=os.getpid(), started_at=time.time())
        rec.replayed = self.source
        # Its owner, as a real run's (``runner.run_trial``): a claimer elsewhere leaves it be.
        records.record_host(
            ctx.storage, self.spec.name, trial.number, optuna_compat.trial_id(trial), host=ctx.host
        )
        params = suggest(trial, self.spec)
        rec.sampled = dict(params)
        try:
            entry = self.table.find(params)
        except SweepsError as exc:
            self.told(finish(ctx, trial, outcomes.CRASHED, f"not in the table: {exc}", rec))
            raise
        cfg = TrainConfig.from_dict(entry.config)
        earlier = duplicate_of(ctx.study, trial.number, params)
        if earlier is not None:
            self.told(copied(ctx, trial, REPLAY_DEVICE, params, cfg, earlier, rec))
            return
        rec.config = dict(entry.config)
        ctx.event(
            "start",
            number=trial.number,
            params=params,
            max_tokens=cfg.max_tokens,
            worker=REPLAY_DEVICE.label,
        )
        run = TrialRun(ctx, REPLAY_DEVICE, trial)
        run.judge.start(cfg)
        rows = ordered_rows(entry)
        running = Running(trial, entry, run, self.clock, rows, row_seconds(entry, rows), rec)
        self.running[trial.number] = running
        heapq.heappush(self.queue, (running.next_time(), next(self.order), running))

    def end(self, running: Running) -> None:
        """Tell the trial as a real run would have ended it (``Monitor.ending``'s rule)."""
        self.running.pop(running.trial.number, None)
        entry, verdict, rec = running.entry, running.verdict, running.rec
        stopped = running.stopped()
        if stopped and verdict is not None:
            outcome, reason = verdict.outcome, verdict.reason
        else:  # its recorded end
            outcome, reason = entry.outcome, entry.reason
        seconds = self.clock - running.started
        rec.merge(ended_record(entry, running.history, early=stopped))
        rec.update(wall_s=seconds)
        values = None
        if outcome == outcomes.COMPLETE:
            values, missing = objective_values(self.spec, attempt_of(rec, running, seconds), rec)
            if missing:
                outcome, reason = outcomes.DIVERGED, f"{missing} is not finite at the end"
                values = None
        self.told(finish(self.ctx, running.trial, outcome, reason, rec, values or None))

    def told(self, report: Any) -> None:
        self.result.reports.append(report)

    def tick(self) -> None:
        if self.hooks.tick is None or time.monotonic() - self.ticked < TICK_S:
            return
        self.ticked = time.monotonic()
        with contextlib.suppress(Exception):  # a display problem never stops a replay
            self.hooks.tick()


#: What a trial stopped early keeps of its recorded run: what it is, not how far it got.
STATIC_KEYS = rc.names(
    "params",
    "params_total",
    "params_non_embedding",
    "params_embedding",
    "flops_per_token",
    "predicted_flops",
    "predicted_mem_bytes",
    "bytes_per_token",
    "planned_steps",
    "under_trained",
    "device",
    "threads",
)


def ended_record(
    entry: tb.TableTrial, history: list[dict[str, Any]], *, early: bool
) -> rc.TrialRecord:
    """The measured part of a replayed trial's record: the table's whole record when it ran to
    its end; stopped early, what it is and the metrics of the evaluation it stopped at."""
    if not early:
        return rc.TrialRecord.from_attrs(dict(entry.record))
    out = rc.TrialRecord.from_attrs({k: entry.record[k] for k in STATIC_KEYS if k in entry.record})
    if not history:
        return out
    last = history[-1]
    final = {k: last[k] for k in rc.FINAL_METRICS if isinstance(last.get(k), (int, float))}
    out.merge(rc.TrialRecord.from_attrs({k: float(v) for k, v in final.items()}))
    tokens, per_token = last.get("tokens"), entry.record.get("flops_per_token")
    if isinstance(tokens, int):
        out.tokens_seen = tokens
        if isinstance(per_token, (int, float)):
            out.flops = float(per_token) * tokens
    if isinstance(last.get("step"), int):
        out.steps = int(last["step"])
    peaks = [r["peak_mem_bytes"] for r in history if isinstance(r.get("peak_mem_bytes"), int)]
    if peaks:
        out.peak_mem_bytes = max(peaks)
    if isinstance(last.get("elapsed_s"), (int, float)):
        out.train_s = float(last["elapsed_s"])
    return out


def attempt_of(rec: rc.TrialRecord, running: Running, seconds: float) -> Attempt:
    """The ``Attempt`` the objectives are read from (``attempt_record.objective_values``): the
    record's final metrics, its peak memory, throughput and parameters, the simulated seconds."""
    final = {k: rec.get(k) for k in rc.FINAL_METRICS if rec.get(k) is not None}
    result = {
        "final_metrics": final or (running.history[-1] if running.history else {}),
        "peak_mem_bytes": rec.peak_mem_bytes,
        "tokens_per_s": rec.tokens_per_s,
        "params": {"total": rec.params_total},
    }
    return Attempt(
        outcomes.COMPLETE,
        "",
        result,
        running.history,
        seconds,
        StartTimes(Path(running.entry.record.get("run_dir") or "."), 0.0),
        None,
        None,
        None,
    )
