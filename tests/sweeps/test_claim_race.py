"""Workers that look at the budget at the same moment never leave a trial behind (#24 item 13):
before the claim lock, three processes of two claimers each on a three-trial study left one to
three empty WAITING trials in every run, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from sweeps.claims import claim_lock, sqlite_lock_path
from sweeps.storage import open_storage

REPO = Path(__file__).resolve().parents[2]
N_TRIALS = 3


def claimer(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sweeps.claimer", *args], cwd=REPO, text=True, **kwargs
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'race.db'}"
    return request.getfixturevalue("pg_url")


@pytest.mark.parametrize("rep", range(2))
def test_concurrent_claimers_leave_no_waiting_trial(url: str, rep: int) -> None:
    name = f"race{rep}"
    optuna.create_study(study_name=name, storage=open_storage(url))
    procs = [claimer(url, name, str(N_TRIALS), "2") for _ in range(3)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    trials = optuna.load_study(study_name=name, storage=open_storage(url)).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * N_TRIALS


def test_a_killed_holder_releases_the_lock(url: str) -> None:
    """kill -9 of a process holding the claim lock frees it (the server ends the transaction,
    the kernel drops the flock), so the study's other workers go on."""
    storage = open_storage(url)
    optuna.create_study(study_name="held", storage=storage)
    holder = claimer("hold", url, "held", stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        acquired = threading.Event()

        def take() -> None:
            with claim_lock(storage, "held"):
                acquired.set()

        waiter = threading.Thread(target=take, daemon=True)
        waiter.start()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        waiter.join(timeout=120)
        assert acquired.is_set()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_sqlite_lock_file_sits_beside_the_database(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'a.db'}")
    assert sqlite_lock_path(storage.engine) == tmp_path / "a.db-claims"
    assert sqlite_lock_path(sa.create_engine("sqlite:///:memory:")) is None
