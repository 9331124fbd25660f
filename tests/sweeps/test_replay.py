"""The replay engine (``sweeps.engines.replay``): a study run on a table of recorded trials, judged
as a real run judges them, on a simulated clock. The tables here are fabricated (``made``):
curves whose pruning and order are known; a table exported from real trials is
``test_table.py``'s."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

from lm.errors import SweepsError
from sweeps import record as rc
from sweeps import records
from sweeps import table as tb
from sweeps.space import trial_config
from sweeps.spec import read_spec
from tests.sweeps.cli import assert_user_error, sweeps_here
from tests.sweeps.helpers import spec_dict, toml_text

LRS = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]


def spec_data(corpus: Path, name: str, **study: Any) -> dict[str, Any]:
    data = spec_dict(
        name,
        corpus,
        space={"lr": {"choices": LRS}},
        study={"sampler": "grid", "n_trials": len(LRS), **study},
        limits={"collapse": {"enabled": False}, "divergence": {"enabled": False}},
    )
    return data


def made(
    corpus: Path,
    data: dict[str, Any],
    curves: dict[float, list[float]],
    walls: dict[float, float] | None = None,
    reads: dict[float, dict[int, float]] | None = None,
) -> list[tb.TableTrial]:
    """A table of ``curves`` (val_bpb at each evaluation, one every ``eval_every_tokens``) for
    the points ``lr`` of ``data``'s space, each ``walls[lr]`` seconds long (default 10), with a
    cooldown read of val_bpb ``reads[lr][tokens]`` at those tokens, written just after the
    evaluation there (as a child writes them)."""
    spec = read_spec(data)
    out = []
    for number, (lr, curve) in enumerate(curves.items()):
        cfg = trial_config(spec, {"lr": lr})
        wall = (walls or {}).get(lr, 10.0)
        every = cfg.eval_every_tokens or 2000
        evals = [
            {
                "step": (i + 1) * every // cfg.tokens_per_step,
                "tokens": (i + 1) * every,
                "val_bpb": v,
                "val_loss": v * 0.7,
                "elapsed_s": wall * (i + 1) / len(curve),
            }
            for i, v in enumerate(curve)
        ]
        at = {e["tokens"]: e["elapsed_s"] for e in evals}
        read_rows = [
            {"read": "cooldown", "tokens": t, "val_bpb": v, "elapsed_s": at[t] + 0.01}
            for t, v in ((reads or {}).get(lr) or {}).items()
        ]
        out.append(
            tb.TableTrial(
                study="made",
                number=number,
                params={"lr": lr},
                outcome="complete",
                reason="trained to the end",
                state="COMPLETE",
                seed=0,
                values=[curve[-1]],
                config=cfg.to_dict(),
                record={"wall_s": wall, "val_bpb": curve[-1], "val_loss": curve[-1] * 0.7},
                evals=evals,
                reads=read_rows,
            )
        )
    return out


def write_table(tmp_path: Path, data: dict[str, Any], trials: list[tb.TableTrial]) -> Path:
    grid = {k: data[k] for k in tb.GRID_KEYS if k in data}
    return tb.write(
        tmp_path / "made.jsonl.gz", {"studies": ["made"], "grids": {"made": grid}}, trials
    )


def replay(tmp_path: Path, data: dict[str, Any], table: Path, *extra: str) -> tuple[Any, str]:
    spec = tmp_path / f"{data['study']['name']}.toml"
    spec.write_text(toml_text(data))
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    proc = sweeps_here(
        "run", str(spec), "--engine", "replay", "--table", str(table), "--storage", url,
        "--runs-dir", str(tmp_path / "runs"), *extra,
    )  # fmt: skip
    return proc, url


def test_a_point_the_table_does_not_hold_is_one_line_naming_the_nearest(
    tmp_path: Path, corpus: Path
) -> None:
    data = spec_data(corpus, "missing")
    held = {lr: [3.0, 2.9] for lr in LRS if lr != 3e-2}
    table = write_table(tmp_path, data, made(corpus, data, held))
    proc, url = replay(tmp_path, data, table, "--max-concurrent", "2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after "created study ..."
    assert line.startswith("error: the point lr=0.03 is not in --table "), line
    assert "; the nearest it holds is lr=0.01: replay a spec whose space" in line
    trials = optuna.load_study(study_name="missing", storage=url).get_trials()
    [crashed] = [t for t in trials if rc.TrialRecord.from_trial(t).outcome == "crashed"]
    assert crashed.params == {"lr": 3e-2}  # told, not left running
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]


def test_a_table_of_another_grid_is_refused(tmp_path: Path, corpus: Path) -> None:
    data = spec_data(corpus, "other")
    table = write_table(tmp_path, data, made(corpus, data, {1e-3: [3.0]}))
    data["fixed"]["d_model"] = 32
    proc, _ = replay(tmp_path, data, table)
    assert_user_error(proc, "[fixed] d_model = 32", "trained with 16")
    spec = tmp_path / "other.toml"
    assert sweeps_here("run", str(spec), "--table", str(table)).stderr.strip() == (
        "error: --table is the replay engine's table; add --engine replay"
    )


def test_a_pruner_stops_the_replayed_trials_where_it_would_on_their_curves(
    tmp_path: Path, corpus: Path
) -> None:
    """The median pruner on fabricated curves, trials told in number order (one worker): the
    replay stops the same trials at the same evaluations as the pruner fed those curves by
    hand, and stores only the evaluations a real run would have reached."""
    pruner = {"name": "median", "n_startup_trials": 2, "n_warmup_evals": 1}
    data = spec_data(corpus, "pruned", pruner=pruner, sampler="random")
    data["enqueue"] = [{"lr": lr} for lr in LRS]
    curves = {
        1e-3: [3.0, 2.8, 2.7, 2.6],
        3e-3: [3.0, 2.7, 2.6, 2.5],
        1e-2: [3.0, 2.9, 2.8, 2.7],  # worse than the median from its second evaluation
        3e-2: [2.9, 2.6, 2.5, 2.4],
        1e-1: [3.1, 3.0, 3.0, 3.0],
        3e-1: [3.0, 2.75, 2.55, 2.45],
    }
    data["fixed"]["max_tokens"] = 8000
    table = write_table(tmp_path, data, made(corpus, data, curves))
    proc, url = replay(tmp_path, data, table)
    assert proc.returncode == 0, proc.stderr
    expected = {}  # the pruner fed by hand, in the same order
    by_hand = optuna.create_study(pruner=optuna.pruners.MedianPruner(2, n_warmup_steps=1))
    for lr, curve in curves.items():
        trial = by_hand.ask()
        for i, value in enumerate(curve):
            trial.report(value, i)
            if trial.should_prune():
                expected[lr] = i
                by_hand.tell(trial, state=optuna.trial.TrialState.PRUNED)
                break
        else:
            by_hand.tell(trial, curve[-1])
    assert expected, "the curves must make the pruner stop something"
    study = optuna.load_study(study_name="pruned", storage=url)
    got = {}
    evals = records.read_evals(sa.create_engine(url), "pruned")
    for t in study.get_trials():
        lr = t.params["lr"]
        stored = [e for e in evals if e["trial_number"] == t.number]
        rec = rc.TrialRecord.from_trial(t)
        assert rec.replayed == str(table)
        if t.state == optuna.trial.TrialState.PRUNED:
            got[lr] = max(t.intermediate_values)
            assert rec.outcome == "pruned" and len(stored) == got[lr] + 1
        else:
            assert t.values == [curves[lr][-1]] and len(stored) == len(curves[lr])
    assert got == expected


def test_the_simulated_clock_orders_the_tells_with_two_workers(
    tmp_path: Path, corpus: Path
) -> None:
    """Two workers: trials 0 (10 s) and 1 (2 s) start at 0; 1 ends at 2 s and its worker takes
    trial 2 (1 s, ending at 3 s), so Optuna is told 1, 2, then 0, and the sampler of trial 3
    (asked at 3 s) has seen 1 and 2 but not 0."""
    data = spec_data(corpus, "clock", sampler="random", n_trials=4)
    order = [1e-3, 3e-3, 1e-2, 3e-2]
    data["enqueue"] = [{"lr": lr} for lr in order]
    walls = {1e-3: 10.0, 3e-3: 2.0, 1e-2: 1.0, 3e-2: 4.0}
    curves = {lr: [3.0, 2.5 + i / 10] for i, lr in enumerate(order)}
    table = write_table(tmp_path, data, made(corpus, data, curves, walls))
    proc, url = replay(tmp_path, data, table, "--max-concurrent", "2")
    assert proc.returncode == 0, proc.stderr
    trials = optuna.load_study(study_name="clock", storage=url).get_trials()
    told = [t.number for t in sorted(trials, key=lambda t: t.datetime_complete)]
    assert told == [1, 2, 3, 0]  # 3 starts at 3 s and ends at 7 s, before 0 at 10 s
    walls_of = {t.number: rc.TrialRecord.from_trial(t).wall_s for t in trials}
    assert walls_of == pytest.approx({0: 10.0, 1: 2.0, 2: 1.0, 3: 4.0})
    # the same replay with one worker tells them in number order
    again = {**data, "study": {**data["study"], "name": "clock1"}}
    proc, url = replay(tmp_path, again, table)
    assert proc.returncode == 0, proc.stderr
    trials = optuna.load_study(study_name="clock1", storage=url).get_trials()
    assert [t.number for t in sorted(trials, key=lambda t: t.datetime_complete)] == [0, 1, 2, 3]


def test_halving_reads_its_rungs_from_the_tables_cooldown_reads(
    tmp_path: Path, corpus: Path
) -> None:
    """``read = "cooldown"``: the rung is judged on the read, not on the evaluation there. Trial 1
    evaluates best at the rung but its read is the worst of the two ranked: it is pruned at the
    read (after its evaluation there, as a child writes them); trial 2's read is the best: it
    goes on."""
    pruner = {"name": "successive_halving", "min_tokens": 2048, "min_trials": 1, "read": "cooldown"}
    data = spec_data(corpus, "halving", pruner=pruner, sampler="random", n_trials=3)
    data["fixed"].update(lr_schedule="wsd", max_tokens=6144, eval_every_tokens=2048)
    order = [1e-3, 3e-3, 1e-2]
    data["enqueue"] = [{"lr": lr} for lr in order]
    curves = {1e-3: [2.6, 2.5, 2.4], 3e-3: [2.3, 2.2, 2.1], 1e-2: [2.7, 2.5, 2.3]}
    reads = {1e-3: {2048: 2.5}, 3e-3: {2048: 2.9}, 1e-2: {2048: 2.4}}
    table = write_table(tmp_path, data, made(corpus, data, curves, reads=reads))
    proc, url = replay(tmp_path, data, table)
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(study_name="halving", storage=url)
    ended = {t.params["lr"]: rc.TrialRecord.from_trial(t) for t in study.get_trials()}
    assert [ended[lr].outcome for lr in order] == ["complete", "pruned", "complete"]
    assert ended[3e-3].rungs == {"2048": [2.9]} and "2.9" in (ended[3e-3].reason or "")
    evals = records.read_evals(sa.create_engine(url), "halving")
    stored = [sum(e["trial_number"] == n for e in evals) for n in range(3)]
    assert stored == [3, 1, 3]  # trial 1 stopped at its read, after its first evaluation
    # no reads in the table: the spec's cooldown rungs cannot be read, said before it starts
    bare = write_table(tmp_path, data, made(corpus, data, curves))
    again = {**data, "study": {**data["study"], "name": "bare"}}
    proc, _ = replay(tmp_path, again, bare)
    assert_user_error(proc, 'pruner.read = "cooldown"', "holds no cooldown reads")


def test_a_file_that_is_no_table_of_this_version_is_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_text("not gzip")
    with pytest.raises(SweepsError, match=r"^--table .*plain.jsonl.gz: cannot read it"):
        tb.read(plain)
    old = tb.write(tmp_path / "old.jsonl.gz", {"studies": []}, [])
    lines = gzip.decompress(old.read_bytes()).decode().splitlines()
    header = {**json.loads(lines[0]), "version": tb.VERSION + 1}
    old.write_bytes(gzip.compress((json.dumps(header) + "\n").encode()))
    with pytest.raises(SweepsError, match=f"format version {tb.VERSION + 1}, this sweeps reads"):
        tb.read(old)
    assert tb.read(tb.write(tmp_path / "empty.jsonl.gz", {"studies": []}, [])).trials == []
