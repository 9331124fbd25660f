"""``sweeps predict``: from a ``[scaling]`` study, the compute-optimal model at a larger budget
and its predicted val_bpb with an interval (``sweeps.loss_fit``); with ``--verify``, the check of
that prediction against a run it did not see.

**What is fitted.** The study's complete trials: N = ``params_non_embedding`` (the IsoFLOP fits'
default, ``sweeps.scaling``), D = ``tokens_seen``, L = ``val_bpb``.

**How compute is counted.** As the ``[scaling]`` design counts it: a trial's training FLOPs are
``lm.flops`` (the head's matmul and the attention scores included), and a size's tokens at a
budget are ``budget_tokens`` (whole optimizer steps). Under that count FLOPs per token depend on
the shape, not on N alone (the head's 6 x vocab x d_model per token), so the optimum is chosen
among realisable configurations (``candidates``): each one's N and its tokens at the budget, the
lowest predicted loss wins. The textbook optimum under C = 6 N D (``LossLaw.optimal_6nd``) is
reported beside it.

**Which configurations.** The study's own sizes, and beyond its largest size (by N), that size's
shape scaled up: d_model in steps of its head width (so every head keeps its d_head), as many
heads as fit, d_ff the same multiple of d_model, and n_layers keeping its d_model / n_layers
ratio (never fewer layers than it has), up to ``MAX_WIDTH_FACTOR`` times its d_model.

**The verification** is an ordinary study in the same database, ``STUDY-verify``: the source's
stored spec with its ``[scaling]`` grid replaced by the one cell of the prediction (the budget
and the chosen size; the first seed), so it runs through the same pipeline and engines as
``sweeps run``. The prediction is stored on that study (``record.STUDY_PREDICTION``) right after
it is created and before its trial is started; the verdict compares the time it was made with the
trial's ``started_at``, and a second ``--verify`` reads the stored prediction, never a new one.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm import flops
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import loss_fit
from sweeps import record as rc
from sweeps.spec import SIZE_FIELDS, StudySpec, budget_tokens, read_spec

SUFFIX = "-verify"
SIZE = "params_non_embedding"
TOKENS = "tokens_seen"
LOSS = "val_bpb"
MAX_WIDTH_FACTOR = 16
RULE = (
    "the study's sizes, and beyond its largest its shape scaled up: d_model in steps of its "
    "head width, d_ff the same multiple of d_model, n_layers keeping d_model / n_layers"
)


def check_budget(budget: float) -> None:
    if not (math.isfinite(budget) and budget > 0):
        raise SweepsError(f"--budget must be a positive number of FLOPs such as 2e13, got {budget}")


def source_spec(data: Any, name: str) -> tuple[dict[str, Any], StudySpec]:
    """The stored spec of a ``[scaling]`` study: (as stored, read back)."""
    if name.endswith(SUFFIX):
        raise SweepsError(f"study {name!r} is a verification; predict from the study it came from")
    stored = data.user_attrs.get(rc.STUDY_SPEC)
    if not isinstance(stored, dict):
        raise SweepsError(
            f"study {name!r} has no stored spec (it was not created by `sweeps run`); "
            "a prediction needs its [scaling] grid"
        )
    if "scaling" not in stored:
        raise SweepsError(
            f"study {name!r} is not a scaling study (its spec has no [scaling] grid); "
            "`sweeps predict` fits an IsoFLOP study"
        )
    return stored, read_spec(stored, source=f"study {name!r}", check_paths=False)


def fit_study(data: Any, name: str, *, seed: int = 0, n_boot: int = 200) -> loss_fit.LossFit:
    """The loss fit of the study's complete trials (a one-line error when there are too few)."""
    trials = data.trials
    if "outcome" in trials:
        trials = trials[trials["outcome"] == "complete"]
    columns = [np.asarray(_numbers(trials, c)) for c in (SIZE, TOKENS, LOSS)]
    try:
        return loss_fit.fit_loss(*columns, seed=seed, n_boot=n_boot)
    except ValueError as exc:
        raise SweepsError(
            f"study {name!r} cannot be fitted: {exc}; run more of its grid first"
        ) from None


