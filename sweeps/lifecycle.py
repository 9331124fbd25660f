"""A study's life after its run: delete it, copy it (to another name or database), rename it.
The service behind ``sweeps delete``, ``sweeps copy`` and ``sweeps rename``; no printing.

What each one touches: Optuna's rows of the study, the project's ``sweeps_`` rows (evaluations,
samples, trial hosts) and, for a copy or a rename, the study's stored spec, whose ``[study]
name`` is set to the new name (everything else in it unchanged): ``sweeps worker NEW`` rebuilds
the spec from the study and joins the study the spec names, so a copy or a renamed study resumes
under its new name. (A spec file on disk still names the old study: ``sweeps run`` with it opens
the old name.) Run directories stay where they are (a trial's ``run_dir`` attribute points at
them), except ``delete --delete-runs``, which removes ``DIR/<study>``.

Each refuses, with one line and nothing changed: a missing study, a new name that exists or is
not a valid study name (the spec's rules), and a study with RUNNING trials (its workers would
lose their study under them) unless ``force``. Each is one transaction
(``storage.write_transaction``): killed at any point (``kill -9`` included), a copy leaves no
study of the new name and a delete leaves the study whole, and running it again does all of it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from optuna.trial import TrialState

from lm.errors import SweepsError
from sweeps import optuna_compat, records
from sweeps import record as rc
from sweeps import storage as st
from sweeps.liveness import failed_attrs, requeue_template
from sweeps.spec.values import MAX_NAME_LENGTH, STUDY_NAME

#: The study user attribute that holds the spec.
SPEC_ATTR = rc.STUDY_SPEC


@dataclass(frozen=True)
class Outcome:
    """What a lifecycle command did, for the CLI's summary."""

    study: str
    trials: int
    storage: str  # masked
    new: str | None = None
    rows: int = 0  # sweeps_ rows copied
    runs_removed: Path | None = None
    requeued: int = 0  # RUNNING trials of a forced copy, queued again in the copy


# --- checks -------------------------------------------------------------------------------------


def check_name(name: str, what: str = "the new name") -> None:
    """A valid study name by the spec's rules (``[study] name``)."""
    if not name or len(name) > MAX_NAME_LENGTH:
        raise SweepsError(
            f"{what} {name[:40]!r} must be 1 to {MAX_NAME_LENGTH} characters long, got {len(name)}"
        )
    if not STUDY_NAME.fullmatch(name):
        raise SweepsError(
            f"{what} {name!r} may use only letters, digits, '_', '.' and '-', "
            "starting with a letter or digit (it names run directories)"
        )


def _study_id(conn: sa.Connection, name: str, shown: str, *, lock: bool = False) -> int:
    t = optuna_compat.STUDIES_TABLE
    query = sa.select(t.c.study_id).where(t.c.study_name == name)
    found = conn.execute(query.with_for_update() if lock else query).first()
    if found is None:
        names = sorted(conn.execute(sa.select(t.c.study_name)).scalars())
        listed = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") or "none"
        raise SweepsError(
            f"no study {name!r} in {shown} (studies there: {listed}); check the name or --storage"
        )
    return int(found[0])


def _exists(conn: sa.Connection, name: str) -> bool:
    t = optuna_compat.STUDIES_TABLE
    return conn.execute(sa.select(t.c.study_id).where(t.c.study_name == name)).first() is not None


def _check_case_clash(conn: sa.Connection, new: str, shown: str, itself: str | None = None) -> None:
    """``new`` may not differ from another study's name only in case: run dirs are named after
    studies (``runs/NAME``), and on a case-insensitive file system (macOS, Windows) ``tiny`` and
    ``TINY`` would write into one dir. ``itself``: the study being renamed."""
    t = optuna_compat.STUDIES_TABLE
    found = (
        conn.execute(
            sa.select(t.c.study_name).where(
                sa.func.lower(t.c.study_name) == new.lower(), t.c.study_name != new
            )
        )
        .scalars()
        .all()
    )
    clash = next((n for n in found if n != itself), None)
    if clash is not None:
        raise SweepsError(
            f"study {new!r} differs from study {clash!r} in {shown} only in case; "
            "their run dirs would be one dir on a case-insensitive file system: "
            "pick another name"
        )


def _check_not_running(
    conn: sa.Connection, study_id: int, name: str, action: str, force: bool
) -> int:
    running = optuna_compat.running_trials(conn, study_id)
    if running and not force:
        raise SweepsError(
            f"study {name!r} has {running} RUNNING trial(s): its workers may be "
            f"alive, and {action} would pull the study from under them; stop them "
            "first, or pass --force if they are dead"
        )
    return running


