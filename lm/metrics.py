"""Metrics that compare runs across tokenizers and catch unigram collapse.

- Bits per byte: the targets' total negative log-likelihood in bits over the UTF-8 bytes of user
  text they stand for. Marker targets (``<Q>``, ``<A>``, ``<D>``) stand for 0 bytes but their bits
  still count: structure is part of what the model must predict. An ``<unk>`` target is charged
  its model NLL plus 8 bits per byte of the word it replaced (the cost of spelling it out), so a
  tiny word vocabulary cannot win by predicting ``<unk>`` cheaply.
- Unigram baseline: the entropy (nats/token) of the training split's token distribution, the loss
  of a model that ignores context; ``unigram_gap`` = entropy - val loss (> 0: context helps).
- Collapse statistics over the predicted next-token distributions p_i of a validation set, with
  mean m = mean_i p_i: KL(m || unigram) (near 0: the model predicts corpus frequencies), mean_i
  KL(p_i || m) (near 0: every prediction is the same, whatever the context), and the overlap of
  the top-20 tokens of m and of the corpus. ``top_tokens`` lists those tokens with both
  probabilities, so a report can draw the two distributions side by side.

Everything here is a pure function of tensors/arrays (or a small accumulator), testable by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

LN2 = math.log(2.0)
#: Bits charged per byte of text an ``<unk>`` replaced (spelling it out with a byte model).
UNK_BITS_PER_BYTE = 8.0
#: Additive smoothing of the unigram model, so an unseen validation token has finite cost.
UNIGRAM_SMOOTHING = 0.5


def _as_tensor(x: torch.Tensor | np.ndarray | Sequence[float]) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(np.asarray(x))


def bpb_terms(
    nll_nats: torch.Tensor, targets: torch.Tensor, nbytes: torch.Tensor, unk_id: int | None
) -> tuple[float, int]:
    """(bits, bytes) of a set of targets, to be summed over batches and divided at the end.

    ``nll_nats[i]`` is the model's -ln p(target i); ``nbytes[i]`` the bytes target i stands for.
    """
    nll = _as_tensor(nll_nats).double().reshape(-1)
    nb = _as_tensor(nbytes).reshape(-1).to(torch.float64, copy=True)
    bits = nll.sum().item() / LN2
    if unk_id is not None:
        is_unk = _as_tensor(targets).reshape(-1).to(nb.device) == unk_id
        bits += UNK_BITS_PER_BYTE * nb[is_unk].sum().item()
    return bits, int(nb.sum().item())


def bits_per_byte(
    nll_nats: torch.Tensor, targets: torch.Tensor, nbytes: torch.Tensor, unk_id: int | None
) -> float:
    """Total bits of the targets (``<unk>`` charged 8 bits/byte extra) per byte they stand for."""
    bits, n = bpb_terms(nll_nats, targets, nbytes, unk_id)
    return bits / n if n else float("nan")


def unigram_entropy(counts: Sequence[int] | np.ndarray) -> float:
    """Entropy in nats/token of the empirical distribution ``counts / sum(counts)``."""
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if total <= 0:
        return float("nan")
    p = c[c > 0] / total
    return float(-(p * np.log(p)).sum())


def unigram_gap(entropy: float, val_loss: float) -> float:
    """Unigram entropy minus validation loss (nats/token): > 0 when context is used."""
    return entropy - val_loss


def unigram_probs(
    counts: Sequence[int] | np.ndarray, smoothing: float = UNIGRAM_SMOOTHING
) -> torch.Tensor:
    """The smoothed unigram model (V,), float64: (count + smoothing) / (total + V * smoothing)."""
    c = torch.as_tensor(np.asarray(counts, dtype=np.float64)) + smoothing
    return c / c.sum()


def unigram_bpb(
    counts: Sequence[int] | np.ndarray,
    targets: torch.Tensor,
    nbytes: torch.Tensor,
    unk_id: int | None,
) -> float:
    """Bits per byte of the (smoothed) unigram model on the same targets: the bar to beat."""
    t = _as_tensor(targets).reshape(-1).long()
    nll = -torch.log(unigram_probs(counts))[t]
    return bits_per_byte(nll, t, nbytes, unk_id)


def kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(p || q) in nats for distributions over the last axis (0 * log 0 = 0)."""
    p, q = p.double(), q.double()
    terms = torch.where(p > 0, p * (torch.log(p) - torch.log(q)), torch.zeros_like(p))
    return float(terms.sum())


