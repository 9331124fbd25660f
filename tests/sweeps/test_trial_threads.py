"""A trial's threads are chosen at its launch from what is measured (#34, item 8), and said:
before, every CPU trial ran on all the cores it was given, and a small model on a busy 2-core
machine trained 3.4x slower for it. A real trial through the runner on the cores a pool would
give it; the dry run's line for a space of small models and one of large ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lm import host
from lm.run_files import read_result
from sweeps import plan
from sweeps.launchers import SubprocessLauncher
from sweeps.runner import RunnerContext, WorkerDevice, run_trial
from sweeps.spec import read_spec
from tests.sweeps.helpers import environ_of, spec_dict, worker_study


@pytest.mark.study
@pytest.mark.skipif(len(host.cpu_ids()) < 2, reason="one core: one thread is all there is")
def test_a_small_trial_on_two_cores_runs_one_thread(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(host.NUM_THREADS_ENV, raising=False)
    cores = host.cpu_ids()[:2]
    # What local.MemoryPool leases a CPU trial: its cores, threads capped at their number.
    device = WorkerDevice("cpu", {host.NUM_THREADS_ENV: "2"}, cores, "cpu 0-1")
    spec = read_spec(
        spec_dict(
            "threads", corpus, space={"lr": {"choices": [0.003]}}, limits={"collapse": False}
        ),
        source=tmp_path / "spec.toml",
    )
    storage, study = worker_study(spec, tmp_path / "sweeps.db")
    seen: dict[str, str] = {}
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp_path / "runs",
        launcher=SubprocessLauncher(),
        budget_bytes=4 * 2**30,
        poll_s=0.05,
        term_grace_s=5.0,
    )

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "launch":
            seen.update(environ_of(int(data["pid"])))

    ctx.on_event = on_event
    report = run_trial(ctx, device, study.ask())
    assert report.outcome == "complete", report.reason
    assert seen[host.NUM_THREADS_ENV] == "1"
    trial = study.trials[0]
    assert trial.user_attrs["threads"] == 1
    assert "GFLOP is under" in trial.user_attrs["threads_reason"]
    assert read_result(Path(trial.user_attrs["run_dir"])).threads == 1


def _spec(tmp_path: Path, corpus: Path, **fixed: Any) -> Any:
    return read_spec(
        spec_dict("plan", corpus, fixed=fixed, space={"lr": {"choices": [0.001, 0.003]}}),
        source=tmp_path / "spec.toml",
    )


def test_the_dry_run_says_the_threads(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(host.NUM_THREADS_ENV, raising=False)
    small = dict(plan.threads_rows(_spec(tmp_path, corpus), (0, 1)))["threads per trial"]
    assert small.startswith("1 for every point of the grid (micro-steps of "), small
    large = _spec(tmp_path, corpus, d_model=256, d_ff=1024, seq_len=128, batch_size=16)
    idle = dict(plan.threads_rows(large, (0, 1), busy=0.0))["threads per trial"]
    assert idle.startswith("2 of 2 points of the grid would use up to 2"), idle
    assert "now 0.0 of them are busy, so those would get 2" in idle
    busy = dict(plan.threads_rows(large, (0, 1), busy=1.8))["threads per trial"]
    assert "now 1.8 of them are busy, so those would get 1" in busy
    monkeypatch.setenv(host.NUM_THREADS_ENV, "1")
    assert plan.threads_rows(large, (0, 1)) == [("threads per trial", "1 (SWEEPS_NUM_THREADS=1)")]
    rows = dict(plan.dry_run(large, "sqlite://", 1, None).rows)
    assert rows["threads per trial"] == "1 (SWEEPS_NUM_THREADS=1)"
