"""Probe: is training K small models of one shape as ONE batched model (horizontal fusion) worth
building? Steps per second of K models fused against the same K trained one after another.

Fused: every weight of ``lm.model.GPT`` stacked along a leading K dimension (``FusedGPT``), each
matmul a batched matmul over the K models, attention over K x B sequences in one
``scaled_dot_product_attention`` call, one AdamW over the stacked weights (element-wise, so each
model's update is its own) and the loss the sum of the K models' mean losses (so each model's
gradient is its own). Separate: K ``lm.model.GPT`` models, each with its own AdamW, trained one
after another. Both in bf16 autocast on CUDA (fp32 on the CPU), d_model 32, 64 and 128,
K = 1, 4 and 16; the figure is the separate wall time over the fused one for the same K x steps.

Published figures for horizontally fused training (HFTA, MLSys 2021) reach 15x on a GPU, where
one small model leaves most of the device idle; on this project's 2-core CPU a quick probe gave
1.0x to 1.5x at K = 8. Only the GPU kit's fusion step (``tests/gpu/kit.py``) times it; the CPU
suite checks the fused model is the K models (``tests/bench/test_bench_fusion.py``).

    .venv/bin/python tests/bench/bench_fusion.py [--device cuda] [--steps 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lm.config import ModelConfig
from lm.model import GPT

D_MODELS = (32, 64, 128)
KS = (1, 4, 16)
#: The probe's fixed shape beside d_model: small trials, as a sweep packs them.
SHAPE = {"vocab_size": 1024, "n_layers": 2, "seq_len": 128}
BATCH = 16


def model_config(d_model: int) -> ModelConfig:
    return ModelConfig(d_model=d_model, n_heads=max(1, d_model // 32), d_ff=4 * d_model, **SHAPE)


# --- the fused model ------------------------------------------------------------------------------


def _stack(tensors: Sequence[torch.Tensor]) -> nn.Parameter:
    return nn.Parameter(torch.stack([t.detach().clone() for t in tensors]))


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """K linear layers at once: x (K, N, I), w (K, O, I) as nn.Linear keeps it, b (K, O)."""
    y = torch.bmm(x, w.transpose(1, 2))  # (K, N, O)
    return y if b is None else y + b[:, None, :]


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """K LayerNorms: x (K, N, C), w and b (K, C)."""
    return F.layer_norm(x, x.shape[-1:]) * w[:, None, :] + b[:, None, :]


class FusedGPT(nn.Module):
    """K ``lm.model.GPT`` models of one config (sdpa attention, tied head, no dropout) as one
    module: each parameter is the K models' stacked along dimension 0."""

    def __init__(self, models: Sequence[GPT]) -> None:
        super().__init__()
        cfg = models[0].cfg
        if not cfg.tie_weights or cfg.dropout or cfg.attention != "sdpa":
            raise ValueError("the probe fuses tied, dropout-free sdpa models only")
        self.cfg, self.k = cfg, len(models)
        by_name = [dict(m.named_parameters()) for m in models]
        self.names = list(by_name[0])
        self.params = nn.ParameterDict(
            {n.replace(".", "__"): _stack([p[n] for p in by_name]) for n in self.names}
        )

    def p(self, name: str) -> torch.Tensor:
        return self.params[name.replace(".", "__")]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (K, B, T) -> logits (K, B, T, V); model k sees idx[k] only."""
        K, B, T = idx.shape
        C, H = self.cfg.d_model, self.cfg.n_heads
        wte = self.p("wte.weight")  # (K, V, C)
        x = wte[torch.arange(K, device=idx.device)[:, None, None], idx]  # (K, B, T, C)
        x = (x + self.p("wpe.weight")[:, None, :T, :]).reshape(K, B * T, C)
        for i in range(self.cfg.n_layers):
            x = x + self._attention(
                i,
                _layer_norm(x, self.p(f"blocks.{i}.ln1.weight"), self.p(f"blocks.{i}.ln1.bias")),
                B,
                T,
                H,
            )
            h = _layer_norm(x, self.p(f"blocks.{i}.ln2.weight"), self.p(f"blocks.{i}.ln2.bias"))
            h = F.gelu(
                _linear(h, self.p(f"blocks.{i}.ffn.up.weight"), self.p(f"blocks.{i}.ffn.up.bias"))
            )  # (K, BT, F)
            x = x + _linear(
                h, self.p(f"blocks.{i}.ffn.down.weight"), self.p(f"blocks.{i}.ffn.down.bias")
            )
        x = _layer_norm(x, self.p("ln_f.weight"), self.p("ln_f.bias"))
        return _linear(x, wte, None).reshape(K, B, T, -1)  # tied head: (K, BT, V)

    def _attention(self, i: int, x: torch.Tensor, B: int, T: int, H: int) -> torch.Tensor:
        K, _, C = x.shape
        qkv = _linear(
            x, self.p(f"blocks.{i}.attn.qkv.weight"), self.p(f"blocks.{i}.attn.qkv.bias")
        )  # (K, BT, 3C)
        # (K, BT, 3C) -> 3 x (K B, H, T, D): the K x B sequences in one attention call
        q, k, v = (t.reshape(K * B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (K B, H, T, D)
        y = y.transpose(1, 2).reshape(K, B * T, C)
        return _linear(
            y, self.p(f"blocks.{i}.attn.proj.weight"), self.p(f"blocks.{i}.attn.proj.bias")
        )


def fused_losses(model: FusedGPT, batch: torch.Tensor) -> torch.Tensor:
    """Each model's mean next-token cross-entropy, (K,), of a (K, B, T + 1) window batch, as
    ``lm.train.lm_loss`` computes one model's."""
    x, y = batch[..., :-1], batch[..., 1:]
    logits = model(x).float()  # (K, B, T, V)
    K = logits.shape[0]
    per_token = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none"
    )
    return per_token.reshape(K, -1).mean(dim=1)