def top_k_overlap(p: torch.Tensor, q: torch.Tensor, k: int = 20) -> float:
    """Share of the k likeliest ids of ``p`` that are among the k likeliest of ``q``."""
    k = min(k, p.numel())
    a = set(torch.topk(p.double(), k).indices.tolist())
    b = set(torch.topk(q.double(), k).indices.tolist())
    return len(a & b) / k


class CollapseStats:
    """Accumulates next-token distributions batch by batch (never holding N x V at once)."""

    def __init__(self, vocab_size: int) -> None:
        self.sum_probs = torch.zeros(vocab_size, dtype=torch.float64)
        self.sum_neg_entropy = 0.0  # sum_i sum_v p_iv ln p_iv
        self.n = 0

    def update(self, logits: torch.Tensor) -> None:
        """Add the predictions of ``logits`` (..., V)."""
        x = logits.detach()
        x = x if x.dtype == torch.float64 else x.float()
        logp = torch.log_softmax(x.reshape(-1, x.shape[-1]), dim=-1)
        p = logp.exp()
        self.sum_probs += p.sum(0).double().cpu()
        # p * logp is 0 where p underflows to 0 (logp is finite for finite logits).
        self.sum_neg_entropy += float((p * logp).sum().double())
        self.n += p.shape[0]

    def mean(self) -> torch.Tensor:
        """The mean predicted distribution m (V,), float64 (zeros before any update)."""
        return self.sum_probs / max(self.n, 1)

    def result(self, unigram: torch.Tensor, k: int = 20) -> dict[str, float]:
        """kl_mean_to_unigram, mean_kl_to_mean, top20_overlap (nats; share)."""
        if self.n == 0:
            nan = float("nan")
            return {"kl_mean_to_unigram": nan, "mean_kl_to_mean": nan, "top20_overlap": nan}
        m = self.sum_probs / self.n
        # mean_i KL(p_i || m) = mean_i sum p_i ln p_i - sum_v m_v ln m_v  (= H(m) - mean_i H(p_i))
        m_neg_entropy = float(torch.where(m > 0, m * torch.log(m), torch.zeros_like(m)).sum())
        mean_kl = self.sum_neg_entropy / self.n - m_neg_entropy
        return {
            # Both are >= 0 in exact arithmetic: clamp rounding noise around a true 0.
            "kl_mean_to_unigram": max(kl(m, unigram), 0.0),
            "mean_kl_to_mean": max(mean_kl, 0.0),
            "top20_overlap": top_k_overlap(m, unigram, k),
        }


def collapse_stats(probs: torch.Tensor, unigram: torch.Tensor, k: int = 20) -> dict[str, float]:
    """Collapse statistics of predicted distributions ``probs`` (N, V) against ``unigram`` (V,)."""
    acc = CollapseStats(probs.shape[-1])
    acc.update(torch.log(probs.double().clamp_min(1e-300)))
    return acc.result(unigram, k)


def top_tokens(
    mean: torch.Tensor, unigram: torch.Tensor, strings: Sequence[str], k: int = 20
) -> dict[str, list[Any]]:
    """The union of the k likeliest tokens of the corpus ``unigram`` and of the model's ``mean``
    prediction, most frequent in the corpus first: ``{"tokens": [display strings], "corpus":
    [p], "model": [p]}`` (probabilities to 6 significant digits: this goes in every evaluation)."""
    m, u = mean.double().reshape(-1), unigram.double().reshape(-1)
    k = min(k, u.numel())
    ids = set(torch.topk(u, k).indices.tolist()) | set(torch.topk(m, k).indices.tolist())
    order = sorted(ids, key=lambda i: (-float(u[i]), -float(m[i]), i))
    return {
        "tokens": [strings[i] if i < len(strings) else f"<{i}>" for i in order],
        "corpus": [float(f"{float(u[i]):.6g}") for i in order],
        "model": [float(f"{float(m[i]):.6g}") for i in order],
    }
