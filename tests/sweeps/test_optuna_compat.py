"""Optuna's internals the project relies on (``sweeps/optuna_compat.py``), checked against the
installed Optuna: a release that renames or removes one fails here, loudly, not in a trial."""

from __future__ import annotations

import inspect
from pathlib import Path

import optuna
from optuna.storages import RDBStorage

from sweeps import optuna_compat


def _study(tmp_path: Path) -> tuple[RDBStorage, optuna.Study]:
    storage = RDBStorage(f"sqlite:///{tmp_path / 'compat.db'}")
    return storage, optuna.create_study(study_name="compat", storage=storage)


def test_trial_ids_of_live_and_frozen_trials(tmp_path: Path) -> None:
    storage, study = _study(tmp_path)
    trial = study.ask()
    frozen = study.get_trials(deepcopy=False)[0]
    assert optuna_compat.trial_id(trial) == optuna_compat.trial_id(frozen)
    assert storage.get_trial(optuna_compat.trial_id(trial)).number == trial.number


def test_user_attrs_are_written_in_one_transaction(tmp_path: Path) -> None:
    storage, study = _study(tmp_path)
    trial = study.ask()
    # The fast path exists in this Optuna (if it moved, the public fallback would hide it).
    assert optuna_compat._one_transaction_writer(storage) is not None
    attrs = {"outcome": "complete", "val_bpb": 1.5, "params": {"total": 3}, "tags": [1, 2]}
    optuna_compat.write_user_attrs(storage, optuna_compat.trial_id(trial), attrs)
    assert storage.get_trial(optuna_compat.trial_id(trial)).user_attrs == attrs


def test_tables_callback_argument_retry_base_and_schema() -> None:
    tables = {
        optuna_compat.STUDIES_TABLE: "studies",
        optuna_compat.STUDY_DIRECTIONS_TABLE: "study_directions",
        optuna_compat.STUDY_USER_ATTRS_TABLE: "study_user_attributes",
        optuna_compat.TRIALS_TABLE: "trials",
        optuna_compat.TRIAL_PARAMS_TABLE: "trial_params",
        optuna_compat.TRIAL_USER_ATTRS_TABLE: "trial_user_attributes",
        optuna_compat.TRIAL_SYSTEM_ATTRS_TABLE: "trial_system_attributes",
    }
    assert {t.name: n for t, n in tables.items()} == {n: n for n in tables.values()}
    assert optuna_compat.stale_callback_arg() in inspect.signature(RDBStorage.__init__).parameters
    assert optuna_compat.RetryCallbackBase.__module__.startswith("optuna.")
    script = optuna_compat.schema_migrations()
    assert script.get_current_head() in {r.revision for r in script.walk_revisions()}