def _numbers(frame: Any, column: str) -> Any:
    import pandas as pd

    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").astype(float).to_numpy()


def _full_size(cfg: TrainConfig) -> dict[str, int]:
    return {k: int(getattr(cfg, k)) for k in SIZE_FIELDS}


def candidates(spec: StudySpec) -> list[dict[str, int]]:
    """The configurations a prediction chooses among (the module's docstring says the rule)."""
    design = spec.scaling
    assert design is not None
    configs = [design.config(size, i) for i, size in enumerate(design.sizes)]
    out = [_full_size(c) for c in configs]
    largest = max(configs, key=lambda c: flops.count(c, 0, n_evals=0).params_non_embedding)
    d_head = largest.d_model // largest.n_heads
    ratio = largest.d_ff / largest.d_model
    aspect = largest.d_model / largest.n_layers
    for width in range(largest.d_model + d_head, MAX_WIDTH_FACTOR * largest.d_model + 1, d_head):
        size = {
            "d_model": width,
            "n_layers": max(largest.n_layers, round(width / aspect)),
            "n_heads": width // d_head,
            "d_ff": max(1, round(ratio * width)),
        }
        if size not in out:
            out.append(size)
    return out


@dataclass(frozen=True)
class Prediction:
    """What ``sweeps predict`` says and ``--verify`` stores: plain values only."""

    values: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.values)


def predict(data: Any, name: str, budget: float, *, seed: int = 0, n_boot: int = 200) -> Prediction:
    """The compute-optimal configuration of study ``name`` at ``budget`` training FLOPs."""
    check_budget(budget)
    _, spec = source_spec(data, name)
    fit = fit_study(data, name, seed=seed, n_boot=n_boot)
    design = spec.scaling
    assert design is not None
    best: tuple[float, dict[str, int], int, int] | None = None
    options = candidates(spec)
    for i, size in enumerate(options):
        cfg = design.config(size, i)
        tokens = budget_tokens(cfg, budget)
        if tokens < 1:
            continue
        n = flops.count(cfg, 0, n_evals=0).params_non_embedding
        value = float(fit.law(n, tokens))
        if best is None or value < best[0]:
            best = (value, size, n, tokens)
    if best is None:
        raise SweepsError(
            f"--budget {budget:.3g} FLOPs is less than half an optimizer step of every size "
            "of the study; raise the budget"
        )
    _, size, n, tokens = best
    point, fit_band, run_band = fit.prediction(n, tokens, seed=seed)
    notes = list(fit.notes)
    if size == options[-1]:
        notes.append(
            f"the best size is the widest considered (d_model {size['d_model']}); "
            "the optimum may lie beyond it"
        )
    notes += _extrapolation(data, n, tokens)
    law = fit.law
    n_6nd, d_6nd = law.optimal_6nd(budget) if law.alpha > 0 and law.beta > 0 else (None, None)
    values = {
        "study": name,
        "budget": float(budget),
        "size": size,
        "n": int(n),
        "tokens": int(tokens),
        "metric": LOSS,
        "predicted": point,
        "interval": list(fit_band),
        "run_interval": list(run_band),
        "confidence": fit.confidence,
        "n_6nd": n_6nd,
        "d_6nd": d_6nd,
        "law": fit.law.as_dict(),
        "intervals": {p: list(fit.interval(p)) for p in loss_fit.PARAMETERS},
        "n_trials": fit.n_trials,
        "n_boot": len(fit.boots),
        "residual_sd": fit.residual_sd,
        "size_column": SIZE,
        "rule": RULE,
        "seed": int(_first_seed(spec)),
        "made_at": time.time(),
        "notes": notes,
    }
    return Prediction(values)


def _extrapolation(data: Any, n: int, tokens: int) -> list[str]:
    """How far beyond the trained sizes and tokens the prediction reaches."""
    trained = data.trials
    most_n, most_d = (np.nanmax(_numbers(trained, c), initial=np.nan) for c in (SIZE, TOKENS))
    out = []
    if n > most_n:
        out.append(f"N is {n / most_n:.2g}x the largest trained size ({most_n:,.0f})")
    if tokens > most_d:
        out.append(f"D is {tokens / most_d:.2g}x the most tokens trained ({most_d:,.0f})")
    return out


