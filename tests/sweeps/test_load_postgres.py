"""Load on PostgreSQL, as a new user shares a study (issue 26): ``sweeps run`` plus three
``sweeps worker`` processes on one machine, two trials at once each, 40 tiny trials (d_model 16,
one block, 4,096 tokens) with byte and byte-level BPE tokenizers and samples on.

Untrained byte-level models sample the byte 0x00, which PostgreSQL refuses in text; before the
one storage rule (``sweeps.text``) the samples insert raised and every process stopped in turn
(14 complete, 4 crashed, 2 interrupted, 1 left WAITING of 40). Here: exactly 40 finished, none
completed twice, nothing left RUNNING or WAITING, every process exits 0, and the children did
write NUL into their samples (else the test would prove nothing).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeps import records
from sweeps import storage as st
from sweeps import workers as wk
from tests.sweeps.helpers import (
    spec_dict,
    study_trials,
    sweeps_popen,
    toml_text,
    wait_for,
)
from tests.sweeps.pg import fresh_database

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning"),
]

N_TRIALS = 40
CONCURRENT = ("--max-concurrent", "2")
#: Long enough for a 2-core machine shared with other test runs; the processes end on their own.
PROCESS_TIMEOUT_S = 900


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url.render_as_string(hide_password=False)


def load_spec(corpus: Path) -> dict:
    # vocab_size first: 260 is the byte tokenizer's size (or BPE's without merges), 512 BPE's.
    # Learning rates this low keep the models near their random start, whose samples are any
    # byte at all (NUL, lone continuation bytes shown as U+FFFD, escapes): what a sweep's worst
    # corner writes. A seed per trial: one start (the fixed seed 0) may never sample NUL.
    space = {
        "lr": {"low": 1e-5, "high": 1e-3, "log": True},
        "seed": {"type": "int", "low": 0, "high": 100_000},
        "vocab_size": {"choices": [260, 512]},
        "tokenizer": {"choices": ["byte", "bpe"], "when": "vocab_size == 260"},
    }
    # 64 tokens per prompt, two prompts, two evaluations: ~10k sampled tokens in all.
    fixed = {
        "max_tokens": 4096,
        "eval_every_tokens": 2048,
        "sample_tokens": 64,
        "sample_prompts": ["<Q>How do I", "<Q>What is"],
    }
    return spec_dict(
        "load",
        corpus,
        fixed=fixed,
        space=space,
        study={"n_trials": N_TRIALS},
        limits={"collapse": False},
    )


def nul_samples(runs: Path) -> int:
    """How many of the children's metrics lines hold a NUL in their samples (JSON ``\\u0000``)."""
    return sum(
        line.count("\\u0000")
        for path in runs.glob("load/trials/*/metrics.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    )


def test_four_processes_finish_forty_trials_whatever_the_models_write(
    tmp_path: Path, corpus: Path, pg_url: str
) -> None:
    spec = tmp_path / "load.toml"
    spec.write_text(toml_text(load_spec(corpus)))
    procs = [sweeps_popen("run", str(spec), "--storage", pg_url, *CONCURRENT, cwd=tmp_path)]
    try:
        wait_for(
            lambda: study_trials(pg_url, "load") or procs[0].poll() is not None, 180, "the study"
        )
        procs += [
            sweeps_popen("worker", "load", "--storage", pg_url, *CONCURRENT, cwd=tmp_path)
            for _ in range(3)
        ]
        ends = [p.communicate(timeout=PROCESS_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, ends, strict=True):
        assert p.returncode == 0 and "stopped on an error" not in err, err[-2000:]
    trials = study_trials(pg_url, "load")
    state = wk.budget_state(trials, N_TRIALS)
    assert state.done and state.finished == N_TRIALS
    # Nothing RUNNING; nothing WAITING inside the budget. (Two processes asking the 40th trial
    # at once: the one numbered beyond the budget hands it back, WAITING and never counted.)
    left = [
        (t.number, t.state.name)
        for t in trials
        if t.state == TrialState.RUNNING
        or (t.state == TrialState.WAITING and state.holds(t.number))
    ]
    assert left == []
    finished = [t.number for t in state.in_budget if t.state.is_finished()]
    assert len(finished) == len(set(finished)) == N_TRIALS
    # No trial failed and re-queued: each of the 40 ran once, to its end.
    assert not any("retry_of" in t.user_attrs for t in trials)
    outcomes = [t.user_attrs.get("outcome") for t in trials]
    assert "crashed" not in outcomes and "interrupted" not in outcomes, outcomes
    assert {t.params.get("tokenizer", "bpe") for t in trials} == {"byte", "bpe"}
    assert nul_samples(tmp_path / "runs") > 0  # the models did write what PostgreSQL refuses
    engine = st.open_engine(pg_url)
    try:
        stored = records.read_samples(engine, "load")
    finally:
        engine.dispose()
    assert stored and not any("\x00" in s["text"] for s in stored)
    assert any("\ufffd" in s["text"] for s in stored)
