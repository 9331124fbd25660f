"""One claimer at a time per study: the lock around "is there room in the budget? then ask".

Without it, workers that look at the budget at the same moment all see room and all ask; the
ones numbered past ``n_trials`` hand their trials back (``workers.claim_trial``), and each
hand-back leaves a WAITING trial with no parameters that nothing will ever run: a finished study
showed "complete 2, waiting 1". Reproduced on both backends by three processes of two claimers
each on a three-trial study, every time (``tests/sweeps/test_claim_race.py``). A requeued trial
could also lose its turn to such an empty one, since Optuna pops the lowest-numbered WAITING
trial first.

The lock is held only for the check and the ask (milliseconds), never while a trial runs:
- threads of one process: a ``threading.Lock`` per database and study, taken first, so a
  process holds at most one database connection waiting on the lock below;
- processes and machines on PostgreSQL: a transaction-scoped advisory lock keyed by the study's
  name, released when the transaction ends, and by the server when a killed worker's connection
  drops, so a ``kill -9`` never leaves it held;
- processes on one machine on SQLite: ``flock`` on a file beside the database
  (``<database>-claims``, like SQLite's own ``-wal`` and ``-shm``), released by the kernel when
  its holder dies.
Other backends get the thread lock only, and the hand-back stays as the fallback.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from optuna.storages import RDBStorage

from lm.files import file_lock

#: The SQLite lock file's suffix, after the database file's name.
SQLITE_SUFFIX = "-claims"

_THREAD_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def advisory_key(study_name: str) -> int:
    """The PostgreSQL advisory lock key of a study's claims: a signed 64-bit hash of its name."""
    digest = hashlib.blake2b(f"sweeps-claim:{study_name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def sqlite_lock_path(engine: sa.Engine) -> Path | None:
    """The lock file beside a SQLite database file; None for an in-memory or URI database
    (one process only) and for other backends."""
    database = engine.url.database or ""
    if (
        engine.dialect.name != "sqlite"
        or not database
        or database == ":memory:"
        or database.startswith("file:")
    ):
        return None
    path = Path(database).expanduser()
    return path.with_name(path.name + SQLITE_SUFFIX)


@contextlib.contextmanager
def claim_lock(storage: RDBStorage, study_name: str) -> Iterator[bool]:
    """Hold the study's claim lock (see the module's docstring) for the body; yields whether it
    holds across processes (PostgreSQL's advisory lock, SQLite's held file lock), so that no
    other claimer anywhere is between its ask and its owner row."""
    engine = storage.engine
    with _thread_lock(str(engine.url), study_name):
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn, conn.begin():
                conn.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key(study_name)}
                )
                yield True
        elif (path := sqlite_lock_path(engine)) is not None:
            with file_lock(path, best_effort=True) as held:  # not held: the hand-back
                yield held
        else:
            yield False


def _thread_lock(url: str, study_name: str) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault((url, study_name), threading.Lock())
