"""Resuming through the orchestrator: `sweeps run` killed with SIGKILL mid-trial, then run again,
re-queues the trial, and the new trial continues the dead one's checkpoint to the same result as
an uninterrupted run of its configuration."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from lm.config import TrainConfig
from lm.run_files import (
    CONFIG_FILE,
    METRICS_FILE,
    RESUME_FILE,
    RESUME_INDEX_FILE,
    read_result,
    read_resume_index,
    write_config,
)
from sweeps.runner import resume_from_earlier
from tests.sweeps.helpers import (
    CHILD_ENV,
    lm_processes,
    spec_dict,
    study_trials,
    sweeps_popen,
    sweeps_run,
    toml_text,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
#: Measurements of the process, not of the computation.
TIMING_KEYS = {"tokens_per_s", "elapsed_s", "peak_mem_bytes"}


def rows(run_dir: Path) -> list[dict[str, Any]]:
    text = (run_dir / METRICS_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def past_a_checkpoint(run_dir: Path) -> bool:
    index = read_resume_index(run_dir)
    try:
        return index is not None and any(r["tokens"] > index["tokens"] for r in rows(run_dir))
    except (OSError, json.JSONDecodeError):
        return False


@pytest.mark.study
def test_sigkill_of_sweeps_run_then_the_requeued_trial_resumes(
    tmp_path: Path, corpus: Path
) -> None:
    data = spec_dict(
        "resume",
        corpus,
        fixed={
            "tokenizer": "word",
            "lr": 3e-2,
            "dropout": 0.1,
            "max_tokens": 40_000,
            "eval_every_tokens": 2_000,
            "checkpoint_every_tokens": 8_000,
        },
        space={"vocab_size": {"choices": [300]}},
        study={"n_trials": 1},
        limits={"collapse": False, "max_wall_s": 600},
    )
    spec = tmp_path / "resume.toml"
    spec.write_text(toml_text(data))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    args = ("run", str(spec), "--storage", url, "--workers", "1")
    first_dir = tmp_path / "runs" / "resume" / "trials" / "0"
    first = sweeps_popen(*args, cwd=tmp_path)
    try:
        wait_for(
            lambda: past_a_checkpoint(first_dir) or first.poll() is not None,
            180,
            "trial 0 past its first checkpoint",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL  # killed mid-run, not finished
    wait_for(lambda: not lm_processes(tmp_path) or None, 10, "no orphan children")
    index = read_resume_index(first_dir)
    assert index is not None and 0 < index["tokens"] < 40_000

    again = sweeps_run(*args, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    trials = study_trials(url, "resume")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    resumed = trials[1]
    assert resumed.system_attrs["retry_history"] == [0]
    assert resumed.user_attrs["resumed_from_tokens"] == index["tokens"]

    # The same configuration, never interrupted, in a child of its own.
    resumed_dir = Path(resumed.user_attrs["run_dir"])
    reference = tmp_path / "reference"
    reference.mkdir()
    shutil.copyfile(resumed_dir / CONFIG_FILE, reference / CONFIG_FILE)
    done = subprocess.run(
        [sys.executable, "-m", "lm.train", str(reference)],
        cwd=REPO,
        env={**os.environ, **CHILD_ENV, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    ref = read_result(reference)
    assert ref.resumed_from_tokens == 0
    assert resumed.user_attrs["val_bpb"] == ref.final_metrics["val_bpb"]
    assert resumed.values == [ref.final_metrics["val_bpb"]]
    strip = [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows(resumed_dir)]
    assert strip == [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows(reference)]
    assert lm_processes(tmp_path) == []


def test_only_a_checkpoint_of_the_same_computation_is_taken(tmp_path: Path, corpus: Path) -> None:
    cfg = TrainConfig(corpus=str(corpus), tokenizer="word", vocab_size=300)
    trials = tmp_path / "trials"
    for number, lr, tokens in ((0, 1e-3, 4_000), (1, 1e-3, 8_000), (2, 2e-3, 12_000)):
        src = trials / str(number)
        src.mkdir(parents=True)
        write_config(src, cfg)
        (src / RESUME_FILE).write_bytes(f"checkpoint {number}".encode())
        fingerprint = TrainConfig(
            corpus=str(corpus), tokenizer="word", vocab_size=300, lr=lr
        ).resume_fingerprint()
        (src / RESUME_INDEX_FILE).write_text(
            json.dumps({"resume_fingerprint": fingerprint, "tokens": tokens}), encoding="utf-8"
        )
        (src / METRICS_FILE).write_text(
            "".join(json.dumps({"tokens": t}) + "\n" for t in range(2_000, tokens + 4_000, 2_000)),
            encoding="utf-8",
        )
    new = trials / "3"
    new.mkdir()
    # Trial 2 is another learning rate's; of the two others, the later checkpoint wins.
    assert resume_from_earlier(tmp_path, [0, 1, 2], cfg, new) == 8_000
    assert (new / RESUME_FILE).read_bytes() == b"checkpoint 1"
    assert [r["tokens"] for r in rows(new)] == [2_000, 4_000, 6_000, 8_000]
    empty = trials / "4"
    empty.mkdir()
    assert resume_from_earlier(tmp_path, [2], cfg, empty) == 0
    assert sorted(p.name for p in empty.iterdir()) == []
