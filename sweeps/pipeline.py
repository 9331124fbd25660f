"""One run pipeline for every command that runs trials (``sweeps run``, ``sweeps worker``,
``sweeps confirm``) and for the dry run: the engine by name (``sweeps.engines.make``), the checks
every run needs before a study is created or joined, in one order, and the job the engine runs.

1. the options (``RunArgs.check``: ``--max-concurrent``, ``--n-trials``, ``--heartbeat`` /
   ``--grace``, ``--launcher``) and the engine's own (``engines.make``: a name it knows, no flag of
   another engine);
2. what the engine needs of the host or cluster (``Engine.check``: this host's devices for the
   local engine, Ray's import, the Slurm partition and a node that holds one task);
3. the runs dir (writable), the corpus (prepared when the spec says how, else there) and that
   every ``seq_len`` the spec can ask for fits it (``prepare``; not for the replay engine,
   whose trials are read from a table: ``trains``).

Then the command opens its study and hands the engine a ``Job`` (``job``); the CLI shows it on
the board (``sweeps.cli.progress.drive``). The dry run (``dry_run``) asks the same engine where
the trials would go (``Engine.describe``), so ``--engine slurm --dry-run`` shows the tasks'
requests, not this host's pools.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps import engines, plan
from sweeps import study as service
from sweeps.console import err_console, progress_bar
from sweeps.engines import Engine, EngineOptions, Job
from sweeps.engines.replay import ReplayEngine
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S
from sweeps.spec.engine import engine_name

if TYPE_CHECKING:
    import optuna

    from sweeps.spec import StudySpec


@dataclass(frozen=True)
class RunArgs:
    """The options every command that runs trials takes."""

    cap: int | None = None  # --max-concurrent (or --workers): None, what the devices hold
    n_trials: int | None = None
    runs_dir: Path = Path("runs")
    launcher: str = "auto"
    heartbeat: int = HEARTBEAT_INTERVAL_S
    grace: int = GRACE_PERIOD_S

    def check(self) -> None:
        service.check_run_options(
            self.cap, self.n_trials, self.heartbeat, self.grace, self.launcher
        )


def engine_for(
    given: str | None, spec: StudySpec, options: EngineOptions | None = None
) -> tuple[str, Engine]:
    """(name, engine): ``--engine``, else the spec's ``[engine] name``, else local."""
    name = engine_name(given, spec.raw.get("engine"))
    return name, engines.make(name, options)


def prepare(spec: StudySpec, engine: Engine, args: RunArgs) -> None:
    """The checks of a run before its study is created or joined, whatever the command: the
    engine's host or cluster, the runs dir, the corpus (prepared here when the spec says how)
    and that every ``seq_len`` fits it."""
    service.check_n_trials(spec, args.n_trials)
    engine.check(spec, args.cap)
    service.check_runs_dir(args.runs_dir)
    if trains(engine):
        ensure_corpus(spec)
        service.check_corpus_fits(spec)


def trains(engine: Engine) -> bool:
    """Whether ``engine``'s trials train (the replay engine's are read from a table: no corpus
    is needed, nor prepared)."""
    return not isinstance(engine, ReplayEngine)


def ensure_corpus(spec: StudySpec) -> None:
    """Prepare the spec's corpus where it says to, once; check a given corpus dir."""
    if not service.corpus_to_prepare(spec):
        service.check_corpus(spec)
        return
    started = time.perf_counter()
    with progress_bar(f"preparing corpus {spec.corpus.dir}") as progress:
        service.prepare_corpus(spec, progress)
    err_console.print(
        f"prepared corpus {spec.corpus.dir} in {time.perf_counter() - started:.1f} s",
        highlight=False,
        markup=False,
    )


def job(spec: StudySpec, storage: Any, study: optuna.Study, url: str, args: RunArgs) -> Job:
    """What the engine runs: the opened study and the run's options."""
    return Job(
        spec,
        storage,
        study,
        url,
        args.runs_dir,
        args.cap,
        args.n_trials,
        args.launcher,
        (args.heartbeat, args.grace),
    )


def dry_run(
    spec: StudySpec,
    url: str,
    engine: Engine,
    args: RunArgs,
    from_study: str | None = None,
    name: str = "local",
) -> plan.DryRunPlan:
    """The plan of ``sweeps run --dry-run``: the checks that need nothing written (the spec's
    ``--n-trials``, the corpus where it is known), then where ``engine`` would put the trials."""
    service.check_n_trials(spec, args.n_trials)
    if trains(engine):
        service.check_corpus_fits(spec)
    n = args.n_trials if args.n_trials is not None else spec.study.n_trials
    placement = engine.describe(spec, args.cap, n)
    return plan.dry_run(
        spec, url, args.cap, args.n_trials, from_study, placement=placement, engine=name
    )
