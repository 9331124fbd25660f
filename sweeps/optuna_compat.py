"""Every use of Optuna's internals, in one place, each with a public fallback where one exists.

The project needs four things Optuna's public API does not give: a trial's storage id (to key the
project's own tables and heartbeats), the RDB storage's table models (the report reads the
database with plain SQL, without loading every trial), writing all of a trial's user attributes in
one transaction (one commit instead of ~35: a measurable share of a short trial's overhead on
PostgreSQL), and the name of the RDB storage's stale-trial callback argument (renamed across
versions). ``tests/sweeps/test_optuna_compat.py`` fails loudly when an Optuna release changes any
of them.
"""

from __future__ import annotations

import inspect
from typing import Any

from optuna.storages import RDBStorage
from optuna.storages._rdb import models


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
