"""``sweeps run``, ``sweeps worker``, ``sweeps status``, ``sweeps trials``, ``sweeps timeline``
and ``sweeps demo``: each parses its options and calls the run pipeline (``sweeps.pipeline``:
the checks and the engine, shown on the board by ``sweeps.cli.progress.drive``) and the study
service (``sweeps.study``; the timeline is ``sweeps.charts.timeline``'s data); what they print
is here. A malformed spec or an unreachable database is one line and exit 2, before
anything is created.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sweeps import study as service
from sweeps.cli.options import (
    AddressOption,
    EngineOption,
    GraceOption,
    HeartbeatOption,
    LauncherOption,
    MaxConcurrentOption,
    RunsDirOption,
    StorageOption,
    TableOption,
    WorkersOption,
    refuse_existing,
    warn,
)
from sweeps.cli.progress import counts_text, drive
from sweeps.cli.slurm import (
    AccountOption,
    GpusPerJobOption,
    JobsOption,
    PartitionOption,
    QosOption,
    SbatchArgOption,
    TimeOption,
)
from sweeps.console import (
    console,
    err_console,
    human_bytes,
    plain,
    print_summary,
    wide_console,
)
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S

if TYPE_CHECKING:
    from sweeps.spec import StudySpec

app = typer.Typer()


# --- init ----------------------------------------------------------------------------------------


@app.command()
def init(
    out: Annotated[Path, typer.Option("--out", help="Where to write the spec.")] = Path(
        "spec.toml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write a commented starter spec that runs as it is: edit it, then `sweeps run` it."""
    from lm.files import write_output
    from sweeps.starter import STARTER_SPEC

    refuse_existing(out, force)
    write_output(out, lambda f: f.write(STARTER_SPEC.encode("utf-8")))
    err_console.print(
        f"wrote {out}; next: sweeps run {out} --dry-run", highlight=False, markup=False
    )


