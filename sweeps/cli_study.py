"""``sweeps run``, ``sweeps worker``, ``sweeps status`` and ``sweeps trials``.

Merged into the top-level app by ``sweeps/cli.py`` (``app.add_typer(cli_study.app)``). Optuna,
SQLAlchemy and the runner are imported inside the commands, so ``sweeps --help`` stays fast.

The storage URL is ``--storage``, else ``$SWEEPS_STORAGE``, else the spec's ``[study] storage``,
else ``sqlite:///sweeps.db``; it is masked in every message. A malformed spec or an unreachable
database is one line and exit 2, before anything is created.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lm.errors import SweepsError
from sweeps.console import console, err_console, human_bytes, print_summary

if TYPE_CHECKING:
    import optuna

    from sweeps.spec import StudySpec

app = typer.Typer()

StorageOption = Annotated[
    str | None,
    typer.Option("--storage", help="Database URL [default: $SWEEPS_STORAGE, the spec's "
                                   "storage, else sqlite:///sweeps.db]."),
]
RunsDirOption = Annotated[
    Path, typer.Option("--runs-dir", help="Trials run in RUNS_DIR/<study>/trials/<number>.")
]
LauncherOption = Annotated[
    str, typer.Option("--launcher", help="fork (a preloaded fork server: fast start, Linux), "
                                         "subprocess (a fresh interpreter per trial) or auto.")
]
HeartbeatOption = Annotated[
    int, typer.Option("--heartbeat", help="Seconds between a running trial's heartbeats.")
]
GraceOption = Annotated[
    int, typer.Option("--grace", help="Seconds without a heartbeat before a trial is failed and "
                                      "re-queued by another worker.")
]
OUTCOME_ORDER = ("complete", "pruned", "predicted_oom", "oom", "unigram_collapse", "diverged",
                 "timeout", "crashed", "interrupted", "running", "waiting")


# --- run -----------------------------------------------------------------------------------------


@app.command()
def run(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="A study spec (.toml).")],
    workers: Annotated[int, typer.Option("--workers", help="Local workers (one GPU each, or a "
                                                           "share of the CPU cores).")] = 1,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and print the plan; run "
                                                            "nothing, write nothing.")] = False,
    n_trials: Annotated[int | None, typer.Option("--n-trials", help="Override the spec's "
                                                                    "n_trials.")] = None,
    storage: StorageOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    launcher: LauncherOption = "auto",
    heartbeat: HeartbeatOption = 10,
    grace: GraceOption = 60,
) -> None:
    """Create the study (or resume it) and run it to n_trials with live progress."""
    from sweeps.spec import load_spec
    from sweeps.storage import mask_url, normalize_url, resolve_storage_url

    _check_counts(workers, n_trials, heartbeat, grace, launcher)
    spec = load_spec(spec_path)
    url = resolve_storage_url(storage, spec.study.storage)
    normalize_url(url)  # the URL's form, before any work
    if dry_run:
        _print_plan(spec, url, workers, n_trials)
        return
    _ensure_corpus(spec)
    st, study, created = _open_study(spec, url, n_trials, heartbeat, grace)
    shown = mask_url(url)
    err_console.print(f"{'created' if created else 'resuming'} study {spec.name!r} in {shown}",
                      highlight=False)
    _run(spec, st, study, runs_dir, workers, n_trials, launcher)


@app.command()
def worker(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="The study to join.")],
    storage: StorageOption = None,
    workers: Annotated[int, typer.Option("--workers", help="Local workers.")] = 1,
    n_trials: Annotated[int | None, typer.Option("--n-trials", help="Override the study's "
                                                                    "n_trials.")] = None,
    runs_dir: RunsDirOption = Path("runs"),
    launcher: LauncherOption = "auto",
    heartbeat: HeartbeatOption = 10,
    grace: GraceOption = 60,
) -> None:
    """Join a study started by `sweeps run` (its spec is read from the database)."""
    from sweeps import storage as st_mod
    from sweeps import workers as wk

    _check_counts(workers, n_trials, heartbeat, grace, launcher)
    url = st_mod.resolve_storage_url(storage, None)
    _require_database(url)
    plain = st_mod.open_storage(url)
    study = _load_study(plain, study_name, url)
    spec = wk.spec_from_study(study)
    plain.engine.dispose()
    _ensure_corpus(spec)
    st = st_mod.open_storage(url, heartbeat_interval=heartbeat, grace_period=grace,
                             max_retries=spec.limits.max_retries)
    # A joining process draws its own random numbers (its pid), not the first worker's.
    study = _load_study(st, study_name, url, spec, extra_seed_offset=os.getpid())
    err_console.print(f"joining study {study_name!r} in {st_mod.mask_url(url)}", highlight=False)
    _run(spec, st, study, runs_dir, workers, n_trials, launcher)


def _check_counts(workers: int, n_trials: int | None, heartbeat: int, grace: int,
                  launcher: str) -> None:
    if workers < 1:
        raise SweepsError(f"--workers must be >= 1, got {workers}")
    if n_trials is not None and n_trials < 1:
        raise SweepsError(f"--n-trials must be >= 1, got {n_trials}")
    if heartbeat < 1 or grace <= heartbeat:
        raise SweepsError(f"--grace ({grace}) must be longer than --heartbeat ({heartbeat}), "
                          "and --heartbeat >= 1")
    if launcher not in ("auto", "fork", "subprocess"):
        raise SweepsError(f"--launcher must be auto, fork or subprocess, got {launcher!r}")


def _ensure_corpus(spec: StudySpec) -> None:
    """Prepare the spec's corpus where it says to, once; check a given corpus dir."""
    from lm import corpus
    from sweeps.console import progress_bar

    c = spec.corpus
    if c.needs_prepare and not (c.dir / "manifest.json").is_file():
        started = time.perf_counter()
        with progress_bar(f"preparing corpus {c.dir}") as progress:
            if c.synthetic_size is not None:
                corpus.prepare_synthetic(c.dir, size_bytes=c.synthetic_size,
                                         seed=c.synthetic_seed, val_fraction=c.val_fraction,
                                         progress=progress)
            elif c.format == "text":
                corpus.prepare_text(list(c.source), c.dir, val_fraction=c.val_fraction,
                                    progress=progress)
            else:
                corpus.prepare_posts(Path(c.source[0]), c.dir, val_fraction=c.val_fraction,
                                     progress=progress)
        err_console.print(f"prepared corpus {c.dir} in {time.perf_counter() - started:.1f} s",
                          highlight=False)
    else:
        corpus.load_manifest(c.dir)


