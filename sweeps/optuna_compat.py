"""Every use of Optuna's internals, in one place, each with a public fallback where one exists.

The project needs five things Optuna's public API does not give: a trial's storage id (to key the
project's own tables and heartbeats), the RDB storage's table models (the report reads the
database with plain SQL, without loading every trial), writing all of a trial's user attributes in
one transaction (one commit instead of ~35: a measurable share of a short trial's overhead on
PostgreSQL), queueing a study's initial trials together with a marker in one transaction (so
processes starting the same study at once queue them exactly once), and the name of the RDB
storage's stale-trial callback argument (renamed across versions).
``tests/sweeps/test_optuna_compat.py`` fails loudly when an Optuna release changes any of them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.trial import TrialState, create_trial


def trial_id(trial: Any) -> int:
    """The storage id of a ``Trial`` or ``FrozenTrial`` (Optuna keeps it private)."""
    return int(trial._trial_id)


def stale_callback_arg() -> str:
    """The ``RDBStorage`` argument that takes the stale-trial (heartbeat) callback."""
    names = inspect.signature(RDBStorage.__init__).parameters
    return "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in names \
        else "failed_trial_callback"


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
    cache re-reads it anyway."""
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
    marker is already there.

    The marker is inserted first: its (study, key) uniqueness makes a second process's insert
    wait for the first transaction and then fail, so exactly one process queues the trials, and a
    process that dies half way queues nothing (the next start queues them all). Where Optuna's
    internals moved, the public calls: correct for one process at a time.
    """
    templates = [create_trial(state=TrialState.WAITING, system_attrs={"fixed_params": dict(p)})
                 for p in params]
    try:
        from optuna.storages._rdb.storage import _create_scoped_session

        prepare = rdb._get_prepared_new_trial
    except (ImportError, AttributeError):
        if rdb.get_study_user_attrs(study_id).get(marker):
            return False
        for template in templates:
            rdb.create_new_trial(study_id, template_trial=template)
        rdb.set_study_user_attr(study_id, marker, True)
        return True
    try:
        with _create_scoped_session(rdb.scoped_session) as session:
            # The marker's INSERT is the transaction's first statement: on SQLite it takes the
            # write lock before any read (a read first would make a waiting writer fail at once).
            session.add(models.StudyUserAttributeModel(study_id=study_id, key=marker,
                                                       value_json=json.dumps(True)))
            session.flush()
            # Optuna's own lock for numbering new trials (``_create_new_trial``).
            models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
            for template in templates:
                prepare(study_id, template, session)
    except sa.exc.IntegrityError:
        return False  # another process wrote the marker (and queued the trials) first
    return True
