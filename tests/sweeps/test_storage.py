"""Storage: URL handling, SQLite under concurrent writers, PostgreSQL, project tables, retries."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
import uuid
import warnings
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from lm.errors import SweepsError
from sweeps import liveness, optuna_compat, records
from sweeps import storage as st


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --- URLs -----------------------------------------------------------------------------------------


def test_resolve_storage_url_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(st.ENV_VAR, raising=False)
    assert st.resolve_storage_url(None, None) == "sqlite:///sweeps.db"
    assert st.resolve_storage_url(None, "sqlite:///spec.db") == "sqlite:///spec.db"
    monkeypatch.setenv(st.ENV_VAR, "sqlite:///env.db")
    assert st.resolve_storage_url(None, "sqlite:///spec.db") == "sqlite:///env.db"
    assert st.resolve_storage_url("sqlite:///cli.db", "sqlite:///spec.db") == "sqlite:///cli.db"
    monkeypatch.setenv(st.ENV_VAR, "  ")
    assert st.resolve_storage_url("", "sqlite:///spec.db") == "sqlite:///spec.db"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "postgresql://user:s3cret@db-host:5432/sweeps",
            "postgresql://user:***@db-host:5432/sweeps",
        ),
        (
            "postgresql+psycopg://u:p%40ss@h/db?sslmode=require",
            "postgresql+psycopg://u:***@h/db?sslmode=require",
        ),
        ("postgresql://u:a@b@host/db", "postgresql://u:***@host/db"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        (
            "postgresql://host/db?user=u&password=pw&x=1",
            "postgresql://host/db?user=u&password=***&x=1",
        ),
        ("sqlite:///sweeps.db", "sqlite:///sweeps.db"),
        ("not a url", "not a url"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert st.mask_url(url) == masked


def test_normalize_url_uses_psycopg() -> None:
    assert st.normalize_url("postgresql://u:pw@h:5432/db") == "postgresql+psycopg://u:pw@h:5432/db"
    assert st.normalize_url("postgres://h/db") == "postgresql+psycopg://h/db"
    assert st.normalize_url("postgresql+psycopg://h/db") == "postgresql+psycopg://h/db"
    assert st.normalize_url("sqlite:///x.db") == "sqlite:///x.db"


# --- opening SQLite -------------------------------------------------------------------------------


def test_open_sqlite_sets_wal_and_busy_timeout(tmp_path: Path) -> None:
    storage = st.open_storage(sqlite_url(tmp_path / "s.db"))
    with storage.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60_000
    names = set(sa.inspect(storage.engine).get_table_names())
    assert {"studies", "trials", "sweeps_evals", "sweeps_samples", "sweeps_trial_hosts"} <= names
    # Optuna can use it as usual.
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    assert len(optuna.load_study(study_name="s", storage=storage).trials) == 3


def test_default_url_is_a_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(st.ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    st.open_storage(st.resolve_storage_url(None, None))
    assert (tmp_path / "sweeps.db").is_file()


def test_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    with pytest.raises(SweepsError) as err:
        st.open_storage(sqlite_url(missing / "s.db"))
    message = str(err.value)
    assert "\n" not in message and str(missing) in message and "does not exist" in message
    assert not (tmp_path / "no").exists()


def test_directory_as_database_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SweepsError, match="is a directory"):
        st.open_storage(sqlite_url(tmp_path))


def test_a_file_that_is_not_a_database_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database " * 100)
    before = path.read_bytes()
    with pytest.raises(SweepsError) as err:
        st.open_storage(sqlite_url(path))
    assert "\n" not in str(err.value) and "notes.db" in str(err.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize("url", ["nonsense", "://x", "mysql://u:pw@127.0.0.1/db"])
def test_invalid_urls(url: str) -> None:
    with pytest.raises(SweepsError) as err:
        st.open_storage(url)
    message = str(err.value)
    assert "\n" not in message and "pw" not in message


def test_unreachable_server_is_one_masked_line(monkeypatch: pytest.MonkeyPatch) -> None:
    engines: list[dict] = []
    real = st.sa.create_engine

    def create_engine(url: object, **kwargs: object) -> object:
        engines.append(kwargs)
        return real(url, **kwargs)

    monkeypatch.setattr(st.sa, "create_engine", create_engine)
    with pytest.raises(SweepsError) as err:
        st.open_storage("postgresql://alice:hunter2@127.0.0.1:1/sweeps")
    message = str(err.value)
    assert "\n" not in message
    assert "hunter2" not in message and "alice:***@127.0.0.1:1/sweeps" in message
    assert "check host, port" in message
    # A server that never answers is given up on (the driver's timeout, not a clock read here)
    assert engines and engines[0]["connect_args"] == {"connect_timeout": st.CONNECT_TIMEOUT_S}


# --- the project's tables -------------------------------------------------------------------------


def test_record_and_read_rows(tmp_path: Path) -> None:
    storage = st.open_storage(sqlite_url(tmp_path / "r.db"))
    records.ensure_tables(storage)  # idempotent
    metrics = {
        "step": 2,
        "tokens": 4096,
        "train_loss": 3.0,
        "val_loss": 2.5,
        "val_bpb": 1.25,
        "unigram_gap": 0.4,
        "peak_mem_bytes": 123456789,
        "tokens_per_s": 1e4,
        "elapsed_s": 3.5,
        "top20_overlap": 0.3,
    }
    records.record_eval(storage, "s", 0, 1, metrics)
    records.record_eval(
        storage.engine, "s", 0, 1, {"step": 3, "val_loss": float("nan"), "val_bpb": float("inf")}
    )
    records.record_eval(storage, "other", 0, 9, {"step": 0})
    rows = records.read_evals(storage, "s")
    assert [r["step"] for r in rows] == [2, 3]
    first = rows[0]
    assert first["metrics"] == metrics
    assert (first["val_bpb"], first["peak_mem_bytes"], first["tokens"]) == (1.25, 123456789, 4096)
    assert (first["trial_number"], first["trial_id"], first["study_name"]) == (0, 1, "s")
    # NaN stays in the JSON (it is the evidence of divergence) but not in the column.
    assert (
        rows[1]["val_loss"] is None
        and rows[1]["metrics"]["val_loss"] != rows[1]["metrics"]["val_loss"]
    )
    assert rows[1]["val_bpb"] == float("inf")
    assert records.read_evals(storage, "s", trial_number=5) == []

    records.record_samples(
        storage, "s", 0, 1, {"<Q>How do I": " fix it<A>", "<Q>What is": " x"}, tokens=4096, step=2
    )
    records.record_samples(storage, "s", 1, 2, [{"prompt": "<Q>Why", "text": "é ✓"}])
    samples = records.read_samples(storage, "s")
    assert [(s["trial_number"], s["prompt"]) for s in samples] == [
        (0, "<Q>How do I"),
        (0, "<Q>What is"),
        (1, "<Q>Why"),
    ]
    assert samples[2]["text"] == "é ✓" and samples[0]["tokens"] == 4096
    assert len(records.read_samples(storage, "s", trial_number=1)) == 1

    records.record_host(storage, "s", 0, 1, host="h1", pid=11)
    records.record_host(storage, "s", 0, 1, host="h2", pid=22)  # replaces: one row per trial
    hosts = records.read_hosts(storage, "s")
    assert [(h["host"], h["pid"]) for h in hosts] == [("h2", 22)]
    records.record_host(storage, "s", 1, 2)
    assert records.read_hosts(storage)[-1]["host"] == socket.gethostname()
    assert records.read_hosts(storage)[-1]["pid"] == os.getpid()

    records.delete_study_records(storage, "s")
    assert records.read_evals(storage, "s") == [] and records.read_samples(storage, "s") == []
    assert records.read_hosts(storage, "s") == [] and len(records.read_evals(storage, "other")) == 1


def test_open_engine_reads_without_optuna(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "e.db")
    records.record_eval(st.open_storage(url), "s", 0, 1, {"step": 0, "val_bpb": 2.0})
    engine = st.open_engine(url)
    assert records.read_evals(engine, "s")[0]["val_bpb"] == 2.0


# --- concurrency on SQLite ------------------------------------------------------------------------


def _worker(url: str, n_trials: int) -> str | None:
    """One worker process: trials with reports, heartbeats and project-table writes."""
    warnings.simplefilter("ignore")
    try:
        storage = st.open_storage(url, heartbeat_interval=1, grace_period=30)
        study = optuna.load_study(study_name="c", storage=storage)

        def objective(trial: optuna.Trial) -> float:
            x = trial.suggest_float("x", -1, 1)
            records.record_host(storage, "c", trial.number, trial._trial_id)
            for step in range(3):
                trial.report(x * step, step)
                records.record_eval(
                    storage, "c", trial.number, trial._trial_id, {"step": step, "val_loss": x}
                )
            records.record_samples(storage, "c", trial.number, trial._trial_id, {"<Q>": "t"})
            return x * x

        study.optimize(objective, n_trials=n_trials)
        return None
    except Exception:
        return traceback.format_exc()


@pytest.mark.slow
def test_four_processes_never_see_a_locked_database(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "c.db")
    optuna.create_study(study_name="c", storage=st.open_storage(url))
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        errors = pool.starmap(_worker, [(url, 20)] * 4)
    assert [e for e in errors if e] == []
    storage = st.open_storage(url)
    trials = optuna.load_study(study_name="c", storage=storage).trials
    assert len(trials) == 80 and all(t.state == TrialState.COMPLETE for t in trials)
    assert len(records.read_evals(storage, "c")) == 240
    assert len(records.read_hosts(storage, "c")) == 80


# --- stale trials, retries ------------------------------------------------------------------------


def test_pid_alive() -> None:
    assert liveness.pid_alive(os.getpid())
    assert liveness.pid_alive(os.getpid(), started_at=time.time())
    assert not liveness.pid_alive(dead_pid())
    if Path("/proc/self/stat").exists():
        # Recorded before this process started: the pid now names a different process.
        assert not liveness.pid_alive(os.getpid(), started_at=time.time() - 10 * 365 * 86400)


def test_stale_local_trials_fail_and_requeue(tmp_path: Path) -> None:
    storage = st.open_storage(sqlite_url(tmp_path / "q.db"))
    study = optuna.create_study(study_name="q", storage=storage)
    host = socket.gethostname()

    def running(*, host: str, pid: int) -> optuna.Trial:
        trial = study.ask()
        trial.suggest_int("x", 0, 100)
        records.record_host(storage, "q", trial.number, trial._trial_id, host=host, pid=pid)
        return trial

    gone = running(host=host, pid=dead_pid())
    alive = running(host=host, pid=os.getpid())
    elsewhere = running(host="another-machine", pid=dead_pid())
    done = running(host=host, pid=dead_pid())
    study.tell(done, 1.0)
    unrecorded = study.ask()  # no host row: left to the heartbeat

    stale = liveness.stale_local_trials(storage, "q", host)
    assert [t.number for t in stale] == [gone.number]
    assert liveness.stale_local_trials(storage, study) == stale  # by Study, default host
    assert {alive.number, elsewhere.number, unrecorded.number}.isdisjoint(t.number for t in stale)

    assert liveness.fail_and_requeue(storage, "q", stale[0], max_retries=1)
    failed = storage.get_trial(gone._trial_id)
    assert failed.state == TrialState.FAIL and failed.user_attrs["outcome"] == "crashed"
    assert "worker" in failed.user_attrs["reason"]
    waiting = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert len(waiting) == 1
    assert waiting[0].params == failed.params
    assert waiting[0].user_attrs == {"retries": 1, "retry_of": gone.number}
    # Failing it again (another process got there first) does nothing.
    assert not liveness.fail_and_requeue(storage, "q", stale[0], max_retries=1)
    assert len([t for t in study.get_trials() if t.state == TrialState.WAITING]) == 1

    # The re-queued trial is picked up next, with the same parameters.
    retry = study.ask()
    assert retry.number == waiting[0].number
    assert retry.suggest_int("x", 0, 100) == failed.params["x"]
    records.record_host(storage, "q", retry.number, retry._trial_id, pid=dead_pid())
    [again] = liveness.stale_local_trials(storage, "q")
    # max_retries=1: the second failure of the same parameters is not queued again.
    assert not liveness.fail_and_requeue(storage, study, again, max_retries=1)
    assert storage.get_trial(retry._trial_id).state == TrialState.FAIL
    assert not [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert storage.get_trial(retry._trial_id).system_attrs["retry_history"] == [gone.number]


def test_heartbeat_fails_and_requeues_a_silent_trial(tmp_path: Path) -> None:
    storage = st.open_storage(
        sqlite_url(tmp_path / "h.db"), heartbeat_interval=1, grace_period=2, max_retries=2
    )
    study = optuna.create_study(study_name="h", storage=storage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "heartbeat is supposed to be used with optimize"
        trial = study.ask()
    trial.suggest_int("x", 0, 100)
    trial.set_user_attr("outcome", "stale-attr-must-not-be-copied")
    with liveness.heartbeat(storage, trial._trial_id):
        time.sleep(3.0)  # longer than the grace period, but beating
        liveness.fail_stale_trials(study)
        assert study.get_trials()[0].state == TrialState.RUNNING
    time.sleep(4.0)  # silent for twice the grace period (margin for a loaded machine)
    liveness.fail_stale_trials(study)
    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL
    assert trials[1].state == TrialState.WAITING
    assert trials[1].params == trials[0].params
    assert trials[1].user_attrs == {"retries": 1, "retry_of": 0}


def test_heartbeat_without_heartbeats_is_a_no_op(tmp_path: Path) -> None:
    """A storage opened without a heartbeat interval: inside the block no thread beats and, after
    it, the database is what it was (no ``trial_heartbeats`` row, the running trial untouched)."""
    path = tmp_path / "n.db"
    storage = st.open_storage(sqlite_url(path))
    trial = optuna.create_study(study_name="n", storage=storage).ask()
    before = _dump(path)
    with liveness.heartbeat(storage, trial._trial_id):
        beating = [t for t in threading.enumerate() if t.name.startswith("sweeps-heartbeat-")]
        assert beating == []
    assert _dump(path) == before
    storage.engine.dispose()


def _dump(path: Path) -> list[str]:
    """Every table's rows, as SQL statements (what changed shows as a line that differs)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return list(db.iterdump())


