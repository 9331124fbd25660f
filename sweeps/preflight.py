"""Pre-flight memory decisions for a trial: fits or not, fitted batch, budget, calibration, limit.

The runner calls these before it launches a trial child (it owns what happens next):

- ``plan_trial(cfg, limits, device=, budget_bytes=, calibration=, launcher=)`` -> ``TrialPlan``: the
  prediction (``lm.memory.estimate``) times the study's calibration factor against the budget.
  With ``limits.oom_policy == "fit"`` a trial that would not fit has its micro-batch halved and
  ``grad_accum`` doubled (``halve_batch``: same effective batch) until it fits or the micro-batch
  is 1; with ``"prune"`` it is simply reported as not fitting (outcome ``predicted_oom``).
- budgets: ``limits.budget`` (``sweeps.spec.limits.MemoryBudget``) says what a budget means in
  bytes for a device, one meaning everywhere; ``sweeps.admission`` gives it the device's room:
  GPU: ``AUTO_GPU_FRACTION`` (90 %) of the device's free memory (``gpu_room``; ``nvidia-smi``'s
  free figure: other processes' use taken off); CPU: ``AUTO_CPU_FRACTION`` (80 %) of
  ``MemAvailable`` (``/proc/meminfo``; the 20 % left covers the parent, the page cache of the
  token files and other users), less the admission margin.
- ``calibration_factor(study)``: the median of measured / predicted over the study's finished
  trials (COMPLETE or PRUNED that ran, i.e. not ``oom``/``predicted_oom``: an OOM's peak is
  where it was stopped, not what it needed), once there are ``MIN_CALIBRATION_TRIALS`` (3);
  else 1.0. Measured and predicted are the same quantity: ``peak_mem_bytes`` against
  ``predicted_peak_mem_raw_bytes``, paired only when ``peak_mem_kind`` equals
  ``predicted_peak_mem_kind`` (``lm.memory.peak_kind``: the CPU child's whole anonymous peak, or
  CUDA's tensors alone); a trial recorded before those fields is a CPU one, against
  ``predicted_mem_raw_bytes``. The factor scales what it was learnt on
  (``MemoryEstimate.calibrated``: on CUDA the tensors, the context and slack added after).
  Clamped to [``CALIBRATION_MIN``, ``CALIBRATION_MAX``] = [0.5, 2.0]: a factor outside that
  says the estimator is wrong for this setup, and trusting it would prune (or launch)
  everything.
- ``cpu_child_limit(budget_bytes, predicted_bytes)``: the child's ``cpu_memory_limit_bytes``.
  ``lm.train`` applies it as RLIMIT_DATA *relative to* its data size after the warm-up step
  (torch imported, tokens mapped), so it is the budget minus the child's baseline (the
  smaller, forked child's: ``CPU_BASELINE_BYTES - CPU_FORK_SAVING_BYTES`` in ``lm.memory``),
  but never less than the predicted growth plus ``CHILD_LIMIT_HEADROOM`` (40 %) and
  ``CHILD_LIMIT_SLACK`` (64 MiB): a trial predicted to fit is not killed by a prediction error of
  that size, and one that outgrows its budget by more ends as ``oom`` instead of taking the
  machine down.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lm import host, memory, outcomes
from lm.config import TrainConfig
from lm.tokens import corpus_counts
from sweeps.console import human_bytes as _hb
from sweeps.record import TrialRecord
from sweeps.spec import Limits

if TYPE_CHECKING:
    import optuna

AUTO_GPU_FRACTION = 0.90
AUTO_CPU_FRACTION = 0.80
MIN_CALIBRATION_TRIALS = 3
CALIBRATION_MIN = 0.5
CALIBRATION_MAX = 2.0
CHILD_LIMIT_HEADROOM = 0.40
CHILD_LIMIT_SLACK = 64 * 2**20
#: Outcomes whose measured peak is not what the trial needed (stopped at the limit / never run).
_NOT_MEASURED = outcomes.OOM_OUTCOMES


@dataclass(frozen=True)
class TrialPlan:
    """What pre-flight decided for one trial."""

    cfg: TrainConfig
    fits: bool
    predicted_bytes: int
    predicted_raw_bytes: int
    budget_bytes: int | None
    fitted: dict[str, int] | None
    reason: str
    calibration: float = 1.0
    #: The raw prediction of what the child measures as ``peak_mem_bytes`` (CUDA: tensors
    #: only) and which quantity that is (``lm.memory.peak_kind``): calibration's denominator.
    predicted_measured_raw_bytes: int = 0
    measured_kind: str = memory.PEAK_CPU_ANON


class Preflight(Protocol):
    """The memory planning a runner asks of this module (``sweeps.runner.load_preflight``);
    a test gives it another, to force a plan the estimator would not make."""

    def plan_trial(
        self,
        cfg: TrainConfig,
        limits: Limits,
        *,
        device: str,
        budget_bytes: int | None,
        calibration: float = 1.0,
        launcher: str = "subprocess",
    ) -> TrialPlan: ...

    def halve_batch(self, cfg: TrainConfig) -> TrainConfig | None: ...

    def cpu_child_limit(self, budget_bytes: int, predicted_bytes: int) -> int: ...

    def calibration_factor(self, study: optuna.Study) -> float: ...


def memory_estimate(
    cfg: TrainConfig, device: str, *, launcher: str = "subprocess"
) -> memory.MemoryEstimate:
    """``lm.memory.estimate`` of ``cfg`` with its corpus's token counts (``lm.tokens``: from the
    token cache when it exists, else a guess from the corpus), the one way every plan asks."""
    assert cfg.vocab_size is not None  # TrainConfig sets it
    counts = corpus_counts(cfg.corpus, cfg.tokenizer, cfg.vocab_size, cfg.lowercase)
    return memory.estimate(cfg, host.device_kind(device), launcher=launcher, counts=counts)


def predict(
    cfg: TrainConfig, *, device: str, calibration: float = 1.0, launcher: str = "subprocess"
) -> tuple[int, int]:
    """(calibrated, raw) predicted peak bytes of ``cfg`` on ``device``."""
    est = memory_estimate(cfg, host.device_kind(device), launcher=launcher)
    return est.calibrated(calibration), est.total


def plan_trial(
    cfg: TrainConfig,
    limits: Limits,
    *,
    device: str,
    budget_bytes: int | None,
    calibration: float = 1.0,
    launcher: str = "subprocess",
) -> TrialPlan:
    """Predict ``cfg``'s peak, compare it with the budget, and fit it when the policy says so.

    ``launcher``: ``fork`` when CPU children are forked from ``sweeps.forkserver`` (their
    baseline is 53 MiB smaller); the default, ``subprocess``, is the conservative one.
    """
    kind = host.device_kind(device)

    def made(
        c: TrainConfig,
        fits: bool,
        est: memory.MemoryEstimate,
        fitted: dict[str, int] | None,
        reason: str,
    ) -> TrialPlan:
        return TrialPlan(
            c,
            fits,
            est.calibrated(calibration),
            est.total,
            budget_bytes,
            fitted,
            reason,
            calibration,
            est.measured,
            est.measured_kind,
        )

    est = memory_estimate(cfg, kind, launcher=launcher)
    predicted = est.calibrated(calibration)
    if budget_bytes is None:
        return made(cfg, True, est, None, f"predicted {_hb(predicted)}; no memory budget")
    if predicted <= budget_bytes:
        return made(
            cfg, True, est, None, f"predicted {_hb(predicted)} <= budget {_hb(budget_bytes)}"
        )
    if limits.oom_policy != "fit":
        return made(
            cfg,
            False,
            est,
            None,
            f"predicted {_hb(predicted)} > budget {_hb(budget_bytes)} "
            f"(batch_size={cfg.batch_size}, grad_accum={cfg.grad_accum})",
        )
    fitted_cfg: TrainConfig | None = cfg
    while fitted_cfg is not None:
        smaller = halve_batch(fitted_cfg)
        if smaller is None:
            break
        fitted_cfg = smaller
        est = memory_estimate(fitted_cfg, kind, launcher=launcher)
        predicted = est.calibrated(calibration)
        if predicted <= budget_bytes:
            fitted = {"batch_size": fitted_cfg.batch_size, "grad_accum": fitted_cfg.grad_accum}
            return made(
                fitted_cfg,
                True,
                est,
                fitted,
                f"fitted batch_size {cfg.batch_size} -> {fitted_cfg.batch_size}, grad_accum "
                f"{cfg.grad_accum} -> {fitted_cfg.grad_accum} (same effective batch): predicted "
                f"{_hb(predicted)} <= budget {_hb(budget_bytes)}",
            )
    return made(
        cfg,
        False,
        est,
        None,
        f"predicted {_hb(predicted)} > budget {_hb(budget_bytes)} even at "
        f"batch_size 1 (grad_accum {cfg.batch_size * cfg.grad_accum})",
    )


def halve_batch(cfg: TrainConfig) -> TrainConfig | None:
    """The micro-batch halved and ``grad_accum`` doubled (same effective batch); None at 1.

    An odd micro-batch is cut to its largest divisor below half of it (15 -> 5 with grad_accum
    x 3; a prime -> 1), so the effective batch ``batch_size x grad_accum`` never changes.
    """
    b = cfg.batch_size
    if b <= 1:
        return None
    new = next(d for d in range(b // 2, 0, -1) if b % d == 0)
    return dataclasses.replace(cfg, batch_size=new, grad_accum=cfg.grad_accum * (b // new))


# --- budgets -----------------------------------------------------------------------------------


def gpu_room(free_bytes: int) -> int:
    """What trials may be given of a GPU with ``free_bytes`` free now: ``AUTO_GPU_FRACTION`` of
    it (the rest covers other processes' growth and the allocator's fragmentation). Free, not
    total: on a shared GPU what other processes hold is not there to give."""
    return int(free_bytes * AUTO_GPU_FRACTION)


# --- calibration -------------------------------------------------------------------------------


def calibration_ratios(study: optuna.Study) -> list[float]:
    """measured / raw predicted peak of each finished trial that ran (oldest first), the same
    quantity on both sides (``measured_pair``)."""
    from optuna.trial import TrialState

    ratios = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        pair = measured_pair(t.user_attrs)
        if pair is not None:
            ratios.append(pair[0] / pair[1])
    return ratios


#: Measured kinds that are the CPU prediction's quantity: the child's own anonymous peak, the
#: parent's poll of its resident set, and a trial recorded before kinds were (CPU only then).
_CPU_KINDS = (memory.PEAK_CPU_ANON, memory.PEAK_HOST_RSS, None)


def measured_pair(attrs: dict[str, Any]) -> tuple[float, float] | None:
    """(measured, predicted) bytes of one trial record when both are the same quantity and it
    ran to a real peak; else None (an OOM, nothing measured, or a CUDA peak of tensors against
    a prediction of the whole device)."""
    rec = TrialRecord.from_attrs(attrs)
    if rec.outcome in _NOT_MEASURED:
        return None
    measured = rec.peak_mem_bytes
    kind = rec.peak_mem_kind
    predicted_kind = rec.predicted_peak_mem_kind or memory.PEAK_CPU_ANON
    predicted = (
        rec.predicted_mem_raw_bytes
        if rec.predicted_peak_mem_raw_bytes is None
        else rec.predicted_peak_mem_raw_bytes
    )
    same = kind == predicted_kind or (kind in _CPU_KINDS and predicted_kind in _CPU_KINDS)
    if (
        not same
        or not isinstance(measured, (int, float))
        or not isinstance(predicted, (int, float))
        or measured <= 0
        or predicted <= 0
    ):
        return None
    return float(measured), float(predicted)


def calibration_factor(study: optuna.Study) -> float:
    """Median measured/predicted of the finished trials once >= 3, clamped to [0.5, 2]; else 1."""
    ratios = calibration_ratios(study)
    if len(ratios) < MIN_CALIBRATION_TRIALS:
        return 1.0
    return min(CALIBRATION_MAX, max(CALIBRATION_MIN, statistics.median(ratios)))


# --- the child's enforced limit ----------------------------------------------------------------


def cpu_child_limit(budget_bytes: int, predicted_bytes: int) -> int:
    """``cpu_memory_limit_bytes`` for a CPU child: what it may allocate beyond its start-up.

    max(budget - baseline, (predicted - baseline) x 1.4 + 64 MiB), at least 64 MiB.
    """
    # The smallest baseline (a forked child's): a larger limit, never a spurious kill.
    baseline = memory.CPU_BASELINE_BYTES - memory.CPU_FORK_SAVING_BYTES
    from_budget = int(budget_bytes) - baseline
    from_prediction = (
        int(max(0, int(predicted_bytes) - baseline) * (1 + CHILD_LIMIT_HEADROOM))
        + CHILD_LIMIT_SLACK
    )
    return max(from_budget, from_prediction, CHILD_LIMIT_SLACK)
