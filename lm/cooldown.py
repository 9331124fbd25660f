"""Cooldown reads: the loss a WSD run would end at if its learning rate decayed from here.

Under warm-up, stable, decay (``lm.schedule``) a run can be cooled down from any point, and the
loss after the cooldown matches a full run of that length (Hägele et al., 2024), so a trial read
early is judged by where it would end, not by how fast it is still moving.

Definition. A read after ``p`` training tokens (``lm.schedule.read_points``: the first step
boundary at or past a point of ``cooldown_reads``), with ``c = lm.schedule.cooldown_tokens(cfg,
p)``, trains a branch of the run from its state at ``p`` for the optimizer steps that start at
``p``, ``p + s``, ... below ``p + c`` (``s`` = ``tokens_per_step``) at
``lm.schedule.cooldown_lr`` (the warm-up, if not over, times the decay from 1 at ``p`` to 0 at
``p + c`` in ``decay_shape``), then evaluates it as every evaluation is evaluated. These are
exactly the steps, batches and rates of a WSD run with ``max_tokens = p + c`` whose decay
covers its last ``c`` tokens, so the read's numbers are that run's final ones. Its
``metrics.jsonl`` line has ``"read": "cooldown"``, ``tokens`` = ``p`` (where the run is) and
``cooldown_tokens`` = the tokens the branch trained (``lm.schedule.branch_tokens``: whole
steps).

Then the state at ``p`` is put back (``lm.snapshot``: weights, AdamW, gradient scaler, the
batch sampler's generator, torch's generators; and Python's and NumPy's global generators,
which training does not draw from today, so that no later draw can tell a read happened): the
run goes on at its stable rate and ends as it would have without reads. The branch's tokens are
compute the trial spent: ``RunResult.cooldown_tokens_total``.
"""

from __future__ import annotations

import math
import random
from typing import Any, Protocol

import numpy as np

from lm import schedule
from lm.config import TrainConfig
from lm.run_files import READ_COOLDOWN


class Branchable(Protocol):
    """What a read needs of the run (``lm.train``'s run state)."""

    cfg: TrainConfig
    tokens: int
    lr_sum: float

    def take(self) -> dict[str, Any]:
        """The trainable state, copied (``lm.snapshot.Trainables.take(copy=True)``)."""

    def put(self, state: dict[str, Any]) -> None:
        """Back to a state from ``take``."""

    def optimizer_step(self, lr: float, read_step: int | None = None) -> float:
        """One optimizer step at ``lr`` (step ``read_step`` of a read's branch); its mean
        training loss."""

    def measure(self, lr: float, train_loss: float) -> dict[str, Any]:
        """An evaluation's ``metrics.jsonl`` row of the weights as they are (nothing recorded)."""

    def train_bytes(self, tokens: int) -> int:
        """The bytes of training text ``tokens`` training tokens stand for."""


def read(run: Branchable) -> dict[str, Any]:
    """Take a cooldown read at ``run.tokens`` (the definition above) and put the run back; the
    read's ``metrics.jsonl`` row (not yet written)."""
    cfg, start = run.cfg, run.tokens
    span = schedule.cooldown_tokens(cfg, start)
    saved = run.take()
    global_rngs = random.getstate(), np.random.get_state()
    tokens, loss_sum, steps = start, 0.0, 0
    lr_sum = run.lr_sum  # the branch's, added to the run's as the WSD run's would be
    lr = schedule.cooldown_lr(start, start, span, cfg)
    # No try/finally: a branch that fails (diverges, runs out of memory, is interrupted) ends
    # the run, whose state is then not trained on again.
    while tokens < start + span:
        lr = schedule.cooldown_lr(tokens, start, span, cfg)
        loss_sum += run.optimizer_step(lr, steps + 1)
        lr_sum += lr
        steps += 1
        tokens += cfg.tokens_per_step
    row = run.measure(lr, loss_sum / steps if steps else math.nan)
    run.put(saved)
    random.setstate(global_rngs[0])
    np.random.set_state(global_rngs[1])
    # Its text, as its lr_sum, is the WSD run's that ends where the branch does.
    return {
        **row,
        "lr_sum": lr_sum,
        "train_bytes": run.train_bytes(tokens),
        "read": READ_COOLDOWN,
        "cooldown_tokens": tokens - start,
    }
