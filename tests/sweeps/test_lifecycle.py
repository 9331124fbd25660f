"""``sweeps delete``, ``copy`` and ``rename`` on SQLite and PostgreSQL, as a user runs them: what
each changes (Optuna's rows, the ``sweeps_`` rows, the stored spec, run dirs), what each refuses
with one line and nothing changed, Optuna's own CLI agreeing after each, and a copy resumed by
``sweeps worker NEW``.

Each operation runs as a process, with Optuna's CLI reading the result, once
(``test_copy_rename_delete_and_optunas_cli_agrees``); the refusals and the ``--force`` cases run
the same ``cli.main`` in this process (``sweeps_here``) and read the database with Optuna's
API, on both backends."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from sweeps import records
from sweeps import storage as st
from sweeps.spec.values import MAX_NAME_LENGTH
from tests.sweeps import fake_study
from tests.sweeps.cli import assert_user_error, sweeps_here
from tests.sweeps.helpers import snapshot, spec_dict, sweeps_run, toml_text
from tests.sweeps.pg import fresh_database

OPTUNA = str(Path(sys.executable).parent / "optuna")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.server)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database holding the fabricated study ``alpha`` (12 trials, evaluations, samples)."""
    if request.param == "sqlite":
        found = f"sqlite:///{tmp_path / 'life.db'}"
        fake_study.fabricate(found, "alpha", 12, seed=3)
        yield found
        return
    with fresh_database("sweeps_life") as pg:
        found = pg.render_as_string(hide_password=False)
        fake_study.fabricate(found, "alpha", 12, seed=3)
        yield found