def _open_study(spec: StudySpec, url: str, n_trials: int | None, heartbeat: int,
                grace: int) -> tuple[Any, optuna.Study, bool]:
    from sweeps import storage as st_mod
    from sweeps import workers as wk

    st = st_mod.open_storage(url, heartbeat_interval=heartbeat, grace_period=grace,
                             max_retries=spec.limits.max_retries)
    _quiet_optuna()
    _, created = wk.create_or_resume(spec, st, n_trials=n_trials)
    return st, _load_study(st, spec.name, url, spec), created


def _load_study(st: Any, name: str, url: str, spec: StudySpec | None = None,
                extra_seed_offset: int = 0) -> optuna.Study:
    import optuna
    from optuna.trial import TrialState

    from sweeps import storage as st_mod
    from sweeps import workers as wk

    _quiet_optuna()
    try:
        plain = optuna.load_study(study_name=name, storage=st)
    except KeyError:
        raise SweepsError(f"no study {name!r} in {st_mod.mask_url(url)}; start it with "
                          "`sweeps run SPEC`, or list studies with `sweeps status`") from None
    if spec is None:
        return plain
    # Seed offset: a resumed run must not replay the first run's random draws.
    ran = sum(t.state != TrialState.WAITING for t in plain.get_trials(deepcopy=False))
    return wk.load_for_workers(spec, st, seed_offset=ran + extra_seed_offset)