@app.command()
def schema(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write it to this file [default: stdout].")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """A JSON Schema of the spec, for an editor (Taplo / Even Better TOML: a first line
    `#:schema spec.schema.json` in the spec)."""
    from lm.files import write_output
    from sweeps.spec.schema import spec_schema

    text = json.dumps(spec_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    refuse_existing(out, force)
    write_output(out, lambda f: f.write(text.encode("utf-8")))


# --- run -----------------------------------------------------------------------------------------


@app.command()
def run(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="A study spec (.toml).")],
    max_concurrent: MaxConcurrentOption = None,
    engine: EngineOption = None,
    address: AddressOption = None,
    table: TableOption = None,
    workers: WorkersOption = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Validate and print the plan; run nothing, write nothing."),
    ] = False,
    n_trials: Annotated[
        int | None,
        typer.Option("--n-trials", help="Override the spec's n_trials [default: the spec's]."),
    ] = None,
    storage: StorageOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    launcher: LauncherOption = "auto",
    heartbeat: HeartbeatOption = HEARTBEAT_INTERVAL_S,
    grace: GraceOption = GRACE_PERIOD_S,
    from_study: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="STUDY",
            help="Start the new study with the finished trials of STUDY "
            "that fit the spec (not counted in n_trials; the plan says which and why) [default: "
            "none: a new study starts empty].",
        ),
    ] = None,
    partition: PartitionOption = None,
    time_limit: TimeOption = None,
    jobs: JobsOption = None,
    gpus_per_job: GpusPerJobOption = None,
    account: AccountOption = None,
    qos: QosOption = None,
    sbatch_arg: SbatchArgOption = None,
) -> None:
    """Create the study (or resume it) and run it to n_trials with live progress."""
    from sweeps import pipeline
    from sweeps.cli import slurm as slurm_cli
    from sweeps.engines import EngineOptions
    from sweeps.spec import load_spec
    from sweeps.storage import mask_url, normalize_url, resolve_storage_url

    cap = service.concurrency_cap(workers, max_concurrent)
    args = pipeline.RunArgs(cap, n_trials, runs_dir, launcher, heartbeat, grace)
    args.check()
    spec = load_spec(spec_path)
    slurm_values = slurm_cli.cli_values(
        partition, time_limit, jobs, gpus_per_job, account, qos, sbatch_arg
    )
    name, chosen = pipeline.engine_for(engine, spec, EngineOptions(address, slurm_values, table))
    service.check_n_trials(spec, n_trials)
    url = resolve_storage_url(storage, spec.study.storage)
    normalize_url(url)  # the URL's form, before any work
    if dry_run:
        _print_plan(spec, pipeline.dry_run(spec, url, chosen, args, from_study, name))
        warn(service.budget_warnings(spec))
        return
    warn(service.budget_warnings(spec))  # said once more for those who skip the dry run
    pipeline.prepare(spec, chosen, args)
    st, study, created = service.open_study(
        spec, url, n_trials=n_trials, heartbeat=heartbeat, grace=grace, from_study=from_study
    )
    err_console.print(
        f"{'created' if created else 'resuming'} study {spec.name!r} in {mask_url(url)}",
        highlight=False,
        markup=False,
    )
    if pipeline.trains(chosen):  # a replay measures no vocabulary: it trains nothing
        _say_arms(spec)
    drive(chosen, pipeline.job(spec, st, study, url, args))


@app.command()
def worker(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="The study to join.")],
    storage: StorageOption = None,
    max_concurrent: MaxConcurrentOption = None,
    workers: WorkersOption = None,
    n_trials: Annotated[
        int | None,
        typer.Option("--n-trials", help="Override the study's n_trials [default: the study's]."),
    ] = None,
    runs_dir: RunsDirOption = Path("runs"),
    launcher: LauncherOption = "auto",
    heartbeat: HeartbeatOption = HEARTBEAT_INTERVAL_S,
    grace: GraceOption = GRACE_PERIOD_S,
) -> None:
    """Join a study started by `sweeps run` (its spec is read from the database)."""
    from sweeps import pipeline
    from sweeps.engines.local import LocalEngine
    from sweeps.storage import mask_url, resolve_storage_url

    cap = service.concurrency_cap(workers, max_concurrent)
    args = pipeline.RunArgs(cap, n_trials, runs_dir, launcher, heartbeat, grace)
    args.check()
    url = resolve_storage_url(storage, None)
    spec, st, study = service.join_study(study_name, url, heartbeat=heartbeat, grace=grace)
    # This host's devices; in a task of the Slurm engine's array, what Slurm gave the task.
    engine = LocalEngine(allocation=True)
    pipeline.prepare(spec, engine, args)
    err_console.print(
        f"joining study {study_name!r} in {mask_url(url)}", highlight=False, markup=False
    )
    drive(engine, pipeline.job(spec, st, study, url, args))


# --- the plan (--dry-run) ------------------------------------------------------------------------


def _print_plan(spec: StudySpec, p: Any) -> None:
    """The dry run's plan (``sweeps.pipeline.dry_run``)."""
    from rich.table import Table

    from sweeps import plan

    print_summary(f"plan: {spec.source or spec.name}", p.rows)
    table = Table(title="space", title_justify="left", box=None, padding=(0, 2))
    for col in ("parameter", "type", "values", "when"):
        table.add_column(col, style="bold" if col == "parameter" else None)
    row: tuple[str, ...]  # a space row, then a grid row
    for row in p.space:
        table.add_row(*(plain(cell) for cell in row))
    console.print(table)
    if p.arms is not None:
        _print_arms(p.arms)
    if p.grid is not None:
        grid = Table(title="IsoFLOP grid", title_justify="left", box=None, padding=(0, 2))
        for col in plan.GRID_COLUMNS:
            grid.add_column(col)
        for row in p.grid:
            grid.add_row(*(plain(cell) for cell in row))
        wide_console().print(grid)
    if p.largest is None:
        console.print("no point of the space makes a valid config")
        return
    print_summary("largest point", p.largest)


def _say_arms(spec: StudySpec) -> None:
    """Before the trials: what each vocabulary trains on, measured (its token cache is built
    now, as its first trial would), and the warning when the arms are unequal."""
    from sweeps import arms

    found = arms.arms(spec, arms.measured)
    if not arms.worth_showing(spec, found):
        return
    _print_arms([a.row() for a in found])
    said = arms.warning(spec, found)
    if said is not None:
        warn([said])


def _print_arms(rows: list[tuple[str, ...]]) -> None:
    """Each vocabulary's tokens, text and FLOPs (``sweeps.arms``)."""
    from rich.table import Table

    from sweeps.arms import TABLE_COLUMNS

    table = Table(
        title="arms: what each vocabulary trains on", title_justify="left", box=None, padding=(0, 2)
    )
    for col in TABLE_COLUMNS:
        table.add_column(col)
    for row in rows:
        table.add_row(*(plain(cell) for cell in row))
    wide_console().print(table)


# --- status and trials ---------------------------------------------------------------------------


@app.command()
def status(
    storage: StorageOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Every study in the database: trials by outcome, best value, calibration factor."""
    from sweeps.storage import mask_url, resolve_storage_url

    url = resolve_storage_url(storage, None)
    rows = service.study_rows(service.open_existing(url))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        console.print(f"no studies in {mask_url(url)}", highlight=False, markup=False)
        return
    from rich.table import Table

    # Names, outcomes and reasons are others' text (a shared database): plain() for each.
    table = Table(
        box=None, padding=(0, 2), title=plain(f"studies in {mask_url(url)}"), title_justify="left"
    )
    for col in ("study", "finished", "outcomes", "best", "calibration"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            plain(r["study"]),
            f"{r['finished']}/{r['n_trials']}",
            plain(counts_text(r["outcomes"]) or "-"),
            plain(r["best"]),
            f"{r['calibration_factor']:.3g}",
        )
    wide_console().print(table)


@app.command()
def trials(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="The study's name.")],
    storage: StorageOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One row per trial: number, parameters, outcome, reason, val_bpb, peak memory, wall time,
    training FLOPs."""
    from sweeps.storage import resolve_storage_url

    url = resolve_storage_url(storage, None)
    rows = service.trial_rows(service.load_study(service.open_existing(url), study_name, url))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(
        box=None, padding=(0, 2), title=plain(f"study {study_name}"), title_justify="left"
    )
    slurm = any(r["slurm_job"] for r in rows)  # which Slurm job ran it, for Slurm studies
    # The unigram column beside val_bpb: a value is good or bad only against it.
    for col in (
        "#",
        "params",
        "outcome",
        "val_bpb",
        "unigram",
        "peak mem",
        "wall",
        "FLOPs",
        *(("slurm job",) if slurm else ()),
        "reason",
    ):
        table.add_column(col, overflow="fold")
    for r in rows:
        bpb, baseline = r["val_bpb"], r["unigram_bpb"]
        where = (plain(r["slurm_job"] or "-"),) if slurm else ()
        table.add_row(
            str(r["number"]),
            plain(" ".join(f"{k}={v}" for k, v in r["params"].items())),
            plain(r["outcome"] + (" (retried)" if r["retried"] else "")),
            "-" if bpb is None else f"{bpb:.4f}",
            "-" if baseline is None else f"{baseline:.4f}",
            "-" if not r["peak_mem_bytes"] else human_bytes(r["peak_mem_bytes"]),
            "-" if r["wall_s"] is None else f"{r['wall_s']:.1f} s",
            "-" if r["flops"] is None else f"{r['flops']:.3g}",
            *where,
            plain(r["reason"] or ""),
        )
    wide_console().print(table)


#: Cells of the strip that pictures each row of ``sweeps timeline`` across the study's span.
STRIP_WIDTH = 40


@app.command()
def timeline(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="The study's name.")],
    storage: StorageOption = None,
) -> None:
    """One row per worker (host, Slurm task, device): its trials, busy time, utilisation (the
    share of the study's span it ran a trial), waits before start, and a strip of when it ran,
    coloured by outcome."""
    from rich.table import Table
    from rich.text import Text

    from sweeps import results
    from sweeps.charts import outcome_color
    from sweeps.charts import timeline as tl_mod
    from sweeps.storage import resolve_storage_url

    tl = tl_mod.data(results.study_frame(resolve_storage_url(storage, None), study_name))
    queued = f"; {tl.queued} queued, not started" if tl.queued else ""
    if tl.bars.empty:
        console.print(
            plain(f"study {study_name}: no trial has started yet{queued}"), highlight=False
        )
        return
    rows = tl.rows
    assert tl.start is not None and tl.end is not None  # a trial has started: a span
    when = " to ".join(
        datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") for t in (tl.start, tl.end)
    )
    table = Table(
        box=None,
        padding=(0, 2),
        title_justify="left",
        title=plain(
            f"study {study_name}: {len(tl.bars)} trials on {len(rows)} worker(s) over "
            f"{tl_mod.duration(tl.span_s)} ({when}, local time); mean utilisation "
            f"{tl_mod.share(rows['utilisation'].mean())}{queued}"
        ),
    )
    for col in (
        "worker",
        "trials",
        "busy",
        "utilisation",
        "wait mean / longest",
        "outcomes",
        "when it ran",
    ):
        table.add_column(col, overflow="fold")
    for r in rows.itertuples():
        cells = tl_mod.strip(tl, r.worker, STRIP_WIDTH)
        picture = Text()
        for outcome in cells:
            picture.append(
                "·" if outcome is None else "█",
                style=None if outcome is None else outcome_color(outcome),
            )
        table.add_row(
            plain(r.worker),
            f"{r.trials}" + (f" ({r.lanes} at once)" if r.lanes > 1 else ""),
            tl_mod.duration(r.busy_s),
            tl_mod.share(r.utilisation),
            f"{tl_mod.duration(r.mean_wait_s)} / {tl_mod.duration(r.max_wait_s)}",
            plain(counts_text(r.outcomes)),
            picture,
        )
    wide_console().print(table)