def run(
    *args: str, cwd: Path, stdin: int | None = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        cwd=cwd,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def optuna_studies(url: str) -> list[str]:
    proc = subprocess.run(
        [OPTUNA, "studies", "--storage", url, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return sorted(s["name"] for s in json.loads(proc.stdout))


def optuna_trials(url: str, name: str) -> list[tuple[int, str]]:
    proc = subprocess.run(
        [OPTUNA, "trials", "--study-name", name, "--storage", url, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [(t["number"], t["state"]) for t in json.loads(proc.stdout)]


def studies_here(url: str) -> list[str]:
    """``optuna_studies`` read through Optuna's API in this process."""
    storage = st.open_storage(url)
    try:
        return sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
    finally:
        storage.engine.dispose()


def states_here(url: str, name: str) -> list[str]:
    """The states of ``optuna_trials``, read through Optuna's API in this process."""
    storage = st.open_storage(url)
    try:
        return [
            t.state.name for t in optuna.load_study(study_name=name, storage=storage).get_trials()
        ]
    finally:
        storage.engine.dispose()


@pytest.mark.slow
def test_copy_rename_delete_and_optunas_cli_agrees(url: str, tmp_path: Path) -> None:
    before = snapshot(url, "alpha")
    assert before[1] > 0 and before[2] > 0
    proc = run("copy", "alpha", "beta", "--storage", url, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    copied = snapshot(url, "beta")
    assert copied[:3] == before[:3] and before[3]["study"]["name"] == "alpha"
    assert copied[3]["study"]["name"] == "beta"  # the copy's spec names the copy
    assert optuna_studies(url) == ["alpha", "beta"]
    assert optuna_trials(url, "beta") == optuna_trials(url, "alpha")

    proc = run("rename", "beta", "gamma", "--storage", url, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    renamed = snapshot(url, "gamma")
    assert renamed[:3] == before[:3] and renamed[3]["study"]["name"] == "gamma"
    storage = st.open_storage(url)
    assert records.read_evals(storage, "beta") == [] and records.read_samples(storage, "beta") == []
    storage.engine.dispose()
    assert optuna_studies(url) == ["alpha", "gamma"]
    assert len(optuna_trials(url, "gamma")) == 12

    runs = tmp_path / "runs"
    (runs / "gamma" / "trials" / "0").mkdir(parents=True)
    (runs / "alpha").mkdir()
    refused = run("delete", "gamma", "--storage", url, cwd=tmp_path)  # stdin: not a terminal
    assert_user_error(refused, "without a confirmation", "--yes")
    proc = run(
        "delete",
        "gamma",
        "--storage",
        url,
        "--yes",
        "--runs-dir",
        str(runs),
        "--delete-runs",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert optuna_studies(url) == ["alpha"]
    assert not (runs / "gamma").exists() and (runs / "alpha").is_dir()
    storage = st.open_storage(url)
    assert records.read_evals(storage, "gamma") == []
    storage.engine.dispose()
    assert snapshot(url, "alpha") == before  # the source never changed


def test_refusals_are_one_line_and_change_nothing(url: str) -> None:
    fake_study.fabricate(url, "other", 2, seed=1)
    before = (studies_here(url), snapshot(url, "alpha"))
    for args, needles in [
        (("copy", "missing", "x"), ["no study 'missing'", "alpha"]),
        (("rename", "missing", "x"), ["no study 'missing'"]),
        (("delete", "missing", "--yes"), ["no study 'missing'"]),
        (("copy", "alpha", "other"), ["'other' already exists"]),
        (("rename", "alpha", "other"), ["'other' already exists"]),
        (("rename", "alpha", "a/b"), ["'a/b'", "letters, digits"]),
        (("copy", "alpha", "-x"), []),  # an option-like name: Typer's own usage error
        (("rename", "alpha", "n" * (MAX_NAME_LENGTH + 1)), [f"1 to {MAX_NAME_LENGTH}"]),
        (("delete", "alpha", "--yes", "--delete-runs"), ["--delete-runs needs --runs-dir"]),
    ]:
        proc = sweeps_here(*args, "--storage", url)
        if needles:
            assert_user_error(proc, *needles)
        else:
            assert proc.returncode == 2
    assert (studies_here(url), snapshot(url, "alpha")) == before


def test_running_trials_need_force(url: str) -> None:
    storage = st.open_storage(url)
    optuna.load_study(study_name="alpha", storage=storage).ask()  # a RUNNING trial, no worker
    storage.engine.dispose()
    for args in (
        ("delete", "alpha", "--yes"),
        ("rename", "alpha", "beta"),
        ("copy", "alpha", "beta"),
    ):
        assert_user_error(sweeps_here(*args, "--storage", url), "1 RUNNING trial", "--force")
    assert studies_here(url) == ["alpha"]
    proc = sweeps_here("copy", "alpha", "beta", "--force", "--storage", url)
    assert proc.returncode == 0, proc.stderr
    states = states_here(url, "beta")
    # in the copy, the running trial is failed and queued again: the copy will run it
    assert states.count("RUNNING") == 0 and states[12:] == ["FAIL", "WAITING"]
    assert sweeps_here("rename", "alpha", "delta", "--force", "--storage", url).returncode == 0
    assert studies_here(url) == ["beta", "delta"]


@pytest.mark.slow
def test_copy_to_another_database(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    fake_study.fabricate(source, "alpha", 5, seed=2)
    proc = run("copy", "alpha", "alpha", "--storage", source, "--to-storage", target, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(target, "alpha") == snapshot(source, "alpha")
    assert optuna_studies(target) == ["alpha"]


@pytest.mark.study
def test_a_copied_study_resumes_under_its_new_name(tmp_path: Path, corpus: Path) -> None:
    data = spec_dict(
        "orig",
        corpus,
        fixed={"tokenizer": "word"},
        space={
            "vocab_size": {"choices": [300, 600]},
            # a continuous lr: the twin's new trial is not a repeat of trial 0
            # (a repeated point is copied, not trained, so it has no run folder)
            "lr": {"low": 1e-3, "high": 3e-2, "log": True},
        },
        study={"n_trials": 1},
    )
    (tmp_path / "orig.toml").write_text(toml_text(data))
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    assert sweeps_run("run", "orig.toml", "--storage", url, cwd=tmp_path).returncode == 0
    assert run("copy", "orig", "twin", "--storage", url, cwd=tmp_path).returncode == 0
    proc = sweeps_run("worker", "twin", "--storage", url, "--n-trials", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "trial 1 complete" in proc.stderr
    assert [s for _, s in optuna_trials(url, "twin")] == ["COMPLETE", "COMPLETE"]
    assert [s for _, s in optuna_trials(url, "orig")] == ["COMPLETE"]
    assert (tmp_path / "runs" / "twin" / "trials" / "1").is_dir()
    storage = st.open_storage(url)
    assert {r["trial_number"] for r in records.read_evals(storage, "twin")} == {0, 1}
    storage.engine.dispose()
