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
lose their study under them) unless ``force``. A copy that fails half way is removed again.
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

from lm.errors import SweepsError
from sweeps import optuna_compat, records
from sweeps import storage as st
from sweeps.liveness import fail_and_requeue
from sweeps.spec.values import MAX_NAME_LENGTH, STUDY_NAME

#: The study user attribute that holds the spec (``sweeps.workers.SPEC_ATTR``, not imported:
#: the workers module pulls in the runner).
SPEC_ATTR = "spec"


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
        raise SweepsError(f"{what} {name[:40]!r} must be 1 to {MAX_NAME_LENGTH} characters "
                          f"long, got {len(name)}")
    if not STUDY_NAME.fullmatch(name):
        raise SweepsError(f"{what} {name!r} may use only letters, digits, '_', '.' and '-', "
                          "starting with a letter or digit (it names run directories)")


def _study_id(conn: sa.Connection, name: str, shown: str, *, lock: bool = False) -> int:
    t = optuna_compat.STUDIES_TABLE
    query = sa.select(t.c.study_id).where(t.c.study_name == name)
    found = conn.execute(query.with_for_update() if lock else query).first()
    if found is None:
        names = sorted(conn.execute(sa.select(t.c.study_name)).scalars())
        listed = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") or "none"
        raise SweepsError(f"no study {name!r} in {shown} (studies there: {listed}); check the "
                          "name or --storage")
    return int(found[0])


def _exists(conn: sa.Connection, name: str) -> bool:
    t = optuna_compat.STUDIES_TABLE
    return conn.execute(sa.select(t.c.study_id).where(t.c.study_name == name)).first() is not None


def _check_case_clash(conn: sa.Connection, new: str, shown: str, itself: str | None = None
                      ) -> None:
    """``new`` may not differ from another study's name only in case: run dirs are named after
    studies (``runs/NAME``), and on a case-insensitive file system (macOS, Windows) ``tiny`` and
    ``TINY`` would write into one dir. ``itself``: the study being renamed."""
    t = optuna_compat.STUDIES_TABLE
    found = conn.execute(sa.select(t.c.study_name).where(
        sa.func.lower(t.c.study_name) == new.lower(), t.c.study_name != new)).scalars().all()
    clash = next((n for n in found if n != itself), None)
    if clash is not None:
        raise SweepsError(f"study {new!r} differs from study {clash!r} in {shown} only in case; "
                          "their run dirs would be one dir on a case-insensitive file system: "
                          "pick another name")


def _check_not_running(conn: sa.Connection, study_id: int, name: str, action: str,
                       force: bool) -> int:
    running = optuna_compat.running_trials(conn, study_id)
    if running and not force:
        raise SweepsError(f"study {name!r} has {running} RUNNING trial(s): its workers may be "
                          f"alive, and {action} would pull the study from under them; stop them "
                          "first, or pass --force if they are dead")
    return running


def _trial_count(conn: sa.Connection, study_id: int) -> int:
    t = optuna_compat.TRIALS_TABLE
    return int(conn.execute(sa.select(sa.func.count()).select_from(t)
                            .where(t.c.study_id == study_id)).scalar_one())


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


def delete_study(url: str, name: str, *, force: bool = False, runs_dir: Path | None = None,
                 delete_runs: bool = False,
                 confirm: Callable[[str], bool] | None = None) -> Outcome:
    """Delete study ``name``: its ``sweeps_`` rows, then Optuna's (one call), then, with
    ``delete_runs``, ``runs_dir/<name>``. ``confirm(question)`` is asked after every check
    (None: no question); a no deletes nothing."""
    import optuna

    if delete_runs and runs_dir is None:
        raise SweepsError("--delete-runs needs --runs-dir DIR (a study's runs are under "
                          "DIR/<study>)")
    shown = st.mask_url(url)
    rdb = _open(url)
    try:
        with rdb.engine.connect() as conn:
            study_id = _study_id(conn, name, shown)
            _check_not_running(conn, study_id, name, "deleting it", force)
            trials = _trial_count(conn, study_id)
        run_dirs = _run_dirs(runs_dir, name) if delete_runs else None
        question = (f"delete study {name!r} ({trials} trials) from {shown}"
                    + (f" and its runs {run_dirs}" if run_dirs else "") + "?")
        if confirm is not None and not confirm(question):
            raise SweepsError(f"not confirmed: study {name!r} was not deleted")
        # The project's rows first: rows left behind would join a later study of the same name.
        records.delete_study_records(rdb, name)
        optuna.delete_study(study_name=name, storage=rdb)
    finally:
        rdb.engine.dispose()
    if run_dirs is not None and run_dirs.exists():
        shutil.rmtree(run_dirs)
    return Outcome(name, trials, shown, runs_removed=run_dirs)


def _run_dirs(runs_dir: Path | None, name: str) -> Path | None:
    """``runs_dir/<name>``, only for a name that cannot leave ``runs_dir``."""
    assert runs_dir is not None
    if not STUDY_NAME.fullmatch(name):
        raise SweepsError(f"study {name!r} is not a name sweeps gives run directories; delete "
                          "its runs by hand, or leave out --delete-runs")
    path = runs_dir / name
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise SweepsError(f"{path} is not a directory of runs; remove it by hand, or leave out "
                          "--delete-runs")
    return path


