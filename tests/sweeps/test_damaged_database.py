"""A damaged database (issue 24, item 7, in part): one study's stored spec set to invalid JSON
made ``status`` crash for every study; a SQLite URL naming a directory said "does not exist"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna

from tests.sweeps.cli import assert_user_error, sweeps


def test_status_shows_every_study_and_names_the_damaged_one(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for name in ("good", "bad"):
        optuna.create_study(storage=url, study_name=name).set_user_attr("spec", {"x": 1})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE study_user_attributes SET value_json = '{broken' WHERE study_id = "
                     "(SELECT study_id FROM studies WHERE study_name = 'bad')")
    proc = sweeps("status", "--storage", url)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "good" in proc.stdout and "unreadable: a stored value is damaged" in proc.stdout


def test_a_sqlite_url_naming_a_directory_says_so(tmp_path: Path) -> None:
    for command in (["status"], ["trials", "x"]):
        proc = sweeps(*command, "--storage", f"sqlite:///{tmp_path}")
        assert_user_error(proc, "is a directory")


def test_every_reader_refuses_a_database_of_a_newer_schema(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(storage=url, study_name="s").optimize(lambda t: 1.0, n_trials=1)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'v99.0.0'")
    for command in (["status"], ["trials", "s"], ["export", "s"],
                    ["report", "s", "--out", str(tmp_path / "r.html")]):
        proc = sweeps(*command, "--storage", url)
        assert_user_error(proc, "newer Optuna", "v99.0.0", "pip install -U optuna")
    assert not (tmp_path / "r.html").exists()
