"""Benchmark: predicted (``lm.memory.estimate``) against measured peak memory of real trials.

Each point of a grid spanning vocab 260 to 16k, seq_len 64 to 1024, d_ff 1 to 4 x d_model,
micro-batch 1 to 64, both attention implementations, fp32 and bf16 (plus checkpointing, dropout
and grad_accum) runs as a real ``python -m lm.train`` child for two optimizer steps and one
evaluation on an 8 MB synthetic corpus (cached under the temp dir; byte, word and BPE tokenizers
reach the vocabulary sizes). Each child runs under the enforced limit the runner would give it
for a budget equal to the prediction (``sweeps.preflight.cpu_child_limit``), so a point that
fits is also checked not to be killed by that limit. Prints predicted, measured and their ratio
per point, and the worst ratio (target: within 20 % for every point on the CPU).

    .venv/bin/python tests/bench/bench_memory.py [--quick] [--threads 2] [--only 3,5]
        [--launcher subprocess|fork] [--device cpu|cuda] [--configs cpu|gpu] [--json FILE]

On CUDA the measured peak is ``torch.cuda.max_memory_allocated`` and the prediction compared is
``MemoryEstimate.allocated`` (the tensors; the context and allocator slack come on top of it);
the target there is within 10 %. ``--configs gpu`` is a grid sized for a GPU (``GPU_GRID``: up to
seq_len 4096, micro-batch 512, vocab 32k, fp16); ``--json`` writes every point and the worst
ratio to FILE (the GPU acceptance kit, ``tests/gpu/kit.py``, reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lm.config import TrainConfig  # noqa: E402
from lm.memory import estimate  # noqa: E402
from lm.tokens import corpus_counts  # noqa: E402
from sweeps.preflight import cpu_child_limit  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "sweeps-bench-memory"
CORPUS_BYTES = 8_000_000

#: (tokenizer, V, T, C, H, F, B, attention, precision, extra)
GRID: list[tuple[str, int, int, int, int, int, int, str, str, dict[str, Any]]] = [
    ("byte", 260, 64, 64, 4, 256, 64, "sdpa", "fp32", {}),
    ("byte", 260, 1024, 64, 4, 64, 4, "naive", "fp32", {}),
    ("word", 300, 256, 128, 4, 1, 32, "sdpa", "bf16", {}),
    ("bpe", 1024, 512, 128, 4, 512, 8, "naive", "bf16", {}),
    ("bpe", 4096, 128, 128, 4, 256, 16, "sdpa", "fp32", {}),
    ("bpe", 16384, 256, 128, 4, 512, 8, "sdpa", "fp32", {}),
    ("bpe", 16384, 64, 64, 4, 128, 64, "naive", "bf16", {}),
    ("word", 2000, 1024, 128, 4, 128, 2, "naive", "fp32", {}),
    ("bpe", 4096, 1024, 128, 4, 512, 1, "sdpa", "bf16", {}),
    ("byte", 260, 128, 256, 4, 1024, 1, "naive", "fp32", {}),
    ("bpe", 1024, 64, 32, 2, 32, 1, "sdpa", "bf16", {}),
    ("bpe", 16384, 1024, 64, 4, 256, 4, "naive", "fp32", {}),
    ("word", 2000, 512, 192, 4, 768, 16, "sdpa", "fp32", {"grad_accum": 2}),
    ("bpe", 4096, 256, 128, 4, 512, 32, "naive", "fp32", {"checkpointing": True, "dropout": 0.1}),
    ("bpe", 4096, 256, 384, 6, 1536, 16, "sdpa", "fp32", {"n_layers": 6}),
    ("word", 300, 254, 200, 4, 800, 128, "sdpa", "fp32", {"n_layers": 1}),
    ("bpe", 1024, 512, 256, 4, 1024, 8, "naive", "bf16", {"n_layers": 4}),
]
QUICK = (0, 2, 4, 6, 9, 11)
#: The CUDA grid (``--configs gpu``): vocab 260 to 32k, seq_len 64 to 4096, micro-batch 1 to 512,
#: both attention implementations, fp32, bf16 and fp16 (its gradient scaler), checkpointing,
#: dropout (1-byte masks on CUDA), grad_accum, and the classic point (word 300, d_ff 1).
GPU_GRID: list[tuple[str, int, int, int, int, int, int, str, str, dict[str, Any]]] = [
    ("word", 300, 64, 128, 4, 512, 512, "sdpa", "fp32", {}),
    ("bpe", 32768, 256, 256, 4, 1024, 16, "sdpa", "bf16", {}),
    ("bpe", 32768, 64, 128, 4, 512, 512, "naive", "fp16", {}),
    ("bpe", 4096, 4096, 128, 4, 512, 2, "sdpa", "bf16", {}),
    ("bpe", 4096, 4096, 128, 4, 512, 1, "naive", "fp32", {}),
    ("word", 2000, 1024, 256, 4, 1024, 8, "naive", "bf16", {}),
    ("bpe", 16384, 1024, 384, 6, 1536, 8, "sdpa", "fp16", {"n_layers": 4}),
    ("bpe", 8192, 512, 256, 4, 1024, 32, "sdpa", "fp32", {"checkpointing": True}),
    ("bpe", 8192, 512, 256, 4, 1024, 32, "naive", "bf16", {"checkpointing": True}),
    ("word", 300, 254, 200, 4, 1, 128, "naive", "fp32", {"n_layers": 1}),
    ("bpe", 1024, 2048, 512, 8, 2048, 4, "sdpa", "bf16", {"n_layers": 6}),
    ("bpe", 32768, 128, 768, 12, 3072, 64, "sdpa", "bf16", {"n_layers": 4, "grad_accum": 2}),
    ("byte", 260, 512, 128, 4, 512, 256, "sdpa", "fp16", {"dropout": 0.1}),
    ("word", 2000, 128, 256, 4, 1024, 1, "naive", "fp32", {}),
]
GRIDS = {"cpu": GRID, "gpu": GPU_GRID}


def corpus_dir(grid: list[tuple] = GRID) -> Path:
    """The synthetic corpus and its token caches (built once, reused by later runs)."""
    from lm.corpus import prepare_synthetic
    from lm.tokens import load_tokens

    out = CACHE / "corpus-8MB"
    if not (out / "manifest.json").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        prepare_synthetic(out, size_bytes=CORPUS_BYTES, seed=0, replace=True)
    for kind, v in sorted({(p[0], p[1]) for p in grid}, key=lambda kv: -kv[1]):
        load_tokens(out, kind, v)  # BPE: the largest size first, smaller ones truncate it
    return out


def config(point: tuple, corpus: Path, device: str = "cpu") -> TrainConfig:
    kind, v, t, c, h, f, b, attention, precision, extra = point
    accum = extra.get("grad_accum", 1)
    return TrainConfig.from_dict(
        {
            "corpus": str(corpus),
            "tokenizer": kind,
            "vocab_size": v,
            "d_model": c,
            "n_layers": extra.get("n_layers", 2),
            "n_heads": h,
            "d_ff": f,
            "seq_len": t,
            "batch_size": b,
            "attention": attention,
            "precision": precision,
            "device": device,
            # Two optimizer steps (the second runs with AdamW's states), then one evaluation of
            # one full micro-batch of windows.
            "max_tokens": 2 * b * t * accum,
            "eval_every_tokens": 10**12,
            "eval_tokens": b * t,
            "warmup_tokens": 0,
            "sample_tokens": 4,
            **{k: val for k, val in extra.items() if k != "n_layers"},
        }
    )


def measure(cfg: TrainConfig, run_dir: Path, threads: int, server: Any = None) -> dict[str, Any]:
    """Train ``cfg`` in a child: ``python -m lm.train`` or, given ``server``, a fork of it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()), encoding="utf-8")
    env = {"SWEEPS_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    if server is not None:
        child = server.launch(run_dir, log_path=run_dir / "log.txt", env=env)
        returncode, stderr = child.wait(), ""
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "lm.train", str(run_dir)],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        returncode, stderr = proc.returncode, proc.stderr
    wall = time.perf_counter() - started
    result_file = run_dir / "result.json"
    if not result_file.exists():
        raise RuntimeError(f"child wrote no result (exit {returncode}): {stderr[-400:]}")
    result = json.loads(result_file.read_text(encoding="utf-8"))
    return {
        "peak": int(result["peak_mem_bytes"]),
        "outcome": result["outcome"],
        "wall": wall,
        "reason": result["reason"],
    }


