"""Benchmark: the Ray engine's overhead against the local engine, side by side in one run: the
same short trials (a tiny model, a few thousand tokens, enqueued in the same order), the same
storage (PostgreSQL over its unix socket), the same launcher (``subprocess``: what a Ray task
launches its child with), two trials at a time on each side.

- launch latency: per trial, from the trial being ready to launch (the runner's ``start``
  event, after its admission here or its submission to Ray) to its child being launched (the
  time the runner takes just before it starts the child: ``tokenizer.json``'s mtime less the
  trial's ``setup_s``), median and max; the child's own start-up (``setup_s``, printed apart)
  is not in it;
- the sweep's wall time and wall time per trial, and the ratio ray/local.

The local engine runs on this machine with ``--max-concurrent 2``; the Ray engine on a simulated
cluster (``ray.cluster_utils.Cluster``: a head and one node, one CPU each) inside a private
network namespace, as tests/sweeps/test_engines_ray.py makes it: the script re-executes itself
there (``unshare --net``, as root) when not already in one. Where that cannot be made (no root,
no unshare, no Ray, no PostgreSQL), it prints why and exits 0.

    .venv/bin/python tests/bench/bench_ray.py [--trials 20] [--tokens 4000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: Set in the namespace: the bench itself runs only there.
INNER_ENV = "SWEEPS_BENCH_RAY_NETNS"
URL_ENV = "SWEEPS_BENCH_RAY_URL"
SOCKET_DIR = "/var/run/postgresql"
GiB = 2**30
VOCABS = (300, 400)
WORKERS = 2


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=4000)
    return parser.parse_args()


# --- outside: the namespace and the database -----------------------------------------------------


def outside(args: argparse.Namespace) -> int:
    try:
        import ray  # noqa: F401
    except ImportError:
        print("bench_ray: skipped: Ray is not installed (pip install -e '.[ray]')")
        return 0
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        print("bench_ray: skipped: a private network namespace needs root, unshare and ip")
        return 0
    probe = subprocess.run(
        ["unshare", "--net", "ip", "link", "set", "lo", "up"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        print(f"bench_ray: skipped: cannot make a network namespace: {probe.stderr.strip()[:200]}")
        return 0
    from tests.sweeps.pg import PG_ADMIN, create_database

    try:
        url, drop = create_database("sweeps_bench_ray")
    except Exception as exc:  # psycopg missing or the server unreachable
        print(
            f"bench_ray: skipped: no PostgreSQL database at {PG_ADMIN} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        )
        return 0
    try:
        socket_url = f"postgresql://{url.username}@/{url.database}?host={SOCKET_DIR}"
        env = {
            **os.environ,
            INNER_ENV: "1",
            URL_ENV: socket_url,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        done = subprocess.run(
            [
                "unshare",
                "--net",
                "sh",
                "-c",
                'ip link set lo up && exec "$0" "$@"',
                sys.executable,
                str(Path(__file__).resolve()),
                *sys.argv[1:],
            ],
            cwd=REPO,
            env=env,
            timeout=900,
        )
        return done.returncode
    finally:
        drop()


# --- inside --------------------------------------------------------------------------------------


def spec(name: str, corpus: Path, trials: int, tokens: int) -> Any:
    from sweeps.spec import read_spec

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
            "space": {"vocab_size": {"choices": list(VOCABS)}},
            "limits": {"memory_budget": "auto", "max_wall_s": 300, "collapse": False},
            "enqueue": [{"vocab_size": VOCABS[i % len(VOCABS)]} for i in range(trials)],
        }
    )


def one_sweep(
    engine: str,
    corpus: Path,
    work: Path,
    url: str,
    args: argparse.Namespace,
    cluster_address: str | None = None,
) -> dict[str, Any]:
    from sweeps import storage as st
    from sweeps import workers as wk

    name = f"bench-ray-{engine}-{uuid.uuid4().hex[:6]}"
    s = spec(name, corpus, args.trials, args.tokens)
    storage = st.open_storage(url, heartbeat_interval=10, grace_period=60)
    wk.create_or_resume(s, storage)
    study = wk.load_for_workers(s, storage)
    ready: dict[int, float] = {}

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            ready.setdefault(int(data["number"]), time.time())

    options = wk.RunOptions(
        n_workers=WORKERS, launcher="subprocess", poll_s=0.05, on_event=on_event
    )
    study_dir = work / name
    started = time.perf_counter()
    if engine == "local":
        results = wk.run_workers(s, storage, study, study_dir, options)
    else:
        from sweeps.engines import ray as ray_engine

        with ray_engine.connect(cluster_address):
            results = ray_engine.run_on_cluster(s, storage, study, url, study_dir, options)
    wall = time.perf_counter() - started
    assert not any(r.error for r in results), [r.error for r in results]
    done = study.get_trials()
    outcomes = [t.user_attrs.get("outcome") for t in done]
    assert outcomes == ["complete"] * args.trials, [t.user_attrs.get("reason") for t in done]
    latency = []
    for t in done:  # launched at: tokenizer.json's mtime less setup_s (the runner's own clock)
        tokenizer = Path(t.user_attrs["run_dir"]) / "tokenizer.json"
        launched = tokenizer.stat().st_mtime - t.user_attrs["setup_s"]
        latency.append(launched - ready[t.number])
    storage.engine.dispose()
    return {
        "engine": engine,
        "wall": wall,
        "per_trial": wall / args.trials,
        "lat_med": statistics.median(latency),
        "lat_max": max(latency),
        "setup": statistics.median(t.user_attrs.get("setup_s", float("nan")) for t in done),
    }


def inside(args: argparse.Namespace) -> int:
    import optuna
    from ray.cluster_utils import Cluster

    from lm import host
    from lm.corpus import prepare_synthetic
    from lm.tokens import load_tokens

    warnings.filterwarnings("ignore", message="Heartbeat of storage")
    warnings.filterwarnings("ignore", message="len\\(ctx\\) is deprecated")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ[host.NUM_THREADS_ENV] = "1"  # tiny models: one thread per trial on both sides
    url = os.environ[URL_ENV]
    work = Path(tempfile.mkdtemp(prefix="sweeps-bench-ray-"))
    try:
        corpus = work / "corpus"
        prepare_synthetic(corpus, size_bytes=300_000, seed=0)
        for v in VOCABS:  # the token caches, built once, outside the timings
            load_tokens(corpus, "word", v)
        local_row = one_sweep("local", corpus, work, url, args)
        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "memory": 2 * GiB})
        cluster.add_node(num_cpus=1, memory=2 * GiB)
        cluster.wait_for_nodes()
        cluster_s = time.perf_counter() - t0
        try:
            ray_row = one_sweep("ray", corpus, work, url, args, cluster.address)
        finally:
            cluster.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.trials} trials of {args.tokens} tokens (d_model 16, 1 layer) on the CPU, "
        f"{WORKERS} at a time, {len(host.cpu_ids())} cores; PostgreSQL over its unix socket; "
        f"subprocess launcher"
    )
    print(
        f"ray: a head and one node (1 CPU each), started in {cluster_s:.1f} s "
        f"(not in its wall time)"
    )
    print(
        f"{'engine':<8}{'trials':>7}{'wall s':>9}{'s/trial':>9}{'launch med s':>14}"
        f"{'launch max s':>14}{'child setup s':>15}"
    )
    for r in (local_row, ray_row):
        print(
            f"{r['engine']:<8}{args.trials:>7}{r['wall']:>9.1f}{r['per_trial']:>9.2f}"
            f"{r['lat_med']:>14.3f}{r['lat_max']:>14.3f}{r['setup']:>15.2f}"
        )
    print(
        f"ray/local: wall {ray_row['wall'] / local_row['wall']:.2f}x, launch latency "
        f"+{ray_row['lat_med'] - local_row['lat_med']:.3f} s (median) per trial"
    )
    return 0


def main() -> None:
    args = parse()
    sys.exit(inside(args) if os.environ.get(INNER_ENV) == "1" else outside(args))


if __name__ == "__main__":
    main()
