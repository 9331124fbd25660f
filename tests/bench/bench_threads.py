"""Benchmark: training throughput on 1 thread against every core, idle and beside busy work.

Decides ``lm.host``'s thread rule (``trial_threads``): for each model size (the README's first
screen, the quickstart's smallest and largest draws, bench_train's two CPU sizes) it trains
``--steps`` optimizer steps in a fresh process per setting (``torch.set_num_threads``) and prints
tokens/s with 1 thread and with every core, with no other work and with ``--hogs`` CPU-bound
processes running beside it (``python -c 'while 1: pass'``), and the ratio all/1 of each. A
ratio under 1 is a model that trains faster on one thread.

    .venv/bin/python tests/bench/bench_threads.py [--steps 40] [--hogs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: name: (d_model, n_layers, n_heads, d_ff, seq_len, batch_size, vocab_size)
SIZES = {
    "first screen": (32, 2, 2, 128, 64, 16, 1024),
    "quickstart small": (64, 2, 4, 64, 64, 4, 512),
    "quickstart large": (64, 2, 4, 256, 256, 8, 8192),
    "d_model 128": (128, 2, 4, 512, 128, 16, 4096),
    "d_model 384": (384, 2, 6, 1536, 128, 16, 4096),
}

CHILD = r"""
import json, sys, time
import numpy as np, torch
import torch.nn.functional as F
from lm.config import ModelConfig
from lm.model import GPT
threads, steps, (d, L, H, ff, T, B, V) = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = GPT(ModelConfig(vocab_size=V, d_model=d, n_layers=L, n_heads=H, d_ff=ff, seq_len=T))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, V, (200_000,))
rng = np.random.default_rng(0)
def step():
    starts = rng.integers(0, len(data) - T - 1, size=B)
    batch = torch.stack([data[s : s + T + 1] for s in starts])
    loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(3):
    step()
started = time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({"tokens_per_s": steps * B * T / (time.perf_counter() - started)}))
"""


def tokens_per_s(threads: int, steps: int, size: tuple) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(threads), str(steps), json.dumps(size)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--hogs", type=int, default=2)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; load before: {os.getloadavg()[0]:.2f}")
    print(
        f"{'model':<18} {'idle 1':>9} {'idle ' + str(cores):>9} {'ratio':>6}  "
        f"{'busy 1':>9} {'busy ' + str(cores):>9} {'ratio':>6}   tokens/s"
    )
    with tempfile.TemporaryDirectory():
        for name, size in SIZES.items():
            idle = [tokens_per_s(n, args.steps, size) for n in (1, cores)]
            hogs = [
                subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.hogs)
            ]
            try:
                busy = [tokens_per_s(n, max(5, args.steps // 4), size) for n in (1, cores)]
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
            print(
                f"{name:<18} {idle[0]:>9,.0f} {idle[1]:>9,.0f} {idle[1] / idle[0]:>6.2f}  "
                f"{busy[0]:>9,.0f} {busy[1]:>9,.0f} {busy[1] / busy[0]:>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
