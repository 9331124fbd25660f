"""A warm start: ``sweeps run SPEC --from STUDY`` carries the finished trials of an older study
into the spec's new study, so a changed range or an added parameter keeps what was learnt.

Which trials carry over: COMPLETE ones, and PRUNED ones with their outcome (out of memory,
collapsed, pruned, ...: the sampler learns the bad region too), whose parameters are valid in the
new space and whose trained config is what the new spec would train for those parameters:

- a parameter the old trial has must lie in the new range or choices;
- a parameter the new spec searches that the old trial lacks (the old study held it fixed) is
  filled with the value the old trial trained with: its ``config`` attribute, which must be the
  old study's fixed (or default) value (a batch the runner fitted to memory is not) and must
  lie in the new space;
- every field the new spec fixes (and every default it keeps) must equal the old trial's
  trained value (a different ``max_tokens``, corpus, model width... trains another model). The
  device and the CPU memory limit (where, not what) are not compared, nor a fitted trial's
  batch size and accumulation (the runner fits the same way in the new study).

Others are left behind and grouped by reason in the dry-run plan. Carried trials are added as
finished trials (``create_trial``) in one transaction with a study marker, so they are added once
whoever starts the study; each keeps its values, intermediate values, constraints and user
attributes (outcome, metrics, run dir), plus ``carried_from`` = ``"STUDY#N"``. They are not
counted in ``n_trials`` (``sweeps.workers.budget_state``) and never run again. The old study's
evaluations and samples are copied with them, so the new study's report draws their curves.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState, create_trial

from lm.errors import SweepsError
from sweeps import optuna_compat
from sweeps import record as rc
from sweeps.record import TrialRecord
from sweeps.spec import ParamSpec, StudySpec, read_spec, walk_one

#: The user attribute that marks a carried trial: "STUDY#N" (its study and number there).
CARRIED_FROM = rc.CARRIED_FROM
#: The study user attribute written with the carried trials: {"study": ..., "trials": ...}.
CARRIED_ATTR = rc.STUDY_CARRIED
#: Config fields that say where a trial ran, not what it trained.
NOT_COMPARED = ("device", "cpu_memory_limit_bytes", "cuda_memory_limit_bytes")
#: Fields the runner changes when it fits a trial to memory (``oom_policy = "fit"``).
FITTED_FIELDS = ("batch_size", "grad_accum")


def is_carried(trial: FrozenTrial) -> bool:
    return rc.value_of(trial, CARRIED_FROM) is not None


@dataclass
class CarryPlan:
    """What ``--from`` carries: the trials to add and, for the others, why not."""

    source: str
    total: int  # trials in the source study
    templates: list[FrozenTrial] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # the carried trials' numbers there
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> trials

    def rows(self) -> list[tuple[str, object]]:
        """The dry-run plan's lines."""
        rows: list[tuple[str, object]] = [
            (
                f"carried from {self.source}",
                f"{len(self.templates)} of {self.total} trials "
                "(finished; not counted in n_trials, never re-run)",
            )
        ]
        if self.skipped:
            rows.append(
                ("not carried", "; ".join(f"{why}: {n}" for why, n in self.skipped.most_common()))
            )
        return rows


def plan(
    spec: StudySpec,
    source: str,
    trials: Sequence[FrozenTrial],
    directions: Sequence[str],
    attrs: dict[str, Any],
) -> CarryPlan:
    """Which of ``trials`` (the study ``source``: its directions and user attributes) carry
    into ``spec``'s study, as templates for ``add_trials_once``."""
    from sweeps.space import distributions as space_distributions

    if spec.ablation is not None:
        raise SweepsError(
            "--from carries trials into a searched space; an ablation enqueues "
            "its own trials: leave out --from"
        )
    if source == spec.name:
        raise SweepsError(
            f"--from {source}: that is the spec's own study; give the study to start from"
        )
    _check_objectives(spec, source, directions, attrs.get(rc.STUDY_SPEC))
    dists = space_distributions(spec)
    old_base = _old_base(attrs.get(rc.STUDY_SPEC))
    out = CarryPlan(source, len(trials))
    for t in sorted(trials, key=lambda t: t.number):
        params, why = carried_params(spec, dists, old_base, t)
        if params is None:
            out.skipped[why] += 1
            continue
        out.templates.append(template(t, params, dists, source))
        out.numbers.append(t.number)
    return out


def _check_objectives(spec: StudySpec, source: str, directions: Sequence[str], stored: Any) -> None:
    """The old trials' values mean the same in the new study: same objectives, same order."""
    mine = [f"{o.metric} ({o.direction})" for o in spec.study.objectives]
    try:
        metrics = [o if isinstance(o, str) else o["metric"] for o in stored["study"]["objectives"]]
    except (TypeError, KeyError):
        metrics = [o.metric for o in spec.study.objectives]  # no spec stored: directions only
    theirs = [f"{m} ({d})" for m, d in zip(metrics, directions, strict=False)]
    if len(metrics) != len(directions) or theirs != mine:
        raise SweepsError(
            f"--from {source}: its objectives are {', '.join(theirs) or 'unknown'}"
            f", the spec's {', '.join(mine)}; a warm start needs the same "
            "objectives"
        )


def _old_base(stored: Any) -> dict[str, Any] | None:
    """The old study's fixed and default values, from its stored spec (None without one)."""
    if not isinstance(stored, dict):
        return None
    try:
        return read_spec(stored, check_paths=False).base_values()
    except SweepsError:
        return None