# --- rename -------------------------------------------------------------------------------------


def rename_study(url: str, name: str, new: str, *, force: bool = False) -> Outcome:
    """Rename study ``name`` to ``new`` in place, in one transaction: Optuna's ``studies`` row,
    the stored spec's name, and the ``sweeps_`` rows."""
    check_name(new)
    shown = st.mask_url(url)
    rdb = _open(url)
    try:
        with rdb.engine.begin() as conn:
            study_id = _study_id(conn, name, shown, lock=True)
            if _exists(conn, new):
                raise SweepsError(f"study {new!r} already exists in {shown}; pick another name "
                                  f"or delete it first (`sweeps delete {new}`)")
            _check_case_clash(conn, new, shown, itself=name)
            _check_not_running(conn, study_id, name, "renaming it", force)
            trials = _trial_count(conn, study_id)
            optuna_compat.rename_study(conn, study_id, new)
            attrs = optuna_compat.STUDY_USER_ATTRS_TABLE
            stored = conn.execute(sa.select(attrs.c.value_json).where(
                attrs.c.study_id == study_id, attrs.c.key == SPEC_ATTR)).scalar()
            if stored is not None:
                optuna_compat.set_study_user_attr(conn, study_id, SPEC_ATTR,
                                                  renamed_spec(json.loads(stored), new))
            records.rename_study_records(conn, name, new)
    except sa.exc.IntegrityError:
        raise SweepsError(f"study {new!r} already exists in {shown} (created just now); pick "
                          "another name") from None
    finally:
        rdb.engine.dispose()
    return Outcome(name, trials, shown, new=new)


# --- copy ---------------------------------------------------------------------------------------


def copy_study(url: str, name: str, new: str, *, to_url: str | None = None,
               force: bool = False) -> Outcome:
    """Copy study ``name`` to ``new`` (in ``to_url``, default the same database) with Optuna's
    ``copy_study`` (trials, attributes, directions), the spec renamed, and the evaluations and
    samples of every trial. With ``force``, a study with RUNNING trials is copied too: in the
    copy those trials are failed and queued again (their run goes on in the source only)."""
    check_name(new)
    shown, target_shown = st.mask_url(url), st.mask_url(to_url or url)
    source = _open(url)
    target = source if to_url is None else st.open_storage(to_url)
    try:
        with source.engine.connect() as conn:
            study_id = _study_id(conn, name, shown)
            _check_not_running(conn, study_id, name, "copying it", force)
        with target.engine.connect() as conn:
            if _exists(conn, new):
                raise SweepsError(f"study {new!r} already exists in {target_shown}; pick another "
                                  f"name or delete it first (`sweeps delete {new}`)")
            _check_case_clash(conn, new, target_shown)
        trials, rows, requeued = _copy(source, name, target, new)
    finally:
        source.engine.dispose()
        target.engine.dispose()
    return Outcome(name, trials, target_shown, new=new, rows=rows, requeued=requeued)


def _copy(source: Any, name: str, target: Any, new: str) -> tuple[int, int, int]:
    """(trials, sweeps_ rows, re-queued trials) of the copy; a failed copy is removed again."""
    import optuna

    optuna_compat.quiet_optuna()
    try:
        optuna.copy_study(from_study_name=name, from_storage=source, to_storage=target,
                          to_study_name=new)
    except optuna.exceptions.DuplicatedStudyError:
        raise SweepsError(f"study {new!r} already exists in {st.mask_url(_url(target))} "
                          "(created just now); pick another name") from None
    except BaseException:
        # Optuna creates the new study before it copies anything: a copy that fails midway
        # (a damaged source value) left a half study under the new name.
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=new, storage=target)
        raise
    try:
        copied = optuna.load_study(study_name=new, storage=target)
        spec = copied.user_attrs.get(SPEC_ATTR)
        if spec is not None:
            copied.set_user_attr(SPEC_ATTR, renamed_spec(spec, new))
        old = sorted(optuna.load_study(study_name=name, storage=source).get_trials(
            deepcopy=False), key=lambda t: t.number)
        mine = sorted(copied.get_trials(deepcopy=False), key=lambda t: t.number)
        ids = {o.number: (m.number, optuna_compat.trial_id(m))
               for o, m in zip(old, mine, strict=True)}
        rows = records.copy_study_records(source, name, target, new, ids)
        requeued = 0
        for t in mine:
            if t.state == optuna.trial.TrialState.RUNNING:
                requeued += fail_and_requeue(
                    target, copied, t, max_retries=None,
                    reason=f"copied from study {name!r} while running; its run went on there")
        return len(mine), rows, requeued
    except BaseException:
        records.delete_study_records(target, new)
        optuna.delete_study(study_name=new, storage=target)
        raise


def _url(rdb: Any) -> str:
    return rdb.engine.url.render_as_string(hide_password=False)
