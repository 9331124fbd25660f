"""The learning rate by tokens trained: warm-up, then cosine or warm-up, stable, decay (WSD).

Pure arithmetic on a ``TrainConfig`` (no torch), so tests and the orchestrator can read a
schedule without training.

- **cosine**: linear warm-up over ``warmup_tokens``, then cosine to ``MIN_LR_FRACTION * lr`` at
  ``max_tokens``.
- **wsd** (Hägele et al., 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training
  Durations"): the same warm-up, ``lr`` held, then a decay to 0 over the last ``decay_tokens``
  (``round(decay_fraction * max_tokens)``) in ``decay_shape``. The rate is the warm-up factor
  times the decay factor, so a decay that starts inside the warm-up is still well defined.

A **cooldown read** at ``p`` tokens (``lm.cooldown``) decays over ``c = cooldown_tokens(cfg,
p)`` tokens from ``p``: ``cooldown_lr`` is, step for step, the rate of a WSD run with
``max_tokens = p + c`` whose decay covers its last ``c`` tokens, so the read measures that run.

**How far the weights could have moved** (``lr_sum``): AdamW moves each weight by about ``lr``
at most per step (its update is ``lr`` times a ratio of gradient moments near 1 or below), so the
learning rate summed over the steps taken bounds how far training can have taken a weight from
its initial value. The verdicts on predictions (``sweeps.verdicts``) wait for it, as for steps.
"""

from __future__ import annotations

import math

from lm.config import TrainConfig

#: The cosine schedule decays to this fraction of ``lr`` at ``max_tokens``.
MIN_LR_FRACTION = 0.1


def lr_at(tokens: int, cfg: TrainConfig) -> float:
    """The learning rate of the optimizer step that starts after ``tokens`` training tokens."""
    assert cfg.max_tokens is not None and cfg.warmup_tokens is not None  # resolved (lm.budget)
    if cfg.lr_schedule == "wsd":
        return _warm(tokens, cfg) * decay_factor(
            tokens, cfg.max_tokens - decay_tokens(cfg), decay_tokens(cfg), cfg.decay_shape
        )
    if tokens < cfg.warmup_tokens:
        return _warm(tokens, cfg)
    span = max(cfg.max_tokens - cfg.warmup_tokens, 1)
    progress = min((tokens - cfg.warmup_tokens) / span, 1.0)
    low = cfg.lr * MIN_LR_FRACTION
    return low + 0.5 * (cfg.lr - low) * (1.0 + math.cos(math.pi * progress))


def lr_sum(tokens: int, cfg: TrainConfig, *, stop_at: float | None = None) -> float:
    """The learning rate summed over the optimizer steps that train the first ``tokens`` tokens
    (the steps that start before ``tokens``). With ``stop_at``, the sum as soon as it reaches
    that value (a bound is all a caller needs; a long run's full sum takes a pass per step)."""
    total, step = 0.0, cfg.tokens_per_step
    for start in range(0, int(tokens), step):
        total += lr_at(start, cfg)
        if stop_at is not None and total >= stop_at:
            break
    return total


def cooldown_lr(tokens: int, start: int, span: int, cfg: TrainConfig) -> float:
    """The rate at ``tokens`` of a cooldown read that branched at ``start`` and decays over
    ``span`` tokens: the warm-up (if it is not over yet) times the decay from ``start``."""
    return _warm(tokens, cfg) * decay_factor(tokens, start, span, cfg.decay_shape)


def decay_tokens(cfg: TrainConfig) -> int:
    """The length of a WSD run's final decay, in tokens."""
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    return round(cfg.decay_fraction * cfg.max_tokens)


def cooldown_tokens(cfg: TrainConfig, tokens: int) -> int:
    """The length of the decay of a cooldown read taken after ``tokens`` training tokens."""
    return round(cfg.read_cooldown_fraction * tokens)


def read_points(cfg: TrainConfig) -> tuple[int, ...]:
    """The tokens at which the run takes its cooldown reads: the first step boundary at or past
    each point of ``cooldown_reads`` (one read however many points one step passes), before the
    end of the run (whose own decay is its cooldown)."""
    step = cfg.tokens_per_step
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    ends = (math.ceil(point / step) * step for point in cfg.cooldown_reads)
    return tuple(sorted({p for p in ends if p < cfg.max_tokens}))


def branch_tokens(cfg: TrainConfig, tokens: int) -> int:
    """The tokens a cooldown read after ``tokens`` trains: whole steps over its decay."""
    step = cfg.tokens_per_step
    return math.ceil(cooldown_tokens(cfg, tokens) / step) * step


def decay_factor(tokens: int, start: int, span: int, shape: str) -> float:
    """1 before ``start``, then falling to 0 at ``start + span``: ``1 - x`` (linear) or
    ``1 - sqrt(x)`` (1-sqrt), ``x`` the share of the decay done."""
    if tokens < start or span <= 0:
        return 1.0
    done = min((tokens - start) / span, 1.0)
    return 1.0 - (math.sqrt(done) if shape == "1-sqrt" else done)


def _warm(tokens: int, cfg: TrainConfig) -> float:
    """``lr`` scaled by the linear warm-up; the first step already gets a non-zero rate."""
    assert cfg.warmup_tokens is not None  # resolved (lm.budget)
    if tokens < cfg.warmup_tokens:
        return cfg.lr * (tokens + cfg.tokens_per_step) / (cfg.warmup_tokens + cfg.tokens_per_step)
    return cfg.lr
