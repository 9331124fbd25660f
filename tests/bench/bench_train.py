"""Benchmark: `lm.train.run` against a minimal hand-written loop of the same model and batch.

For two sizes (d_model 128 and 384) it prints the tokens/s of both, side by side in one process
(target: run / hand >= 0.95), the training GFLOP/s (6N + attention FLOPs per token) and that as a
share of a plain fp32 torch matmul's GFLOP/s on this machine (a utilization ratio).

    .venv/bin/python tests/bench/bench_train.py [--steps 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lm.config import TrainConfig, param_breakdown
from lm.corpus import prepare_synthetic
from lm.model import GPT
from lm.tokens import load_tokens
from lm.train import run


def hand_loop(cfg: TrainConfig, train_ids: np.ndarray, steps: int) -> float:
    """The textbook loop: sample windows, forward, shifted cross-entropy, backward, clip, step."""
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config())
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    data = torch.from_numpy(np.asarray(train_ids, dtype=np.int64))
    span = cfg.seq_len + 1
    started = time.perf_counter()
    for _ in range(steps):
        for _ in range(cfg.grad_accum):
            starts = rng.integers(0, len(data) - span, size=cfg.batch_size)
            batch = torch.stack([data[s : s + span] for s in starts])  # (B, T + 1)
            logits = model(batch[:, :-1])  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            (loss / cfg.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    float(loss.detach())  # wait for the last step
    return steps * cfg.tokens_per_step / (time.perf_counter() - started)


def matmul_gflops(n: int = 2048, repeats: int = 5, trials: int = 5) -> float:
    """The best of a few timings of an fp32 n x n matmul: this machine's attainable GFLOP/s."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = 0.0
    for _ in range(trials):
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - started) / 1e9)
    return best


def flops_per_token(cfg: TrainConfig) -> float:
    """6N for the matmuls (N without the position table, which is a lookup) plus attention's
    12 x layers x d_model x seq_len (QK^T and AV, forward and backward)."""
    params = param_breakdown(cfg.model_config())
    n = params["total"] - params["position"]
    return 6 * n + 12 * cfg.n_layers * cfg.d_model * cfg.seq_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    corpus = work / "corpus"
    prepare_synthetic(corpus, size_bytes=3_000_000, seed=0)
    peak = matmul_gflops()
    print(f"fp32 matmul 2048^3: {peak:.1f} GFLOP/s on {torch.get_num_threads()} threads")
    for d_model, n_heads in ((128, 4), (384, 6)):
        cfg = TrainConfig(
            corpus=str(corpus), tokenizer="bpe", vocab_size=4096, d_model=d_model, n_layers=2,
            n_heads=n_heads, d_ff=4 * d_model, seq_len=128, batch_size=16, grad_accum=2,
            lr=1e-3, max_tokens=args.steps * 16 * 2 * 128, eval_every_tokens=10**12,
            eval_tokens=256, sample_prompts=(), sample_tokens=0, device="cpu",
            warmup_tokens=0,
        )
        train_ids = load_tokens(corpus, "bpe", 4096).train
        hand, ours = [], []
        for round_ in range(args.rounds):  # interleaved, so drift hits both alike
            hand.append(hand_loop(cfg, train_ids, args.steps))
            result = run(cfg, work / f"run-{d_model}-{round_}")
            ours.append(result.tokens_per_s)
        best_hand, best_ours = max(hand), max(ours)
        gflops = best_ours * flops_per_token(cfg) / 1e9
        print(f"d_model {d_model}: hand loop {best_hand:,.0f} tok/s, sweeps train "
              f"{best_ours:,.0f} tok/s, ratio {best_ours / best_hand:.3f} "
              f"(rounds: hand {[round(h) for h in hand]}, ours {[round(o) for o in ours]}); "
              f"{gflops:.1f} GFLOP/s = {gflops / peak:.2f} of matmul")


if __name__ == "__main__":
    main()