def _trial_count(conn: sa.Connection, study_id: int) -> int:
    t = optuna_compat.TRIALS_TABLE
    return int(
        conn.execute(
            sa.select(sa.func.count()).select_from(t).where(t.c.study_id == study_id)
        ).scalar_one()
    )


def _open(url: str) -> Any:
    """Optuna's storage on an existing sweeps database (a typo in the URL creates nothing)."""
    st.read_only_engine(url).dispose()
    return st.open_storage(url)


def renamed_spec(spec: Any, new: str) -> Any:
    """The stored spec with ``[study] name`` set to ``new`` (anything else: unchanged)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("study"), dict):
        return spec
    out = copy.deepcopy(spec)
    out["study"]["name"] = new
    return out


# --- delete -------------------------------------------------------------------------------------


def delete_study(
    url: str,
    name: str,
    *,
    force: bool = False,
    runs_dir: Path | None = None,
    delete_runs: bool = False,
    confirm: Callable[[str], bool] | None = None,
) -> Outcome:
    """Delete study ``name``: Optuna's rows and its ``sweeps_`` rows in one transaction (a
    delete killed half way leaves the study whole), then, with ``delete_runs``, only once that
    committed, ``runs_dir/<name>``. ``confirm(question)`` is asked after every check (None: no
    question); a no deletes nothing. The checks are made again inside the transaction: the
    question waits on a person, the transaction on nobody."""
    if delete_runs and runs_dir is None:
        raise SweepsError(
            "--delete-runs needs --runs-dir DIR (a study's runs are under DIR/<study>)"
        )
    shown = st.mask_url(url)
    rdb = _open(url)
    try:
        with rdb.engine.connect() as conn:
            study_id = _study_id(conn, name, shown)
            _check_not_running(conn, study_id, name, "deleting it", force)
            trials = _trial_count(conn, study_id)
        run_dirs = _run_dirs(runs_dir, name) if delete_runs else None
        question = (
            f"delete study {name!r} ({trials} trials) from {shown}"
            + (f" and its runs {run_dirs}" if run_dirs else "")
            + "?"
        )
        if confirm is not None and not confirm(question):
            raise SweepsError(f"not confirmed: study {name!r} was not deleted")
        with st.write_transaction(rdb.engine) as conn:
            study_id = _study_id(conn, name, shown, lock=True)
            _check_not_running(conn, study_id, name, "deleting it", force)
            trials = _trial_count(conn, study_id)
            # The project's rows too: rows left behind would join a later study of the name.
            records.delete_study_rows(conn, name)
            optuna_compat.delete_study_rows(conn, study_id)
    finally:
        rdb.engine.dispose()
    if run_dirs is not None and run_dirs.exists():
        shutil.rmtree(run_dirs)
    return Outcome(name, trials, shown, runs_removed=run_dirs)


def _run_dirs(runs_dir: Path | None, name: str) -> Path | None:
    """``runs_dir/<name>``, only for a name that cannot leave ``runs_dir``."""
    assert runs_dir is not None
    if not STUDY_NAME.fullmatch(name):
        raise SweepsError(
            f"study {name!r} is not a name sweeps gives run directories; delete "
            "its runs by hand, or leave out --delete-runs"
        )
    path = runs_dir / name
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise SweepsError(
            f"{path} is not a directory of runs; remove it by hand, or leave out --delete-runs"
        )
    return path


# --- rename -------------------------------------------------------------------------------------


def rename_study(url: str, name: str, new: str, *, force: bool = False) -> Outcome:
    """Rename study ``name`` to ``new`` in place, in one transaction: Optuna's ``studies`` row,
    the stored spec's name, and the ``sweeps_`` rows."""
    check_name(new)
    shown = st.mask_url(url)
    rdb = _open(url)
    try:
        with st.write_transaction(rdb.engine) as conn:
            study_id = _study_id(conn, name, shown, lock=True)
            if _exists(conn, new):
                raise SweepsError(
                    f"study {new!r} already exists in {shown}; pick another name "
                    f"or delete it first (`sweeps delete {new}`)"
                )
            _check_case_clash(conn, new, shown, itself=name)
            _check_not_running(conn, study_id, name, "renaming it", force)
            trials = _trial_count(conn, study_id)
            optuna_compat.rename_study(conn, study_id, new)
            _rename_spec(conn, study_id, new)
            records.rename_study_records(conn, name, new)
    except sa.exc.IntegrityError:
        raise SweepsError(
            f"study {new!r} already exists in {shown} (created just now); pick another name"
        ) from None
    finally:
        rdb.engine.dispose()
    return Outcome(name, trials, shown, new=new)