def test_requeue_callback_is_optunas_kind() -> None:
    callback = liveness.RequeueCallback(3)
    assert isinstance(callback, optuna_compat.RetryCallbackBase)


# --- PostgreSQL -----------------------------------------------------------------------------------


def _pg_worker(url: str) -> str | None:
    warnings.simplefilter("ignore")
    try:
        storage = st.open_storage(url, heartbeat_interval=5)
        study = optuna.create_study(study_name="race", storage=storage, load_if_exists=True)

        def objective(trial: optuna.Trial) -> float:
            x = trial.suggest_float("x", -1, 1)
            records.record_eval(
                storage, "race", trial.number, trial._trial_id, {"step": 0, "val_loss": x}
            )
            return x

        study.optimize(objective, n_trials=8)
        storage.engine.dispose()
        return None
    except Exception:
        return traceback.format_exc()


def test_postgres_storage(pg_url: str) -> None:
    storage = st.open_storage(pg_url)  # postgresql:// -> psycopg 3
    assert storage.engine.dialect.driver == "psycopg"
    assert storage.engine.pool._pre_ping
    names = set(sa.inspect(storage.engine).get_table_names())
    assert {"studies", "trials", "sweeps_evals", "sweeps_samples", "sweeps_trial_hosts"} <= names
    study = optuna.create_study(study_name="pg", storage=storage)
    trial = study.ask()
    trial.suggest_int("d_ff", 1, 8)
    records.record_eval(
        storage,
        "pg",
        trial.number,
        trial._trial_id,
        {"step": 0, "val_bpb": 1.5, "peak_mem_bytes": 2**40},
    )
    records.record_samples(storage, "pg", trial.number, trial._trial_id, {"<Q>": "ok"})
    records.record_host(storage, "pg", trial.number, trial._trial_id, pid=dead_pid())
    assert records.read_evals(storage, "pg")[0]["peak_mem_bytes"] == 2**40
    assert records.read_samples(storage, "pg")[0]["text"] == "ok"
    [stale] = liveness.stale_local_trials(storage, "pg")
    assert liveness.fail_and_requeue(storage, "pg", stale)
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.WAITING]
    storage.engine.dispose()