def _run(spec: StudySpec, st: Any, study: optuna.Study, runs_dir: Path, workers: int,
         n_trials: int | None, launcher: str) -> None:
    from sweeps import workers as wk

    target = wk.target_trials(spec, study, n_trials)
    board = Board(study, target)
    flags = wk.StopFlags()
    options = wk.RunOptions(n_workers=workers, n_trials=n_trials, timeout=spec.study.timeout,
                            launcher=launcher, on_event=board.on_event)
    study_dir = runs_dir / spec.name
    with wk.stop_on_signals(flags, say=board.say), live_display(board) as tick:
        results = wk.run_workers(spec, st, study, study_dir, options, flags, tick=tick)
    board.refresh(force=True)
    _print_final(board, study_dir)
    errors = [r.error for r in results if r.error]
    if errors:
        raise SweepsError(f"a worker stopped on an error: {errors[0]}")
    if flags.stop.is_set():
        err_console.print("stopped; `sweeps run` again resumes the study", highlight=False)
        raise typer.Exit(130)


def _require_database(url: str) -> None:
    """Read-only commands never create a SQLite file."""
    import sqlalchemy as sa

    from sweeps.storage import mask_url, normalize_url

    parsed = sa.engine.make_url(normalize_url(url))
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).expanduser()
        if not path.is_file():
            raise SweepsError(f"no database at {mask_url(url)} ({path} does not exist); run a "
                              "study first with `sweeps run SPEC`, or pass --storage")


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


# --- the plan (--dry-run) ------------------------------------------------------------------------


def _print_plan(spec: StudySpec, url: str, workers: int, n_trials: int | None) -> None:
    from lm import memory
    from lm.tokens import corpus_counts
    from sweeps import preflight
    from sweeps import workers as wk
    from sweeps.storage import mask_url

    # A GPU spec is often checked on a laptop before it goes to a cluster: without a GPU here,
    # plan for the spec's device kind and leave an "auto" budget to each worker.
    try:
        devices = wk.plan_devices(spec, workers)
        device, worker_text = devices[0].device, ", ".join(d.label for d in devices)
    except SweepsError:
        device, worker_text = "cuda", f"{workers} on GPUs (none visible on this host)"
    try:
        budget = preflight.resolve_budget(spec.limits, device=device, workers=workers)
        budget_text = "none" if budget is None else (
            f"{human_bytes(budget)} per trial ({spec.limits.memory_budget})")
    except SweepsError:
        budget, budget_text = None, "auto: decided on each worker's GPU (none visible here)"
    corpus = spec.corpus
    corpus_state = "prepared" if (corpus.dir / "manifest.json").is_file() else (
        "to prepare from " + (", ".join(corpus.source) if corpus.source
                              else f"synthetic {human_bytes(corpus.synthetic_size or 0)}"))
    rows: list[tuple[str, object]] = [
        ("study", spec.name),
        ("storage", f"{mask_url(url)} (not opened: dry run)"),
        ("objectives", ", ".join(f"{o.metric} ({o.direction})" for o in spec.study.objectives)),
        ("sampler / pruner", f"{spec.study.sampler.name} / {spec.study.pruner.name}"),
        ("trials", n_trials if n_trials is not None else spec.study.n_trials),
        ("enqueued first", len(spec.initial_trials())),
        ("timeout", f"{spec.study.timeout:g} s" if spec.study.timeout else "none"),
        ("workers", worker_text),
        ("memory budget", budget_text),
        ("oom policy", spec.limits.oom_policy),
        ("max wall per trial", f"{spec.limits.max_wall_s:g} s" if spec.limits.max_wall_s
         else "none"),
        ("corpus", f"{corpus.dir} ({corpus_state})"),
    ]
    print_summary(f"plan: {spec.source or spec.name}", rows)
    _print_space(spec)
    point, cfg = _largest_point(spec, device)
    if cfg is None:
        console.print("no point of the space makes a valid config")
        return
    est = memory.estimate(cfg, device, counts=corpus_counts(cfg.corpus, cfg.tokenizer,
                                                            cfg.vocab_size, cfg.lowercase))
    plan = preflight.plan_trial(cfg, spec.limits, device=device, budget_bytes=budget)
    verdict = ("fits" if plan.fits and not plan.fitted else
               f"fitted: {plan.fitted}" if plan.fits else "predicted_oom: never launched")
    print_summary("largest point", [
        ("params", ", ".join(f"{k}={v}" for k, v in point.items()) or "(fixed only)"),
        ("predicted peak", f"{human_bytes(est.total)} ({device}, peak at "
                           f"{getattr(est, 'peak_moment', '?')})"),
        ("against the budget", f"{verdict}: {plan.reason}"),
    ])


