"""The Slurm engine's options (``sweeps run --engine slurm``), ``sweeps slurm-script`` and the run
itself: submit the array, follow it on the board (``sweeps.engines.slurm``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lm.errors import SweepsError
from sweeps.cli.options import GraceOption, HeartbeatOption, MaxConcurrentOption, RunsDirOption
from sweeps.console import err_console
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S

if TYPE_CHECKING:
    import optuna

    from sweeps.spec import StudySpec

app = typer.Typer()
_PANEL = "Slurm (--engine slurm; also keys of the spec's engine table)"

PartitionOption = Annotated[
    str | None,
    typer.Option(
        "--partition",
        help="Slurm partition [default: the spec's, else the cluster's default].",
        rich_help_panel=_PANEL,
    ),
]
TimeOption = Annotated[
    str | None,
    typer.Option(
        "--time",
        help="Each task's time limit, as sbatch takes it (04:00:00, 2-00:00:00) "
        "[default: the spec's, else the partition's limit].",
        rich_help_panel=_PANEL,
    ),
]
JobsOption = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        help="Worker tasks in the job array [default: the spec's, else 1].",
        rich_help_panel=_PANEL,
    ),
]
GpusPerJobOption = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-job",
        help="GPUs per task (--gres=gpu:N) [default: the spec's, else 1 for a GPU "
        "study, none for a CPU one].",
        rich_help_panel=_PANEL,
    ),
]
AccountOption = Annotated[
    str | None,
    typer.Option(
        "--account",
        help="Slurm account to charge [default: the spec's, else none].",
        rich_help_panel=_PANEL,
    ),
]
QosOption = Annotated[
    str | None,
    typer.Option(
        "--qos",
        help="Slurm quality of service [default: the spec's, else none].",
        rich_help_panel=_PANEL,
    ),
]
SbatchArgOption = Annotated[
    list[str] | None,
    typer.Option(
        "--sbatch-arg",
        help="One more sbatch option, passed as is (repeatable): "
        "--sbatch-arg=--constraint=a100 [default: the spec's sbatch_args, else none].",
        rich_help_panel=_PANEL,
    ),
]


def cli_values(
    partition: str | None,
    time: str | None,
    jobs: int | None,
    gpus_per_job: int | None,
    account: str | None,
    qos: str | None,
    sbatch_arg: list[str] | None,
) -> dict[str, Any]:
    """The Slurm flags given (None: not given, the spec's ``[engine]`` or the default)."""
    return {
        "partition": partition,
        "time": time,
        "jobs": jobs,
        "gpus_per_job": gpus_per_job,
        "account": account,
        "qos": qos,
        "sbatch_args": tuple(sbatch_arg or ()),
    }


def check_engine_flags(engine: str, values: dict[str, Any]) -> None:
    given = [k for k, v in values.items() if v not in (None, ())]
    if engine != "slurm" and given:
        flag = "--" + given[0].replace("_", "-").replace("sbatch-args", "sbatch-arg")
        raise SweepsError(f"{flag} is an option of the Slurm engine; add --engine slurm")


def requests_for(
    spec: StudySpec, values: dict[str, Any], cap: int | None, calibration: float = 1.0
) -> tuple[Any, Any]:
    from sweeps.engines import slurm

    options = slurm.options_from(spec.raw.get("engine"), {**values, "trials_per_task": cap})
    nodes = slurm.partition_nodes(options.partition)
    requests = slurm.plan_requests(spec, nodes, options, calibration)
    slurm.check_fits(requests, nodes, options.partition)
    return options, requests


def run_slurm(
    spec: StudySpec,
    st: Any,
    study: optuna.Study,
    url: str,
    runs_dir: Path,
    cap: int | None,
    n_trials: int | None,
    values: dict[str, Any],
    beats: tuple[int, int],
) -> None:
    """Submit the array of workers and follow it until the study is done (Ctrl-C cancels)."""
    from sweeps import preflight
    from sweeps import workers as wk
    from sweeps.cli.progress import Board, live_display, summary
    from sweeps.engines import slurm

    options, requests = requests_for(spec, values, cap, preflight.calibration_factor(study))
    target = wk.target_trials(spec, study, n_trials)
    board = Board(study, target)
    flags = wk.StopFlags()
    study_dir = runs_dir / spec.name
    if not wk.budget_state(study.get_trials(deepcopy=False), target).done:
        text = slurm.script(spec, requests, options, runs_dir=runs_dir, beats=beats)
        logs = Path(runs_dir).resolve() / spec.name / "slurm"
        job = slurm.submit(text, url, logs)
        gres = f", gres gpu:{requests.gpus}" if requests.gpus else ""
        err_console.print(
            f"submitted Slurm job {job}: {options.jobs} task(s), each --mem "
            f"{requests.mem_mib}M --cpus-per-task {requests.cpus}{gres}; "
            f"logs in {logs}",
            highlight=False,
            markup=False,
        )
        with wk.stop_on_signals(flags, say=board.say), live_display(board) as tick:
            slurm.follow(job, study, target, flags.stop, board.say, tick, on_event=board.on_event)
    summary(board, study_dir, [], flags)


@app.command("slurm-script")
def slurm_script(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="A study spec (.toml).")],
    partition: PartitionOption = None,
    time: TimeOption = None,
    jobs: JobsOption = None,
    gpus_per_job: GpusPerJobOption = None,
    account: AccountOption = None,
    qos: QosOption = None,
    sbatch_arg: SbatchArgOption = None,
    max_concurrent: MaxConcurrentOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    heartbeat: HeartbeatOption = HEARTBEAT_INTERVAL_S,
    grace: GraceOption = GRACE_PERIOD_S,
) -> None:
    """Print the sbatch script `sweeps run SPEC --engine slurm` submits (the same requests), for
    submitting by hand: `sweeps run SPEC --n-trials N` creates the study, then
    `SWEEPS_STORAGE=URL sbatch script`."""
    from sweeps import study as service
    from sweeps.engines import slurm
    from sweeps.spec import load_spec

    service.check_run_options(max_concurrent, None, heartbeat, grace, "auto")
    spec = load_spec(spec_path, check_paths=False)
    values = cli_values(partition, time, jobs, gpus_per_job, account, qos, sbatch_arg)
    options, requests = requests_for(spec, values, max_concurrent)
    typer.echo(
        slurm.script(spec, requests, options, runs_dir=runs_dir, beats=(heartbeat, grace)), nl=False
    )
