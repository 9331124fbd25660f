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


def test_table_models_and_callback_argument() -> None:
    assert optuna_compat.models.StudyModel.__tablename__ == "studies"
    for name in ("TrialModel", "TrialParamModel", "TrialUserAttributeModel",
                 "TrialSystemAttributeModel", "StudyUserAttributeModel", "StudyDirectionModel"):
        assert hasattr(optuna_compat.models, name), name
    assert optuna_compat.stale_callback_arg() in inspect.signature(RDBStorage.__init__).parameters
