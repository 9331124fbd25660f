"""The ``sweeps`` command line: thin Typer commands, one module per group, each parsing its
options and calling one function of a non-CLI module.

- ``data``: prepare, tokenize;  ``train``: train, generate;  ``memory``: estimate;
- ``study``: run, worker, status, trials (the study service is ``sweeps.study``, the dry-run plan
  ``sweeps.plan``), with ``progress`` for what ``sweeps run`` shows;  ``report``: report, export;
- ``lifecycle``: delete, copy, rename (the service is ``sweeps.lifecycle``);
- ``effects``: effects, confirm (the statistics are ``sweeps.effects``);
- ``predict``: predict, with --verify (the fit is ``sweeps.loss_fit``, the rest ``sweeps.predict``);
- ``transfer``: transfer coord (the coordinate check is ``lm.coord``);
- ``table``: table export (the tabulated benchmark the replay engine reads, ``sweeps.table``);
- ``options``: options shared by several commands, defined once.

Heavy imports (torch, the training loop, Optuna, plotly) happen inside the commands that need
them, so ``sweeps --help`` and the data commands start fast. Every user mistake is a
``SweepsError``: ``main`` prints its one line and exits 2; ``--debug`` shows the traceback instead.
A database error that reaches ``main`` is one line too (the driver's message, never SQLAlchemy's
statement and parameters: kilobytes of a model's text), exit 1.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from lm.errors import SweepsError
from sweeps.cli import (
    data,
    effects,
    lifecycle,
    memory,
    predict,
    report,
    slurm,
    study,
    table,
    train,
    transfer,
)
from sweeps.console import console, err_console, write_line
from sweeps.text import elide

app = typer.Typer(
    name="sweeps",
    help="Hyperparameter sweeps and ablations for small GPT-style language models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    # Plain help, as click writes it: rich markup would swallow every "[default: ...]" and
    # ".[ray]" in a help string, and rich panels print "<bool>" for flags, which take no value.
    rich_markup_mode=None,
)
for _group in (
    data,
    train,
    memory,
    study,
    slurm,
    lifecycle,
    report,
    effects,
    predict,
    transfer,
    table,
):
    app.add_typer(_group.app)

_state = {"debug": False}


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            is_eager=True,
            callback=lambda value: _print_version() if value else None,
        ),
    ] = False,
) -> None:
    _state["debug"] = debug


def _print_version() -> None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        shown = installed("sweeps")
    except PackageNotFoundError:  # run from a checkout that was never installed
        shown = "unknown (not installed)"
    typer.echo(f"sweeps {shown}")
    raise typer.Exit()


# --- the main job ---------------------------------------------------------------------------


QUICKSTART = Path(__file__).resolve().parents[2] / "studies" / "quickstart.toml"


@app.command()
def demo(
    out: Annotated[
        Path, typer.Option(help="Where the demo writes its database, runs and report.")
    ] = Path("demo-out"),
) -> None:
    """The main job: the quickstart study on a synthetic corpus, end to end, then its report."""
    if not QUICKSTART.exists():
        raise SweepsError(f"{QUICKSTART} is missing; run the demo from a checkout of the project")
    from sweeps.spec import load_spec

    name = load_spec(QUICKSTART).name
    out.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{out / 'sweeps.db'}"
    study.run(spec_path=QUICKSTART, storage=storage, runs_dir=out / "runs")
    report_path = out / f"{name}.html"
    report.report(studies=[name], out=report_path, storage=storage)
    console.print(f"report: {report_path.resolve()}  (open it in a browser)", highlight=False)
    console.print(f"more: sweeps trials {name} --storage {storage}", highlight=False)


def main() -> None:
    """Console-script entry: one line and exit 2 for a user mistake, never a traceback."""
    try:
        app()
    except SweepsError as exc:
        if _state["debug"]:
            raise
        # Plain write: one line whatever the terminal width (rich would wrap it), control
        # characters escaped (a message may quote text from a shared database).
        write_line(elide(f"error: {exc}"))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted by Ctrl-C")
        sys.exit(130)
    except json.JSONDecodeError as exc:
        if _state["debug"] or not _read_from_the_database(exc):
            raise
        # A value stored in the database is not JSON (a damaged or hand-edited row): the
        # study's problem, told in one line, not a traceback from deep inside Optuna.
        write_line(
            elide(
                f"error: a value stored in the database is not valid JSON ({exc}); "
                "the study is damaged: restore the database from a copy, or remove "
                "the study with `sweeps delete STUDY`"
            )
        )
        sys.exit(1)
    except Exception as exc:
        if _state["debug"] or not _from_the_database(exc):
            raise
        from sweeps.storage import describe_error

        # The driver's one line; SQLAlchemy's text carries the SQL and its parameters.
        write_line(
            elide(
                f"error: database error: {describe_error(exc)} (`sweeps --debug ...` "
                "shows the statement and the traceback)"
            )
        )
        sys.exit(1)


#: Where a JSON value read from the database is parsed: Optuna's storage, and sweeps' readers.
_DATABASE_READERS = (
    f"{os.sep}optuna{os.sep}storages{os.sep}",
    f"{os.sep}sweeps{os.sep}results.py",
    f"{os.sep}sweeps{os.sep}records.py",
    f"{os.sep}sweeps{os.sep}lifecycle.py",
)


def _read_from_the_database(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while parsing a value read from the database (by where)."""
    return any(
        any(part in frame.filename for part in _DATABASE_READERS)
        for frame in traceback.extract_tb(exc.__traceback__)
    )


def _from_the_database(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLAlchemy's (by module: sqlalchemy is not imported to ask)."""
    return any(c.__module__.startswith("sqlalchemy.") for c in type(exc).__mro__)


if __name__ == "__main__":
    main()
