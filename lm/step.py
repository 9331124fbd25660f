"""The parts of one training step of ``lm.train``: the batches (random windows of the token
memmap), the objective (next-token cross-entropy), gradients accumulated over micro-batches,
AdamW with decay on matrices only, and the throwaway warm-up step a run takes before its memory
limit is measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lm.config import ModelConfig, TrainConfig
from lm.model import GPT
from lm.runtime import autocast_for

# --- data --------------------------------------------------------------------------------------


class BatchSampler:
    """Random windows of ``seq_len + 1`` tokens from a token memmap, from a seeded generator."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int) -> None:
        # len(tokens) >= seq_len + 1: checked by lm.train's _setup, before anything is written.
        self.tokens = tokens
        self.batch_size = batch_size
        self.offsets = np.arange(seq_len + 1)
        self.high = len(tokens) - seq_len  # last start: len - seq_len - 1
        self.rng = np.random.default_rng(seed)

    def next(self, rows: int | None = None) -> torch.Tensor:
        """(B, T + 1) int64 ids (``rows`` instead of B: the last step of a budget in bytes or
        FLOPs, ``lm.budget``)."""
        starts = self.rng.integers(0, self.high, size=self.batch_size if rows is None else rows)
        return torch.from_numpy(self.tokens[starts[:, None] + self.offsets].astype(np.int64))


# --- the objective -----------------------------------------------------------------------------


def lm_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of a (B, T + 1) window batch: target i is input i + 1."""
    x, y = batch[:, :-1], batch[:, 1:]  # (B, T) each: the one-position shift
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def accumulate_gradients(
    model: torch.nn.Module,
    micro_batches: Sequence[torch.Tensor],
    *,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    scaler: Any = None,
) -> torch.Tensor:
    """Backward over the micro-batches; returns the mean loss (a detached scalar tensor).

    Each micro-batch's mean loss is weighted by its share of the rows (equal-sized ones: divided
    by their number), so the accumulated gradient is the gradient of the full batch's mean loss;
    only the last step of a budget in bytes or FLOPs has a smaller last micro-batch.
    """
    n = len(micro_batches)
    rows = [len(b) for b in micro_batches]
    equal = len(set(rows)) == 1
    total = torch.zeros((), device=micro_batches[0].device)
    for batch, r in zip(micro_batches, rows, strict=True):
        with autocast():
            loss = lm_loss(model, batch)
        scaled = loss / n if equal else loss * (r / sum(rows))
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss.detach() if equal else loss.detach() * (r * n / sum(rows))
    return total / n


def make_optimizer(
    model: torch.nn.Module, cfg: TrainConfig, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not biases, norms or embeddings).

    Under µP (``model.cfg.parametrization``, ``lm.model``) the hidden matrices get a group of
    their own at rate lr / m (Tensor Programs V, Table 3: Adam's hidden-weight rate 1/fan_in)
    and decay x m, so AdamW's per-step decay lr x weight_decay is unchanged (``mup.MuAdam``'s
    default); each group's ``lr_scale`` is what ``set_lr`` multiplies the schedule's rate by.
    Under sp the two groups are the ones every earlier run (and resume checkpoint) had.
    """
    # The width multiplier of a µP model, None for SP (or a module that is not lm.model's GPT).
    m = (
        model.cfg.width_mult
        if isinstance(model, GPT) and model.cfg.parametrization == "mup"
        else None
    )
    hidden_ids = {id(p) for p in model.hidden_matrices()} if isinstance(model, GPT) and m else set()
    hidden: list[torch.nn.Parameter] = []
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen:  # a tied head is the embedding
            continue
        seen.add(id(p))
        is_embedding = name.startswith(("wte.", "wpe."))
        if id(p) in hidden_ids:
            hidden.append(p)
        else:
            (decay if p.dim() >= 2 and not is_embedding else no_decay).append(p)
    groups: list[dict[str, Any]] = [
        {"params": decay, "weight_decay": cfg.weight_decay, "lr_scale": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0},
    ]
    if m is not None:
        groups.insert(
            0, {"params": hidden, "weight_decay": cfg.weight_decay * m, "lr_scale": 1.0 / m}
        )
    optimizer = torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(0.9, 0.95), fused=device.type == "cuda" or None
    )
    set_lr(optimizer, cfg.lr)
    return optimizer


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The schedule's rate ``lr`` on every group, times its ``lr_scale`` (µP's 1/m for hidden
    matrices, ``make_optimizer``; 1 when absent, as in a checkpoint written before it)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


# --- the warm-up -------------------------------------------------------------------------------


def warm_up(device: torch.device, cfg: TrainConfig) -> None:
    """One throwaway step of a tiny model, before the memory limit is measured and set.

    It starts the intra-op thread pool and makes torch import what it imports lazily (AdamW
    pulls in torch._dynamo, tens of MB), so the limit's baseline holds them and
    ``cpu_memory_limit_bytes`` is left for the model itself.
    """
    tiny = ModelConfig(
        vocab_size=8,
        d_model=8,
        n_layers=1,
        n_heads=1,
        d_ff=8,
        seq_len=4,
        attention=cfg.attention,
        checkpointing=cfg.checkpointing,
    )
    model = GPT(tiny).to(device)
    optimizer = make_optimizer(model, cfg, device)
    batch = torch.zeros(2, 5, dtype=torch.long, device=device)
    accumulate_gradients(model, [batch], autocast=autocast_for(device, cfg.precision))
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    with torch.no_grad():
        model.eval()
        model(batch[:, :4])