def test_postgres_missing_database_creates_nothing(pg_url: str) -> None:
    url = sa.engine.make_url(pg_url)
    name = f"sweeps_missing_{uuid.uuid4().hex[:8]}"
    missing = url.set(database=name, password="topsecret").render_as_string(hide_password=False)
    with pytest.raises(SweepsError) as err:
        st.open_storage(missing)
    message = str(err.value)
    assert "\n" not in message and "topsecret" not in message and name in message
    engine = sa.create_engine(
        pg_url.replace("postgresql://", "postgresql+psycopg://"), poolclass=sa.pool.NullPool
    )
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
        ).first()
    assert found is None


@pytest.mark.slow
def test_postgres_three_workers_join_a_fresh_database(pg_url: str) -> None:
    """Three workers open the storage at once (racing to create tables) and share a study."""
    with multiprocessing.get_context("spawn").Pool(3) as pool:  # pg_url: a database, no tables
        errors = pool.map(_pg_worker, [pg_url] * 3)
    assert [e for e in errors if e] == []
    storage = st.open_storage(pg_url)
    trials = optuna.load_study(study_name="race", storage=storage).trials
    assert len(trials) == 24 and len({t.number for t in trials}) == 24
    assert len(records.read_evals(storage, "race")) == 24
    storage.engine.dispose()


