"""``sweeps delete``, ``sweeps copy`` and ``sweeps rename``: each parses its options and calls
one function of ``sweeps.lifecycle``; what they print is here. A refusal (missing study, taken or
invalid new name, RUNNING trials without ``--force``, no confirmation) is one line and exit 2,
with nothing changed; each command is one transaction, so an interrupted one changed nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from lm.errors import SweepsError
from sweeps.cli.options import StorageOption
from sweeps.console import print_summary

app = typer.Typer()

StudyArgument = Annotated[str, typer.Argument(metavar="STUDY", help="The study's name.")]
NewArgument = Annotated[str, typer.Argument(metavar="NEW", help="The new study's name.")]
ForceOption = Annotated[
    bool,
    typer.Option(
        "--force", help="Go ahead although the study has RUNNING trials (their workers are dead)."
    ),
]


@app.command()
def delete(
    study: StudyArgument,
    storage: StorageOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: ForceOption = False,
    runs_dir: Annotated[
        Path | None,
        typer.Option(
            "--runs-dir",
            help="Where the study ran (its runs are RUNS_DIR/<study>) [default: "
            "none: runs are left alone].",
        ),
    ] = None,
    delete_runs: Annotated[
        bool, typer.Option("--delete-runs", help="Also remove RUNS_DIR/<study> (needs --runs-dir).")
    ] = False,
) -> None:
    """Delete a study: its trials, evaluations and samples (and, with --delete-runs, its runs).
    All or nothing: an interrupted delete leaves the study whole (its runs too). Asks first on a
    terminal; elsewhere needs --yes."""
    from sweeps import lifecycle
    from sweeps.storage import resolve_storage_url

    def confirm(question: str) -> bool:
        if not sys.stdin.isatty():
            raise SweepsError(
                f"refusing to delete study {study!r} without a confirmation: "
                "not a terminal; pass --yes"
            )
        return typer.confirm(question, default=False)

    done = lifecycle.delete_study(
        resolve_storage_url(storage, None),
        study,
        force=force,
        runs_dir=runs_dir,
        delete_runs=delete_runs,
        confirm=None if yes else confirm,
    )
    rows: list[tuple[str, object]] = [("storage", done.storage), ("trials", done.trials)]
    if done.runs_removed is not None:
        rows.append(("runs removed", str(done.runs_removed)))
    print_summary(f"deleted study {done.study}", rows)


@app.command(name="copy")
def copy_(
    study: StudyArgument,
    new: NewArgument,
    storage: StorageOption = None,
    to_storage: Annotated[
        str | None,
        typer.Option("--to-storage", help="Copy into this database [default: the same one]."),
    ] = None,
    force: ForceOption = False,
) -> None:
    """Copy a study (trials, attributes, evaluations, samples) to NEW; `sweeps worker NEW`
    resumes the copy (its stored spec is renamed to NEW). All or nothing: an interrupted copy
    leaves no NEW, so running it again copies it whole."""
    from sweeps import lifecycle
    from sweeps.storage import resolve_storage_url

    done = lifecycle.copy_study(
        resolve_storage_url(storage, None), study, new, to_url=to_storage, force=force
    )
    rows: list[tuple[str, object]] = [
        ("into", done.storage),
        ("trials", done.trials),
        ("evaluation and sample rows", done.rows),
    ]
    if done.requeued:
        rows.append(("re-queued (were running)", done.requeued))
    print_summary(f"copied study {done.study} to {done.new}", rows)


@app.command()
def rename(
    study: StudyArgument,
    new: NewArgument,
    storage: StorageOption = None,
    force: ForceOption = False,
) -> None:
    """Rename a study in place (one transaction); its run directories keep their names."""
    from sweeps import lifecycle
    from sweeps.storage import resolve_storage_url

    done = lifecycle.rename_study(resolve_storage_url(storage, None), study, new, force=force)
    print_summary(
        f"renamed study {done.study} to {done.new}",
        [("storage", done.storage), ("trials", done.trials)],
    )
