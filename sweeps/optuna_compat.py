"""Every use of Optuna's internals, in one place, each with a public fallback where one exists.

The project needs five things Optuna's public API does not give: a trial's storage id (to key the
project's own tables and heartbeats), the RDB storage's table models (the report reads the
database with plain SQL, without loading every trial), writing all of a trial's user attributes in
one transaction (one commit instead of ~35: a measurable share of a short trial's overhead on
PostgreSQL), queueing a study's initial trials together with a marker in one transaction (so
processes starting the same study at once queue them exactly once), and the name of the RDB
storage's stale-trial callback argument (renamed across versions). Also: adding finished trials
(a warm start) in the same one transaction as the queued ones, renaming a study in place (Optuna
has no rename API: one UPDATE of its ``studies`` table, inside the caller's transaction),
which system attributes hold a trial's constraints, the base class of the heartbeat retry
callback (renamed across versions), the schema revisions Optuna ships (an old schema told from a
newer one) and the table of each of Optuna's records (the report, ``sweeps status`` and
``sweeps.lifecycle`` read them with plain SQL), and naming a study's objectives (public, but
experimental: it warns). Nothing outside this module touches a private
name of Optuna's (``tests/test_conventions.py`` keeps it so).
``tests/sweeps/test_optuna_compat.py`` fails loudly when an Optuna release changes any of them.
"""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.trial import TrialState, create_trial

from sweeps.text import storable, storable_value


def trial_id(trial: Any) -> int:
    """The storage id of a ``Trial`` or ``FrozenTrial`` (Optuna keeps it private)."""
    return int(trial._trial_id)


def stale_callback_arg() -> str:
    """The ``RDBStorage`` argument that takes the stale-trial (heartbeat) callback."""
    names = inspect.signature(RDBStorage.__init__).parameters
    return "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in names \
        else "failed_trial_callback"


#: Optuna's heartbeat retry callback: Optuna >= 4.9 renamed it; older 4.x have the old name.
RetryCallbackBase: type = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) \
    or optuna.storages.RetryFailedTrialCallback


def schema_migrations() -> Any:
    """Optuna's alembic script directory: the schema revisions this Optuna knows and its head."""
    from alembic.script import ScriptDirectory
    from optuna.storages import _rdb

    return ScriptDirectory(str(Path(_rdb.__file__).parent / "alembic"))


def _one_transaction_writer(rdb: RDBStorage) -> tuple[Any, Any] | None:
    """(session factory, per-attribute writer) of the RDB storage, or None if they changed."""
    try:
        from optuna.storages._rdb.storage import _create_scoped_session

        return _create_scoped_session, rdb._set_trial_attr_without_commit
    except (ImportError, AttributeError):
        return None


def write_user_attrs(rdb: RDBStorage, trial_id: int, attrs: dict[str, Any]) -> None:
    """All of a trial's user attributes in one transaction; Optuna's public one-by-one API where
    the RDB storage's internals are missing. The trial is still RUNNING here, so Optuna's trial
    cache re-reads it anyway. Strings follow the one storage rule (``sweeps.text``): a reason
    or a note reads the same as a sample would, on every backend."""
    attrs = {storable(k): storable_value(v) for k, v in attrs.items()}
    writer = _one_transaction_writer(rdb)
    if writer is None:
        for key, value in attrs.items():
            rdb.set_trial_user_attr(trial_id, key, value)
        return
    scoped_session, write_one = writer
    with scoped_session(rdb.scoped_session, True) as session:
        for key, value in attrs.items():
            write_one(session, models.TrialUserAttributeModel, trial_id, key, value)


def enqueue_once(rdb: RDBStorage, study_id: int, marker: str,
                 params: Sequence[dict[str, Any]]) -> bool:
    """Queue ``params`` as WAITING trials (as ``Study.enqueue_trial`` does) and set the study user
    attribute ``marker`` to true, all in one transaction; False, and nothing written, when the
    marker is already there (see ``add_trials_once``)."""
    templates = [create_trial(state=TrialState.WAITING, system_attrs={"fixed_params": dict(p)})
                 for p in params]
    return add_trials_once(rdb, study_id, marker, templates)


