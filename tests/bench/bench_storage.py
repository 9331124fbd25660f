"""Benchmark: how many worker processes one study's database holds, SQLite against PostgreSQL.

For each storage (SQLite with WAL and a 60 s busy timeout; PostgreSQL when the local server
answers) and 1, 2, 4 and 8 worker processes it runs one study of ``--trials`` tiny trials and
prints, side by side:

- trials/min: the study's trials over the wall time from the moment every process is ready
  (storage open, study loaded) to the last one's end;
- db errors: exceptions the database raised to a worker (``database is locked``, a
  serialization failure, a deadlock, a dropped connection). The bench retries such an
  operation up to 3 times (``retries``); a real worker would stop on it, so any non-zero count
  is a study that a run of ``sweeps`` would have lost a worker in;
- stopped: worker processes that gave up (an operation still failing after its retries);
- deadlocks: PostgreSQL's own count for the study's database (``pg_stat_database``, over the
  run). Its ``xact_rollback`` is not shown: it counts the pool's harmless rollback of every
  read-only checkout too. SQLite keeps no such count (its busy handler waits silently for the
  write lock, which shows in the latency);
- write p50 / p95: the latency of one evaluation's writes (its row, its samples, the reported
  value), in milliseconds: where a database starts to queue its writers.

The trials are the orchestrator's own storage traffic with the training left out, so the
figures are the database's limit, not the CPU's: each process runs the worker's loop
(``fail_stale_trials``, ``claim_trial``: ask, host row, heartbeat), then per trial a heartbeat
thread and ``--evals`` evaluations (a sleep of ``--train-s / evals`` standing for training, the
evaluation's row with its extras, two 64-character samples, ``trial.report``), and
``runner.finish`` (the ~35 user attributes in one transaction, the constraint, ``tell``, the
study's calibration attribute).

    .venv/bin/python tests/bench/bench_storage.py [--trials 64] [--evals 4] [--train-s 0.4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa

# Run as a script, the repository root is not on sys.path; the PostgreSQL helper lives in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lm import outcomes
from sweeps import liveness, records, runner
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.record import TrialRecord
from sweeps.spec import StudySpec, read_spec
from tests.sweeps.pg import bench_storages

WORKERS = (1, 2, 4, 8)
RETRIES = 3
SAMPLE = "<Q>How do I" + " keep a toddler asleep" * 3


def spec(name: str, trials: int) -> StudySpec:
    return read_spec(
        {
            "study": {
                "name": name,
                "sampler": "random",
                "seed": 0,
                "pruner": "none",
                "n_trials": trials,
            },
            "corpus": {"dir": "/nonexistent-corpus"},  # never read: no child is launched
            "fixed": {
                "device": "cpu",
                "tokenizer": "byte",
                "vocab_size": 260,
                "d_model": 16,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 32,
                "seq_len": 16,
                "batch_size": 8,
                "max_tokens": 4096,
            },
            "space": {"lr": {"low": 1e-3, "high": 3e-2, "log": True}},
            "limits": {"memory_budget": "4GiB", "collapse": False},
        },
        check_paths=False,
    )


class Counted:
    """Database operations of one process, each retried after a database error, counted."""

    def __init__(self) -> None:
        self.errors = 0
        self.retries = 0
        self.write_ms: list[float] = []

    def __call__(self, op: Any, *args: Any, **kwargs: Any) -> Any:
        for attempt in range(RETRIES + 1):
            try:
                return op(*args, **kwargs)
            except sa.exc.SQLAlchemyError:
                self.errors += 1
                if attempt == RETRIES:
                    raise
                self.retries += 1
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")


def fake_trial(
    ctx: runner.RunnerContext, trial: optuna.Trial, db: Counted, evals: int, train_s: float
) -> None:
    """A trial's storage traffic, its training replaced by a sleep."""
    name, number, tid = ctx.spec.name, trial.number, trial._trial_id
    lr = trial.suggest_float("lr", 1e-3, 3e-2, log=True)
    with liveness.heartbeat(ctx.storage, tid):
        for step in range(1, evals + 1):
            time.sleep(train_s / evals)
            metrics = {
                "step": step,
                "tokens": step * 1024,
                "val_loss": 3.0 / step,
                "val_bpb": 4.0 / step,
                "unigram_gap": 0.1,
                "tokens_per_s": 1e4,
                "peak_mem_bytes": 2**27,
                "elapsed_s": step * 0.1,
                "kl_mean_to_unigram": 0.2,
                "top20_overlap": 0.5,
                "train_loss": 3.1,
            }
            started = time.perf_counter()
            db(records.record_eval, ctx.storage, name, number, tid, metrics)
            db(
                records.record_samples,
                ctx.storage,
                name,
                number,
                tid,
                {"<Q>How do I": SAMPLE, "<Q>What is": SAMPLE},
                tokens=step * 1024,
                step=step,
            )
            db(trial.report, 4.0 / step, step - 1)
            db.write_ms.append((time.perf_counter() - started) * 1000)
    attrs = {f"note_{i}": i * lr for i in range(30)}
    attrs.update(
        host="bench",
        pid=os.getpid(),
        started_at=time.time(),
        run_dir="/tmp/x",
        config={"lr": lr, "d_model": 16},
    )
    rec = TrialRecord.from_attrs(attrs)
    db(runner.finish, ctx, trial, outcomes.COMPLETE, "done", rec, [4.0 / evals])


