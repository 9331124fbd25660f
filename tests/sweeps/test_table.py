"""The tabulated benchmark (``sweeps.table``): a small grid study run for real, exported by
``sweeps table export``, then replayed from the table (``--engine replay``): the same values."""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeps import record as rc
from sweeps import table as tb
from tests.sweeps.cli import sweeps_here
from tests.sweeps.helpers import sweeps_run, toml_text

pytestmark = pytest.mark.study


#: The shipped small grid: two learning rates x two seeds, WSD with a cooldown read at the
#: middle evaluation, the verdicts off (every trial to its end), as the shipped table's grid.
SMALL = Path(__file__).resolve().parents[2] / "studies" / "table_grid_small.toml"


def grid_spec(corpus: Path) -> dict:
    """The shipped small grid on the tests' synthetic corpus."""
    data = tomllib.loads(SMALL.read_text())
    data["corpus"] = {"dir": str(corpus)}
    return data


def test_a_study_replayed_from_its_table_gets_the_recorded_values(
    tmp_path: Path, corpus: Path
) -> None:
    (tmp_path / "grid.toml").write_text(toml_text(grid_spec(corpus)))
    real = f"sqlite:///{tmp_path / 'real.db'}"
    ran = sweeps_run("run", "grid.toml", "--storage", real, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = tmp_path / "grid.jsonl.gz"
    exported = sweeps_here(
        "table", "export", "table_grid_small", "--storage", real, "--out", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    assert f"wrote {out}: 4 trials of table_grid_small" in " ".join(
        exported.stderr.split()
    )  # rich wraps

    # the file: a versioned header with the grid, then one line per trial, stdlib-readable
    with gzip.open(out, "rt") as fh:
        header, *lines = [json.loads(line) for line in fh]
    assert (header["format"], header["version"], header["trials"]) == (tb.FORMAT, tb.VERSION, 4)
    assert header["grids"]["table_grid_small"]["space"]["lr"] == [1e-3, 3e-2]
    recorded = optuna.load_study(study_name="table_grid_small", storage=real).get_trials()
    for line in lines:
        [t] = [t for t in recorded if t.number == line["number"]]
        assert line["params"] == t.params and line["seed"] == t.params["seed"]
        assert line["values"] == t.values and line["outcome"] == "complete"
        assert [e["tokens"] for e in line["evals"]] == [2048, 4096]
        assert [(r["read"], r["tokens"]) for r in line["reads"]] == [("cooldown", 2048)]
        assert line["record"]["wall_s"] == rc.TrialRecord.from_trial(t).wall_s > 0
        assert line["record"]["flops"] > 0 and line["record"]["peak_mem_bytes"] > 0
        assert all(e["elapsed_s"] > 0 for e in line["evals"])

    # replayed: the same points, the same values, the same best, marked replayed
    again = f"sqlite:///{tmp_path / 'replay.db'}"
    replayed = sweeps_here(
        "run", str(tmp_path / "grid.toml"), "--engine", "replay", "--table", str(out),
        "--storage", again, "--runs-dir", str(tmp_path / "replay-runs"),
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    study = optuna.load_study(study_name="table_grid_small", storage=again)
    by_point = {tuple(sorted(t.params.items())): t for t in recorded}
    assert len(study.trials) == 4
    for t in study.trials:
        source = by_point[tuple(sorted(t.params.items()))]
        assert t.state == TrialState.COMPLETE and t.values == source.values
        rec, old = rc.TrialRecord.from_trial(t), rc.TrialRecord.from_trial(source)
        assert rec.replayed == str(out) and rec.outcome == "complete"
        assert rec.wall_s == pytest.approx(old.wall_s)
        assert (rec.flops, rec.peak_mem_bytes) == (old.flops, old.peak_mem_bytes)
        assert t.intermediate_values == source.intermediate_values
    best = optuna.load_study(study_name="table_grid_small", storage=real).best_value
    assert study.best_value == best
    # a replay never runs into the study that trained: the two would mix
    mixed = sweeps_here(
        "run", str(tmp_path / "grid.toml"), "--engine", "replay", "--table", str(out),
        "--storage", real,
    )  # fmt: skip
    assert mixed.returncode == 2, mixed.stderr
    assert "holds trials that were trained" in " ".join(mixed.stderr.split())