def add_trials_once(rdb: RDBStorage, study_id: int, marker: str, templates: Sequence[Any],
                    value: Any = True) -> bool:
    """Add ``templates`` (``create_trial`` results: WAITING, or finished ones carried from
    another study) and set the study user attribute ``marker`` to ``value``, all in one
    transaction; False, and nothing written, when the marker is already there.

    The marker is inserted first: its (study, key) uniqueness makes a second process's insert
    wait for the first transaction and then fail, so exactly one process adds the trials, and a
    process that dies half way adds nothing (the next start adds them all). Where Optuna's
    internals moved, the public calls: correct for one process at a time.
    """
    try:
        from optuna.storages._rdb.storage import _create_scoped_session

        prepare = rdb._get_prepared_new_trial
    except (ImportError, AttributeError):
        if marker in rdb.get_study_user_attrs(study_id):
            return False
        for template in templates:
            rdb.create_new_trial(study_id, template_trial=template)
        rdb.set_study_user_attr(study_id, marker, value)
        return True
    try:
        with _create_scoped_session(rdb.scoped_session) as session:
            # The marker's INSERT is the transaction's first statement: on SQLite it takes the
            # write lock before any read (a read first would make a waiting writer fail at once).
            session.add(models.StudyUserAttributeModel(study_id=study_id, key=marker,
                                                       value_json=json.dumps(value)))
            session.flush()
            # Optuna's own lock for numbering new trials (``_create_new_trial``).
            models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
            for template in templates:
                prepare(study_id, template, session)
    except sa.exc.IntegrityError:
        return False  # another process wrote the marker (and added the trials) first
    return True


#: Prefix of the system attributes where ``Trial.set_constraint`` (and the older list form)
#: keeps a trial's constraint values (``optuna.study._constrained_optimization``).
CONSTRAINTS_KEY = "constraints"


def constraint_attrs(system_attrs: dict[str, Any]) -> dict[str, Any]:
    """The system attributes that hold a trial's constraints (what a carried trial keeps, so a
    constrained sampler learns the infeasible region from it too)."""
    return {k: v for k, v in system_attrs.items() if k.startswith(CONSTRAINTS_KEY)}


#: Optuna's table of studies and its name column: the only place Optuna keeps a study's name
#: (trials, attributes and directions refer to the study by id).
STUDIES_TABLE = models.StudyModel.__table__
#: The rest of Optuna's tables the project reads with plain SQL (columns as Optuna names them).
STUDY_DIRECTIONS_TABLE = models.StudyDirectionModel.__table__
STUDY_USER_ATTRS_TABLE = models.StudyUserAttributeModel.__table__
TRIALS_TABLE = models.TrialModel.__table__
TRIAL_PARAMS_TABLE = models.TrialParamModel.__table__
TRIAL_USER_ATTRS_TABLE = models.TrialUserAttributeModel.__table__
TRIAL_SYSTEM_ATTRS_TABLE = models.TrialSystemAttributeModel.__table__


def rename_study(conn: sa.Connection, study_id: int, new_name: str) -> None:
    """Rename a study in place, inside the caller's transaction ``conn`` (Optuna has no rename
    API; every other Optuna table refers to the study by id, so one UPDATE renames it)."""
    t = STUDIES_TABLE
    done = conn.execute(sa.update(t).where(t.c.study_id == study_id)
                        .values(study_name=new_name))
    if done.rowcount != 1:
        raise RuntimeError(f"renaming study id {study_id} changed {done.rowcount} rows")


def set_study_user_attr(conn: sa.Connection, study_id: int, key: str, value: Any) -> None:
    """Overwrite an existing study user attribute inside the caller's transaction."""
    t = STUDY_USER_ATTRS_TABLE
    conn.execute(sa.update(t).where(t.c.study_id == study_id, t.c.key == key)
                 .values(value_json=json.dumps(value)))


def running_trials(conn: sa.Connection, study_id: int) -> int:
    """How many of the study's trials are RUNNING, read inside the caller's transaction."""
    t = TRIALS_TABLE
    return int(conn.execute(sa.select(sa.func.count()).select_from(t).where(
        t.c.study_id == study_id, t.c.state == TrialState.RUNNING)).scalar_one())


def set_metric_names(study: optuna.Study, names: Sequence[str]) -> None:
    """Name the study's objectives for Optuna's own tools (optuna-dashboard, ``optuna trials``,
    ``optuna.visualization``), which otherwise say "Objective 0": ``Study.set_metric_names``,
    public but marked experimental (it warns on every call). Written only when they differ, so
    a process opening the study writes nothing when they are set already."""
    if study.metric_names == list(names):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(list(names))


def quiet_optuna() -> None:
    """Optuna's INFO lines (a trial finished, a study created) off: the CLI says what matters."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
