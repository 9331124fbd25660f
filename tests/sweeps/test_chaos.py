"""Chaos on PostgreSQL: three workers on one study of 30 short trials, while training children
and whole workers are killed with SIGKILL at random (seeded) moments and dead workers replaced.

At the end the study must hold exactly ``n_trials`` counted trials, none completed twice (a
re-queued trial's chain ends at most once complete), none left RUNNING (nor WAITING inside the
budget), and no training child or fork server left alive.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeps import workers as wk
from tests.sweeps.helpers import (
    alive,
    descendants,
    lm_processes,
    spec_dict,
    study_trials,
    sweeps_popen,
    toml_text,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.study]

N_TRIALS = 30
SEED = 20261130
#: Heartbeats fast enough that a killed worker's trial is failed and re-queued within seconds.
BEAT = ("--heartbeat", "1", "--grace", "4")


def chain_roots(trials: list[optuna.trial.FrozenTrial]) -> dict[int, int]:
    """Each trial's first ancestor: a re-queued trial's ``retry_of`` chain, followed back."""
    parent = {t.number: t.user_attrs.get("retry_of") for t in trials}
    roots = {}
    for n in parent:
        root = n
        while parent.get(root) is not None:
            root = int(parent[root])
        roots[n] = root
    return roots


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def training_children(workers: list[subprocess.Popen[str]]) -> list[int]:
    """Live training children of the workers: ``python -m lm.train`` processes, or processes
    forked by a fork server (they keep the server's command line)."""
    out = []
    for w in workers:
        family = descendants(w.pid)
        servers = {p for p in family if b"sweeps.forkserver" in _cmdline(p) and _ppid(p) == w.pid}
        out += [
            p for p in family if alive(p) and (b"lm.train" in _cmdline(p) or _ppid(p) in servers)
        ]
    return out


def test_random_sigkills_leave_a_consistent_study(
    tmp_path: Path, corpus: Path, pg_url: str
) -> None:
    data = spec_dict(
        "chaos",
        corpus,
        fixed={"tokenizer": "word", "max_tokens": 16_000, "eval_every_tokens": 4_000},
        space={
            "vocab_size": {"choices": [300, 400, 500, 600]},
            "lr": {"low": 1e-3, "high": 3e-2, "log": True},
        },
        study={"n_trials": N_TRIALS},
        limits={"collapse": False, "max_retries": 50},
    )
    spec = tmp_path / "chaos.toml"
    spec.write_text(toml_text(data))
    rng = random.Random(SEED)
    workers = [sweeps_popen("run", str(spec), "--storage", pg_url, *BEAT, cwd=tmp_path)]
    everyone = list(workers)
    kills = {"child": 0, "worker": 0}
    try:
        wait_for(lambda: study_trials(pg_url, "chaos"), 90, "the study")
        for _ in range(2):
            w = sweeps_popen("worker", "chaos", "--storage", pg_url, *BEAT, cwd=tmp_path)
            workers.append(w)
            everyone.append(w)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and (kills["child"] < 8 or kills["worker"] < 2):
            time.sleep(rng.uniform(0.3, 1.5))
            live = [w for w in workers if w.poll() is None]
            if not live:
                break
            if rng.random() < 0.75 or kills["worker"] >= 2:
                victims = training_children(live)
                if victims:
                    with contextlib.suppress(ProcessLookupError):  # it may just have ended
                        os.kill(rng.choice(victims), signal.SIGKILL)
                        kills["child"] += 1
            else:
                victim = rng.choice([w for w in live if w is not workers[0]] or live)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills["worker"] += 1
                workers.remove(victim)
                fresh = sweeps_popen("worker", "chaos", "--storage", pg_url, *BEAT, cwd=tmp_path)
                workers.append(fresh)
                everyone.append(fresh)
        for w in workers:
            w.communicate(timeout=300)
    finally:
        for w in everyone:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert kills["child"] >= 3 and kills["worker"] >= 1, kills
    # A worker killed by the chaos may have left a RUNNING trial that no live worker failed
    # (it ended first): the next join fails it at once and finishes the study.
    trials = study_trials(pg_url, "chaos")
    if not wk.budget_state(trials, N_TRIALS).done:
        again = sweeps_popen("worker", "chaos", "--storage", pg_url, *BEAT, cwd=tmp_path)
        _, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        trials = study_trials(pg_url, "chaos")
    state = wk.budget_state(trials, N_TRIALS)
    assert state.done and state.finished == N_TRIALS, (state.finished, kills)
    # Nothing RUNNING; nothing WAITING inside the budget (a WAITING trial beyond it is a
    # re-queued retry of a trial a dying worker had asked beyond the budget: never counted).
    left = [
        (t.number, t.state.name)
        for t in trials
        if t.state == TrialState.RUNNING
        or (t.state == TrialState.WAITING and state.holds(t.number))
    ]
    assert left == [], (left, kills)
    complete_roots = [
        chain_roots(trials)[t.number] for t in trials if t.state == TrialState.COMPLETE
    ]
    assert len(complete_roots) == len(set(complete_roots))  # no chain completed twice
    wait_for(lambda: not lm_processes(tmp_path) or None, 15, "no orphan training child")
    assert lm_processes(tmp_path) == []
