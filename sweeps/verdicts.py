"""When a trial is stopped early, and how each ending is told to Optuna.

The project's own rules run on the evaluation history of one trial (the ``metrics.jsonl`` rows,
oldest first) and apply in single- and multi-objective studies alike (Optuna's pruners only
handle one objective); the judge (``sweeps.judge``) asks them first, then Optuna's pruner in
single-objective studies, then successive halving or Hyperband on tokens trained
(``sweeps.fidelity``).

- Divergence: a non-finite validation loss, or ``val_loss`` above ``ratio`` x the best value so
  far for ``patience`` evaluations in a row. (A non-finite *training* loss is caught by the child
  itself: it ends with outcome ``diverged``.)
- Verdicts on what the model predicts (``CollapseLimits``), never before ``min_steps`` optimizer
  steps, nor before its learning rate summed over them (``lr_sum``, ``lm.schedule``) reaches
  ``min_lr_sum``: a model judged after 3 or 19 steps has not been trained, whatever it predicts,
  and nor has one whose rate was so small that its weights cannot have moved far from their
  initial values (AdamW moves a weight by about ``lr`` at most per step). Then, for
  ``patience`` evaluations in a row:
  - ``unigram_collapse``: predictions that ignore the context (``mean_kl_to_mean``, nats, below
    ``max_context_kl``), whose mean is the corpus unigram (``kl_mean_to_unigram`` below
    ``max_unigram_kl``) and that are no better than it (``unigram_gap`` = unigram entropy - val
    loss, below ``min_unigram_gap``, 0 by default: worse than it): the classic failure, and the
    only thing called that;
  - ``stalled``: context-free and worse than the unigram, but far from it (near uniform,
    or stuck elsewhere): not learning, which is not the same failure;
  - ``unk_dominated``: ``<unk>`` is the likeliest prediction at most positions
    (``unk_argmax_rate``) and most of what the model writes (``unk_rate_samples``): a capped word
    vocabulary whose accuracy is about its share of ``<unk>`` targets.
  A trial whose budget cannot reach ``min_steps`` steps (``planned_steps``) or ``min_lr_sum``
  is never judged: it runs to the end with an ``under_trained`` note (``under_trained_note``),
  and its value is told to the sampler like any other, since at equal tokens it is an honest
  point.

Everything here is a pure function of plain dicts and configs: no Optuna trial, no files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from lm import outcomes
from lm.config import TrainConfig
from lm.schedule import lr_sum
from sweeps.spec import CollapseLimits, DivergenceLimits, Limits

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """Why a trial is stopped: an outcome (``lm.outcomes``) and a human one-liner."""

    outcome: str
    reason: str


def finite(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a finite number (a bool is not one): a metric worth comparing."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def divergence(history: Sequence[Row], limits: DivergenceLimits) -> Verdict | None:
    """``diverged`` when the newest evaluation's loss is non-finite, or the last ``patience``
    losses are all above ``ratio`` x the best loss before them."""
    if not limits.enabled or not history:
        return None
    last = history[-1]
    n = len(history)
    # A row without the key had a value of the wrong type (dropped by the runner): not judged.
    if "val_loss" in last and not finite(last["val_loss"]):
        return Verdict(
            outcomes.DIVERGED,
            f"val_loss is not finite ({last.get('val_loss')}) at "
            f"evaluation {n} ({_tokens(last)} tokens)",
        )
    if n <= limits.patience:
        return None
    earlier = [r["val_loss"] for r in history[: n - limits.patience] if finite(r.get("val_loss"))]
    if not earlier:
        return None
    best = min(earlier)
    recent = [r.get("val_loss") for r in history[n - limits.patience :]]
    if best > 0 and all(finite(v) and v > limits.ratio * best for v in recent):
        return Verdict(
            outcomes.DIVERGED,
            f"val_loss {recent[-1]:.4g} above {limits.ratio:g} x the "
            f"best {best:.4g} for {limits.patience} evaluation(s), at "
            f"{_tokens(last)} tokens",
        )
    return None


def planned_steps(max_tokens: int, tokens_per_step: int) -> int:
    """Optimizer steps a trial takes to train ``max_tokens`` (the child steps until it has)."""
    return -(-int(max_tokens) // max(1, int(tokens_per_step)))


def unreachable(cfg: TrainConfig, limits: CollapseLimits) -> tuple[str, float] | None:
    """The limit a trial of configuration ``cfg`` never reaches, so that it is never judged, and
    how far it gets: ``("min_steps", its optimizer steps)`` or ``("min_lr_sum", its learning rate
    summed over them)``; None when it can be judged (or the verdicts are off)."""
    if not limits.enabled:
        return None
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    steps = planned_steps(cfg.max_tokens, cfg.tokens_per_step)
    if steps < limits.min_steps:
        return "min_steps", steps
    total = lr_sum(cfg.max_tokens, cfg, stop_at=limits.min_lr_sum)
    return ("min_lr_sum", total) if total < limits.min_lr_sum else None


def under_trained_note(cfg: TrainConfig, limits: CollapseLimits) -> str | None:
    """Why a trial of configuration ``cfg`` cannot be judged at any evaluation (too few optimizer
    steps, or too small a learning rate summed over them), or None when it can."""
    short = unreachable(cfg, limits)
    if short is None:
        return None
    limit, reached = short
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    steps = planned_steps(cfg.max_tokens, cfg.tokens_per_step)
    if limit == "min_steps":
        return (
            f"{steps} optimizer steps, fewer than the {limits.min_steps} needed to judge "
            "its predictions (limits.collapse.min_steps); it runs to the end unjudged"
        )
    return (
        f"its learning rate summed over its {steps:,} optimizer steps is {reached:.3g}, "
        f"below the {limits.min_lr_sum:g} needed to judge its predictions "
        "(limits.collapse.min_lr_sum: AdamW moves a weight by about lr at most per "
        "step, so its weights cannot move far from where they started); it runs to the "
        "end unjudged"
    )


def trained_enough(row: Row, limits: CollapseLimits) -> bool:
    """Whether an evaluation comes late enough to judge what the model predicts: ``min_steps``
    optimizer steps, and ``min_lr_sum`` when the row has ``lr_sum`` (rows written before the
    child logged it are judged on steps alone)."""
    step, total = row.get("step"), row.get("lr_sum")
    if not isinstance(step, int) or step < limits.min_steps:
        return False
    return not finite(total) or total >= limits.min_lr_sum


def _stats(row: Row) -> tuple[float, float, float] | None:
    """(mean_kl_to_mean, kl_mean_to_unigram, unigram_gap) when all three are known."""
    values = (row.get("mean_kl_to_mean"), row.get("kl_mean_to_unigram"), row.get("unigram_gap"))
    return values if all(finite(v) for v in values) else None  # type: ignore[return-value]


def prediction_verdict(row: Row, limits: CollapseLimits) -> str | None:
    """The verdict one evaluation supports (an outcome of ``lm.outcomes.PREDICTION_VERDICTS``),
    or None: not judged before ``min_steps`` and ``min_lr_sum`` (``trained_enough``), nor on
    statistics it lacks."""
    if not trained_enough(row, limits):
        return None
    argmax, samples = row.get("unk_argmax_rate"), row.get("unk_rate_samples")
    if (
        finite(argmax)
        and finite(samples)
        and argmax > limits.max_unk_argmax
        and samples > limits.max_unk_samples
    ):
        return outcomes.UNK_DOMINATED
    stats = _stats(row)
    if stats is None:
        return None
    context_kl, unigram_kl, gap = stats
    if context_kl >= limits.max_context_kl or gap >= limits.min_unigram_gap:
        return None  # it uses its context, or it beats the unigram: learning
    return outcomes.UNIGRAM_COLLAPSE if unigram_kl < limits.max_unigram_kl else outcomes.STALLED


def still_learning(history: Sequence[Row], limits: CollapseLimits) -> float | None:
    """How much ``val_loss`` fell from the evaluation before the last ``patience`` ones to the
    last, when that is at least ``min_loss_drop`` nats: a model on its way to (or off) the
    unigram plateau, not one stuck on it. None when it is flat, rising or unknown, or when
    ``min_loss_drop`` is not set (the default: see ``CollapseLimits``)."""
    n = len(history)
    if limits.min_loss_drop is None or n <= limits.patience:
        return None
    before, last = history[n - limits.patience - 1].get("val_loss"), history[-1].get("val_loss")
    if not (finite(before) and finite(last)):
        return None
    drop = before - last
    return drop if drop >= limits.min_loss_drop else None


def collapse(
    history: Sequence[Row], limits: CollapseLimits, *, final: bool = False
) -> Verdict | None:
    """A verdict when the last ``patience`` evaluations all support the same one. With
    ``min_loss_drop`` set, a model that learns nothing (``unigram_collapse``, ``stalled``) whose
    loss still falls is not stopped (``still_learning``): a slow learning rate reaches the
    plateau late and may leave it. At its ``final`` evaluation it is judged anyway, and the
    reason says the loss was still falling."""
    if not limits.enabled or len(history) < limits.patience:
        return None
    found = {prediction_verdict(r, limits) for r in history[len(history) - limits.patience :]}
    if len(found) != 1 or None in found:
        return None
    outcome = found.pop()
    assert outcome is not None  # None in found returned above
    reason = _verdict_reason(outcome, history[-1], limits)
    drop = still_learning(history, limits) if outcome != outcomes.UNK_DOMINATED else None
    if drop is not None:
        if not final:
            return None
        reason += (
            f"; at the end of its budget, and its val_loss was still falling ({drop:.3f} "
            f"nats since evaluation {len(history) - limits.patience}): a longer budget "
            "or a higher learning rate might take it off the plateau"
        )
    return Verdict(outcome, reason)


def _verdict_reason(outcome: str, last: Row, limits: CollapseLimits) -> str:
    total = last.get("lr_sum")
    summed = f", learning rate summed to {total:.3g}" if finite(total) else ""
    where = f"after {last['step']:,} optimizer steps ({_tokens(last)} tokens{summed})"
    if outcome == outcomes.UNK_DOMINATED:
        targets = last.get("unk_rate_targets")
        share = f" (<unk> is {targets:.0%} of the targets)" if finite(targets) else ""
        return (
            f"{where}: <unk> is the likeliest prediction at {last['unk_argmax_rate']:.0%} "
            f"of positions{share} and {last['unk_rate_samples']:.0%} of sampled tokens "
            f"(limits {limits.max_unk_argmax:g} and {limits.max_unk_samples:g}): the capped "
            "vocabulary's <unk> dominates what it predicts"
        )
    context_kl, unigram_kl, gap = _stats(last)  # type: ignore[misc]
    beaten = "worse than" if limits.min_unigram_gap == 0 else "not enough better than"
    common = (
        f"mean_kl_to_mean {context_kl:.4f} < {limits.max_context_kl:g} (its predictions "
        f"ignore the context), unigram_gap {gap:.4f} < {limits.min_unigram_gap:g} "
        f"({beaten} the unigram)"
    )
    if outcome == outcomes.UNIGRAM_COLLAPSE:
        return (
            f"{where}: {common}, kl_mean_to_unigram {unigram_kl:.4f} < "
            f"{limits.max_unigram_kl:g}: it predicts the corpus frequencies, whatever the "
            "context"
        )
    return (
        f"{where}: {common}, but kl_mean_to_unigram {unigram_kl:.4f} >= "
        f"{limits.max_unigram_kl:g}: its mean prediction is far from the corpus unigram "
        "(near uniform, or stuck elsewhere): not learning"
    )


#: An ``<unk>`` share of the validation text's bytes worth a note on a trial that is not
#: stopped for it (``unk_note``): a twentieth of the text charged 8 bits a byte.
UNK_NOTE_SHARE = 0.05


def unk_text(row: Row, limits: CollapseLimits) -> Verdict | None:
    """``unk_dominated`` when ``<unk>`` is more than ``max_unk_targets`` of the validation
    targets (``unk_rate_targets``): a fact of the tokenizer and the text, so judged at any
    evaluation, before ``min_steps`` and ``min_lr_sum``."""
    share = row.get("unk_rate_targets")
    if not limits.enabled or not finite(share) or share <= limits.max_unk_targets:
        return None
    in_bytes = row.get("unk_byte_rate")
    of_bytes = f" ({in_bytes:.0%} of the validation text's bytes)" if finite(in_bytes) else ""
    return Verdict(
        outcomes.UNK_DOMINATED,
        (
            f"<unk> is {share:.0%} of the validation targets{of_bytes}, above "
            f"limits.collapse.max_unk_targets = {limits.max_unk_targets:g}: the vocabulary drops "
            f"most of the text it is to model, however long it trains (evaluation at "
            f"{_tokens(row)} tokens)"
        ),
    )


def unk_note(unk_tokens: float | None, unk_bytes: float | None) -> str | None:
    """What a trial's vocabulary drops, when it drops a share worth saying (``UNK_NOTE_SHARE``
    of the validation text's bytes): said before it trains and kept with its result."""
    if not finite(unk_bytes) or unk_bytes < UNK_NOTE_SHARE:
        return None
    of_tokens = f"{unk_tokens:.1%} of the validation tokens, " if finite(unk_tokens) else ""
    return (
        f"<unk> stands for {of_tokens}{unk_bytes:.1%} of their bytes: the vocabulary drops "
        "that share of the text (charged 8 bits a byte in val_bpb)"
    )


def project_rules(history: Sequence[Row], limits: Limits, *, final: bool = False) -> Verdict | None:
    """The project's rules on a trial's history so far (``final``: its last evaluation, at its
    token budget): divergence first, then what the data alone shows (``unk_text``), then the
    verdicts on its predictions."""
    return (
        divergence(history, limits.divergence)
        or (unk_text(history[-1], limits.collapse) if history else None)
        or collapse(history, limits.collapse, final=final)
    )


def optuna_prune_reason(pruner: str, metric: str, value: float | None, index: int, row: Row) -> str:
    """The reason recorded when Optuna's pruner stops a trial."""
    shown = "n/a" if value is None else f"{value:.4f}"
    return (
        f"{pruner} pruner: {metric} {shown} at evaluation {index + 1} "
        f"({_tokens(row)} tokens) is worse than the other trials at that point"
    )


def _tokens(row: Row) -> str:
    tokens = row.get("tokens")
    return f"{tokens:,}" if isinstance(tokens, int) else "?"
