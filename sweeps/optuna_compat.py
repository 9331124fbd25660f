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
experimental: it warns). And for ``sweeps copy``/``delete``/``status``
on large studies: a study's rows copied and deleted with plain SQL inside the caller's one
transaction (the tables read off Optuna's models and their foreign keys), a copied trial failed
and re-queued inside that transaction (Optuna's per-attribute writer and new-trial builder on a
session of the caller's connection), the trials a summary counts read without loading them
whole, and the Pareto front of given trials. Nothing outside this module touches a private
name of Optuna's (``tests/test_conventions.py`` keeps it so).
``tests/sweeps/test_optuna_compat.py`` fails loudly when an Optuna release changes any of them.
"""

from __future__ import annotations

import datetime
import inspect
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
import sqlalchemy.orm
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState, create_trial

from sweeps import sql
from sweeps.text import storable, storable_value


def trial_id(trial: Any) -> int:
    """The storage id of a ``Trial`` or ``FrozenTrial`` (Optuna keeps it private)."""
    return int(trial._trial_id)


def stale_callback_arg() -> str:
    """The ``RDBStorage`` argument that takes the stale-trial (heartbeat) callback."""
    names = inspect.signature(RDBStorage.__init__).parameters
    return (
        "heartbeat_stale_trial_callback"
        if "heartbeat_stale_trial_callback" in names
        else "failed_trial_callback"
    )


#: Optuna's heartbeat retry callback: Optuna >= 4.9 renamed it; older 4.x have the old name.
RetryCallbackBase: type = (
    getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
    or optuna.storages.RetryFailedTrialCallback
)


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


def enqueue_once(
    rdb: RDBStorage, study_id: int, marker: str, params: Sequence[dict[str, Any]]
) -> bool:
    """Queue ``params`` as WAITING trials (as ``Study.enqueue_trial`` does) and set the study user
    attribute ``marker`` to true, all in one transaction; False, and nothing written, when the
    marker is already there (see ``add_trials_once``)."""
    templates = [
        create_trial(state=TrialState.WAITING, system_attrs={"fixed_params": dict(p)})
        for p in params
    ]
    return add_trials_once(rdb, study_id, marker, templates)


def add_trials_once(
    rdb: RDBStorage, study_id: int, marker: str, templates: Sequence[Any], value: Any = True
) -> bool:
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
            session.add(
                models.StudyUserAttributeModel(
                    study_id=study_id, key=marker, value_json=json.dumps(value)
                )
            )
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
    done = conn.execute(sa.update(t).where(t.c.study_id == study_id).values(study_name=new_name))
    if done.rowcount != 1:
        raise RuntimeError(f"renaming study id {study_id} changed {done.rowcount} rows")


def set_study_user_attr(conn: sa.Connection, study_id: int, key: str, value: Any) -> None:
    """Overwrite an existing study user attribute inside the caller's transaction."""
    t = STUDY_USER_ATTRS_TABLE
    conn.execute(
        sa.update(t)
        .where(t.c.study_id == study_id, t.c.key == key)
        .values(value_json=json.dumps(value))
    )


def running_trials(conn: sa.Connection, study_id: int) -> int:
    """How many of the study's trials are RUNNING, read inside the caller's transaction."""
    t = TRIALS_TABLE
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(t)
            .where(t.c.study_id == study_id, t.c.state == TrialState.RUNNING)
        ).scalar_one()
    )


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


# --- a study's rows, copied and deleted with plain SQL ------------------------------------------


@dataclass(frozen=True)
class _Owned:
    """One of Optuna's tables that holds a study's rows: its column that points at the parent
    row (a study, or a trial), the parent table, and its own id column where another table
    points at its rows (a trial's id), else None."""

    table: sa.Table
    parent_column: sa.Column[Any]
    parent: sa.Table
    own_id: sa.Column[Any] | None


def study_tables() -> list[_Owned]:
    """Optuna's tables of a study's rows, parents first, read off its ORM models' foreign keys
    (not a list kept here): every table but ``studies`` and the ones that point at nothing
    (``version_info``). An Optuna release whose tables no longer form that tree (a row with two
    parents) is refused loudly, never copied half."""
    tables = models.BaseModel.metadata.sorted_tables
    referenced = {fk.column.table for t in tables for fk in t.foreign_keys}
    reached = {STUDIES_TABLE}
    out = []
    for table in tables:
        if table is STUDIES_TABLE or not table.foreign_keys:
            continue
        fks = list(table.foreign_keys)
        parent = fks[0].column.table
        if len(fks) != 1 or parent not in reached or not fks[0].column.primary_key:
            raise RuntimeError(
                f"Optuna's table {table.name} is not a child of one study or "
                f"trial row (foreign keys: {[str(f.column) for f in fks]}); this "
                "Optuna's tables are not copied with plain SQL"
            )
        own = None
        if table in referenced:
            (own,) = table.primary_key.columns
        out.append(_Owned(table, fks[0].parent, parent, own))
        reached.add(table)
    return out


