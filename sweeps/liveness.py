"""Whether a trial's worker is alive, and what happens to its trial when it is not.

- Heartbeats: a trial whose worker stops beating for ``grace_period`` is failed by the next
  worker that starts a trial (``fail_stale_trials``; ``Study.optimize`` does it itself, an
  ask/tell loop must), and ``RequeueCallback`` queues its parameters again (at most
  ``max_retries`` times). ``heartbeat`` beats for one trial of an ask/tell loop.
- A dead worker on this host: ``stale_local_trials`` finds the RUNNING trials whose owner
  (``sweeps_trial_hosts``, written by ``records.record_host``) is a process that no longer exists
  (``lm.host.pid_alive``, from ``/proc``: a reused pid counts as gone), and ``fail_and_requeue``
  fails and re-queues them at once (a resume after ``kill -9``), without waiting for the grace
  period.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from lm import outcomes
from lm.host import pid_alive
from sweeps import optuna_compat, records
from sweeps import record as rc
from sweeps.record import TrialRecord

StudyRef = str | optuna.Study


# Optuna's class under its name in this Optuna (chosen at import), so the checker sees a variable
class RequeueCallback(optuna_compat.RetryCallbackBase):  # type: ignore[misc]
    """Optuna's heartbeat retry callback, minus the failed run's user attributes.

    Optuna's version copies ``user_attrs`` (here: outcome, reason, run dir of the dead run) into
    the new trial, which would then look finished before it starts. This one queues the same
    parameters with ``retries`` (how many times they have been re-queued) and ``retry_of`` (the
    first trial number) as user attributes; Optuna's ``retry_history``/``retried_trial_number``
    read it as usual.
    """

    def __init__(self, max_retry: int | None = 2) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            super().__init__(max_retry=max_retry)
        self.max_retries = max_retry  # Optuna keeps its own copy private

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        requeue(study, trial, max_retries=self.max_retries)


#: User attributes a re-queued trial keeps: ``sweeps confirm``'s link to the trial it confirms.
REQUEUE_KEEPS = rc.REQUEUE_KEEPS


def requeue(study: optuna.Study, trial: FrozenTrial, *, max_retries: int | None) -> bool:
    """Queue ``trial``'s parameters again as a WAITING trial; False when it already was
    re-queued ``max_retries`` times."""
    template = requeue_template(trial, max_retries=max_retries)
    if template is None:
        return False
    study.add_trial(template)
    return True


def requeue_template(trial: FrozenTrial, *, max_retries: int | None) -> FrozenTrial | None:
    """The WAITING trial that runs ``trial``'s parameters again (None when it already was
    re-queued ``max_retries`` times): the one definition of a retry, for ``requeue`` and for a
    copy's running trials (``sweeps.lifecycle``, inside its transaction)."""
    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if max_retries is not None and len(history) > max_retries:
        return None
    system_attrs = {**trial.system_attrs, "failed_trial": history[0], "retry_history": history}
    # What the trial is, not what its run did, stays with the retry (a confirmation's link).
    old = TrialRecord.from_trial(trial)
    kept = TrialRecord().update(**{k: getattr(old, k) for k in REQUEUE_KEEPS})
    return optuna.trial.create_trial(
        state=TrialState.WAITING,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs=kept.update(retries=len(history), retry_of=history[0]).to_attrs(),
        system_attrs=system_attrs,
    )


def failed_attrs(reason: str | None = None) -> dict[str, str]:
    """The user attributes of a trial failed because its worker is gone."""
    return TrialRecord(
        outcome=outcomes.CRASHED, reason=reason or "its worker process ended without finishing it"
    ).to_attrs()


@contextlib.contextmanager
def heartbeat(storage: RDBStorage, trial_id: int) -> Iterator[None]:
    """Record ``trial_id``'s heartbeat every ``heartbeat_interval`` seconds while inside.

    ``Study.optimize`` does this itself; an ask/tell loop (the runner's) must, or its long trials
    look dead after ``grace_period``. A no-op when the storage has no heartbeat.
    """
    interval = storage.get_heartbeat_interval()
    if interval is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            # A database blip: the next beat tries again, well within the grace period.
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                storage.record_heartbeat(trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"sweeps-heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail trials whose heartbeat is older than the grace period and run the storage's callback
    (re-queue); ``Study.optimize`` calls this before each trial, an ask/tell loop must."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _running_with_owners(
    storage: RDBStorage, study: StudyRef, host: str | None = None
) -> tuple[dict[int, FrozenTrial], list[dict[str, Any]]]:
    """``study``'s RUNNING trials by storage id, and the owner rows (``sweeps_trial_hosts``)
    recorded for them (only ``host``'s when given)."""
    study_name = study if isinstance(study, str) else study.study_name
    study_id = storage.get_study_id_from_name(study_name)
    running = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return {}, []
    by_id = {optuna_compat.trial_id(t): t for t in running}
    return by_id, records.read_hosts(storage, study_name, host=host, trial_ids=by_id)


def stale_local_trials(
    storage: RDBStorage, study: StudyRef, host: str | None = None
) -> list[FrozenTrial]:
    """RUNNING trials of ``study`` owned (per ``sweeps_trial_hosts``) by a process of ``host``
    (default: this machine) that no longer exists: safe to fail at once, without waiting for the
    heartbeat grace period. Trials of other hosts are left to their heartbeats."""
    by_id, owners = _running_with_owners(storage, study, host or socket.gethostname())
    return [by_id[o["trial_id"]] for o in owners if not pid_alive(o["pid"], o["started_at"])]


def unowned_running_trials(storage: RDBStorage, study: StudyRef) -> list[FrozenTrial]:
    """RUNNING trials of ``study`` that no process recorded as its own (``sweeps_trial_hosts``).

    A claimer killed between Optuna's ask and its ``record_host`` (``workers.claim_trial``)
    leaves one: it has no owner for a restart to find and no heartbeat to go stale, so without
    this it stays RUNNING for ever and a resumed study waits on it. Only a claimer holding the
    study's claim lock across processes (``sweeps.claims``) may fail them: then no live claimer
    is inside that window."""
    by_id, owners = _running_with_owners(storage, study)
    owned = {o["trial_id"] for o in owners}
    return [t for i, t in by_id.items() if i not in owned]


def fail_and_requeue(
    storage: RDBStorage,
    study: StudyRef,
    trial: FrozenTrial,
    *,
    max_retries: int | None = 2,
    reason: str | None = None,
) -> bool:
    """Fail a RUNNING trial whose worker is gone and queue its parameters again (if it was
    re-queued fewer than ``max_retries`` times). Returns whether a new trial was queued; False
    also when another process finished or failed the trial first."""
    study_obj = (
        study
        if isinstance(study, optuna.Study)
        else optuna.load_study(study_name=study, storage=storage)
    )
    trial_id = optuna_compat.trial_id(trial)
    try:
        for key, value in failed_attrs(reason).items():
            storage.set_trial_user_attr(trial_id, key, value)
        if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
            return False
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return requeue(study_obj, storage.get_trial(trial_id), max_retries=max_retries)
