"""``sweeps confirm``: re-run the K best configurations of a finished study with S fresh seeds,
then rank them with intervals and say whether the best is distinguishable from the runner-up.

A TPE study's "best trial" is the luckiest draw among noisy evaluations (seed spreads of 0.016 to
0.029 bits per byte were measured here at d_model 64). The confirmation is an ordinary study in
the same database, ``STUDY-confirm``, built from the source study's stored spec: its ``[space]``
is the chosen configurations' values (categorical), its trials are all enqueued (each
configuration once per fresh seed, seed-major, so a partial run already covers every
configuration), no pruner (each is worth its loss at its full budget). So it runs through the
same engines and runner as ``sweeps run``, and resumes like any study: its enqueued trials are
written once (``workers.create_or_resume``), and a run stops at K x S.

Links: the confirmation study's user attribute ``confirms`` names the source study, the seeds
and each configuration with the source trials it confirms; each confirmation trial's user
attribute ``confirms`` names those source trials (``STUDY#N``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from lm.errors import SweepsError
from sweeps import optuna_compat
from sweeps import record as rc
from sweeps import replicates as rp
from sweeps.plain import plain_value
from sweeps.seeds import seeds_of

SUFFIX = "-confirm"


@dataclass(frozen=True)
class Plan:
    """What a confirmation runs: ``configs`` (label, params, source trials, source mean), each
    with every seed of ``seeds``; ``spec`` the confirmation study's spec."""

    source: str
    metric: str
    direction: str
    configs: tuple[dict[str, Any], ...]
    seeds: tuple[int, ...]
    spec: Any  # StudySpec

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("a confirmation needs at least one configuration")
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be two or more distinct seeds, got {self.seeds}")

    @property
    def name(self) -> str:
        return self.source + SUFFIX

    @property
    def n_trials(self) -> int:
        return len(self.configs) * len(self.seeds)

    def link(self) -> dict[str, Any]:
        """The confirmation study's ``confirms`` attribute."""
        return {
            "study": self.source,
            "metric": self.metric,
            "seeds": list(self.seeds),
            "configs": [
                {
                    "config": c["config"],
                    "params": c["params"],
                    "trials": [f"{self.source}#{n}" for n in c["trials"]],
                }
                for c in self.configs
            ],
        }


def check_options(top: int, seeds: int, level: float = 0.05) -> None:
    """``--top``, ``--seeds`` and ``--level``, before anything is opened or run."""
    if top < 1:
        raise SweepsError(f"--top must be >= 1, got {top}")
    if seeds < 2:
        raise SweepsError(
            f"--seeds must be >= 2 (a test needs two seeds per configuration), got {seeds}"
        )
    if not 0.0 < level < 1.0:
        raise SweepsError(f"--level must be between 0 and 1, got {level}")


def plan(storage: Any, source: str, *, top: int, seeds: int, metric: str | None = None) -> Plan:
    """The confirmation of ``source``'s ``top`` best configurations (by mean ``metric`` over
    their complete trials) with ``seeds`` seeds none of its trials used. Deterministic for a
    finished study, so a second ``sweeps confirm`` resumes the same study."""
    from sweeps import results

    check_options(top, seeds)
    if source.endswith(SUFFIX):
        raise SweepsError(f"study {source!r} is a confirmation; confirm the study it came from")
    data = results.load(storage, source)
    stored = data.user_attrs.get(rc.STUDY_SPEC)
    if not isinstance(stored, dict):
        raise SweepsError(
            f"study {source!r} has no stored spec (it was not created by "
            "`sweeps run`); a confirmation re-runs its spec"
        )
    if "scaling" in stored:
        raise SweepsError(
            f"study {source!r} is an IsoFLOP grid; `sweeps confirm` re-runs the "
            "best configurations of a search or an ablation"
        )
    if "transfer" in stored:
        raise SweepsError(
            f"study {source!r} is a transfer study; `sweeps transfer drift {source}` reads "
            "its answer, `sweeps confirm` re-runs the best configurations of a search or "
            "an ablation"
        )
    column, direction = rp.metric_of(data, metric)
    reps = rp.replicates(data.trials, column, direction)
    if reps.empty:
        raise SweepsError(
            f"study {source!r} has no complete trial with a {column}; nothing to confirm yet"
        )
    chosen = reps.head(top)
    configs = tuple(
        {
            "config": r["config"],
            "params": r["params"],
            "trials": r["trials"],
            "mean": float(r["mean"]),
        }
        for _, r in chosen.iterrows()
    )
    used = [s for s in seeds_of(data.trials) if isinstance(s, int)]
    start = max([*used, int(stored.get("fixed", {}).get("seed", 0))]) + 1
    fresh = tuple(range(start, start + seeds))
    spec = confirm_spec(stored, source + SUFFIX, [c["params"] for c in configs], fresh)
    return Plan(source, column, direction, configs, fresh, spec)


