"""When a trial is stopped early, and how each ending is told to Optuna.

The project's own rules run on the evaluation history of one trial (the ``metrics.jsonl`` rows,
oldest first) and apply in single- and multi-objective studies alike (Optuna's pruners only
handle one objective); the runner also asks Optuna's pruner in single-objective studies.

- Divergence: a non-finite validation loss, or ``val_loss`` above ``ratio`` x the best value so
  far for ``patience`` evaluations in a row. (A non-finite *training* loss is caught by the child
  itself: it ends with outcome ``diverged``.)
- Unigram collapse: after the warm-up, ``unigram_gap`` (unigram entropy - val loss, nats/token)
  below ``min_unigram_gap`` AND ``mean_kl_to_mean`` (how much predictions vary with the context,
  nats) below ``max_context_kl``, for ``patience`` evaluations in a row: the model predicts the
  corpus frequencies whatever the context. Both conditions are needed: a tiny word vocabulary can
  have a small gap while its predictions still use context, and a model early in training has
  context-independent predictions that are still far from the unigram (a large negative gap is
  caught once the warm-up is over, since it is below the threshold too: it has learned less
  than the unigram).

Everything here is a pure function of plain dicts: no Optuna trial, no files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lm import outcomes
from sweeps.spec import CollapseLimits, DivergenceLimits, Limits

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """Why a trial is stopped: an outcome (``lm.outcomes``) and a human one-liner."""

    outcome: str
    reason: str


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def divergence(history: Sequence[Row], limits: DivergenceLimits) -> Verdict | None:
    """``diverged`` when the newest evaluation's loss is non-finite, or the last ``patience``
    losses are all above ``ratio`` x the best loss before them."""
    if not limits.enabled or not history:
        return None
    last = history[-1]
    n = len(history)
    # A row without the key had a value of the wrong type (dropped by the runner): not judged.
    if "val_loss" in last and not _finite(last["val_loss"]):
        return Verdict(outcomes.DIVERGED, f"val_loss is not finite ({last.get('val_loss')}) at "
                       f"evaluation {n} ({_tokens(last)} tokens)")
    if n <= limits.patience:
        return None
    earlier = [r["val_loss"] for r in history[: n - limits.patience] if _finite(r.get("val_loss"))]
    if not earlier:
        return None
    best = min(earlier)
    recent = [r.get("val_loss") for r in history[n - limits.patience:]]
    if best > 0 and all(_finite(v) and v > limits.ratio * best for v in recent):
        return Verdict(outcomes.DIVERGED, f"val_loss {recent[-1]:.4g} above {limits.ratio:g} x the "
                       f"best {best:.4g} for {limits.patience} evaluation(s), at "
                       f"{_tokens(last)} tokens")
    return None


def past_warmup(index: int, row: Row, limits: CollapseLimits) -> bool:
    """Whether evaluation ``index`` (0-based) is after the collapse warm-up: more than
    ``warmup_evals`` evaluations done, or at least ``warmup_tokens`` trained."""
    if limits.warmup_tokens is not None:
        return isinstance(row.get("tokens"), int) and row["tokens"] >= limits.warmup_tokens
    return index >= (limits.warmup_evals or 0)


def is_collapsed(row: Row, limits: CollapseLimits) -> bool:
    """One evaluation's collapse test (both statistics must be known)."""
    gap, context_kl = row.get("unigram_gap"), row.get("mean_kl_to_mean")
    return _finite(gap) and _finite(context_kl) and gap < limits.min_unigram_gap \
        and context_kl < limits.max_context_kl


def collapse(history: Sequence[Row], limits: CollapseLimits) -> Verdict | None:
    """``unigram_collapse`` when the last ``patience`` evaluations, all after the warm-up, are
    collapsed (``is_collapsed``)."""
    if not limits.enabled or len(history) < limits.patience:
        return None
    start = len(history) - limits.patience
    for i in range(start, len(history)):
        if not past_warmup(i, history[i], limits) or not is_collapsed(history[i], limits):
            return None
    last = history[-1]
    return Verdict(outcomes.UNIGRAM_COLLAPSE, f"unigram_gap {last['unigram_gap']:.4f} < "
                   f"{limits.min_unigram_gap:g} and mean_kl_to_mean "
                   f"{last['mean_kl_to_mean']:.4f} < {limits.max_context_kl:g} at "
                   f"{_tokens(last)} tokens: it predicts corpus frequencies, whatever the context")


def project_rules(history: Sequence[Row], limits: Limits) -> Verdict | None:
    """The project's rules on a trial's history so far: divergence first, then collapse."""
    return divergence(history, limits.divergence) or collapse(history, limits.collapse)


def optuna_prune_reason(pruner: str, metric: str, value: float | None, index: int,
                        row: Row) -> str:
    """The reason recorded when Optuna's pruner stops a trial."""
    shown = "n/a" if value is None else f"{value:.4f}"
    return (f"{pruner} pruner: {metric} {shown} at evaluation {index + 1} "
            f"({_tokens(row)} tokens) is worse than the other trials at that point")


def _tokens(row: Row) -> str:
    tokens = row.get("tokens")
    return f"{tokens:,}" if isinstance(tokens, int) else "?"
