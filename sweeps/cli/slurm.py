"""The Slurm engine's options (``sweeps run --engine slurm``, ``sweeps confirm --engine slurm``)
and ``sweeps slurm-script``; the engine itself, which submits the array and follows it, is
``sweeps.engines.slurm``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sweeps.cli.options import GraceOption, HeartbeatOption, MaxConcurrentOption, RunsDirOption
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S

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
    options, requests = slurm.requests_for(spec, values, max_concurrent)
    typer.echo(
        slurm.script(spec, requests, options, runs_dir=runs_dir, beats=(heartbeat, grace)), nl=False
    )