def _print_space(spec: StudySpec) -> None:
    from rich.table import Table

    table = Table(title="space", title_justify="left", box=None, padding=(0, 2))
    for col in ("parameter", "type", "values", "when"):
        table.add_column(col, style="bold" if col == "parameter" else None)
    if spec.ablation is not None:
        for name in spec.ablation.param_names:
            table.add_row(name, "ablation", ", ".join(map(str, spec.ablation.choices(name))), "")
    for p in spec.space:
        if p.type == "categorical":
            values = ", ".join(map(str, p.choices or ()))
        else:
            values = f"{p.low} .. {p.high}" + (" log" if p.log else "") + (
                f" step {p.step}" if p.step is not None else "")
        table.add_row(p.name, p.type, values, p.when.text if p.when else "")
    console.print(table)


def _largest_point(spec: StudySpec, device: str) -> tuple[dict[str, Any], Any]:
    """The point with the largest predicted memory, over the grid (or the ablation) when it is
    small, else over every combination of each parameter's bounds and choices."""
    import dataclasses
    import itertools

    from lm import memory
    from lm.tokens import corpus_counts
    from sweeps.space import grid_points, trial_config
    from sweeps.spec import iter_grid

    try:
        points = grid_points(spec, limit=2048)
    except SweepsError:
        corners = [dataclasses.replace(p, type="categorical", choices=tuple(p.probe_values()),
                                       low=None, high=None, step=None, log=False)
                   for p in spec.space]
        points = list(itertools.islice(iter_grid(corners, spec.base_values()), 4096))
    best: tuple[int, dict[str, Any], Any] = (-1, {}, None)
    for point in points or [{}]:
        try:
            cfg = trial_config(spec, point)
        except SweepsError:
            continue
        counts = corpus_counts(cfg.corpus, cfg.tokenizer, cfg.vocab_size, cfg.lowercase)
        total = memory.estimate(cfg, device, counts=counts).total
        if total > best[0]:
            best = (total, point, cfg)
    return best[1], best[2]


# --- progress ------------------------------------------------------------------------------------


