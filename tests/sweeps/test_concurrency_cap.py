"""``--max-concurrent`` far beyond the study or the host (issue 24, item 9): 100000 on a 2-trial
study kept starting threads (271 at 40 s, still running). Workers are now capped at the trials
left, and at ``HOST_THREADS_PER_SLOT`` per slot of this host's devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sweeps import admission as local
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.spec import read_spec
from tests.shared import shared_corpus
from tests.sweeps.helpers import spec_dict

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")


def threads_started(
    tmp_path: Path, corpus: Path, n_trials: int, cap: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[str]]:
    spec = read_spec(spec_dict("cap", corpus, study={"n_trials": n_trials}))
    storage = st.open_storage(
        f"sqlite:///{tmp_path / 'db.sqlite'}", heartbeat_interval=1, grace_period=5, max_retries=0
    )
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    started: list[int] = []

    def no_threads(ctx: Any, device: Any, options: Any, n_threads: int, *args: Any) -> list:
        started.append(n_threads)
        return [wk.WorkerResult() for _ in range(n_threads)]

    monkeypatch.setattr(wk, "run_threads", no_threads)
    notes: list[str] = []
    options = wk.RunOptions(
        n_workers=cap,
        launcher="subprocess",
        on_event=lambda kind, info: notes.append(info.get("text", "")),
    )
    wk.run_workers(spec, storage, study, tmp_path / "runs", options)
    return started[0], notes


def test_no_more_workers_than_trials_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    n, _ = threads_started(tmp_path, shared_corpus(tmp_path_factory), 2, 100_000, monkeypatch)
    assert n == 2


def test_no_more_workers_than_the_host_can_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = shared_corpus(tmp_path_factory)
    spec = read_spec(spec_dict("cap", corpus))
    slots = local.concurrency(local.host_pool(spec, 100_000), None)  # as run_workers sees it
    n, notes = threads_started(tmp_path, corpus, 100_000, 100_000, monkeypatch)
    assert n == wk.HOST_THREADS_PER_SLOT * slots
    assert any("more than this host can run" in note for note in notes)
