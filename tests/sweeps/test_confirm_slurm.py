"""``sweeps confirm --engine slurm`` on a real one-node Slurm cluster
(``tests/sweeps/slurm_cluster.py``): the confirmation's trials run in the tasks of a Slurm job
array, as ``sweeps run --engine slurm``'s do, through the same pipeline. Before the run pipeline,
confirm checked the engine's name, skipped the cluster and ran every trial on the local host.
Skipped with the reason where Slurm, root or PostgreSQL is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.sweeps import slurm_cluster
from tests.sweeps.confirm_source import source_spec, store_source
from tests.sweeps.helpers import CHILD_ENV, SWEEPS, study_trials


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    why = slurm_cluster.missing()
    if why:
        pytest.skip(why)
    with slurm_cluster.one_node_cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


@pytest.mark.slow
def test_confirm_on_slurm_runs_its_trials_as_slurm_jobs(
    cluster: slurm_cluster.Cluster, pg_url: str, tmp_path: Path, corpus: Path
) -> None:
    store_source(pg_url, source_spec(corpus), {8: 2.3, 16: 2.2, 32: 2.1})
    done = subprocess.run(
        [
            *SWEEPS,
            "confirm",
            "src",
            "--top",
            "2",
            "--seeds",
            "2",
            "--engine",
            "slurm",
            "--heartbeat",
            "2",
            "--grace",
            "20",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env={**os.environ, **CHILD_ENV, **cluster.env, "SWEEPS_STORAGE": pg_url},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:] + cluster.logs()
    job = re.search(r"submitted Slurm job (\d+): 1 task\(s\), each --mem \d+M", done.stderr)
    assert job, done.stderr[-2000:]
    trials = study_trials(pg_url, "src-confirm")
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # The two best configurations x the fresh seeds 1 and 2, each trained in the array's task.
    assert sorted((t.params["d_ff"], t.params["seed"]) for t in complete) == [
        (16, 1),
        (16, 2),
        (32, 1),
        (32, 2),
    ], [(t.number, t.state.name, t.user_attrs.get("reason")) for t in trials]
    assert {t.user_attrs.get("slurm_job") for t in complete} == {f"{job.group(1)}_0"}
    log = next((tmp_path / "runs" / "src-confirm" / "slurm").glob("*.out")).read_text()
    assert "sweeps: slurm task" in log and "joining study 'src-confirm'" in log, log[-2000:]
    assert "confirmation of src (val_bpb, minimize)" in done.stdout, done.stdout
