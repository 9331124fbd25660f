"""Benchmark: `lm.train.run` against a minimal hand-written loop of the same model and batch.

It prints the tokens/s of both, side by side in one process (target: run / hand >= 0.95), and
the training throughput in FLOP/s, counted per token as 6N + 12 x L x T x d_model (N the
parameters less the position table, a lookup; the second term is attention's QK^T and AV,
forward and backward, with the causal half not subtracted, as PaLM's MFU counts it).

- ``--device cpu`` (the default): two sizes (d_model 128 and 384, 2 layers, seq_len 128, fp32);
  the FLOP/s as a share of a plain fp32 torch matmul's on this machine (a utilization ratio).
- ``--device cuda``: d_model 768, 12 layers, 12 heads, seq_len 1024, bf16 (GPT-2 small's shape);
  the FLOP/s as a share of ``--peak-tflops`` (default 989, the H200's dense bf16 peak by its
  specification): the model FLOP utilization (MFU). Both loops use the fused AdamW that
  ``lm.train`` uses on CUDA, so the ratio measures the loop, not the optimizer kernel.

``torch.compile`` is not measured: the project does not offer it (no TrainConfig field; the
model runs eagerly).

    .venv/bin/python tests/bench/bench_train.py [--device cpu|cuda] [--steps 30] [--rounds 2]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lm.config import TrainConfig, param_breakdown
from lm.corpus import prepare_synthetic
from lm.model import GPT
from lm.runtime import autocast_for
from lm.tokens import load_tokens
from lm.train import run

#: The H200's dense bf16 peak, TFLOP/s, by NVIDIA's specification (sparse: twice that).
H200_BF16_DENSE_TFLOPS = 989.0
#: The sizes per device: (d_model, n_layers, n_heads, seq_len, batch_size, grad_accum, precision).
SIZES: dict[str, list[tuple[int, int, int, int, int, int, str]]] = {
    "cpu": [(128, 2, 4, 128, 16, 2, "fp32"), (384, 2, 6, 128, 16, 2, "fp32")],
    "cuda": [(768, 12, 12, 1024, 16, 1, "bf16")],
}
VOCAB = {"cpu": 4096, "cuda": 8192}


def hand_loop(cfg: TrainConfig, train_ids: np.ndarray, steps: int) -> float:
    """The textbook loop: sample windows, forward, shifted cross-entropy, backward, clip, step."""
    device = torch.device(cfg.device)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config()).to(device)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        fused=device.type == "cuda" or None,
    )
    autocast = autocast_for(device, cfg.precision)
    rng = np.random.default_rng(cfg.seed)
    data = torch.from_numpy(np.asarray(train_ids, dtype=np.int64))
    span = cfg.seq_len + 1

    def step() -> torch.Tensor:
        for _ in range(cfg.grad_accum):
            starts = rng.integers(0, len(data) - span, size=cfg.batch_size)
            batch = torch.stack([data[s : s + span] for s in starts]).to(device)  # (B, T + 1)
            with autocast():
                logits = model(batch[:, :-1])  # (B, T, V)
                loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            (loss / cfg.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    if device.type == "cuda":
        # lm.train warms up before it times (cuBLAS handles, the allocator's first blocks).
        step()
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        loss = step()
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


def train_config(corpus: Path, device: str, size: tuple, steps: int) -> TrainConfig:
    d_model, n_layers, n_heads, seq_len, batch, accum, precision = size
    return TrainConfig(
        corpus=str(corpus),
        tokenizer="bpe",
        vocab_size=VOCAB[device],
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        d_ff=4 * d_model,
        seq_len=seq_len,
        batch_size=batch,
        grad_accum=accum,
        lr=1e-3,
        precision=precision,
        max_tokens=steps * batch * accum * seq_len,
        eval_every_tokens=10**12,
        eval_tokens=seq_len,
        sample_prompts=(),
        sample_tokens=0,
        device=device,
        warmup_tokens=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=tuple(SIZES), default="cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=H200_BF16_DENSE_TFLOPS,
        help="CUDA: the device's dense peak for the precision, for the MFU",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    corpus = work / "corpus"
    prepare_synthetic(corpus, size_bytes=3_000_000, seed=0)
    if args.device == "cpu":
        peak_gflops = matmul_gflops()
        print(f"fp32 matmul 2048^3: {peak_gflops:.1f} GFLOP/s on {torch.get_num_threads()} threads")
    else:
        peak_gflops = args.peak_tflops * 1e3
        print(
            f"{torch.cuda.get_device_name()}: MFU against {args.peak_tflops:g} TFLOP/s; "
            f"torch.compile not measured (the project does not offer it)"
        )
    results: list[dict[str, Any]] = []
    for size in SIZES[args.device]:
        cfg = train_config(corpus, args.device, size, args.steps)
        train_ids = load_tokens(corpus, "bpe", cfg.vocab_size).train
        hand, ours = [], []
        for round_ in range(args.rounds):  # interleaved, so drift hits both alike
            hand.append(hand_loop(cfg, train_ids, args.steps))
            result = run(cfg, work / f"run-{cfg.d_model}-{round_}")
            if result.outcome != "complete":
                raise SystemExit(f"lm.train.run ended {result.outcome}: {result.reason}")
            ours.append(result.tokens_per_s)
        best_hand, best_ours = max(hand), max(ours)
        per_token = flops_per_token(cfg)
        gflops = best_ours * per_token / 1e9
        results.append(
            {
                "d_model": cfg.d_model,
                "n_layers": cfg.n_layers,
                "seq_len": cfg.seq_len,
                "batch_size": cfg.batch_size,
                "precision": cfg.precision,
                "hand_tokens_per_s": best_hand,
                "run_tokens_per_s": best_ours,
                "ratio": best_ours / best_hand,
                "flops_per_token": per_token,
                "tflops": gflops / 1e3,
                "utilization": gflops / peak_gflops,
                "rounds_hand": hand,
                "rounds_run": ours,
            }
        )
        share = "MFU" if args.device == "cuda" else "of matmul"
        print(
            f"d_model {cfg.d_model} x {cfg.n_layers} layers, T {cfg.seq_len}, "
            f"{cfg.precision}: hand loop {best_hand:,.0f} tok/s, sweeps train "
            f"{best_ours:,.0f} tok/s, ratio {best_ours / best_hand:.3f} "
            f"(rounds: hand {[round(h) for h in hand]}, ours {[round(o) for o in ours]}); "
            f"{gflops:.1f} GFLOP/s = {gflops / peak_gflops:.3f} {share}",
            flush=True,
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "device": args.device,
                    "peak_gflops": peak_gflops,
                    "compile": "not offered",
                    "flops_per_token": "6N + 12 * n_layers * seq_len * d_model",
                    "sizes": results,
                },
                indent=1,
            ),
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