def _of_study(owned: _Owned, plan: list[_Owned], study_id: int) -> sa.ColumnElement[bool]:
    """The condition that picks ``owned``'s rows of study ``study_id`` (a subquery per level)."""
    if owned.parent is STUDIES_TABLE:
        return owned.parent_column == study_id
    up = next(p for p in plan if p.table is owned.parent)
    assert up.own_id is not None
    return owned.parent_column.in_(sa.select(up.own_id).where(_of_study(up, plan, study_id)))


@dataclass(frozen=True)
class CopiedStudy:
    """What ``copy_study_rows`` wrote: the new study's id, each trial's new id by its old one,
    and the rows written (Optuna's)."""

    study_id: int
    trial_ids: dict[int, int]
    rows: int


def copy_study_rows(
    source: sa.Connection, target: sa.Connection, study_id: int, new_name: str
) -> CopiedStudy:
    """Copy study ``study_id`` (read on ``source``) as ``new_name`` (written on ``target``: the
    same connection, or one on another database), every row of every table of
    ``study_tables`` with its ids remapped, in batches of ``sql.COPY_BATCH`` rows, inside the
    callers' transactions (nothing is committed here). A name taken by then is the unique
    constraint's ``IntegrityError``."""
    s = STUDIES_TABLE
    row = source.execute(sa.select(s).where(s.c.study_id == study_id)).mappings().one()
    new_id = target.execute(
        s.insert().returning(s.c.study_id), [{**_without_id(s, row), "study_name": new_name}]
    ).scalar_one()
    ids: dict[sa.Table, dict[int, int]] = {s: {study_id: new_id}}
    written = 1
    for owned in study_tables():
        parents = ids[owned.parent]
        mapping: dict[int, int] = {}
        key = owned.parent_column.name
        for chunk in sql.batches(sorted(parents)):
            rows = (
                source.execute(
                    sa.select(owned.table)
                    .where(owned.parent_column.in_(chunk))
                    .order_by(*owned.table.primary_key.columns)
                )
                .mappings()
                .all()
            )
            for batch in sql.batches(rows):
                sql.insert_rows(
                    target,
                    owned.table,
                    [{**_without_id(owned.table, r), key: parents[r[key]]} for r in batch],
                )
            written += len(rows)
            if owned.own_id is not None:
                mapping.update(
                    _new_ids(
                        target,
                        owned,
                        [parents[p] for p in chunk],
                        [r[owned.own_id.name] for r in rows],
                    )
                )
        if owned.own_id is not None:
            ids[owned.table] = mapping
    return CopiedStudy(new_id, ids.get(TRIALS_TABLE, {}), written)


def _new_ids(
    target: sa.Connection, owned: _Owned, new_parents: list[int], old: list[int]
) -> dict[int, int]:
    """{old id: new id} of the rows just inserted under ``new_parents``, in ``old``'s order:
    the parents are this transaction's own (no one else's rows hang under them yet) and the
    database numbers one connection's inserts in the order they are sent, so the new ids in
    order are the old rows in order. (A batched ``INSERT ... RETURNING`` would say the same,
    but SQLAlchemy sends it one row at a time on SQLite to keep the order.)"""
    assert owned.own_id is not None
    new = (
        target.execute(
            sa.select(owned.own_id)
            .where(owned.parent_column.in_(new_parents))
            .order_by(owned.own_id)
        )
        .scalars()
        .all()
    )
    if len(new) != len(old):
        raise RuntimeError(f"copied {len(old)} rows of {owned.table.name}, found {len(new)}")
    return dict(zip(old, new, strict=True))


def delete_study_rows(conn: sa.Connection, study_id: int) -> None:
    """Delete every row of study ``study_id`` from Optuna's tables, children first, inside the
    caller's transaction: one statement per table, whatever the number of trials."""
    plan = study_tables()
    for owned in reversed(plan):
        conn.execute(owned.table.delete().where(_of_study(owned, plan, study_id)))
    done = conn.execute(STUDIES_TABLE.delete().where(STUDIES_TABLE.c.study_id == study_id))
    if done.rowcount != 1:
        raise RuntimeError(f"deleting study id {study_id} removed {done.rowcount} rows")


def _without_id(table: sa.Table, row: Any) -> dict[str, Any]:
    """A row's values without its own generated id (the target database numbers it)."""
    ids = {c.name for c in table.primary_key.columns}
    return {k: v for k, v in row.items() if k not in ids}


