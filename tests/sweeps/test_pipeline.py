"""The run pipeline (``sweeps.pipeline``) and the engines behind one protocol: ``sweeps run`` and
``sweeps confirm`` run the same checks, in the same order, with the same one-line errors; the
engines are the spec's names; the dry run asks the run's engine where the trials would go.
(``sweeps confirm --engine slurm`` on a real cluster: ``test_confirm_slurm.py``.)"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sweeps import engines, pipeline, plan
from sweeps.engines import slurm
from sweeps.engines.base import Engine
from sweeps.spec import read_spec
from sweeps.spec.engine import ENGINE_NAMES
from tests.sweeps.cli import assert_user_error, sweeps
from tests.sweeps.confirm_source import source_spec, store_source
from tests.sweeps.helpers import toml_text

GiB = 2**30


def test_the_engines_are_the_spec_names_and_implement_the_protocol() -> None:
    assert tuple(engines.ENGINES) == ENGINE_NAMES
    for name in ENGINE_NAMES:
        made = engines.make(name)
        assert isinstance(made, engines.ENGINES[name])
        for method in ("check", "describe", "run"):
            assert callable(getattr(made, method)), (name, method)
    assert {m for m in dir(Engine) if not m.startswith("_")} == {"check", "describe", "run"}


def test_run_and_confirm_refuse_a_corpus_that_does_not_fit_alike(
    tmp_path: Path, corpus: Path
) -> None:
    """``confirm`` used to skip the corpus check (and the host's on other engines): both now
    go through ``pipeline.prepare``, one line, nothing created."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    too_long = {"seq_len": 200_000, "eval_tokens": 200_000}
    store_source(url, source_spec(corpus, **too_long), {8: 2.3, 16: 2.2, 32: 2.1})
    spec = tmp_path / "fresh.toml"
    spec.write_text(toml_text(source_spec(corpus, "fresh", **too_long)))
    ran = sweeps("run", str(spec), "--storage", url, cwd=tmp_path)
    confirmed = sweeps("confirm", "src", "--seeds", "2", "--storage", url, cwd=tmp_path)
    assert ran.returncode == confirmed.returncode == 2, (ran.stderr, confirmed.stderr)
    line = ran.stderr.strip().splitlines()[-1]
    assert line.startswith("error: seq_len=200000 from the spec cannot run on corpus"), line
    assert_user_error(confirmed, line.removeprefix("error: "))
    assert set(optuna.get_all_study_names(url)) == {"src"}  # neither fresh nor src-confirm


def test_run_and_confirm_check_the_engine_alike(tmp_path: Path, corpus: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store_source(url, source_spec(corpus), {8: 2.3, 16: 2.2})
    spec = tmp_path / "fresh.toml"
    spec.write_text(toml_text(source_spec(corpus, "fresh")))
    for bad, says in (
        (["--engine", "nope"], "--engine must be one of local, ray, slurm, replay, got 'nope'"),
        (["--partition", "p"], "--partition is an option of the Slurm engine; add --engine slurm"),
        (["--address", "a"], "--address is the Ray cluster's address; add --engine ray"),
    ):
        for argv in (["run", str(spec)], ["confirm", "src"]):
            proc = sweeps(*argv, *bad, "--storage", url, cwd=tmp_path)
            assert_user_error(proc, says)
            assert proc.stderr.strip() == f"error: {says}"
    assert set(optuna.get_all_study_names(url)) == {"src"}


def test_the_dry_run_asks_the_runs_engine(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--engine slurm --dry-run`` shows the tasks' requests and the budget they were planned
    against (the partition's largest node), not this host's pools."""
    monkeypatch.setattr(
        slurm, "partition_nodes", lambda partition: [slurm.Node("n1", 4, 8 * GiB, 0)]
    )
    spec = read_spec(source_spec(corpus))
    engine = engines.make("slurm", engines.EngineOptions(slurm={"jobs": 3}))
    args = pipeline.RunArgs(cap=2)
    p = pipeline.dry_run(spec, "sqlite://", engine, args, name="slurm")
    rows = dict(p.rows)
    _, requests = slurm.requests_for(spec, {"jobs": 3}, 2)
    assert rows["engine"] == "slurm"
    assert rows["workers"] == (
        "3 Slurm task(s) on the default partition, each up to 2 trial(s) at once"
    )
    assert rows["slurm task"].startswith(f"--mem {requests.mem_mib}M --cpus-per-task 2")
    assert requests.budget is not None
    assert rows["memory budget"] == plan.budget_text(requests.budget, "4294967296")
    # The local engine's plan is this host's, as before: no engine row.
    local = dict(pipeline.dry_run(spec, "sqlite://", engines.make("local"), args).rows)
    assert "engine" not in local and local["workers"].startswith("up to ")


def test_a_slurm_dry_run_off_the_cluster_says_what_the_spec_says(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Slurm spec checked where Slurm is not (a laptop): the plan, not an error."""
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    spec = read_spec(source_spec(corpus))
    engine = engines.make("slurm", engines.EngineOptions(slurm={"jobs": 2}))
    rows = dict(pipeline.dry_run(spec, "sqlite://", engine, pipeline.RunArgs(), name="slurm").rows)
    assert rows["workers"].startswith("2 Slurm task(s), each up to 1 trial(s) at once (no sinfo")
    assert rows["memory budget"] == plan.budget_text(4 * GiB, 4 * GiB)