def test_sqlite_connections_are_plain_sqlite3(tmp_path: Path) -> None:
    storage = st.open_storage(sqlite_url(tmp_path / "p.db"))
    with storage.engine.connect() as conn:
        assert isinstance(conn.connection.dbapi_connection, sqlite3.Connection)


# --- text a model writes ------------------------------------------------------------------------


def test_a_nul_in_a_sample_is_stored_on_postgres(pg_url: str) -> None:
    """The failure of issue 26: an untrained byte-level model sampled the byte 0x00, PostgreSQL
    refused the row ("text fields cannot contain NUL"), and every worker stopped on it."""
    storage = st.open_storage(pg_url)
    sample = 'J\ufffd1ds\ufffd \rfM?"\x00\x1fi'
    records.record_samples(storage, "nul", 0, 1, {"<Q>How\x00": sample}, tokens=4096, step=1)
    records.record_eval(storage, "nul", 0, 1, {"step": 1, "note\x00": "a\x00b", "val_bpb": 8.0})
    [row] = records.read_samples(storage, "nul")
    assert row["text"] == sample.replace("\x00", "\ufffd")
    assert row["prompt"] == "<Q>How\ufffd"
    assert records.read_evals(storage, "nul")[0]["metrics"]["note\ufffd"] == "a\ufffdb"
    storage.engine.dispose()


def test_a_count_beyond_bigint_stays_in_the_json_only(pg_url: str) -> None:
    storage = st.open_storage(pg_url)
    records.record_eval(storage, "big", 0, 1, {"step": 1, "tokens": 2**70, "peak_mem_bytes": 1e30})
    [row] = records.read_evals(storage, "big")
    assert row["tokens"] is None and row["peak_mem_bytes"] is None
    assert row["metrics"]["tokens"] == 2**70
    storage.engine.dispose()


def test_describe_error_is_the_drivers_line_without_sql_or_parameters(pg_url: str) -> None:
    engine = sa.create_engine(st.normalize_url(pg_url), poolclass=sa.pool.NullPool)
    with pytest.raises(sa.exc.DBAPIError) as err, engine.begin() as conn:
        conn.execute(sa.text("SELECT CAST(:t AS text)"), {"t": "secret model text\x00 " * 200})
    assert "[SQL:" in str(err.value)  # what SQLAlchemy itself would have shown
    line = st.describe_error(err.value)
    assert line.startswith("DataError: ") and "NUL" in line
    assert "\n" not in line and "secret model text" not in line and "[SQL" not in line
    assert st.describe_error(ValueError("a\nb")) == "ValueError: a"