POINT_KEYS = (
    "tokenizer",
    "vocab_size",
    "seq_len",
    "d_model",
    "n_heads",
    "d_ff",
    "batch_size",
    "attention",
    "precision",
    "extra",
)


def write_json(
    path: Path, device: str, configs: str, rows: list[dict[str, Any]], worst: float
) -> None:
    path.write_text(
        json.dumps(
            {
                "device": device,
                "configs": configs,
                "points": rows,
                "worst_ratio": worst if rows else None,
            },
            indent=1,
        ),
        encoding="utf-8",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only points {QUICK}")
    ap.add_argument("--only", help="comma-separated point numbers")
    ap.add_argument("--threads", type=int, default=2, help="SWEEPS_NUM_THREADS of the children")
    ap.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: compare the tensor peak (allocated) with max_memory_allocated",
    )
    ap.add_argument(
        "--launcher",
        choices=("subprocess", "fork"),
        default="subprocess",
        help="fresh interpreters, or forks of sweeps.forkserver as the runner uses",
    )
    ap.add_argument(
        "--configs",
        choices=tuple(GRIDS),
        default="cpu",
        help="the grid: sized for the CPU (GRID) or for a GPU (GPU_GRID)",
    )
    ap.add_argument("--json", type=Path, help="also write the points and the worst ratio here")
    args = ap.parse_args()
    grid = GRIDS[args.configs]
    indices = list(range(len(grid)))
    if args.quick:
        indices = list(QUICK)
    if args.only:
        indices = [int(i) for i in args.only.split(",")]
    corpus = corpus_dir(grid)
    server = None
    if args.launcher == "fork":
        from sweeps.forkserver import ForkServer

        server = ForkServer().start()
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=CACHE))
    head = (
        f"{'#':>2} {'tok':5} {'V':>6} {'T':>5} {'C':>4} {'F':>5} {'B':>3} {'attn':5} "
        f"{'prec':4} {'extra':18} {'predicted':>10} {'measured':>10} {'ratio':>6} "
        f"{'peak at':16} {'outcome':8} {'s':>5}"
    )
    print(head)
    print("-" * len(head))
    worst = 1.0
    failures = 0
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i in indices:
        point = grid[i]
        cfg = config(point, corpus, args.device)
        counts = corpus_counts(corpus, cfg.tokenizer, cfg.vocab_size, cfg.lowercase)
        est = estimate(
            cfg, args.device, threads=args.threads, launcher=args.launcher, counts=counts
        )
        predicted = est.total
        if args.device == "cpu":
            limit = cpu_child_limit(est.total, est.total)  # a budget equal to the prediction
            cfg = TrainConfig.from_dict({**cfg.to_dict(), "cpu_memory_limit_bytes": limit})
        else:
            predicted = est.allocated  # what torch.cuda.max_memory_allocated measures
        got = measure(cfg, runs / str(i), args.threads, server)
        ratio = predicted / got["peak"]
        if abs(ratio - 1) > abs(worst - 1):
            worst = ratio
        if got["outcome"] != "complete" or abs(ratio - 1) > (
            0.20 if args.device == "cpu" else 0.10
        ):
            failures += 1
        kind, v, t, c, _, f, b, attention, precision, extra = point
        shown = ",".join(f"{k}={val}" for k, val in extra.items())
        print(
            f"{i:>2} {kind:5} {v:>6} {t:>5} {c:>4} {f:>5} {b:>3} {attention:5} {precision:4} "
            f"{shown:18} {predicted / 2**20:>8.1f}Mi {got['peak'] / 2**20:>8.1f}Mi "
            f"{ratio:>6.3f} {est.peak_moment:16} {got['outcome']:8} {got['wall']:>5.1f}",
            flush=True,
        )
        rows.append(
            {
                "point": i,
                "config": dict(zip(POINT_KEYS, point, strict=True)),
                "predicted": predicted,
                "measured": got["peak"],
                "ratio": ratio,
                "peak_moment": est.peak_moment,
                "outcome": got["outcome"],
                "reason": got["reason"],
                "seconds": got["wall"],
            }
        )
        if args.json is not None:  # after every point: a killed run still leaves what it measured
            write_json(args.json, args.device, args.configs, rows, worst)
    if server is not None:
        server.close()
    shutil.rmtree(runs, ignore_errors=True)  # run dirs (checkpoints); the corpus stays cached
    target = "0.80-1.20" if args.device == "cpu" else "0.90-1.10"
    print(
        f"\nworst ratio predicted/measured: {worst:.3f} (target within {target}); "
        f"{failures} point(s) outside the target or not complete; "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
