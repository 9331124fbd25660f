"""Optuna's internals the project relies on (``sweeps/optuna_compat.py``), checked against the
installed Optuna: a release that renames or removes one fails here, loudly, not in a trial."""

from __future__ import annotations

import inspect
from pathlib import Path

import optuna
from optuna.storages import RDBStorage

from sweeps import optuna_compat


def _study(tmp_path: Path) -> tuple[RDBStorage, optuna.Study]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
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
    tables = {optuna_compat.STUDIES_TABLE: "studies",
              optuna_compat.STUDY_DIRECTIONS_TABLE: "study_directions",
              optuna_compat.STUDY_USER_ATTRS_TABLE: "study_user_attributes",
              optuna_compat.TRIALS_TABLE: "trials",
              optuna_compat.TRIAL_PARAMS_TABLE: "trial_params",
              optuna_compat.TRIAL_USER_ATTRS_TABLE: "trial_user_attributes",
              optuna_compat.TRIAL_SYSTEM_ATTRS_TABLE: "trial_system_attributes"}
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

    named = sorted(table.name for table in models.BaseModel.metadata.sorted_tables
                   if "study_name" in table.columns)
    assert named == ["studies"]
    assert optuna_compat.STUDIES_TABLE.name == "studies"
    assert {"study_id", "study_name"} <= set(optuna_compat.STUDIES_TABLE.columns.keys())
    storage, study = _study(tmp_path)
    study.set_user_attr("spec", {"study": {"name": "compat"}})
    study.ask()
    with storage.engine.begin() as conn:
        optuna_compat.rename_study(conn, study._study_id, "renamed")
        optuna_compat.set_study_user_attr(conn, study._study_id, "spec",
                                          {"study": {"name": "renamed"}})
        assert optuna_compat.running_trials(conn, study._study_id) == 1
    again = optuna.load_study(study_name="renamed", storage=storage)
    assert again.user_attrs == {"spec": {"study": {"name": "renamed"}}}
    assert len(again.trials) == 1
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["renamed"]
    with storage.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM studies WHERE study_name = 'compat'")
                            ).scalar_one() == 0


def test_finished_trials_are_added_once_with_their_marker(tmp_path: Path) -> None:
    from optuna.trial import TrialState, create_trial

    storage, study = _study(tmp_path)
    done = create_trial(state=TrialState.COMPLETE, value=1.0,
                        params={"x": 1.0}, distributions={
                            "x": optuna.distributions.FloatDistribution(0, 2)},
                        user_attrs={"carried_from": "old#0"},
                        system_attrs={"constraints": [0.0]})
    assert optuna_compat.add_trials_once(storage, study._study_id, "m", [done], {"n": 1})
    assert not optuna_compat.add_trials_once(storage, study._study_id, "m", [done], {"n": 1})
    [t] = study.get_trials()
    assert (t.state, t.value, t.params, t.user_attrs) == (TrialState.COMPLETE, 1.0, {"x": 1.0},
                                                          {"carried_from": "old#0"})
    assert optuna_compat.constraint_attrs(t.system_attrs) == {"constraints": [0.0]}
    assert study.user_attrs["m"] == {"n": 1}