class _NotCarried(Exception):
    """Why an old trial does not carry: ends the walk over the new space."""


def carried_params(
    spec: StudySpec,
    dists: dict[str, BaseDistribution],
    old_base: dict[str, Any] | None,
    t: FrozenTrial,
) -> tuple[dict[str, Any] | None, str]:
    """(the trial's parameters in the new space, "") or (None, why it does not carry)."""
    if t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
        return None, f"not finished ({t.state.name})"
    rec = TrialRecord.from_trial(t)
    config = rec.config
    if config is None:
        return None, "no trained config recorded"

    def value(p: ParamSpec) -> Any:
        if p.name in t.params:
            found = t.params[p.name]
        elif p.name in config:
            found = config[p.name]
            if old_base is not None and old_base.get(p.name) != found:
                raise _NotCarried(
                    f"{p.name} was not searched and trained other than its fixed value"
                )
        else:
            raise _NotCarried(f"{p.name} unknown for the old trial")
        why = outside(p.name, found, dists[p.name])
        if why:
            raise _NotCarried(why)
        return found

    try:
        params = walk_one(spec.space, spec.base_values(), value)
    except _NotCarried as exc:
        return None, str(exc)
    why = _config_difference(spec, params, config, fitted=bool(rec.fitted))
    return (None, why) if why else (params, "")


def outside(name: str, value: Any, dist: BaseDistribution) -> str:
    """Why ``value`` is not a point of ``dist`` ("" when it is)."""
    if isinstance(dist, CategoricalDistribution):
        return "" if value in dist.choices else f"{name} not in the new choices"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} not a number"
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    if not dist.low <= value <= dist.high:
        return f"outside the new range of {name}"
    if dist.step is not None:
        steps = (value - dist.low) / dist.step
        if not math.isclose(steps, round(steps), abs_tol=1e-8):
            return f"{name} off the new step"
    return ""


def _config_difference(
    spec: StudySpec, params: dict[str, Any], config: dict[str, Any], *, fitted: bool
) -> str:
    """The first field the new spec would train differently from the old trial ("" if none)."""
    from sweeps.space import trial_config

    try:
        new = trial_config(spec, params).to_dict()
    except SweepsError:
        return "not a valid config in the new spec"
    skip = set(NOT_COMPARED) | (set(FITTED_FIELDS) if fitted else set())
    for key, value in new.items():
        if key in skip or key not in config:
            continue
        if _canon(config[key]) != _canon(value):
            return f"different fixed field {key}"
    return ""


def _canon(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return float(value)


def template(
    t: FrozenTrial, params: dict[str, Any], dists: dict[str, BaseDistribution], source: str
) -> FrozenTrial:
    """The finished trial to add: the old one's results under the new space's distributions."""
    rec = TrialRecord.from_trial(t).without(rc.NOT_CARRIED)
    rec.carried_from = f"{source}#{t.number}"
    new = create_trial(
        state=t.state,
        values=t.values if t.state == TrialState.COMPLETE else None,
        params=params,
        distributions={k: dists[k] for k in params},
        user_attrs=rec.to_attrs(),
        system_attrs=optuna_compat.constraint_attrs(t.system_attrs),
        intermediate_values=dict(t.intermediate_values),
    )
    new.datetime_start, new.datetime_complete = t.datetime_start, t.datetime_complete
    return new


# --- reading the source, adding the trials ------------------------------------------------------


def read(storage: Any, spec: StudySpec, source: str, url: str) -> CarryPlan:
    """The carry plan of ``--from source`` in ``storage`` (``SweepsError`` when it is missing)."""
    import optuna

    from sweeps.storage import mask_url

    try:
        old = optuna.load_study(study_name=source, storage=storage)
    except KeyError:
        raise SweepsError(
            f"--from {source}: no such study in {mask_url(url)}; list studies with `sweeps status`"
        ) from None
    return plan(
        spec,
        source,
        old.get_trials(deepcopy=False),
        [d.name.lower() for d in old.directions],
        old.user_attrs,
    )


def add_once(storage: Any, study: Any, carry: CarryPlan, *, created: bool) -> bool:
    """Add the carried trials to ``study`` once (a marker in the same transaction), and copy
    their evaluations and samples. A study that exists already must have been started from the
    same source (or be empty); False when the trials were there already."""
    from sweeps import records

    marker = study.user_attrs.get(CARRIED_ATTR)
    if not created and marker is None and study.get_trials(deepcopy=False):
        raise SweepsError(
            f"study {study.study_name!r} exists and was not started with --from; "
            f"drop --from to resume it, or name the new study differently"
        )
    if marker is not None and marker.get("study") != carry.source:
        raise SweepsError(
            f"study {study.study_name!r} was started from {marker.get('study')!r}"
            f", not {carry.source!r}; drop --from to resume it"
        )
    study_id = storage.get_study_id_from_name(study.study_name)
    if not optuna_compat.add_trials_once(
        storage,
        study_id,
        CARRIED_ATTR,
        carry.templates,
        {"study": carry.source, "trials": len(carry.templates)},
    ):
        return False
    mine = {
        rc.value_of(t, CARRIED_FROM): t for t in study.get_trials(deepcopy=False) if is_carried(t)
    }
    ids = {
        n: (mine[f"{carry.source}#{n}"].number, optuna_compat.trial_id(mine[f"{carry.source}#{n}"]))
        for n in carry.numbers
    }
    records.copy_study_records(storage, carry.source, storage, study.study_name, ids)
    return True
