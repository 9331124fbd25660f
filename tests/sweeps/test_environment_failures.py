"""Failures of the environment never use up a trial: a corpus deleted mid-study, a full disk in
the child, a runs dir that cannot be written. Such trials are re-queued, a worker stops after a
few in a row with one clear line, and once the cause is fixed a resume finishes the study."""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeps import workers as wk
from sweeps.launchers import PopenChild
from sweeps.spec import StudySpec, read_spec
from tests.shared import shared_corpus
from tests.sweeps.helpers import CPU, spec_dict, sweeps_run, toml_text, worker_study


def open_study(tmp: Path, data: dict[str, Any]) -> tuple[StudySpec, Any, Any]:
    spec = read_spec(data)
    return (spec, *worker_study(spec, tmp / "db.sqlite"))


@pytest.mark.study
def test_a_corpus_deleted_mid_study_uses_up_no_trial(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(corpus, tmp_path / "corpus")
    corpus = tmp_path / "corpus"  # a copy: this test deletes it
    spec, storage, study = open_study(
        tmp_path,
        spec_dict(
            "gone",
            corpus,
            fixed={"tokenizer": "word"},
            study={"n_trials": 4},
            space={"vocab_size": {"choices": [300, 600]}},
            limits={"max_retries": 0},
        ),
    )
    moved = tmp_path / "corpus-away"

    def on_event(kind: str, info: dict[str, Any]) -> None:
        if kind == "end" and info["number"] == 0:
            corpus.rename(moved)  # the corpus disappears after the first trial

    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    options = wk.RunOptions(n_workers=1, launcher="fork", poll_s=0.05, on_event=on_event)
    [result] = wk.run_workers(spec, storage, study, tmp_path / "runs", options)
    assert (
        result.error is not None and "3 trials in a row failed for the environment" in result.error
    ), result.error
    trials = study.get_trials()
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 3 and all(t.user_attrs["environment_failure"] for t in failed)
    assert all(t.user_attrs["reason"].startswith("environment:") for t in failed)
    state = wk.budget_state(trials, 4)
    assert state.finished == 1 and not state.done  # the failed ones are not counted
    assert sum(t.state == TrialState.WAITING for t in trials) >= 1  # re-queued, max_retries 0
    # The cause fixed, a resume finishes the study with exactly its four trials.
    moved.rename(corpus)
    study = wk.load_for_workers(spec, storage)
    options = wk.RunOptions(n_workers=1, launcher="fork", poll_s=0.05)
    [again] = wk.run_workers(spec, storage, study, tmp_path / "runs", options)
    assert again.error is None
    state = wk.budget_state(study.get_trials(), 4)
    assert state.done and state.finished == 4
    assert all(t.state == TrialState.COMPLETE for t in state.counted)


class SmallDiskLauncher:
    """Children whose files may not grow past 64 KiB (``RLIMIT_FSIZE``, SIGXFSZ ignored): the
    first checkpoint does not fit, as on a full disk."""

    kind = "subprocess"

    def launch(
        self,
        run_dir: Path,
        *,
        log_path: Path,
        env: dict | None = None,
        cpus: list[int] | None = None,
    ) -> PopenChild:
        def small_disk() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lm.train", str(run_dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=small_disk,
            )
        return PopenChild(proc)

    def close(self) -> None:
        pass


@pytest.mark.study
def test_a_full_disk_in_the_child_is_the_environment_and_leaves_no_temp_file(
    tmp_path: Path, corpus: Path
) -> None:
    from lm.tokens import load_tokens
    from sweeps.runner import RunnerContext, run_trial

    load_tokens(corpus, "word", 600)  # the cache exists: the checkpoint is what does not fit
    spec, storage, study = open_study(
        tmp_path,
        spec_dict(
            "full",
            corpus,
            fixed={"tokenizer": "word", "d_model": 64},
            study={"n_trials": 1},
            space={"vocab_size": {"choices": [600]}},
        ),
    )
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp_path / "runs",
        launcher=SmallDiskLauncher(),
        budget_bytes=4 * 2**30,
        poll_s=0.05,
    )
    report = run_trial(ctx, CPU, study.ask())
    assert report.environment and report.outcome == "crashed"
    assert report.reason.startswith("environment: OSError") and "File too large" in report.reason
    run_dir = tmp_path / "runs" / "trials" / str(report.number)
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert wk.requeue_interrupted(study, report.number, None)  # what the worker loop does


def test_a_runs_dir_that_cannot_be_written_is_refused_before_the_study(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = shared_corpus(tmp_path_factory)
    runs = tmp_path / "ro"
    runs.mkdir()
    spec = tmp_path / "spec.toml"
    spec.write_text(toml_text(spec_dict("ro", corpus)))
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here for a private read-only mount")
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind '{runs}' '{runs}' && "
            f"mount -o remount,bind,ro '{runs}' && ! touch '{runs}/probe' 2>/dev/null",
        ],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("no private read-only bind mount here (needs unshare -m and mount rights)")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    command = " ".join(
        shlex.quote(a)
        for a in [
            sys.executable,
            "-m",
            "sweeps",
            "run",
            str(spec),
            "--storage",
            url,
            "--runs-dir",
            str(runs / "sub"),
        ]
    )
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind '{runs}' '{runs}' && "
            f"mount -o remount,bind,ro '{runs}' && exec {command}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--runs-dir" in lines[0] and "not writable" in lines[0], lines
    assert not (tmp_path / "db.sqlite").exists()  # no study was created
    assert list(runs.iterdir()) == []
    # The same spec and storage run once the runs dir is writable.
    ok = sweeps_run(
        "run", str(spec), "--storage", url, "--runs-dir", str(runs), "--dry-run", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
