"""A nearly full runs dir (issue 24, item 5): with a few KiB free, the baseline trial's child died
writing (exit 1, its log empty) and the trial was recorded "crashed: exit code 1 without
result.json", counted and never re-queued. The parent now checks that the run dir has room for a
result before it blames the configuration: no room is the environment's failure, re-queued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeps import workers as wk
from sweeps.monitor import classify, run_dir_unwritable
from sweeps.spec import read_spec
from tests.shared import shared_corpus, small_tmpfs
from tests.sweeps.helpers import spec_dict, worker_study

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 300 KiB tmpfs with 8 KiB free (root only: skipped where mount is not allowed)."""
    with small_tmpfs(tmp_path / "small", "300k") as mount:
        (mount / "runs").mkdir()
        (mount / "fill").write_bytes(b"\0" * (292 * 1024))
        yield mount


def test_a_child_without_result_on_a_full_disk_is_the_environments_failure(
    small_disk: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = read_spec(
        spec_dict(
            "full",
            shared_corpus(tmp_path_factory),
            fixed={"tokenizer": "byte", "vocab_size": 260},
            space={"lr": {"low": 0.001, "high": 0.01}},
            study={"n_trials": 2},
        )
    )
    storage, study = worker_study(spec, tmp_path / "db.sqlite")
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    options = wk.RunOptions(n_workers=1, launcher="subprocess", poll_s=0.05)
    [result] = wk.run_workers(spec, storage, study, small_disk / "runs", options)
    assert result.error is not None and "failed for the environment" in result.error
    trials = study.get_trials()
    assert wk.budget_state(trials, 2).finished == 0  # nothing counted against n_trials
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert failed and all(t.user_attrs.get("environment_failure") for t in failed)
    assert sum(t.state == TrialState.WAITING for t in trials) >= 1  # re-queued


def test_the_room_check_blames_only_a_dir_without_room(small_disk: Path, tmp_path: Path) -> None:
    assert run_dir_unwritable(tmp_path) is None
    assert list(tmp_path.glob(".sweeps-probe*")) == []  # the probe leaves nothing
    why = run_dir_unwritable(small_disk / "runs")
    assert why is not None and "No space left" in why
    outcome, reason = classify(1, None, None, small_disk / "runs", unwritable=why)
    assert outcome == "crashed" and reason.startswith("environment:")
    assert classify(1, None, None, tmp_path)[1].startswith("exit code 1")  # a real crash