def fail_and_requeue_in(
    conn: sa.Connection,
    rdb: RDBStorage,
    study_id: int,
    trial_id: int,
    attrs: dict[str, Any],
    template: FrozenTrial | None,
) -> None:
    """Fail trial ``trial_id`` (its user attributes ``attrs`` written first) and add
    ``template`` (``sweeps.liveness.requeue_template``; None: none) to study ``study_id``, as
    ``liveness.fail_and_requeue`` does through the public API, but inside the caller's
    transaction ``conn`` (a copy's trials exist nowhere else yet)."""
    session = sa.orm.Session(bind=conn)
    try:
        for key, value in attrs.items():
            rdb._set_trial_attr_without_commit(
                session, models.TrialUserAttributeModel, trial_id, key, storable_value(value)
            )
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        trial.state = TrialState.FAIL
        trial.datetime_complete = datetime.datetime.now()
        session.flush()
        if template is not None:
            models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
            rdb._get_prepared_new_trial(study_id, template, session)
        session.flush()
    finally:
        session.close()


# --- a study's summary, read with plain SQL -----------------------------------------------------


def study_user_attrs(conn: sa.Connection, study_id: int) -> dict[str, Any]:
    """A study's user attributes (ValueError when a stored value is not JSON)."""
    t = STUDY_USER_ATTRS_TABLE
    return {
        k: json.loads(v)
        for k, v in conn.execute(sa.select(t.c.key, t.c.value_json).where(t.c.study_id == study_id))
    }


def study_directions(conn: sa.Connection, study_id: int) -> list[StudyDirection]:
    t = STUDY_DIRECTIONS_TABLE
    return list(
        conn.execute(
            sa.select(t.c.direction).where(t.c.study_id == study_id).order_by(t.c.objective)
        ).scalars()
    )


def summary_trials(
    conn: sa.Connection,
    study_id: int,
    *,
    user_keys: Sequence[str] = (),
    system_keys: Sequence[str] = (),
) -> list[FrozenTrial]:
    """The study's trials, by number, as ``FrozenTrial``s that hold only their number, state,
    dates, values, the user and system attributes named (and the constraints, which decide a
    constrained Pareto front): no parameters, no intermediate values, no other attribute. Four
    queries whatever the number of trials (``sweeps status`` on 3,000 trials: no full load).
    ValueError when a stored value read is not JSON."""
    t, v = TRIALS_TABLE, models.TrialValueModel.__table__
    of_study = sa.select(t.c.trial_id).where(t.c.study_id == study_id)
    values: dict[int, dict[int, float]] = {}
    for tid, objective, value, kind in conn.execute(
        sa.select(v.c.trial_id, v.c.objective, v.c.value, v.c.value_type).where(
            v.c.trial_id.in_(of_study)
        )
    ):
        values.setdefault(tid, {})[objective] = models.TrialValueModel.stored_repr_to_value(
            value, kind
        )
    attrs: list[dict[int, dict[str, Any]]] = []
    for table, keys, prefix in (
        (TRIAL_USER_ATTRS_TABLE, user_keys, None),
        (TRIAL_SYSTEM_ATTRS_TABLE, system_keys, CONSTRAINTS_KEY),
    ):
        wanted = table.c.key.in_(list(keys))
        if prefix is not None:
            wanted = sa.or_(wanted, table.c.key.startswith(prefix, autoescape=True))
        found: dict[int, dict[str, Any]] = {}
        for tid, key, value in conn.execute(
            sa.select(table.c.trial_id, table.c.key, table.c.value_json).where(
                table.c.trial_id.in_(of_study), wanted
            )
        ):
            found.setdefault(tid, {})[key] = json.loads(value)
        attrs.append(found)
    rows = conn.execute(
        sa.select(t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start, t.c.datetime_complete)
        .where(t.c.study_id == study_id)
        .order_by(t.c.number)
    )
    return [
        FrozenTrial(
            number=number,
            state=state,
            value=None,
            values=[values[tid][i] for i in sorted(values[tid])] if tid in values else None,
            datetime_start=start,
            datetime_complete=complete,
            params={},
            distributions={},
            user_attrs=attrs[0].get(tid, {}),
            system_attrs=attrs[1].get(tid, {}),
            intermediate_values={},
            trial_id=tid,
        )
        for tid, number, state, start, complete in rows
    ]


def pareto_front(
    trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]
) -> list[FrozenTrial]:
    """``Study.best_trials`` of ``trials`` (feasible ones only where any has constraints),
    without the study loading every trial again."""
    from optuna.study._constrained_optimization import _is_constrained_optimization
    from optuna.study._multi_objective import _get_pareto_front_trials_by_trials

    return _get_pareto_front_trials_by_trials(
        trials, directions, consider_constraint=_is_constrained_optimization(trials)
    )