def worker(
    url: str, name: str, trials: int, evals: int, train_s: float, ready: Any, out: Any
) -> None:
    """One worker process: the worker's loop with fake trials; its counts onto ``out``."""
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = Counted()
    done, error = 0, None
    try:
        storage = st.open_storage(url, heartbeat_interval=10, grace_period=60)
        the_spec = spec(name, trials)
        study = wk.load_for_workers(the_spec, storage, seed_offset=os.getpid())
        ctx = runner.RunnerContext(
            spec=the_spec,
            study=study,
            storage=storage,
            study_dir=Path("/nonexistent"),
            launcher=None,
        )
    finally:
        ready.wait(timeout=600)  # the others start together, whatever happened here
    try:
        while True:
            db(liveness.fail_stale_trials, study)
            finished, trial = db(wk.claim_trial, study, storage, trials)
            if finished:
                break
            if trial is None:
                time.sleep(0.05)
                continue
            fake_trial(ctx, trial, db, evals, train_s)
            done += 1
        storage.engine.dispose()
    except Exception as exc:  # a worker that would have stopped: reported, not raised
        error = st.describe_error(exc)
    out.put(
        {
            "done": done,
            "errors": db.errors,
            "retries": db.retries,
            "write_ms": db.write_ms,
            "error": error,
        }
    )


def pg_stats(url: str) -> dict[str, int]:
    engine = sa.create_engine(st.normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            ).one()
    finally:
        engine.dispose()
    return {"deadlocks": int(row[0])}


def one_run(url: str, n_workers: int, trials: int, evals: int, train_s: float) -> dict[str, Any]:
    name = f"bench-{n_workers}-{uuid.uuid4().hex[:6]}"
    storage = st.open_storage(url)
    wk.create_or_resume(spec(name, trials), storage)
    storage.engine.dispose()
    pg = url.startswith("postgresql")
    before = pg_stats(url) if pg else None
    mp = multiprocessing.get_context("spawn")
    ready, out = mp.Barrier(n_workers + 1), mp.Queue()
    procs = [
        mp.Process(target=worker, args=(url, name, trials, evals, train_s, ready, out))
        for _ in range(n_workers)
    ]
    for p in procs:
        p.start()
    ready.wait(timeout=600)  # every process has its storage open and the study loaded
    started = time.perf_counter()
    results = [out.get(timeout=1800) for _ in procs]
    wall = time.perf_counter() - started
    for p in procs:
        p.join()
    after = pg_stats(url) if pg else None
    check = st.open_storage(url)
    state = wk.budget_state(optuna.load_study(study_name=name, storage=check).get_trials(), trials)
    check.engine.dispose()
    ms = sorted(m for r in results for m in r["write_ms"])
    return {
        "per_min": state.finished / wall * 60,
        "finished": state.finished,
        "wall": wall,
        "errors": sum(r["errors"] for r in results),
        "retries": sum(r["retries"] for r in results),
        "stopped": sum(r["error"] is not None for r in results),
        "first_error": next((r["error"] for r in results if r["error"]), None),
        "deadlocks": None if before is None else after["deadlocks"] - before["deadlocks"],
        "p50": statistics.median(ms) if ms else float("nan"),
        "p95": ms[int(0.95 * (len(ms) - 1))] if ms else float("nan"),
    }


def row(label: str, n: int, r: dict[str, Any]) -> str:
    deadlocks = "-" if r["deadlocks"] is None else str(r["deadlocks"])
    done = f"{r['finished']} in {r['wall']:.1f}s"
    line = (
        f"{label:<11} {n:>7} {r['per_min']:>11.0f} {done:>14} {r['errors']:>9} "
        f"{r['retries']:>7} {r['stopped']:>7} {deadlocks:>9} {r['p50']:>9.1f} "
        f"{r['p95']:>9.1f}"
    )
    return line + (f"  first error: {r['first_error']}" if r["first_error"] else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--evals", type=int, default=4)
    parser.add_argument("--train-s", type=float, default=0.4)
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKERS))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="sweeps-bench-") as tmp:
        storages = bench_storages(f"sqlite:///{Path(tmp) / 'bench.db'}")
        print(
            f"{args.trials} trials per run, {args.evals} evaluations each, "
            f"{args.train_s:g} s of simulated training per trial, {os.cpu_count()} cores"
        )
        print(
            f"{'storage':<11} {'workers':>7} {'trials/min':>11} {'finished':>14} "
            f"{'db errors':>9} {'retries':>7} {'stopped':>7} {'deadlocks':>9} "
            f"{'write p50':>9} {'p95 (ms)':>9}"
        )
        try:
            for label, url, _ in storages:
                for n in args.workers:
                    print(
                        row(label, n, one_run(url, n, args.trials, args.evals, args.train_s)),
                        flush=True,
                    )
        finally:
            for _, _, drop in storages:
                if drop is not None:
                    drop()


if __name__ == "__main__":
    main()