# --- copy ---------------------------------------------------------------------------------------


def copy_study(
    url: str, name: str, new: str, *, to_url: str | None = None, force: bool = False
) -> Outcome:
    """Copy study ``name`` to ``new`` (in ``to_url``, default the same database) in one
    transaction on the target: Optuna's rows (trials, values, parameters, attributes,
    directions, intermediate values, heartbeats: ``optuna_compat.copy_study_rows``), the spec
    renamed, and the evaluations and samples of every trial. Killed half way, the target holds
    no study ``new`` and a second run copies it whole. Across databases the source is read in
    one read transaction (one moment of it). With ``force``, a study with RUNNING trials is
    copied too: in the copy those trials are failed and queued again (their run goes on in the
    source only)."""
    check_name(new)
    shown, target_shown = st.mask_url(url), st.mask_url(to_url or url)
    source = _open(url)
    target = source if to_url is None else st.open_storage(to_url)
    try:
        with contextlib.ExitStack() as stack:
            dst = stack.enter_context(st.write_transaction(target.engine))
            src = dst if to_url is None else stack.enter_context(st.read_transaction(source.engine))
            study_id = _study_id(src, name, shown, lock=to_url is None)
            running = _running_ids(src, study_id)
            _check_not_running(src, study_id, name, "copying it", force)
            if _exists(dst, new):
                raise SweepsError(
                    f"study {new!r} already exists in {target_shown}; pick "
                    f"another name or delete it first (`sweeps delete {new}`)"
                )
            _check_case_clash(dst, new, target_shown)
            copied = optuna_compat.copy_study_rows(src, dst, study_id, new)
            _rename_spec(dst, copied.study_id, new)
            numbers = _numbers(dst, copied.study_id)
            ids = {numbers[i]: (numbers[i], i) for i in copied.trial_ids.values()}
            rows = records.copy_study_rows(src, dst, name, new, ids)
            for old_id in running:
                # Built from the source's trial (read outside this transaction, which alone
                # sees the copy); the copy's trial has the same number, parameters, attributes.
                template = requeue_template(source.get_trial(old_id), max_retries=None)
                optuna_compat.fail_and_requeue_in(
                    dst,
                    target,
                    copied.study_id,
                    copied.trial_ids[old_id],
                    failed_attrs(
                        f"copied from study {name!r} while running; its run went on there"
                    ),
                    template,
                )
    except sa.exc.IntegrityError:
        raise SweepsError(
            f"study {new!r} already exists in {target_shown} (created just now); pick another name"
        ) from None
    finally:
        source.engine.dispose()
        target.engine.dispose()
    return Outcome(
        name, len(copied.trial_ids), target_shown, new=new, rows=rows, requeued=len(running)
    )


def _running_ids(conn: sa.Connection, study_id: int) -> list[int]:
    t = optuna_compat.TRIALS_TABLE
    return list(
        conn.execute(
            sa.select(t.c.trial_id)
            .where(t.c.study_id == study_id, t.c.state == TrialState.RUNNING)
            .order_by(t.c.number)
        ).scalars()
    )


def _numbers(conn: sa.Connection, study_id: int) -> dict[int, int]:
    """{trial id: number} of a study's trials."""
    t = optuna_compat.TRIALS_TABLE
    return dict(
        conn.execute(sa.select(t.c.trial_id, t.c.number).where(t.c.study_id == study_id)).all()
    )


def _rename_spec(conn: sa.Connection, study_id: int, new: str) -> None:
    """The stored spec's ``[study] name`` set to ``new``, inside the caller's transaction."""
    attrs = optuna_compat.STUDY_USER_ATTRS_TABLE
    stored = conn.execute(
        sa.select(attrs.c.value_json).where(attrs.c.study_id == study_id, attrs.c.key == SPEC_ATTR)
    ).scalar()
    if stored is not None:
        optuna_compat.set_study_user_attr(
            conn, study_id, SPEC_ATTR, renamed_spec(json.loads(stored), new)
        )


def _url(rdb: Any) -> str:
    return str(rdb.engine.url.render_as_string(hide_password=False))