class Board:
    """What `sweeps run` shows: trials by outcome, the best value, the running trials."""

    def __init__(self, study: optuna.Study, n_trials: int) -> None:
        import threading

        self.study = study
        self.n_trials = n_trials
        self.lock = threading.Lock()
        self.running: dict[int, dict[str, Any]] = {}
        self.messages: deque[str] = deque()
        self.counts: Counter[str] = Counter()
        self.best: str = "-"
        self.finished = 0
        self.refreshed = 0.0
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        with self.lock:
            self.messages.append(text)

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        with self.lock:
            number = data.get("number")
            if kind == "start":
                self.running[number] = {"params": data.get("params", {}), "tokens": 0,
                                        "max_tokens": data.get("max_tokens"),
                                        "worker": data.get("worker", ""),
                                        "since": time.monotonic()}
            elif kind == "eval" and number in self.running:
                self.running[number]["tokens"] = data.get("tokens") or 0
                self.running[number]["val_bpb"] = data.get("val_bpb")
            elif kind == "end":
                info = self.running.pop(number, {})
                took = time.monotonic() - info.get("since", time.monotonic())
                values = data.get("values")
                shown = (" " + ", ".join(f"{v:.4g}" for v in values)) if values else ""
                self.messages.append(f"trial {number} {data.get('outcome')}{shown} "
                                     f"({took:.1f} s): {data.get('reason')}")
                self.refreshed = 0.0

    def refresh(self, force: bool = False) -> None:
        from sweeps.workers import budget_state, superseded_numbers, trial_outcome

        if not force and time.monotonic() - self.refreshed < 2.0:
            return
        self.refreshed = time.monotonic()
        trials = self.study.get_trials(deepcopy=False)
        gone = superseded_numbers(trials)
        state = budget_state(trials, self.n_trials)
        self.counts = Counter(trial_outcome(t) for t in trials
                              if t.number not in gone and t.state.is_finished())
        self.finished = state.finished
        self.best = best_text(self.study, trials)

    def line(self) -> str:
        counts = ", ".join(f"{o} {self.counts[o]}" for o in OUTCOME_ORDER if self.counts[o])
        with self.lock:
            running = ", ".join(f"#{n} {_tokens(r)}" for n, r in sorted(self.running.items()))
        return (f"[{time.monotonic() - self.started:6.0f} s] {self.finished}/{self.n_trials} "
                f"finished ({counts or 'none yet'}); best {self.best}; "
                f"running: {running or 'none'}")

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(box=None, padding=(0, 2), title_justify="left",
                      title=f"{self.finished}/{self.n_trials} finished, best {self.best}")
        for col in ("trial", "worker", "tokens", "val_bpb", "params"):
            table.add_column(col)
        with self.lock:
            for number, r in sorted(self.running.items()):
                bpb = r.get("val_bpb")
                table.add_row(str(number), r["worker"], _tokens(r),
                              "-" if bpb is None else f"{bpb:.4f}",
                              " ".join(f"{k}={v}" for k, v in r["params"].items()))
        counts = "  ".join(f"{o} {self.counts[o]}" for o in OUTCOME_ORDER if self.counts[o])
        return Group(counts or "no trial finished yet", table)

    def drain(self) -> list[str]:
        with self.lock:
            out = list(self.messages)
            self.messages.clear()
        return out


def _tokens(r: dict[str, Any]) -> str:
    done, total = r.get("tokens") or 0, r.get("max_tokens")
    return f"{done:,}/{total:,} tokens" if total else f"{done:,} tokens"


def best_text(study: optuna.Study, trials: list[Any] | None = None) -> str:
    """The best value (one objective) or the Pareto front's size (several)."""
    from optuna.trial import TrialState

    trials = trials if trials is not None else study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    if not complete:
        return "-"
    if len(study.directions) == 1:
        pick = min if study.direction.name == "MINIMIZE" else max
        t = pick(complete, key=lambda t: t.values[0])
        return f"{t.values[0]:.4f} (trial {t.number})"
    return f"{len(study.best_trials)} trials on the Pareto front"


@contextmanager
def live_display(board: Board, *, every_s: float = 10.0) -> Iterator[Callable[[], None]]:
    """A ``tick`` for ``run_workers``: rich Live on a terminal, else a line every ``every_s``
    seconds and one per finished trial (stderr)."""
    if err_console.is_terminal:
        from rich.live import Live

        with Live(board.render(), console=err_console, refresh_per_second=2,
                  transient=True) as live:
            def tick() -> None:
                board.refresh()
                for message in board.drain():
                    live.console.print(message, highlight=False, markup=False)
                live.update(board.render())

            yield tick
        return
    last = [time.monotonic()]
    dirty = [False]  # a trial ended since the last progress line

    def tick() -> None:
        messages = board.drain()
        for message in messages:
            sys.stderr.write(message + "\n")
        dirty[0] = dirty[0] or bool(messages)
        if messages or time.monotonic() - last[0] > every_s:
            board.refresh(force=bool(messages))
            sys.stderr.write(board.line() + "\n")
            sys.stderr.flush()
            last[0] = time.monotonic()
            dirty[0] = False

    yield tick
    messages = board.drain()
    for message in messages:
        sys.stderr.write(message + "\n")
    if messages or dirty[0]:
        board.refresh(force=True)
        sys.stderr.write(board.line() + "\n")


def _print_final(board: Board, study_dir: Path) -> None:
    counts = ", ".join(f"{o} {board.counts[o]}" for o in OUTCOME_ORDER if board.counts[o])
    print_summary(f"study {board.study.study_name}", [
        ("finished", f"{board.finished}/{board.n_trials}"),
        ("outcomes", counts or "none"),
        ("best", board.best),
        ("runs", str(study_dir)),
    ])


