"""A claimer killed between Optuna's ask and its owner row leaves a RUNNING trial that nothing
else would ever fail (no owner for a restart to find, no heartbeat to go stale): the next claim
under a cross-process claim lock fails and re-queues it, so a resumed study does not wait on
it for ever (seen once as a hung ``sweeps confirm`` after a kill -9)."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeps import claims, records
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.record import TrialRecord


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'orphans.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_a_trial_left_between_ask_and_owner_row_is_failed_and_queued_again(url: str) -> None:
    storage = st.open_storage(url)
    study = optuna.create_study(study_name="orphans", storage=storage)
    study.enqueue_trial({"x": 3})
    orphan = study.ask()  # its claimer was killed here, before records.record_host
    owned = study.ask()  # a live worker's trial, with its owner row
    records.record_host(storage, "orphans", owned.number, owned._trial_id, pid=os.getpid())

    done, trial = wk.claim_trial(study, storage, 3, max_retries=2)

    assert not done and trial is not None
    left = storage.get_trial(orphan._trial_id)
    assert left.state == TrialState.FAIL
    record = TrialRecord.from_trial(left)
    assert record.outcome == "crashed" and "between asking" in str(record.reason)
    # The claim ran the orphan's parameters again, as a retry of it; the owned trial runs on.
    retry = storage.get_trial(trial._trial_id)
    assert retry.system_attrs["failed_trial"] == orphan.number
    assert retry.system_attrs["fixed_params"] == {"x": 3}
    assert storage.get_trial(owned._trial_id).state == TrialState.RUNNING
    storage.engine.dispose()


def test_without_a_cross_process_lock_an_unowned_trial_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the claim lock holds only within a process (a backend other than PostgreSQL and
    SQLite, here SQLite with its lock file taken away), another process could be inside the
    window: the trial is not touched (the hand-back stays the fallback)."""
    monkeypatch.setattr(claims, "sqlite_lock_path", lambda engine: None)
    storage = st.open_storage(f"sqlite:///{tmp_path / 'thread-lock-only.db'}")
    study = optuna.create_study(study_name="t", storage=storage)
    unowned = study.ask()
    done, trial = wk.claim_trial(study, storage, 3)
    assert not done and trial is not None and trial.number == 1
    assert storage.get_trial(unowned._trial_id).state == TrialState.RUNNING
    storage.engine.dispose()
