"""Read-only commands (``status``, ``trials``, ``report``, ``export``) change nothing: not a
foreign database (one line: not a sweeps database), not a sweeps database (no WAL switch, no
-wal/-shm left behind), and they read a file on a read-only mount. An in-memory storage is
refused before anything is printed."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from sweeps import storage as st
from tests.shared import shared_corpus
from tests.sweeps import fake_study
from tests.sweeps.cli import assert_user_error, sweeps
from tests.sweeps.helpers import spec_dict, toml_text


def snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file of ``directory``: (sha256, mtime in ns)."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
    }


def sqlite_tables(path: Path) -> list[str]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))
    finally:
        conn.close()


def read_commands(url: str, study: str, out: Path) -> list[list[str]]:
    return [
        ["status", "--storage", url],
        ["trials", study, "--storage", url],
        ["export", study, "--format", "json", "--storage", url],
        ["report", study, "--out", str(out / f"{study}.html"), "--storage", url],
    ]


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A SQLite file of another program: one unrelated table, rollback journal."""
    path = tmp_path / "db" / "other.db"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.commit()
    conn.close()
    return path


def test_a_foreign_database_is_refused_and_left_unchanged(foreign: Path, tmp_path: Path) -> None:
    before, tables = snapshot(foreign.parent), sqlite_tables(foreign)
    for args in read_commands(f"sqlite:///{foreign}", "x", tmp_path):
        assert_user_error(sweeps(*args), "is not a sweeps database", "sqlite:///")
        assert snapshot(foreign.parent) == before, args  # no -wal, -shm or -journal either
        assert sqlite_tables(foreign) == tables == ["invoices"]


@pytest.fixture
def sweeps_db(tmp_path: Path) -> Path:
    path = tmp_path / "db" / "sweeps.db"
    path.parent.mkdir()
    fake_study.fabricate(f"sqlite:///{path}", "s", 12, bulk=False)
    assert sorted(p.name for p in path.parent.iterdir()) == ["sweeps.db"]  # closed cleanly
    return path


@pytest.mark.slow
def test_read_commands_write_nothing_to_a_sweeps_database(sweeps_db: Path, tmp_path: Path) -> None:
    before = snapshot(sweeps_db.parent)
    out = tmp_path / "out"
    out.mkdir()
    for args in read_commands(f"sqlite:///{sweeps_db}", "s", out):
        proc = sweeps(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert snapshot(sweeps_db.parent) == before, args
    assert (out / "s.html").stat().st_size > 10_000


def test_reading_while_a_writer_has_the_database_open(sweeps_db: Path) -> None:
    """With a writer's WAL present, readers see its latest commits (read through the WAL)."""
    writer = st.open_storage(f"sqlite:///{sweeps_db}")
    study = optuna.load_study(study_name="s", storage=writer)
    study.set_user_attr("written_after", 1)
    assert Path(f"{sweeps_db}-wal").exists()
    reader = st.read_only_storage(f"sqlite:///{sweeps_db}")
    assert optuna.load_study(study_name="s", storage=reader).user_attrs["written_after"] == 1
    reader.engine.dispose()
    writer.engine.dispose()


def test_a_database_optuna_wrote_alone_is_read_without_adding_tables(tmp_path: Path) -> None:
    path = tmp_path / "db" / "plain.db"
    path.parent.mkdir()
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    optuna.create_study(study_name="plain", storage=storage).enqueue_trial({"x": 1})
    storage.engine.dispose()
    before, tables = snapshot(path.parent), sqlite_tables(path)
    proc = sweeps("export", "plain", "--format", "json", "--storage", f"sqlite:///{path}")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(path.parent) == before and sqlite_tables(path) == tables
    assert not any(t.startswith("sweeps_") for t in tables)


def _read_only_mount_works(directory: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind '{directory}' '{directory}' && "
            f"mount -o remount,bind,ro '{directory}' && ! touch '{directory}/probe' 2>/dev/null",
        ],
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0 and not (directory / "probe").exists()


@pytest.mark.slow
def test_read_commands_read_a_file_on_a_read_only_mount(sweeps_db: Path, tmp_path: Path) -> None:
    directory = sweeps_db.parent
    if not _read_only_mount_works(directory):
        pytest.skip("no private read-only bind mount here (needs unshare -m and mount rights)")
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(directory)
    for args in read_commands(f"sqlite:///{sweeps_db}", "s", out):
        command = " ".join(f"'{a}'" for a in [sys.executable, "-m", "sweeps", *args])
        proc = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                f"mount --bind '{directory}' '{directory}' && "
                f"mount -o remount,bind,ro '{directory}' && exec {command}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (args, proc.stderr)
        assert "s" in proc.stdout or (out / "s.html").exists()
    assert snapshot(directory) == before
    assert (out / "s.html").stat().st_size > 10_000


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true"]
)
def test_an_in_memory_storage_is_refused_before_anything_is_printed(
    url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = shared_corpus(tmp_path_factory)
    (tmp_path / "spec.toml").write_text(toml_text(spec_dict("mem", corpus)))
    for args in (
        ["run", "spec.toml", "--storage", url],
        ["worker", "mem", "--storage", url],
        ["status", "--storage", url],
    ):
        proc = sweeps(*args, cwd=tmp_path)
        assert_user_error(proc, "in-memory", "use a file")
        assert proc.stdout == "" and "created study" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_a_foreign_postgres_database_gets_no_tables(pg_url: str, tmp_path: Path) -> None:
    engine = sa.create_engine(st.normalize_url(pg_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE invoices (id SERIAL PRIMARY KEY, total REAL)"))
    for args in read_commands(pg_url, "x", tmp_path):
        assert_user_error(sweeps(*args), "is not a sweeps database")
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == ["invoices"]
    engine.dispose()


def test_write_commands_on_a_read_only_mount_say_read_only(tmp_path: Path) -> None:
    """#24 item 7, end to end: root ignores file modes, so a read-only bind mount stands in for a
    read-only file; the error names that, not a damaged database, and changes nothing."""
    directory = tmp_path / "db"
    directory.mkdir()
    if not _read_only_mount_works(directory):
        pytest.skip("no private read-only bind mount here (needs unshare -m and mount rights)")
    url = f"sqlite:///{directory / 's.db'}"
    optuna.create_study(storage=url, study_name="s").optimize(lambda t: 1.0, n_trials=1)
    before = snapshot(directory)
    for args in (["delete", "s", "--yes"], ["rename", "s", "t"]):
        command = " ".join(
            f"'{a}'" for a in [sys.executable, "-m", "sweeps", *args, "--storage", url]
        )
        proc = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                f"mount --bind '{directory}' '{directory}' && "
                f"mount -o remount,bind,ro '{directory}' && exec {command}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert_user_error(proc, "read-only", "make both writable")
        assert "SQLite database" not in proc.stderr
    assert snapshot(directory) == before