# --- status and trials ---------------------------------------------------------------------------


@app.command()
def status(storage: StorageOption = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Every study in the database: trials by outcome, best value, calibration factor."""
    from sweeps import storage as st_mod

    url = st_mod.resolve_storage_url(storage, None)
    _require_database(url)
    st = st_mod.open_storage(url)
    rows = study_rows(st)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        console.print(f"no studies in {st_mod.mask_url(url)}", highlight=False)
        return
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), title=f"studies in {st_mod.mask_url(url)}",
                  title_justify="left")
    for col in ("study", "finished", "outcomes", "best", "calibration"):
        table.add_column(col)
    for r in rows:
        outcomes = ", ".join(f"{o} {n}" for o, n in r["outcomes"].items())
        table.add_row(r["study"], f"{r['finished']}/{r['n_trials']}", outcomes or "-",
                      r["best"], f"{r['calibration_factor']:.3g}")
    _wide().print(table)


def study_rows(st: Any) -> list[dict[str, Any]]:
    """One summary per study (for ``status``)."""
    import optuna

    from sweeps import workers as wk

    _quiet_optuna()
    out = []
    for summary in optuna.get_all_study_summaries(st, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=st)
        trials = study.get_trials(deepcopy=False)
        gone = wk.superseded_numbers(trials)
        counts = Counter(wk.trial_outcome(t) for t in trials if t.number not in gone)
        attrs = study.user_attrs
        spec_n = (attrs.get("spec") or {}).get("study", {}).get("n_trials")
        n_trials = attrs.get(wk.N_TRIALS_ATTR) or spec_n or len(trials)
        state = wk.budget_state(trials, int(n_trials))
        out.append({
            "study": summary.study_name,
            "n_trials": int(n_trials),
            "finished": state.finished,
            "retried": len(gone),
            "outcomes": {o: counts[o] for o in OUTCOME_ORDER if counts[o]},
            "best": best_text(study, trials),
            "calibration_factor": float(attrs.get("calibration_factor", 1.0)),
            "memory_budget_bytes": attrs.get("memory_budget_bytes"),
        })
    return out


@app.command()
def trials(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="The study's name.")],
    storage: StorageOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One row per trial: number, parameters, outcome, reason, val_bpb, peak memory, wall time."""
    from sweeps import storage as st_mod

    url = st_mod.resolve_storage_url(storage, None)
    _require_database(url)
    st = st_mod.open_storage(url)
    study = _load_study(st, study_name, url)
    rows = trial_rows(study)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), title=f"study {study_name}", title_justify="left")
    for col in ("#", "params", "outcome", "val_bpb", "peak mem", "wall", "reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        bpb = r["val_bpb"]
        table.add_row(str(r["number"]), " ".join(f"{k}={v}" for k, v in r["params"].items()),
                      r["outcome"] + (" (retried)" if r["retried"] else ""),
                      "-" if bpb is None else f"{bpb:.4f}",
                      "-" if not r["peak_mem_bytes"] else human_bytes(r["peak_mem_bytes"]),
                      "-" if r["wall_s"] is None else f"{r['wall_s']:.1f} s",
                      r["reason"] or "")
    _wide().print(table)


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    from sweeps import workers as wk

    trials = study.get_trials(deepcopy=False)
    gone = wk.superseded_numbers(trials)
    rows = []
    for t in trials:
        a = t.user_attrs
        rows.append({
            "number": t.number,
            "state": t.state.name,
            "params": dict(t.params),
            "outcome": wk.trial_outcome(t),
            "retried": t.number in gone,
            "reason": a.get("reason") or ("failed by a heartbeat: its worker stopped"
                                          if t.state.name == "FAIL" else None),
            "val_bpb": a.get("val_bpb"),
            "peak_mem_bytes": a.get("peak_mem_bytes"),
            "wall_s": a.get("wall_s"),
            "values": t.values,
        })
    return rows


def _wide() -> Any:
    """Tables are not wrapped to 80 columns when stdout is a pipe or a file."""
    from rich.console import Console

    return console if console.is_terminal else Console(width=250)