def confirm_spec(
    stored: dict[str, Any], name: str, configs: list[dict[str, Any]], seeds: tuple[int, ...]
) -> Any:
    """The source spec with its search replaced by the enqueued configurations x seeds."""
    from sweeps.spec import read_spec

    data = copy.deepcopy(stored)
    old_space = data.pop("space", {}) or {}
    for key in ("ablation", "scaling", "enqueue"):
        data.pop(key, None)
    names = list(dict.fromkeys(k for c in configs for k in c))
    space: dict[str, Any] = {}
    for n in names:
        values = list(dict.fromkeys(json.dumps(c[n]) for c in configs if n in c))
        space[n] = {"choices": [json.loads(v) for v in values]}
        when = old_space.get(n, {}).get("when") if isinstance(old_space.get(n), dict) else None
        if when is not None:
            space[n]["when"] = when  # a conditional parameter stays conditional
    space["seed"] = {"choices": list(seeds)}
    data["space"] = space
    data["fixed"] = {k: v for k, v in data.get("fixed", {}).items() if k not in space}
    data["enqueue"] = [{**c, "seed": s} for s in seeds for c in configs]
    study = dict(data.get("study", {}))
    study.update(
        {"name": name, "sampler": "random", "pruner": "none", "n_trials": len(configs) * len(seeds)}
    )
    study.pop("timeout", None)  # the source's search budget is no limit on a confirmation
    data["study"] = study
    return read_spec(
        data, source=f"confirmation of {name.removesuffix(SUFFIX)!r}", check_paths=False
    )


def link(storage: Any, study: Any, the_plan: Plan) -> None:
    """Name the source trials on the confirmation study and on each of its unfinished trials
    (finished ones already carry it, or are named by the study's attribute)."""
    study.set_user_attr(rc.STUDY_CONFIRMS, the_plan.link())
    by_label = {c["config"]: c for c in the_plan.configs}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished() or rc.value_of(t, rc.CONFIRMS) is not None:
            continue
        fixed = dict(t.system_attrs.get("fixed_params") or t.params)
        fixed.pop("seed", None)
        found = by_label.get(rp.label({k: plain_value(v) for k, v in fixed.items()}))
        if found is not None:
            storage.set_trial_user_attr(
                optuna_compat.trial_id(t),
                rc.CONFIRMS,
                ", ".join(f"{the_plan.source}#{n}" for n in found["trials"]),
            )


def rankings(
    storage: Any, name: str, *, metric: str | None = None, level: float = 0.05
) -> list[rp.Ranking]:
    """The confirmation study's configurations ranked on ``metric`` (default: the first
    objective), then on each other objective (multi-objective: per objective)."""
    from sweeps import results

    if not 0.0 < level < 1.0:
        raise SweepsError(f"--level must be between 0 and 1, got {level}")
    data = results.load(storage, name)
    first = rp.metric_of(data, metric)
    others = [rp.metric_of(data, o) for o in data.objectives]
    out = []
    for column, direction in dict.fromkeys([first, *others]):
        if column in data.trials:
            out.append(rp.rank(data.trials, metric=column, direction=direction, level=level))
    return out