def test_a_study_is_renamed_by_its_one_name_column(tmp_path: Path) -> None:
    """Optuna keeps a study's name in ``studies.study_name`` only (everything else refers to the
    study by id): a new name column anywhere, or a renamed one, fails here first."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models

    named = sorted(
        table.name
        for table in models.BaseModel.metadata.sorted_tables
        if "study_name" in table.columns
    )
    assert named == ["studies"]
    assert optuna_compat.STUDIES_TABLE.name == "studies"
    assert {"study_id", "study_name"} <= set(optuna_compat.STUDIES_TABLE.columns.keys())
    storage, study = _study(tmp_path)
    study.set_user_attr("spec", {"study": {"name": "compat"}})
    study.ask()
    with storage.engine.begin() as conn:
        optuna_compat.rename_study(conn, study._study_id, "renamed")
        optuna_compat.set_study_user_attr(
            conn, study._study_id, "spec", {"study": {"name": "renamed"}}
        )
        assert optuna_compat.running_trials(conn, study._study_id) == 1
    again = optuna.load_study(study_name="renamed", storage=storage)
    assert again.user_attrs == {"spec": {"study": {"name": "renamed"}}}
    assert len(again.trials) == 1
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["renamed"]
    with storage.engine.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM studies WHERE study_name = 'compat'")
            ).scalar_one()
            == 0
        )


def test_finished_trials_are_added_once_with_their_marker(tmp_path: Path) -> None:
    from optuna.trial import TrialState, create_trial

    storage, study = _study(tmp_path)
    done = create_trial(
        state=TrialState.COMPLETE,
        value=1.0,
        params={"x": 1.0},
        distributions={"x": optuna.distributions.FloatDistribution(0, 2)},
        user_attrs={"carried_from": "old#0"},
        system_attrs={"constraints": [0.0]},
    )
    assert optuna_compat.add_trials_once(storage, study._study_id, "m", [done], {"n": 1})
    assert not optuna_compat.add_trials_once(storage, study._study_id, "m", [done], {"n": 1})
    [t] = study.get_trials()
    assert (t.state, t.value, t.params, t.user_attrs) == (
        TrialState.COMPLETE,
        1.0,
        {"x": 1.0},
        {"carried_from": "old#0"},
    )
    assert optuna_compat.constraint_attrs(t.system_attrs) == {"constraints": [0.0]}
    assert study.user_attrs["m"] == {"n": 1}


def test_a_study_is_copied_and_deleted_row_for_row_with_plain_sql(tmp_path: Path) -> None:
    """Every table of a study's rows (read off Optuna's models; a release that adds one shows
    here), copied with its ids remapped so Optuna reads the copy as the study, then deleted."""
    import math
    import warnings

    import sqlalchemy as sa

    assert [o.table.name for o in optuna_compat.study_tables()] == [
        "study_directions",
        "study_system_attributes",
        "study_user_attributes",
        "trials",
        "trial_heartbeats",
        "trial_intermediate_values",
        "trial_params",
        "trial_system_attributes",
        "trial_user_attributes",
        "trial_values",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = RDBStorage(f"sqlite:///{tmp_path / 'rows.db'}", heartbeat_interval=60)
    study = optuna.create_study(
        study_name="src", storage=storage, directions=["minimize", "maximize"]
    )
    study.set_user_attr("spec", {"study": {"name": "src"}})
    storage.set_study_system_attr(study._study_id, "marker", [1, 2])
    for i in range(3):
        trial = study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        trial.suggest_categorical("kind", ["a", "b"])
        trial.set_user_attr("outcome", "complete")
        storage.set_trial_system_attr(trial._trial_id, "retry_history", [i])
        storage.record_heartbeat(trial._trial_id)
        if i < 2:
            study.tell(trial, [i + 0.5, math.inf if i else -1.0])
    with storage.engine.begin() as conn:
        source_id = storage.get_study_id_from_name("src")
        copied = optuna_compat.copy_study_rows(conn, conn, source_id, "dst")
    assert len(copied.trial_ids) == 3
    copy = optuna.load_study(study_name="dst", storage=storage)

    def shown(s: optuna.Study) -> list[tuple]:
        return [
            (
                t.number,
                t.state,
                t.values,
                t.params,
                t.distributions,
                t.user_attrs,
                t.system_attrs,
                t.intermediate_values,
                t.datetime_start,
                t.datetime_complete,
            )
            for t in s.get_trials()
        ]

    assert shown(copy) == shown(study) and copy.directions == study.directions
    assert copy.user_attrs == study.user_attrs
    assert storage.get_study_system_attrs(copied.study_id) == {"marker": [1, 2]}
    heartbeats = optuna_compat.study_tables()[4].table
    with storage.engine.begin() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(heartbeats)).scalar() == 6
        optuna_compat.delete_study_rows(conn, source_id)
        left = {
            o.table.name: conn.execute(sa.select(sa.func.count()).select_from(o.table)).scalar()
            for o in optuna_compat.study_tables()
        }
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["dst"]
    assert shown(optuna.load_study(study_name="dst", storage=storage)) == shown(copy)
    assert left["trials"] == 3 and left["trial_heartbeats"] == 3 and left["trial_params"] == 6
