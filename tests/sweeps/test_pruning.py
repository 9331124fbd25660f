"""The project's pruning rules on evaluation histories (plain dicts, no training).

The collapse numbers are real: rows measured on the 300 KB synthetic corpus with a one-layer
d_model=32 model (word tokenizer with 6 ids: everything is ``<unk>`` or a marker, the model
predicts the unigram; word tokenizer with 300 ids after 30k tokens: it beats the unigram by
0.6 nats/token), judged with the spec's default thresholds (0.05 nats each).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from lm import outcomes
from sweeps import pruning
from sweeps.spec import CollapseLimits, DivergenceLimits, Limits

COLLAPSED = {"tokens": 12_032, "val_loss": 0.275, "unigram_gap": 0.001, "mean_kl_to_mean": 0.0008}
HEALTHY = {"tokens": 30_080, "val_loss": 3.084, "unigram_gap": 0.602, "mean_kl_to_mean": 0.0919}
# Early in training: predictions ignore the context and are worse than the unigram.
EARLY = {"tokens": 4_096, "val_loss": 5.255, "unigram_gap": -1.145, "mean_kl_to_mean": 0.0002}


def rows(*losses: float | None) -> list[dict]:
    return [{"tokens": 1000 * (i + 1), "val_loss": v} for i, v in enumerate(losses)]


# --- divergence -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, math.nan, math.inf])
def test_a_non_finite_loss_diverges_at_once(bad: float | None) -> None:
    verdict = pruning.divergence(rows(3.0, bad), DivergenceLimits())
    assert verdict is not None and verdict.outcome == "diverged"
    assert "not finite" in verdict.reason and "evaluation 2" in verdict.reason


def test_rising_loss_diverges_after_patience_evaluations() -> None:
    limits = DivergenceLimits(ratio=1.5, patience=2)
    assert pruning.divergence(rows(4.0, 3.0, 4.6), limits) is None  # once: patience is 2
    verdict = pruning.divergence(rows(4.0, 3.0, 4.6, 5.0), limits)
    assert verdict is not None and verdict.outcome == "diverged"
    assert "1.5 x the best 3" in verdict.reason


def test_noise_below_the_ratio_is_not_divergence() -> None:
    limits = DivergenceLimits(ratio=1.5, patience=1)
    assert pruning.divergence(rows(4.0, 3.0, 4.4, 3.9, 4.49), limits) is None
    assert pruning.divergence(rows(4.0, 3.0, 4.51), limits) is not None


def test_one_high_value_between_good_ones_is_not_a_streak() -> None:
    limits = DivergenceLimits(ratio=1.5, patience=2)
    assert pruning.divergence(rows(3.0, 5.0, 3.1, 5.0), limits) is None


def test_divergence_can_be_turned_off() -> None:
    assert pruning.divergence(rows(3.0, None), DivergenceLimits(enabled=False)) is None


# --- collapse -------------------------------------------------------------------------------------


def test_collapse_waits_for_the_warm_up() -> None:
    limits = CollapseLimits(warmup_evals=2)
    assert pruning.collapse([EARLY], limits) is None
    assert pruning.collapse([EARLY, COLLAPSED], limits) is None  # 2 warm-up evaluations
    verdict = pruning.collapse([EARLY, COLLAPSED, COLLAPSED], limits)
    assert verdict is not None and verdict.outcome == "unigram_collapse"
    assert "unigram_gap 0.0010 < 0.05" in verdict.reason
    assert "mean_kl_to_mean 0.0008 < 0.05" in verdict.reason


def test_a_model_that_uses_context_is_not_collapsed() -> None:
    limits = CollapseLimits(warmup_evals=0)
    assert pruning.collapse([HEALTHY], limits) is None
    # A small gap alone is not collapse when predictions still depend on the context.
    assert pruning.collapse([{**COLLAPSED, "mean_kl_to_mean": 0.3}], limits) is None
    # Context-free predictions alone are not collapse when they beat the unigram.
    assert pruning.collapse([{**COLLAPSED, "unigram_gap": 0.4}], limits) is None


def test_still_below_the_unigram_after_the_warm_up_is_collapse() -> None:
    assert pruning.collapse([EARLY], CollapseLimits(warmup_evals=0)) is not None


def test_collapse_patience_needs_consecutive_evaluations() -> None:
    limits = CollapseLimits(warmup_evals=0, patience=2)
    assert pruning.collapse([COLLAPSED], limits) is None
    assert pruning.collapse([COLLAPSED, HEALTHY, COLLAPSED], limits) is None
    assert pruning.collapse([HEALTHY, COLLAPSED, COLLAPSED], limits) is not None


def test_collapse_warm_up_in_tokens() -> None:
    limits = CollapseLimits(warmup_evals=None, warmup_tokens=20_000)
    assert pruning.collapse([COLLAPSED], limits) is None  # 12,032 tokens
    assert pruning.collapse([{**COLLAPSED, "tokens": 20_000}], limits) is not None


def test_missing_statistics_are_never_collapse() -> None:
    limits = CollapseLimits(warmup_evals=0)
    assert pruning.collapse([{**COLLAPSED, "unigram_gap": None}], limits) is None
    assert pruning.collapse([{**COLLAPSED, "mean_kl_to_mean": None}], limits) is None
    assert pruning.collapse([COLLAPSED], CollapseLimits(enabled=False)) is None


def test_project_rules_check_divergence_first() -> None:
    limits = Limits(collapse=CollapseLimits(warmup_evals=0))
    diverged = {**COLLAPSED, "val_loss": None}
    assert pruning.project_rules([diverged], limits).outcome == "diverged"
    assert pruning.project_rules([COLLAPSED], limits).outcome == "unigram_collapse"
    assert pruning.project_rules([HEALTHY], limits) is None


# --- how outcomes are told -----------------------------------------------------------------------


def test_outcome_states_and_constraints() -> None:
    assert outcomes.state_name("complete") == "COMPLETE"
    for outcome in ("pruned", "predicted_oom", "oom", "unigram_collapse", "diverged", "timeout"):
        assert outcomes.state_name(outcome) == "PRUNED"
    for outcome in ("crashed", "interrupted"):
        assert outcomes.state_name(outcome) == "FAIL"
    assert set(outcomes.ENDINGS) == outcomes.PRUNED_OUTCOMES | outcomes.FAILED_OUTCOMES | {
        "complete"}
    assert [outcomes.constraint_value(o) for o in ("oom", "predicted_oom", "complete", "pruned")] \
        == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        outcomes.state_name("exploded")
    with pytest.raises(ValueError):  # a state of a trial not finished is not an ending
        outcomes.state_name("running")


def test_one_outcome_vocabulary() -> None:
    """Every ending the child can report has an exit code; the shown outcome of a trial without
    a recorded one follows its state; every outcome has its own colour."""
    assert set(outcomes.EXIT_CODES) <= set(outcomes.ENDINGS)
    assert outcomes.outcome_for_exit_code(3) == "oom" and outcomes.outcome_for_exit_code(2) is None
    assert outcomes.shown(None, "FAIL") == "crashed"
    assert outcomes.shown("oom", "PRUNED") == "oom"
    assert outcomes.shown("oom", "RUNNING") == "running"  # a stale attribute of a re-run
    assert len(set(outcomes.COLORS.values())) == len(outcomes.ORDER)
    assert outcomes.display_order(["zz", "oom", "complete"]) == ["complete", "oom", "zz"]


def test_outcome_names_defined_once() -> None:
    """No module but lm/outcomes.py spells out the list of outcome names."""
    repo = Path(__file__).resolve().parents[2]
    pattern = re.compile(r'"complete",\s*"pruned"|"oom",\s*"predicted_oom"|'
                         r'"predicted_oom",\s*"oom"')
    offenders = [str(p.relative_to(repo)) for pkg in ("lm", "sweeps")
                 for p in (repo / pkg).rglob("*.py")
                 if p.name != "outcomes.py" and pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