def _first_seed(spec: StudySpec) -> int:
    design = spec.scaling
    assert design is not None
    if design.seeds:
        return design.seeds[0]
    return int((design.defaults or {}).get("seed", 0))


def verify_spec(stored: dict[str, Any], prediction: dict[str, Any]) -> StudySpec:
    """The verification study's spec: the source's, its grid the one predicted cell."""
    data = copy.deepcopy(stored)
    scaling: dict[str, Any] = {"budgets": [prediction["budget"]], "sizes": [prediction["size"]]}
    if data["scaling"].get("seeds"):
        scaling["seeds"] = [prediction["seed"]]
    data["scaling"] = scaling
    # The cell's size sets every size field (a source's sizes may leave some to [fixed]).
    data["fixed"] = {k: v for k, v in data.get("fixed", {}).items() if k not in SIZE_FIELDS}
    study = dict(data.get("study", {}))
    for key in ("n_trials", "timeout"):
        study.pop(key, None)
    study["name"] = prediction["study"] + SUFFIX
    data["study"] = study
    return read_spec(data, source=f"verification of {prediction['study']!r}", check_paths=False)


def stored_prediction(user_attrs: dict[str, Any]) -> dict[str, Any] | None:
    found = user_attrs.get(rc.STUDY_PREDICTION)
    return found if isinstance(found, dict) else None


def held_prediction(url: str, name: str) -> dict[str, Any] | None:
    """The prediction stored on verification study ``name``; None when there is no such study
    (or it holds none)."""
    import sqlalchemy as sa

    from sweeps import optuna_compat as oc
    from sweeps import results

    table = oc.STUDIES_TABLE
    with results.reader(url) as (conn, _):
        found = conn.execute(sa.select(table.c.study_id).where(table.c.study_name == name))
        if found.first() is None:
            return None
    return stored_prediction(results.load(url, name).user_attrs)


def store(study: Any, prediction: dict[str, Any]) -> dict[str, Any]:
    """Write the prediction on the verification study unless one is there; the stored one."""
    held = stored_prediction(study.user_attrs)
    if held is not None:
        return held
    study.set_user_attr(rc.STUDY_PREDICTION, prediction)
    return prediction


def check_same_budget(held: dict[str, Any], budget: float, name: str) -> None:
    if not math.isclose(float(held["budget"]), budget, rel_tol=1e-9):
        raise SweepsError(
            f"study {name!r} verifies the prediction at {held['budget']:.3g} FLOPs, not "
            f"{budget:.3g}; give --budget {held['budget']:.3g}, or remove it with "
            f"`sweeps delete {name}`"
        )


def verdict(prediction: dict[str, Any], trials: Any) -> dict[str, Any]:
    """Measured against predicted, from the verification study's trials frame."""
    done = trials[trials["outcome"] == "complete"] if "outcome" in trials else trials[:0]
    out: dict[str, Any] = {"prediction": prediction, "measured": None}
    if done.empty or LOSS not in done or not np.isfinite(float(done[LOSS].iloc[0])):
        return out
    row = done.iloc[0]
    measured = float(row[LOSS])
    lo, hi = prediction["interval"]
    run_lo, run_hi = prediction["run_interval"]
    started = float(row["started_at"]) if "started_at" in row else math.nan
    out.update(
        measured=measured,
        trial=int(row["number"]),
        error=measured - prediction["predicted"],
        inside=bool(lo <= measured <= hi),
        inside_run=bool(run_lo <= measured <= run_hi),
        made_before_run=bool(prediction["made_at"] < started),
        n_measured=int(row[SIZE]) if SIZE in row and np.isfinite(row[SIZE]) else None,
        tokens_measured=int(row[TOKENS]) if TOKENS in row and np.isfinite(row[TOKENS]) else None,
    )
    return out
