"""A damaged database (issue 24, item 7, in part): one study's stored spec set to invalid JSON
made ``status`` crash for every study; a SQLite URL naming a directory said "does not exist"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest

from tests.shared import shared_corpus, small_tmpfs
from tests.sweeps.cli import assert_user_error, sweeps
from tests.sweeps.helpers import spec_dict, toml_text


def test_status_shows_every_study_and_names_the_damaged_one(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    for name in ("good", "bad"):
        optuna.create_study(storage=url, study_name=name).set_user_attr("spec", {"x": 1})
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE study_user_attributes SET value_json = '{broken' WHERE study_id = "
            "(SELECT study_id FROM studies WHERE study_name = 'bad')"
        )
    proc = sweeps("status", "--storage", url)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "good" in proc.stdout and "unreadable: a stored value is damaged" in proc.stdout


def test_report_copy_and_rename_of_a_damaged_study_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    optuna.create_study(storage=url, study_name="bad").set_user_attr("spec", {"x": 1})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE study_user_attributes SET value_json = '{broken'")
    for command in (["report", "bad", "--out", str(tmp_path / "r.html")], ["rename", "bad", "b3"]):
        proc = sweeps(*command, "--storage", url)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "not valid JSON" in proc.stderr
        assert "sweeps delete" in proc.stderr
    proc = sweeps("copy", "bad", "b2", "--storage", url)
    assert proc.returncode == 1 and "not valid JSON" in proc.stderr, proc.stderr
    with sqlite3.connect(db) as conn:  # no half copy left
        assert conn.execute("SELECT study_name FROM studies").fetchall() == [("bad",)]
    assert sweeps("delete", "bad", "--yes", "--storage", url).returncode == 0


def test_a_sqlite_url_naming_a_directory_says_so(tmp_path: Path) -> None:
    for command in (["status"], ["trials", "x"]):
        proc = sweeps(*command, "--storage", f"sqlite:///{tmp_path}")
        assert_user_error(proc, "is a directory")


def test_every_reader_refuses_a_database_of_a_newer_schema(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    optuna.create_study(storage=url, study_name="s").optimize(lambda t: 1.0, n_trials=1)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'v99.0.0'")
    for command in (
        ["status"],
        ["trials", "s"],
        ["export", "s"],
        ["report", "s", "--out", str(tmp_path / "r.html")],
    ):
        proc = sweeps(*command, "--storage", url)
        assert_user_error(proc, "newer Optuna", "v99.0.0", "pip install -U optuna")
    assert not (tmp_path / "r.html").exists()


def test_sqlite_errors_name_their_cause() -> None:
    from sweeps.storage import _sqlite_hint

    assert "read-only" in _sqlite_hint("OperationalError: attempt to write a readonly database")
    assert "free some space" in _sqlite_hint("OperationalError: database or disk is full")
    assert "SQLite database" in _sqlite_hint("DatabaseError: file is not a database")


def test_a_new_sqlite_database_on_a_full_disk_is_one_line_and_leaves_nothing(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with small_tmpfs(tmp_path / "small", "40k") as mount:
        (mount / "fill").write_bytes(b"\0" * (36 * 1024))
        spec = tmp_path / "spec.toml"
        data = spec_dict("s", shared_corpus(tmp_path_factory))
        spec.write_text(toml_text(data), encoding="utf-8")
        proc = sweeps("run", str(spec), "--storage", f"sqlite:///{mount / 'db.sqlite'}")
        assert_user_error(proc, "disk is full: free some space")
        assert [p.name for p in mount.iterdir()] == ["fill"]  # no db, -wal or -shm left


@pytest.mark.study
def test_a_worker_joins_a_study_whose_stored_spec_names_another(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A study renamed outside sweeps: its stored spec still says the old name."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    spec = tmp_path / "spec.toml"
    spec.write_text(
        toml_text(spec_dict("old", shared_corpus(tmp_path_factory), study={"n_trials": 1})),
        encoding="utf-8",
    )
    from tests.sweeps.helpers import sweeps_run

    assert sweeps_run("run", str(spec), "--storage", url, cwd=tmp_path).returncode == 0
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        conn.execute("UPDATE studies SET study_name = 'new' WHERE study_name = 'old'")
    proc = sweeps_run("worker", "new", "--storage", url, "--n-trials", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "KeyError" not in proc.stderr
    assert len(optuna.load_study(study_name="new", storage=url).get_trials()) == 2
