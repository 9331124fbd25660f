"""Processes starting the same study at the same instant: exactly one creates it, and its
``[[enqueue]]`` trials are queued once (SQLite and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeps import storage as st
from sweeps import workers as wk
from sweeps.spec import StudySpec, read_spec
from tests.sweeps.helpers import spec_dict

PROCESSES = 4
ROUNDS = 5
ENQUEUE = [{"tokenizer": t, "vocab_size": v} for t in ("word", "bpe") for v in (300, 600)]


def _spec(name: str, corpus: Path) -> StudySpec:
    return read_spec(spec_dict(name, corpus, enqueue=ENQUEUE), check_paths=False)


def _start(
    url: str,
    name: str,
    corpus: Path,
    barrier: multiprocessing.synchronize.Barrier,
    results: multiprocessing.queues.Queue,
) -> None:
    try:
        storage = st.open_storage(url)
        spec = _spec(name, corpus)
        barrier.wait(timeout=60)  # every process is connected: go at the same instant
        _, created = wk.create_or_resume(spec, storage)
        results.put(("created" if created else "resumed", ""))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _race(url: str, tmp_path: Path) -> None:
    st.open_storage(url).engine.dispose()  # the tables exist before the race: only studies race
    ctx = multiprocessing.get_context("fork")
    for round_ in range(ROUNDS):
        name = f"race-{round_}"
        barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [
            ctx.Process(target=_start, args=(url, name, tmp_path, barrier, results))
            for _ in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        outcomes = sorted(results.get(timeout=180) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        errors = [text for kind, text in outcomes if kind == "error"]
        assert not errors, errors[0]
        storage = st.open_storage(url)
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        storage.engine.dispose()
        assert [t.state for t in trials] == [TrialState.WAITING] * len(ENQUEUE), (
            f"round {round_}: {len(trials)} trials for {len(ENQUEUE)} [[enqueue]] entries"
        )
        queued = sorted(
            (
                t.system_attrs["fixed_params"]["tokenizer"],
                t.system_attrs["fixed_params"]["vocab_size"],
            )
            for t in trials
        )
        assert queued == sorted((e["tokenizer"], e["vocab_size"]) for e in ENQUEUE)
        assert [kind for kind, _ in outcomes] == ["created"] + ["resumed"] * (PROCESSES - 1)


def test_simultaneous_starts_enqueue_once_on_sqlite(tmp_path: Path) -> None:
    _race(f"sqlite:///{tmp_path / 'race.db'}", tmp_path)


def test_simultaneous_starts_enqueue_once_on_postgres(tmp_path: Path, pg_url: str) -> None:
    _race(pg_url, tmp_path)


def test_a_resume_after_the_creator_queued_adds_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    storage = st.open_storage(url)
    spec = _spec("again", tmp_path)
    assert wk.create_or_resume(spec, storage)[1] is True
    assert wk.create_or_resume(spec, storage)[1] is False
    study = optuna.load_study(study_name="again", storage=storage)
    assert len(study.get_trials(deepcopy=False)) == len(ENQUEUE)
    assert study.user_attrs[wk.ENQUEUED_ATTR] is True


def test_marker_and_trials_commit_together(tmp_path: Path) -> None:
    """Nothing half written: a trial that cannot be stored rolls the marker back too."""
    from sweeps import optuna_compat

    storage = st.open_storage(f"sqlite:///{tmp_path / 'atomic.db'}")
    study = optuna.create_study(study_name="atomic", storage=storage)
    study_id = storage.get_study_id_from_name("atomic")
    # The one-transaction path exists in this Optuna (the public fallback is not atomic).
    assert callable(getattr(storage, "_get_prepared_new_trial", None))
    with pytest.raises(TypeError):  # a value JSON cannot hold, in the second trial
        optuna_compat.enqueue_once(storage, study_id, "queued", [{"x": 1}, {"x": object()}])
    assert study.get_trials(deepcopy=False) == [] and "queued" not in study.user_attrs
    assert optuna_compat.enqueue_once(storage, study_id, "queued", [{"x": 1}, {"x": 2}])
    assert not optuna_compat.enqueue_once(storage, study_id, "queued", [{"x": 3}])
    assert [t.system_attrs["fixed_params"] for t in study.get_trials(deepcopy=False)] == [
        {"x": 1},
        {"x": 2},
    ]
    assert study.user_attrs["queued"] is True
