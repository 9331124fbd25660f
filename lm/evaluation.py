"""The fixed validation subset and one evaluation of a model on it: loss, bits per byte,
accuracy, the ``<unk>`` shares and the collapse statistics (``lm.metrics``). The training loop
(``lm.train``) evaluates with these at every ``eval_every_tokens`` and at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lm import flops, metrics
from lm.model import GPT


class TooLittleData(Exception):
    """A split of the corpus is shorter than one window of this configuration (``seq_len + 1``
    tokens with its tokenizer). Not bad input: the config and the corpus are each valid, only
    their pair is not, which the parent cannot always know before the tokens exist; so the run
    ends with outcome ``too_little_data`` (counted, infeasible), never an environment failure
    that would be re-queued and replayed forever."""


def eval_windows(
    val: np.ndarray,
    val_nbytes: np.ndarray,
    seq_len: int,
    eval_tokens: int,
    eval_bytes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed validation subset: the first ``eval_tokens`` targets of the split, cut into
    consecutive windows -> ids (N, T + 1) and the bytes each target stands for (N, T). With
    ``eval_bytes``, the windows whose targets cover the first ``eval_bytes`` bytes of the
    split's text: the same text for every tokenizer, to within one window."""
    available = (len(val) - 1) // seq_len
    if available < 1:
        raise TooLittleData(
            f"the validation split has {len(val)} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
            "use a smaller seq_len or a bigger val_fraction"
        )
    if eval_bytes is not None:
        covered = np.cumsum(np.asarray(val_nbytes[1 : available * seq_len + 1]), dtype=np.int64)
        targets = int(np.searchsorted(covered, eval_bytes)) + 1
        n = min(max(1, math.ceil(targets / seq_len)), available)
    else:
        n = flops.eval_windows(eval_tokens, seq_len, len(val))
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)  # (N, T + 1)
    ids = torch.from_numpy(np.asarray(val[idx], dtype=np.int64))
    nbytes = torch.from_numpy(np.asarray(val_nbytes[idx[:, 1:]], dtype=np.int64))  # targets'
    return ids, nbytes


@torch.no_grad()
def evaluate(
    model: GPT,
    windows: torch.Tensor,
    nbytes: torch.Tensor,
    *,
    batch_size: int,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager[Any]],
    unk_id: int | None,
    unigram: torch.Tensor,
    token_strings: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Loss, bits per byte, accuracy and collapse statistics on fixed windows (eval mode); with
    ``token_strings``, also ``top_tokens`` (the collapse chart's corpus-vs-model frequencies)."""
    model.eval()
    nll_sum, bits, n_bytes, correct, n, unk, unk_argmax = 0.0, 0.0, 0, 0, 0, 0, 0
    unk_bytes = 0
    collapse = metrics.CollapseStats(model.cfg.vocab_size)
    for i in range(0, len(windows), batch_size):
        batch = windows[i : i + batch_size].to(device)
        x, y = batch[:, :-1], batch[:, 1:]  # (b, T)
        with autocast():
            logits = model(x)
        logits = logits.float().reshape(-1, logits.size(-1))  # (b*T, V)
        y = y.reshape(-1)
        nll = F.cross_entropy(logits, y, reduction="none")  # (b*T,)
        b, nb = metrics.bpb_terms(nll.cpu(), y.cpu(), nbytes[i : i + batch_size], unk_id)
        bits += b
        n_bytes += nb
        nll_sum += float(nll.double().sum())
        predicted = logits.argmax(-1)
        correct += int((predicted == y).sum())
        n += y.numel()
        if unk_id is not None:
            is_unk = y == unk_id
            unk += int(is_unk.sum())
            unk_argmax += int((predicted == unk_id).sum())
            unk_bytes += int(nbytes[i : i + batch_size].reshape(-1)[is_unk.cpu()].sum())
        collapse.update(logits)
    model.train()
    out: dict[str, Any] = {
        "val_loss": nll_sum / n,
        "val_bpb": bits / n_bytes if n_bytes else float("nan"),
        "accuracy": correct / n,
        **collapse.result(unigram),
        "unk_rate_targets": unk / n,
        # Where <unk> is the likeliest prediction: a capped word vocabulary's failure shows here
        # (its accuracy is then about its share of <unk> targets).
        "unk_argmax_rate": unk_argmax / n,
        # The share of the validation text's bytes <unk> stands for: what the vocabulary drops.
        "unk_byte_rate": unk_bytes / n_bytes if n_bytes else 0.0,
    }
    if token_strings is not None:
        out["top_tokens"] = metrics.top_tokens(collapse.mean(), unigram, token_strings)
    return out
