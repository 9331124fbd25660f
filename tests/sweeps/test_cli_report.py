"""``sweeps report`` and ``sweeps export`` as a user runs them, on SQLite and PostgreSQL."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from sweeps import results
from sweeps import storage as st
from tests.sweeps import fake_study
from tests.sweeps.cli import assert_user_error, sweeps


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli_report') / 'study.db'}"
    fake_study.fabricate(url, "vocab", 25, seed=7)
    return url


def test_report_writes_one_html_file_and_summarises(db: str, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "vocab.html"
    proc = sweeps("report", "vocab", "--storage", db, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and out.stat().st_size > 1_000_000  # plotly.js inlined
    for word in ("study", "vocab", "complete", "charts", "pareto", "size", "time"):
        assert word in proc.stdout
    assert not list(out.parent.glob(".*tmp"))


def test_report_defaults_to_study_html_and_env_storage(db: str, tmp_path: Path) -> None:
    env = {**os.environ, "SWEEPS_STORAGE": db}
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps", "report", "vocab"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "vocab.html").is_file()


@pytest.mark.skipif(
    importlib.util.find_spec("kaleido") is not None,
    reason="kaleido is installed: --png works instead of failing",
)
def test_png_without_kaleido_is_a_one_line_error(db: str, tmp_path: Path) -> None:
    assert_user_error(
        sweeps(
            "report",
            "vocab",
            "--storage",
            db,
            "--out",
            str(tmp_path / "r.html"),
            "--png",
            str(tmp_path / "png"),
        ),
        "pip install kaleido",
    )
    assert not (tmp_path / "r.html").exists()


def test_report_errors_are_one_line(db: str, tmp_path: Path) -> None:
    assert_user_error(
        sweeps("report", "nope", "--storage", db, "--out", str(tmp_path / "r.html")),
        "'nope'",
        "studies there: vocab",
    )
    missing = tmp_path / "missing.db"
    assert_user_error(
        sweeps("report", "vocab", "--storage", f"sqlite:///{missing}"), "does not exist"
    )
    assert not missing.exists()
    assert_user_error(
        sweeps("report", "vocab", "--storage", db, "--out", str(tmp_path)), "is a directory"
    )


def test_export_csv_to_stdout_is_the_study_frame(db: str) -> None:
    proc = sweeps("export", "vocab", "--storage", db)
    assert proc.returncode == 0, proc.stderr
    got = pd.read_csv(io.StringIO(proc.stdout))
    want = results.study_frame(db, "vocab")
    assert list(got.columns) == list(want.columns) and len(got) == 25
    assert got["outcome"].tolist() == want["outcome"].tolist()
    assert got["val_bpb"].to_numpy() == pytest.approx(
        want["val_bpb"].to_numpy(dtype=float), nan_ok=True
    )
    # integer columns print as integers
    assert str(want["vocab_size"].iloc[0]) + "," in proc.stdout.splitlines()[1]


def test_export_json_file_is_strict_json(db: str, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    proc = sweeps("export", "vocab", "--storage", db, "--format", "json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "wrote 25 trials" in proc.stderr
    rows = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    want = results.study_frame(db, "vocab")
    assert [r["number"] for r in rows] == want["number"].tolist()
    never_run = next(r for r in rows if r["outcome"] == "predicted_oom")
    assert never_run["peak_mem_bytes"] is None and never_run["predicted_mem_bytes"] > 0
    first = rows[0]
    assert first["param_lr"] == pytest.approx(want["param_lr"].iloc[0], rel=1e-12)


def test_export_parquet(db: str, tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    proc = sweeps("export", "vocab", "--storage", db, "--format", "parquet", "--out", str(out))
    if (
        importlib.util.find_spec("pyarrow") is None
        and importlib.util.find_spec("fastparquet") is None
    ):
        assert_user_error(proc, "pyarrow", "pip install pyarrow")
        assert not out.exists()
        return
    assert proc.returncode == 0, proc.stderr
    pd.testing.assert_frame_equal(
        pd.read_parquet(out), results.study_frame(db, "vocab"), check_dtype=False
    )


def test_export_unknown_format(db: str) -> None:
    assert_user_error(
        sweeps("export", "vocab", "--storage", db, "--format", "xlsx"),
        "'xlsx'",
        "csv, parquet, json",
    )


# --- PostgreSQL -----------------------------------------------------------------------------------


def test_report_and_export_against_postgresql(pg_url: str, db: str, tmp_path: Path) -> None:
    # a password in the URL (the local server trusts any) so masking can be checked
    url = sa.engine.make_url(pg_url)
    pg_url = url.set(password=url.password or "s3cret-pw").render_as_string(hide_password=False)
    fake_study.fabricate(pg_url, "vocab", 25, seed=7)
    when = ["datetime_start", "datetime_complete"]
    pd.testing.assert_frame_equal(
        results.study_frame(pg_url, "vocab").drop(columns=when),
        results.study_frame(db, "vocab").drop(columns=when),
    )
    out = tmp_path / "pg.html"
    proc = sweeps("report", "vocab", "--storage", pg_url, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    password = sa.engine.make_url(pg_url).password
    page = out.read_text()
    assert password not in page and password not in proc.stdout
    assert st.mask_url(pg_url) in page and ":***@" in page
    proc = sweeps("export", "vocab", "--storage", pg_url, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(io.StringIO(proc.stdout))) == 25
