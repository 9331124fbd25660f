"""Benchmark: trials per hour of a sweep of small trials, admitted by predicted memory (packed)
against one trial at a time: the same trials (enqueued, in the same order), the same machine, the
same launcher, printed side by side.

One trial at a time is ``--max-concurrent 1`` (a CPU trial then gets every core). Packed is the
default engine as ``sweeps run`` uses it: on GPUs as many trials as memory admits; on the CPU
``--max-concurrent`` defaults to the number of cores (one core per trial), since an uncapped
CPU run gives one trial every core. On a 2-core CPU the gain is bounded by the cores; the same
script runs unchanged on a GPU (``--device cuda``, or ``auto`` where one is visible).

    .venv/bin/python tests/bench/bench_packing.py [--trials 12] [--tokens 20000]
        [--device auto|cpu|cuda] [--max-concurrent N] [--json PATH]

The GPU kit's ``packing`` step runs it with 16 trials on the GPU (``tests/gpu/kit.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lm import host
from lm.corpus import prepare_synthetic
from lm.tokens import load_tokens
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.spec import StudySpec, read_spec

VOCABS = (300, 400, 500, 600)


def spec(name: str, corpus: Path, trials: int, tokens: int, device: str) -> StudySpec:
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
                "device": device,
                "tokenizer": "word",
                "d_model": 64,
                "n_layers": 2,
                "n_heads": 2,
                "d_ff": 128,
                "seq_len": 32,
                "batch_size": 16,
                "lr": 3e-2,
                "max_tokens": tokens,
                "warmup_tokens": 500,
                "eval_every_tokens": tokens,
                "eval_tokens": 512,
                "sample_tokens": 4,
            },
            "space": {"vocab_size": {"choices": list(VOCABS)}},
            "limits": {"memory_budget": "auto", "max_wall_s": 600, "collapse": False},
            "enqueue": [{"vocab_size": VOCABS[i % len(VOCABS)]} for i in range(trials)],
        }
    )


def one_sweep(
    label: str, corpus: Path, work: Path, args: argparse.Namespace, cap: int | None
) -> dict[str, Any]:
    name = f"bench-pack-{label.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    s = spec(name, corpus, args.trials, args.tokens, args.device)
    storage = st.open_storage(
        f"sqlite:///{work / (name + '.db')}", heartbeat_interval=10, grace_period=60
    )
    wk.create_or_resume(s, storage)
    study = wk.load_for_workers(s, storage)
    options = wk.RunOptions(n_workers=cap, launcher="fork", poll_s=0.05)
    started = time.perf_counter()
    results = wk.run_workers(s, storage, study, work / name, options)
    wall = time.perf_counter() - started
    assert not any(r.error for r in results), [r.error for r in results]
    done = study.get_trials()
    outcomes = [t.user_attrs.get("outcome") for t in done]
    assert outcomes == ["complete"] * args.trials, [t.user_attrs.get("reason") for t in done]
    return {
        "label": label,
        "wall": wall,
        "per_hour": args.trials / wall * 3600,
        "workers": len(results),
        "peak_mib": max(t.user_attrs["peak_mem_bytes"] for t in done) / 2**20,
        "reserved_mib": max(t.user_attrs["reserved_mem_bytes"] for t in done) / 2**20,
    }


def write_json(path: Path, kind: str, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The rows so far, the speed-up once both ran, and whether MPS runs (``lm.host``): without
    it packed trials' kernels take turns, so the speed-up is host-side overlap only."""
    data: dict[str, Any] = {
        "device": kind,
        "trials": args.trials,
        "tokens": args.tokens,
        "mps": host.mps_pipe() is not None,
        "rows": rows,
    }
    if len(rows) == 2:
        data["speedup"] = rows[0]["wall"] / rows[1]["wall"]
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    warnings.filterwarnings("ignore", message="Heartbeat of storage")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="cap of the packed run [default: GPU none, CPU one per core]",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="write the rows here, after each sweep (a run cut short keeps the first)",
    )
    args = parser.parse_args(argv)
    kind = host.device_kind(args.device)
    cap = args.max_concurrent or (len(host.cpu_ids()) if kind == "cpu" else None)
    work = Path(tempfile.mkdtemp(prefix="sweeps-bench-pack-"))
    corpus = work / "corpus"
    prepare_synthetic(corpus, size_bytes=300_000, seed=0)
    for v in VOCABS:  # the token caches, built once, outside the timings
        load_tokens(corpus, "word", v)
    os.environ.pop(host.NUM_THREADS_ENV, None)  # each trial's threads follow from its cores
    rows: list[dict[str, Any]] = []
    for label, n in (("one at a time", 1), ("packed by memory", cap)):
        rows.append(one_sweep(label, corpus, work, args, n))
        if args.json is not None:
            write_json(args.json, kind, args, rows)
    print(
        f"{args.trials} trials of {args.tokens} tokens on {kind} ({len(host.cpu_ids())} "
        f"cores{', GPUs ' + ','.join(host.visible_gpus()) if kind == 'cuda' else ''})"
    )
    print(
        f"{'':<18}{'workers':>8}{'wall s':>10}{'trials/h':>11}{'peak MiB':>10}{'reserved MiB':>14}"
    )
    for r in rows:
        print(
            f"{r['label']:<18}{r['workers']:>8}{r['wall']:>10.1f}{r['per_hour']:>11.0f}"
            f"{r['peak_mib']:>10.0f}{r['reserved_mib']:>14.0f}"
        )
    print(f"speed-up: {rows[0]['wall'] / rows[1]['wall']:.2f}x")


if __name__ == "__main__":
    main()
