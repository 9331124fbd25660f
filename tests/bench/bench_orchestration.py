"""Benchmark: what orchestration costs, per storage and per way of starting a trial child.

For each storage (SQLite; PostgreSQL when the local server answers) and each launcher (a plain
``python -m lm.train`` subprocess per trial; a preloaded fork server: torch imported once, no CUDA
initialized, one forked child per trial, still its own process, session and memory limit) it
runs the same sweep of 10 short trials with one worker and prints, side by side:

- overhead = (sweep wall - sum of the children's time inside their training loops) / sweep wall.
  The sweep wall runs from ``run_workers`` being called (launcher start included) to its return;
  a child's loop time is ``train_s`` (tokens / the child's own tokens/s: optimizer steps only,
  not its one evaluation), so evaluation, start-up, database writes and polling are overhead.
- launcher start: the fork server's one-time imports (included in the sweep wall); ~0 for
  subprocess. child wall-train: median per trial of (launch -> end) - time in the loop.
- cold start per trial: launch -> first training step (plus the first evaluation, tiny here:
  512 tokens, 4 sampled). The child writes no timestamp of its first step, so the runner takes
  the mtime of ``metrics.jsonl`` when its first row appears minus the child's own loop time up
  to that row (``cold_start_s``). Median and max. ``setup`` is launch -> ``tokenizer.json``
  written (imports done, token cache mapped; model not yet built, AdamW's lazy imports not yet
  paid): ``setup_s``.

    .venv/bin/python tests/bench/bench_orchestration.py [--trials 10] [--tokens 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import optuna

from lm.corpus import prepare_synthetic
from lm.tokens import load_tokens
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.launchers import make_launcher
from sweeps.spec import StudySpec, read_spec

# Run as a script, the repository root is not on sys.path; the PostgreSQL helper lives in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.sweeps.pg import bench_storages


def spec(name: str, corpus: Path, trials: int, tokens: int) -> StudySpec:
    return read_spec(
        {
            "study": {
                "name": name,
                "sampler": "random",
                "seed": 0,
                "pruner": "none",
                "n_trials": trials,
            },
            "corpus": {"dir": str(corpus)},
            "fixed": {
                "device": "cpu",
                "tokenizer": "word",
                "d_model": 16,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 32,
                "seq_len": 16,
                "batch_size": 8,
                "lr": 3e-2,
                "max_tokens": tokens,
                "warmup_tokens": 500,
                "eval_every_tokens": tokens,
                "eval_tokens": 512,
                "sample_tokens": 4,
            },
            "space": {"vocab_size": {"choices": [300, 600]}},
            "limits": {"memory_budget": "4GiB", "collapse": False},
        }
    )


def sweep(
    url: str, launcher: str, corpus: Path, work: Path, trials: int, tokens: int
) -> dict[str, float]:
    name = f"bench-{launcher}-{uuid.uuid4().hex[:6]}"
    s = spec(name, corpus, trials, tokens)
    storage = st.open_storage(url, heartbeat_interval=10, grace_period=60)
    wk.create_or_resume(s, storage)
    study = wk.load_for_workers(s, storage)
    options = wk.RunOptions(n_workers=1, launcher=launcher, poll_s=0.05)
    started = time.perf_counter()
    trial_launcher = make_launcher(launcher)  # the fork server's imports happen here
    start_s = time.perf_counter() - started
    try:
        results = wk.run_workers(s, storage, study, work / name, options, launcher=trial_launcher)
    finally:
        trial_launcher.close()
    wall = time.perf_counter() - started
    assert not any(r.error for r in results), [r.error for r in results]
    done = study.get_trials()
    outcomes = [t.user_attrs.get("outcome") for t in done]
    assert outcomes == ["complete"] * trials, [t.user_attrs.get("reason") for t in done]
    train = sum(t.user_attrs["train_s"] for t in done)
    cold = [t.user_attrs["cold_start_s"] for t in done]
    setup = [t.user_attrs["setup_s"] for t in done]
    per_trial = [t.user_attrs["wall_s"] - t.user_attrs["train_s"] for t in done]
    storage.engine.dispose()
    return {
        "wall": wall,
        "start": start_s,
        "train": train,
        "overhead": (wall - train) / wall,
        "cold_median": statistics.median(cold),
        "cold_max": max(cold),
        "setup": statistics.median(setup),
        "per_trial": statistics.median(per_trial),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=20_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("SWEEPS_NUM_THREADS", "1")  # tiny models: one thread each
    with tempfile.TemporaryDirectory(prefix="sweeps-bench-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        prepare_synthetic(corpus, size_bytes=300_000, seed=0)
        for vocab in (300, 600):  # token caches built once, outside the timings
            load_tokens(corpus, "word", vocab)
        storages = bench_storages(f"sqlite:///{work / 'bench.db'}")
        print(
            f"{args.trials} trials of {args.tokens:,} tokens each (d_model 16, one layer, "
            f"one evaluation), one worker, {os.cpu_count()} cores"
        )
        print(
            f"{'storage':<11} {'launcher':<11} {'sweep wall':>10} {'launcher start':>14} "
            f"{'in loops':>9} {'overhead':>9} {'cold start median / max':>24} "
            f"{'setup':>7} {'child wall-train':>17}"
        )
        try:
            for label, url, _ in storages:
                for launcher in ("subprocess", "fork"):
                    r = sweep(url, launcher, corpus, work, args.trials, args.tokens)
                    print(
                        f"{label:<11} {launcher:<11} {r['wall']:>9.1f}s {r['start']:>13.2f}s "
                        f"{r['train']:>8.1f}s {r['overhead']:>8.1%} "
                        f"{r['cold_median']:>14.3f}s / {r['cold_max']:.3f}s "
                        f"{r['setup']:>6.3f}s {r['per_trial']:>16.3f}s"
                    )
        finally:
            for _, _, drop in storages:
                if drop is not None:
                    drop()


if __name__ == "__main__":
    main()
