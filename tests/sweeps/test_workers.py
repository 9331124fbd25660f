"""Workers: the exact trial count, devices, a whole study, kill -9 of a worker and of the whole
run, three workers on PostgreSQL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeps import preflight, records
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.space import trial_config
from sweeps.spec import read_spec
from tests.sweeps.helpers import (
    alive,
    descendants,
    lm_processes,
    running_with_evals,
    spec_dict,
    study_trials,
    sweeps_popen,
    sweeps_run,
    toml_text,
    wait_for,
)

X = {"x": CategoricalDistribution([0, 1, 2, 3])}


def add(study: optuna.Study, state: TrialState, retry_of: list[int] | None = None) -> None:
    system = {"retry_history": retry_of} if retry_of else {}
    study.add_trial(
        create_trial(
            state=state,
            params={"x": 0},
            distributions=X,
            value=1.0 if state == TrialState.COMPLETE else None,
            system_attrs=system,
        )
    )


# --- counting ------------------------------------------------------------------------------------


def test_budget_counts_requeued_trials_once() -> None:
    study = optuna.create_study()
    add(study, TrialState.COMPLETE)  # 0
    add(study, TrialState.FAIL)  # 1: re-queued as 3
    add(study, TrialState.PRUNED)  # 2
    add(study, TrialState.WAITING, retry_of=[1])  # 3
    state = wk.budget_state(study.get_trials(), 4)
    assert [t.number for t in state.counted] == [0, 2, 3]
    assert state.finished == 2 and not state.done and state.can_ask
    state = wk.budget_state(study.get_trials(), 3)
    assert not state.done and state.can_ask  # trial 3 waits inside the budget
    state = wk.budget_state(study.get_trials(), 2)
    assert state.done and not state.can_ask  # 0 and 2 are the budget


def test_budget_waits_for_running_trials() -> None:
    study = optuna.create_study()
    add(study, TrialState.COMPLETE)
    add(study, TrialState.RUNNING)
    state = wk.budget_state(study.get_trials(), 2)
    assert (state.done, state.can_ask, state.running) == (False, False, 1)
    assert wk.budget_state(study.get_trials(), 3).can_ask


def test_a_trial_asked_beyond_the_budget_is_handed_back(tmp_path: Path) -> None:
    storage = st.open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    study = optuna.create_study(study_name="race", storage=storage)
    add(study, TrialState.COMPLETE)
    done, trial = wk.claim_trial(study, storage, 2)
    assert not done and trial is not None and trial.number == 1
    # Another worker asks at the same moment as this one: both pass the first check.
    real_ask = study.ask

    def racing_ask() -> optuna.Trial:
        real_ask()  # the other worker's trial, created first
        return real_ask()

    study.ask = racing_ask  # type: ignore[method-assign]
    storage.set_trial_state_values(trial._trial_id, TrialState.PRUNED)
    done, mine = wk.claim_trial(study, storage, 3)
    assert not done and mine is None
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {
        0: TrialState.COMPLETE,
        1: TrialState.PRUNED,
        2: TrialState.RUNNING,
        3: TrialState.WAITING,
    }
    assert wk.budget_state(study.get_trials(), 3).holds(2)


# --- a whole study (in this process) -------------------------------------------------------------


def outcome_for(params: dict[str, Any]) -> str:
    if params["batch_size"] == 4096:
        return "predicted_oom"
    if params["vocab_size"] == 6:
        return "unigram_collapse"
    return "complete"


@pytest.mark.study
def test_a_small_study_ends_with_exactly_n_trials(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Word vocabularies of 300/600 beat the unigram by ~0.2 nats/token in 4,000 tokens at this
    # learning rate; 6 ids (a word, four markers, <unk>) cannot: the default thresholds tell them
    # apart at the last evaluation of these 32-step trials (judged from step 20 on here; the
    # <unk> verdict is off: after 32 steps every word model still predicts <unk> everywhere).
    # The 6-id model ends just above its unigram (a gap under 0.05 nats): min_unigram_gap 0.05
    # calls it collapsed, as the default did before it became 0 (studies/README.md, collapse).
    data = spec_dict(
        "small",
        corpus,
        fixed={"tokenizer": "word", "lr": 3e-2},
        space={"vocab_size": {"choices": [6, 300, 600]}, "batch_size": {"choices": [8, 4096]}},
        study={"n_trials": 5},
        limits={
            "collapse": {
                "min_steps": 20,
                "max_unk_argmax": 1.0,
                "max_unk_targets": 1.0,
                "min_unigram_gap": 0.05,
            }
        },
        enqueue=[
            {"vocab_size": 6, "batch_size": 8},
            {"vocab_size": 300, "batch_size": 4096},
            {"vocab_size": 600, "batch_size": 8},
        ],
    )
    spec = read_spec(data)
    tiny = preflight.predict(
        trial_config(spec, {"vocab_size": 600, "batch_size": 8}), device="cpu"
    )[0]
    big = preflight.predict(
        trial_config(spec, {"vocab_size": 6, "batch_size": 4096}), device="cpu"
    )[0]
    data["limits"]["memory_budget"] = (tiny + big) // 2
    spec = read_spec(data)
    storage = st.open_storage(
        f"sqlite:///{tmp_path / 'db.sqlite'}", heartbeat_interval=1, grace_period=5
    )
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    events: list[tuple[str, int]] = []
    lock = threading.Lock()

    def on_event(kind: str, info: dict[str, Any]) -> None:
        with lock:
            events.append((kind, info["number"]))

    options = wk.RunOptions(n_workers=2, launcher="fork", poll_s=0.05, on_event=on_event)
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    results = wk.run_workers(spec, storage, study, tmp_path / "runs" / "small", options)
    assert [r.error for r in results] == [None, None]
    trials = study.get_trials()
    assert len(trials) == 5 and all(t.state.is_finished() for t in trials)
    assert [t.params for t in trials[:3]] == [e for e in spec.enqueue]
    for t in trials:
        assert t.user_attrs["outcome"] == outcome_for(t.params), t.user_attrs["reason"]
    assert {r.number for r in results[0].reports} & {r.number for r in results[1].reports} == set()
    assert sorted(n for kind, n in events if kind == "end") == [0, 1, 2, 3, 4]
    hosts = records.read_hosts(storage, "small")
    launched = [
        t.number
        for t in trials
        if t.user_attrs["outcome"] != "predicted_oom" and "copy_of" not in t.user_attrs
    ]  # a repeated point is copied, not run
    assert sorted(h["trial_number"] for h in hosts) == [t.number for t in trials]
    assert {e["trial_number"] for e in records.read_evals(storage, "small")} == set(launched)
    assert study.user_attrs["memory_budget_bytes"] == (tiny + big) // 2
    # Resuming a finished study runs nothing and queues nothing again.
    wk.create_or_resume(spec, storage)
    wk.run_workers(spec, storage, study, tmp_path / "runs" / "small", options)
    assert len(study.get_trials()) == 5


# --- processes: kill -9 --------------------------------------------------------------------------


def write_spec(tmp: Path, corpus: Path, name: str, n_trials: int, max_tokens: int) -> Path:
    data = spec_dict(
        name,
        corpus,
        fixed={
            "tokenizer": "word",
            "lr": 3e-2,
            "max_tokens": max_tokens,
            "eval_every_tokens": 10_000,
        },
        # A seed per trial: points that differ on purpose (a repeated point is
        # a copy of the first, never trained: runner.duplicate_of).
        space={
            "vocab_size": {"choices": [300, 600]},
            "seed": {"type": "int", "low": 0, "high": 10**9},
        },
        # max_wall_s: a bound a busy machine cannot reach, not a pace
        study={"n_trials": n_trials},
        limits={"collapse": False, "max_wall_s": 1800},
    )
    path = tmp / f"{name}.toml"
    path.write_text(toml_text(data))
    return path


def assert_exact(trials: list[optuna.trial.FrozenTrial], n: int) -> wk.BudgetState:
    state = wk.budget_state(trials, n)
    assert state.done and state.finished == n
    assert all(t.state != TrialState.RUNNING for t in trials)
    return state


@pytest.mark.study
def test_kill_9_of_a_worker_fails_its_trial_after_the_grace_period(
    tmp_path: Path, corpus: Path
) -> None:
    # Two long trials, one for each worker; the joiner dies; `sweeps run` finishes its own, then
    # fails the dead one after the grace period (the heartbeat path: the joiner was alive when
    # `sweeps run` started), re-queues it and trains it. Long enough that `sweeps run`'s own trial
    # outlasts the joiner's start on a busy machine: a small model trains on one thread, fast,
    # and a `sweeps run` done with its trial would take the joiner's too (150,000 tokens lost
    # that race beside two CPU-bound processes).
    spec = write_spec(tmp_path, corpus, "killworker", 2, 600_000)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    beat = ["--heartbeat", "1", "--grace", "3"]
    main = sweeps_popen("run", str(spec), "--storage", url, *beat, cwd=tmp_path)
    try:
        wait_for(lambda: study_trials(url, "killworker"), 60, "the study")
        # A plain subprocess per trial: this worker is up in a second (no fork server to start),
        # and its child is killed by PDEATHSIG, not by a fork server's.
        joiner = sweeps_popen(
            "worker",
            "killworker",
            "--storage",
            url,
            *beat,
            "--launcher",
            "subprocess",
            cwd=tmp_path,
        )
        # a bound, not a pace: a worker's first trial can take a minute on a busy machine
        wait_for(
            lambda: running_with_evals(url, "killworker", joiner.pid) is not None,
            900,
            "the joining worker's trial",
        )
        victim = running_with_evals(url, "killworker", joiner.pid)
        family = descendants(joiner.pid)
        assert family  # its fork server and the training child
        joiner.send_signal(signal.SIGKILL)
        joiner.wait()
        wait_for(lambda: not any(alive(p) for p in family), 10, "its children to die")
        _, err = main.communicate(timeout=1800)  # a bound: its trial, the grace, the retry
    finally:
        main.kill()
    assert main.returncode == 0, err
    trials = study_trials(url, "killworker")
    state = assert_exact(trials, 2)
    assert len(trials) == 3
    dead = next(t for t in trials if t.number == victim)
    assert dead.state == TrialState.FAIL and victim not in {t.number for t in state.counted}
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == victim)
    assert retry.state == TrialState.COMPLETE and retry.params == dead.params
    assert lm_processes(tmp_path) == []


@pytest.mark.study
def test_kill_9_of_sweeps_run_then_resume(tmp_path: Path, corpus: Path) -> None:
    """``sweeps run`` with two workers killed with SIGKILL (nothing marks its trials), then run
    again: the completed trials kept with their values, each trial left RUNNING failed at once
    ("found on restart": same host, dead pid, no grace to wait out) and re-queued, the numbering
    continued, exactly n_trials. tests/sweeps/test_resume.py kills a one-worker run to prove the
    checkpoint is continued; this one proves what a resume keeps and fails, with trials in every
    state at the kill."""
    # Long enough that a trial is still running when the first completes (the third starts
    # then) and the kill lands while it trains, even unloaded.
    spec = write_spec(tmp_path, corpus, "resume", 3, 100_000)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    args = ("run", str(spec), "--storage", url, "--workers", "2")
    first = sweeps_popen(*args, cwd=tmp_path)
    try:
        # The running trial is looked at last, just before the kill: its two trials start
        # together and end close together, and a check of "running" before "complete" could
        # see both finish in between.
        wait_for(
            lambda: (
                any(t.state == TrialState.COMPLETE for t in study_trials(url, "resume"))
                and running_with_evals(url, "resume", first.pid) is not None
            ),
            90,
            "a complete trial and a running one",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    wait_for(lambda: not lm_processes(tmp_path) or None, 10, "no orphan children")
    before = {t.number: t for t in study_trials(url, "resume")}
    complete = {n: t.values for n, t in before.items() if t.state == TrialState.COMPLETE}
    left_running = [n for n, t in before.items() if t.state == TrialState.RUNNING]
    assert complete and left_running
    again = sweeps_run(*args, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "resuming study 'resume'" in again.stderr
    after = study_trials(url, "resume")
    assert_exact(after, 3)
    for n, values in complete.items():  # no completed trial lost
        assert after[n].state == TrialState.COMPLETE and after[n].values == values
    for n in left_running:  # failed at once on restart (same host, dead pid), re-queued
        assert after[n].state == TrialState.FAIL
        assert "found on restart" in after[n].user_attrs["reason"]
    new = [t.number for t in after if t.number not in before]
    assert new and min(new) > max(before)  # numbering continues
    assert lm_processes(tmp_path) == []


# --- PostgreSQL ----------------------------------------------------------------------------------


@pytest.mark.study
def test_three_workers_on_postgres(tmp_path: Path, corpus: Path, pg_url: str) -> None:
    spec = write_spec(tmp_path, corpus, "pg", 6, 10_000)
    main = sweeps_popen("run", str(spec), "--storage", pg_url, "--workers", "2", cwd=tmp_path)
    try:
        wait_for(lambda: study_trials(pg_url, "pg"), 60, "the study")
        joined = sweeps_run("worker", "pg", "--storage", pg_url, cwd=tmp_path, timeout=120)
        _, err = main.communicate(timeout=120)
    finally:
        main.kill()
    assert main.returncode == 0 and joined.returncode == 0, (err, joined.stderr)
    trials = study_trials(pg_url, "pg")
    assert_exact(trials, 6)
    assert len(trials) == 6  # nothing failed, nothing handed back and left waiting
    # No trial ran twice: one owner row per trial, one run directory per trial number.
    engine = sa.create_engine(st.normalize_url(pg_url))
    hosts = records.read_hosts(engine, "pg")
    engine.dispose()
    assert sorted(h["trial_number"] for h in hosts) == list(range(6))
    results = sorted(
        int(p.parent.name) for p in (tmp_path / "runs" / "pg").glob("trials/*/result.json")
    )
    assert results == list(range(6))
    # Optuna's own CLI reads the same trials from the same database.
    listed = subprocess.run(
        [
            str(Path(sys.executable).parent / "optuna"),
            "trials",
            "--study-name",
            "pg",
            "--storage",
            st.normalize_url(pg_url),
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted(r["number"] for r in rows) == list(range(6))
    assert {r["number"]: r["state"] for r in rows} == {t.number: t.state.name for t in trials}