# --- timing ---------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device) -> Any:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def time_fused(models: list[GPT], batches: torch.Tensor, steps: int, device: torch.device) -> float:
    """Seconds for ``steps`` steps of the K models fused."""
    fused = FusedGPT(models).to(device)
    opt = torch.optim.AdamW(fused.parameters(), lr=1e-3)

    def step() -> None:
        with _autocast(device):
            loss = fused_losses(fused, batches).sum()  # each model's gradient is its own
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up: kernels chosen, memory cached
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return time.perf_counter() - t0


def time_separate(
    models: list[GPT], batches: torch.Tensor, steps: int, device: torch.device
) -> float:
    """Seconds for ``steps`` steps of each of the K models, one model after another."""
    from lm.train import lm_loss

    total = 0.0
    for k, model in enumerate(models):
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(model: GPT = model, opt: Any = opt, k: int = k) -> None:
            with _autocast(device):
                loss = lm_loss(model, batches[k])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        total += time.perf_counter() - t0
    return total


def make_models(cfg: ModelConfig, k: int, seed: int = 0) -> list[GPT]:
    out = []
    for i in range(k):
        torch.manual_seed(seed + i)
        out.append(GPT(cfg))
    return out


def probe(d_model: int, k: int, steps: int, device: torch.device) -> dict[str, Any]:
    cfg = model_config(d_model)
    gen = torch.Generator().manual_seed(d_model * 100 + k)
    batches = torch.randint(0, cfg.vocab_size, (k, BATCH, cfg.seq_len + 1), generator=gen).to(
        device
    )  # (K, B, T + 1)
    fused_s = time_fused(make_models(cfg, k), batches, steps, device)
    separate_s = time_separate(make_models(cfg, k), batches, steps, device)
    return {
        "d_model": d_model,
        "k": k,
        "steps": steps,
        "fused_steps_per_s": steps / fused_s,  # one step trains all K models
        "separate_steps_per_s": steps / separate_s,
        "speedup": separate_s / fused_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--d-models", type=int, nargs="+", default=list(D_MODELS))
    ap.add_argument("--ks", type=int, nargs="+", default=list(KS))
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help="rewritten after every point, so a run cut short keeps what it timed",
    )
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    rows: list[dict[str, Any]] = []
    print(f"{'d_model':>8}{'K':>4}{'fused steps/s':>15}{'separate steps/s':>18}{'speed-up':>10}")
    for d_model in args.d_models:
        for k in args.ks:
            row = probe(d_model, k, args.steps, device)
            rows.append(row)
            print(
                f"{d_model:>8}{k:>4}{row['fused_steps_per_s']:>15.1f}"
                f"{row['separate_steps_per_s']:>18.1f}{row['speedup']:>10.2f}",
                flush=True,
            )
            if args.json is not None:
                args.json.write_text(
                    json.dumps(
                        {
                            "device": str(device),
                            "precision": "bf16" if device.type == "cuda" else "fp32",
                            "points": rows,
                        },
                        indent=1,
                    ),
                    encoding="utf-8",
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
