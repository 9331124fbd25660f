"""Benchmark: how long the replay engine takes to run a study on a table (issue 36: a 100-trial
study in under 10 s).

A fabricated table (``sweeps.table``) of a 2-parameter grid (lr x d_model, ``--points`` points),
each trial a WSD-like curve of ``--evals`` evaluations, is replayed by ``sweeps.engines.replay``
through the same pipeline as ``sweeps run --engine replay`` (the study opened as the CLI opens it,
TPE and the median pruner, ``--workers`` simulated workers), into a fresh SQLite file: every
trial asked, every evaluation stored in ``sweeps_evals`` and judged, every trial told. It prints
the wall seconds of the replay alone (the study's creation excluded) and per trial.

    python tests/bench/bench_replay.py [--trials 100] [--workers 2] [--evals 9] [--points 400]

Measured on the project's 2-core machine with other work running (its load average in brackets):
100 trials in 4.4 s [5.4] and 12.9 to 13.7 s [7.0]. A profile puts most of it in Optuna's
storage: reading the trials (the sampler, the pruner, the copy check, the calibration) and
writing each user attribute of a trial's record one by one.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sweeps import pipeline  # noqa: E402
from sweeps import study as service  # noqa: E402
from sweeps import table as tb  # noqa: E402
from sweeps.engines import EngineOptions, Hooks  # noqa: E402
from sweeps.space import trial_config  # noqa: E402
from sweeps.spec import read_spec  # noqa: E402

FIXED = {
    "device": "cpu",
    "tokenizer": "byte",
    "n_layers": 1,
    "n_heads": 2,
    "d_ff": 64,
    "seq_len": 32,
    "batch_size": 8,
    "lr_schedule": "wsd",
    "eval_tokens": 2048,
}


def spec_data(corpus: Path, trials: int, points: int, evals: int) -> dict:
    lrs = [round(1e-4 * 3000 ** (i / (points // 4 - 1)), 8) for i in range(points // 4)]
    return {
        "study": {
            "name": "bench-replay",
            "sampler": "tpe",
            "seed": 0,
            "pruner": {"name": "median", "n_startup_trials": 5, "n_warmup_evals": 2},
            "n_trials": trials,
        },
        "corpus": {"dir": str(corpus)},
        "fixed": {**FIXED, "max_tokens": 4096 * evals, "eval_every_tokens": 4096},
        "space": {"lr": {"choices": lrs}, "d_model": {"choices": [16, 32, 48, 64]}},
    }


def curve(lr: float, d_model: int, evals: int) -> list[float]:
    """A loss that falls fastest near lr 3e-3 and lower for wider models."""
    floor = 2.2 + 0.1 * abs(math.log10(lr / 3e-3)) - 0.002 * d_model
    return [floor + 0.8 * math.exp(-(i + 1) / (1 + evals / 3)) for i in range(evals)]


def table(spec_dict: dict, path: Path, evals: int) -> Path:
    spec = read_spec(spec_dict, check_paths=False)
    trials = []
    space = spec_dict["space"]
    for lr in space["lr"]["choices"]:
        for d_model in space["d_model"]["choices"]:
            params = {"lr": lr, "d_model": d_model}
            cfg = trial_config(spec, params)
            values = curve(lr, d_model, evals)
            wall = 2.0 + d_model / 16
            trials.append(
                tb.TableTrial(
                    study="bench",
                    number=len(trials),
                    params=params,
                    outcome="complete",
                    reason="trained to the end",
                    state="COMPLETE",
                    seed=0,
                    values=[values[-1]],
                    config=cfg.to_dict(),
                    record={"wall_s": wall, "val_bpb": values[-1], "flops_per_token": 1e6},
                    evals=[
                        {
                            "step": (i + 1) * 16,
                            "tokens": (i + 1) * 4096,
                            "val_bpb": v,
                            "val_loss": v * 0.69,
                            "elapsed_s": wall * (i + 1) / evals,
                        }
                        for i, v in enumerate(values)
                    ],
                )
            )
    grid = {k: spec_dict[k] for k in tb.GRID_KEYS if k in spec_dict}
    return tb.write(path, {"studies": ["bench"], "grids": {"bench": grid}}, trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--evals", type=int, default=9)
    parser.add_argument("--points", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = spec_data(root / "corpus", args.trials, args.points, args.evals)
        path = table(data, root / "bench.jsonl.gz", args.evals)
        spec = read_spec(data, check_paths=False)
        url = f"sqlite:///{root / 'replay.db'}"
        run = pipeline.RunArgs(args.workers, None, root / "runs")
        _, engine = pipeline.engine_for("replay", spec, EngineOptions(table=path))
        pipeline.prepare(spec, engine, run)
        storage, study, _ = service.open_study(
            spec, url, n_trials=None, heartbeat=run.heartbeat, grace=run.grace
        )
        started = time.perf_counter()
        [result] = engine.run(pipeline.job(spec, storage, study, url, run), Hooks())
        seconds = time.perf_counter() - started
        outcomes: dict[str, int] = {}
        for report in result.reports:
            outcomes[report.outcome] = outcomes.get(report.outcome, 0) + 1
        print(
            f"replayed {len(result.reports)} trials ({args.evals} evaluations each, "
            f"{args.workers} simulated workers, TPE + median pruner) in {seconds:.2f} s "
            f"({1000 * seconds / max(1, len(result.reports)):.0f} ms a trial); outcomes "
            + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + f"; best {study.best_value:.4f}"
        )


if __name__ == "__main__":
    main()
