"""Answers with error bars: ablation effects with intervals (the replicates they compare, grouped
by configuration, and the ranking a confirmation study ends with: ``sweeps.replicates``).

- ``effects``: per factor and level of an ablation (or against any ``--baseline``), n, mean and
  sd, the difference to the baseline paired by seed with its 95 % interval, a paired t-test's
  p-value, Holm-corrected across the study's comparisons, and a plain verdict. A seed present on
  one side only is left out of the pairs and named; with fewer than two pairs the comparison
  falls back to Welch's unpaired test, and says so.

Every test, interval and power figure comes from ``scipy.stats``; only Holm's step-down (an
ordering over scipy's p-values) is written here. Measured on this project: seed spreads of 0.016
to 0.029 bits per byte at d_model 64, so most single-seed differences are noise; this module is
what says which are not.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lm import outcomes
from lm.errors import SweepsError
from sweeps import record as rc
from sweeps import results
from sweeps.console import human_count
from sweeps.plain import plain_value
from sweeps.replicates import label, metric_of, params_of, scored
from sweeps.seeds import config_params, seeds_of
from sweeps.spec.values import same
from sweeps.stats import CONFIDENCE, MAX_SEEDS, Comparison, compare, holm, seeds_needed

# --- effects ---------------------------------------------------------------------------------

#: How ``effects`` counts an arm's stopped trials: apart (named, their share tested against the
#: baseline's, left out of the paired test) or ``as-value`` (compared on their last evaluation).
STOPPED_MODES = ("apart", "as-value")
#: Arms whose training text differs by more than this factor are said to be unequal.
UNEQUAL_TEXT = 1.02


@dataclass(frozen=True)
class Stopped:
    """A seed of an arm that ended before its budget: a result, never missing data."""

    seed: Any
    outcome: str
    trial: int


@dataclass(frozen=True)
class Effect:
    """One row of the effects table: a level of a factor against the baseline. ``n`` counts
    the seeds with a value (complete ones; with ``--stopped as-value`` stopped ones too),
    ``stopped`` every seed that ended early and how."""

    factor: str  # the parameter(s) changed from the baseline; "baseline" for the baseline
    level: str  # their values here
    n: int
    mean: float
    sd: float
    seeds: tuple[Any, ...]
    comparison: Comparison | None = None  # None for the baseline itself
    p_holm: float = math.nan
    verdict: str = ""
    seeds_needed: int | None = None
    trials: tuple[int, ...] = field(default=())
    stopped: tuple[Stopped, ...] = ()
    #: Fisher's exact test of this arm's share of stopped seeds against the baseline's
    #: (NaN: neither stopped any, or the baseline row).
    stopped_p: float = math.nan
    #: The gap to its own unigram baseline (the unigram's metric minus this arm's, so positive
    #: means learned from context): mean over its seeds and its 95 % t interval.
    gap: float = math.nan
    gap_low: float = math.nan
    gap_high: float = math.nan
    #: Mean bytes of training text its trials read (NaN: not recorded).
    text_bytes: float = math.nan

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")
        if (self.factor == "baseline") != (self.comparison is None):
            raise ValueError("the baseline row, and only it, has no comparison")

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seeds"] = list(self.seeds)
        out["trials"] = list(self.trials)
        out["stopped"] = [asdict(s) for s in self.stopped]
        return out


@dataclass(frozen=True)
class Effects:
    """The effects of one study on one metric."""

    study: str
    metric: str
    direction: str
    level: float  # the significance level of the verdicts
    baseline: dict[str, Any]
    rows: tuple[Effect, ...]
    #: Configurations with no complete trial (every one stopped: a verdict, OOM, a pruner...):
    #: (label, what happened to them). Each is also a row, with n = 0.
    not_compared: tuple[tuple[str, str], ...] = ()
    stopped_mode: str = "apart"
    #: The arms differ in what a token is and trained on unequal text: one line saying so.
    text_warning: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("minimize", "maximize"):
            raise ValueError(f"direction must be minimize or maximize, got {self.direction!r}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level}")
        if self.stopped_mode not in STOPPED_MODES:
            raise ValueError(
                f"stopped_mode must be one of {STOPPED_MODES}, got {self.stopped_mode!r}"
            )

    @property
    def n_tests(self) -> int:
        """The comparisons that ran a test: what Holm's correction counted."""
        return sum(
            1 for e in self.rows if e.comparison is not None and not math.isnan(e.comparison.p)
        )

    @property
    def stopped(self) -> list[dict[str, Any]]:
        """Every stopped seed of every arm, with its arm."""
        return [{"config": _arm_label(e), **asdict(s)} for e in self.rows for s in e.stopped]

    def frame(self) -> pd.DataFrame:
        rows = []
        for e in self.rows:
            c = e.comparison
            rows.append(
                {
                    "factor": e.factor,
                    "level": e.level,
                    "n": e.n,
                    "mean": e.mean,
                    "sd": e.sd,
                    "n_pairs": c.n_pairs if c else e.n,
                    "test": c.test if c else "",
                    "diff": c.diff if c else 0.0,
                    "low": c.low if c else math.nan,
                    "high": c.high if c else math.nan,
                    "p": c.p if c else math.nan,
                    "p_holm": e.p_holm,
                    "unpaired": list(c.unpaired) if c else [],
                    "verdict": e.verdict,
                    "seeds_needed": e.seeds_needed,
                    "n_stopped": len(e.stopped),
                    "stopped_p": e.stopped_p,
                    "gap": e.gap,
                    "gap_low": e.gap_low,
                    "gap_high": e.gap_high,
                    "text_bytes": e.text_bytes,
                }
            )
        return pd.DataFrame(rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "metric": self.metric,
            "direction": self.direction,
            "level": self.level,
            "confidence": CONFIDENCE,
            "baseline": self.baseline,
            "stopped_mode": self.stopped_mode,
            "tests_corrected": self.n_tests,
            "rows": [_finite(e.as_dict()) for e in self.rows],
            "stopped": _finite(self.stopped),
            "text_warning": self.text_warning or None,
            "not_compared": [{"config": c, "trials": what} for c, what in self.not_compared],
        }


def _arm_label(e: Effect) -> str:
    return e.level if e.factor == "baseline" else f"{e.factor}={e.level}"


def _finite(value: Any) -> Any:
    """NaN as None and numpy scalars as Python's, for JSON."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def parse_baseline(text: str) -> dict[str, Any]:
    """``--baseline d_ff=256,lr=0.01`` -> {"d_ff": 256, "lr": 0.01} (values read as JSON when
    they parse, else as text)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, raw = part.partition("=")
        if not sep or not name.strip() or not raw.strip():
            raise SweepsError(
                f"--baseline {text!r}: write FIELD=VALUE[,FIELD=VALUE], e.g. --baseline d_ff=256"
            )
        try:
            value = json.loads(raw.strip())
        except ValueError:
            value = raw.strip()
        out[name.strip()] = plain_value(value)
    if not out:
        raise SweepsError("--baseline is empty; write FIELD=VALUE, e.g. --baseline d_ff=256")
    return out


#: How close a baseline's number must be to an arm's (``values.same``): to rounding.
BASELINE_REL_TOL = 1e-9


def _same(a: Any, b: Any) -> bool:
    """The spec's equality (``True`` is not ``1``), numbers to rounding."""
    return same(a, b, rel_tol=BASELINE_REL_TOL)


def spec_baseline(spec: Any) -> dict[str, Any] | None:
    """The baseline of an ``[ablation]`` study's stored spec (every varied field at its
    baseline value), else None."""
    from sweeps.spec import read_spec

    if not isinstance(spec, dict) or "ablation" not in spec:
        return None
    parsed = read_spec(spec, source="stored spec", check_paths=False)
    ablation = parsed.ablation
    assert ablation is not None  # the spec has an [ablation]
    # choices() lists the baseline value first.
    return {name: plain_value(ablation.choices(name)[0]) for name, _ in ablation.vary}


def _matching(arms: Sequence[_Arm], baseline: Mapping[str, Any], study: str) -> int:
    hits = [
        i
        for i, arm in enumerate(arms)
        if all(k in arm.params and _same(arm.params[k], v) for k, v in baseline.items())
    ]
    if len(hits) == 1:
        return hits[0]
    shown = ",".join(f"{k}={v}" for k, v in baseline.items())
    if not hits:
        known = {k for arm in arms for k in arm.params}
        missing = [k for k in baseline if k not in known]
        if missing:
            raise SweepsError(
                f"--baseline {shown}: study {study!r} has no parameter "
                f"{missing[0]!r} (its parameters: {', '.join(sorted(known))})"
            )
        raise SweepsError(
            f"--baseline {shown} matches no configuration of study {study!r} "
            f"that has run; `sweeps trials {study}` lists them"
        )
    raise SweepsError(
        f"--baseline {shown} matches {len(hits)} configurations of study "
        f"{study!r}; name more fields, e.g. {arms[hits[0]].label}"
    )


@dataclass
class _Arm:
    """One configuration's finished trials, by seed (the latest trial of a seed counts)."""

    label: str
    params: dict[str, Any]
    values: dict[Any, float] = field(default_factory=dict)
    gaps: dict[Any, float] = field(default_factory=dict)
    stopped: list[Stopped] = field(default_factory=list)
    trials: list[int] = field(default_factory=list)
    text: list[float] = field(default_factory=list)


def _finished(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials that ended with an outcome (not running or queued, not a copy of another
    trial's result: ``runner.duplicate_of``), oldest first."""
    keep = trials["outcome"].notna() & ~trials["outcome"].isin([outcomes.RUNNING, outcomes.WAITING])
    if "state" in trials:
        keep &= ~trials["state"].isin(["RUNNING", "WAITING"])
    if "copy_of" in trials:
        keep &= trials["copy_of"].isna()
    out = trials[keep]
    return out.sort_values("number", kind="stable") if "number" in out else out


def _arms(trials: pd.DataFrame, metric: str, stopped_mode: str) -> list[_Arm]:
    """Every configuration that has run, each seed's latest trial: its value when it completed
    (or, ``as-value``, its last evaluation when it was stopped with one), else a ``Stopped``."""
    scored(trials, metric)  # the metric is a metric
    finished = _finished(trials)
    names = config_params(finished)
    unigram = UNIGRAM_COLUMN.get(metric)
    latest: dict[tuple[str, Any], tuple[pd.Series, dict[str, Any]]] = {}
    for (_, row), seed in zip(finished.iterrows(), seeds_of(finished), strict=True):
        params = params_of(row, names)
        key = seed if seed is not None else f"trial {int(row['number'])}"
        latest[(label(params), key)] = (row, params)
    arms: dict[str, _Arm] = {}
    for (config, seed), (row, params) in latest.items():
        arm = arms.setdefault(config, _Arm(config, params))
        arm.trials.append(int(row["number"]))
        text = _text_bytes(row)
        if text is not None:
            arm.text.append(text)
        value = _float(row.get(metric))
        complete = row["outcome"] == outcomes.COMPLETE
        if value is not None and (complete or stopped_mode == "as-value"):
            arm.values[seed] = value
            base = _float(row.get(unigram)) if unigram else None
            if base is not None:
                arm.gaps[seed] = base - value
        if not complete:
            arm.stopped.append(Stopped(seed, str(row["outcome"]), int(row["number"])))
    return list(arms.values())


#: The trial column of each metric's unigram baseline.
UNIGRAM_COLUMN = rc.UNIGRAM_BASELINE


def _float(value: Any) -> float | None:
    value = plain_value(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _text_bytes(row: pd.Series) -> float | None:
    """The bytes of training text a trial read: recorded, else its tokens at its corpus' mean
    bytes per token (trials from before it was recorded)."""
    recorded = _float(row.get("train_bytes"))
    if recorded is not None:
        return recorded
    tokens, per = _float(row.get("tokens_seen")), _float(row.get("bytes_per_token"))
    return tokens * per if tokens is not None and per is not None else None


def effects(
    trials: pd.DataFrame,
    *,
    study: str,
    baseline: Mapping[str, Any],
    metric: str = "val_bpb",
    direction: str = "minimize",
    level: float = 0.05,
    stopped: str = "apart",
) -> Effects:
    """Each configuration against the one ``baseline`` names (see the module docstring).
    Every trial of every arm is counted: a seed that was stopped is a result (named with its
    outcome, its arm's share of them tested against the baseline's), never missing data."""
    if stopped not in STOPPED_MODES:
        raise SweepsError(f"--stopped must be one of {', '.join(STOPPED_MODES)}, got {stopped!r}")
    arms = _arms(trials, metric, stopped)
    if not arms:
        raise SweepsError(f"study {study!r} has no finished trial; nothing to compare yet")
    base_i = _matching(arms, baseline, study)
    base = arms[base_i]
    ascending = direction != "maximize"
    others = sorted(
        (a for i, a in enumerate(arms) if i != base_i),
        key=lambda a: (
            not a.values,
            (1 if ascending else -1)
            * (float(np.mean(list(a.values.values()))) if a.values else 0.0),
        ),
    )
    comparisons = [(arm, compare(arm.values, base.values)) for arm in others]
    adjusted = holm([c.p for _, c in comparisons])
    m = sum(1 for _, c in comparisons if not math.isnan(c.p))
    rows = [_effect_row("baseline", base.label, base)]
    for (arm, c), p_holm in zip(comparisons, adjusted, strict=True):
        changed = {
            k: v
            for k, v in arm.params.items()
            if k not in base.params or not _same(v, base.params[k])
        }
        changed.update({k: None for k in base.params if k not in arm.params})
        left_out = _left_out(arm, base, c)
        verdict, needed = _verdict(
            c, p_holm, len(arm.values), len(base.values), level, max(m, 1), direction, left_out
        )
        row = _effect_row(
            ",".join(changed),
            ",".join(str(v) for v in changed.values()),
            arm,
            c,
            p_holm,
            verdict,
            needed,
            _stopped_p(arm, base),
        )
        if verdict.startswith(("better", "worse")):
            verdict += _unigram_remark(row, rows[0])
            row = dataclasses.replace(row, verdict=verdict)
        rows.append(row)
    result_rows = tuple(rows)
    return Effects(
        study,
        metric,
        direction,
        level,
        dict(baseline),
        result_rows,
        tuple((a.label, _stopped_text(a.stopped)) for a in arms if not a.values),
        stopped,
        text_warning(trials),
    )


def _effect_row(
    factor: str,
    level_: str,
    arm: _Arm,
    c: Comparison | None = None,
    p_holm: float = math.nan,
    verdict: str = "",
    needed: int | None = None,
    stopped_p: float = math.nan,
) -> Effect:
    from scipy import stats

    values = np.array(list(arm.values.values()), dtype=float)
    seeds = sorted(arm.values, key=lambda s: (str(type(s)), s))
    gaps = np.array(list(arm.gaps.values()), dtype=float)
    gap = float(gaps.mean()) if len(gaps) else math.nan
    low = high = math.nan
    if len(gaps) >= 2:
        spread = gaps.std(ddof=1)
        if spread > 0:
            low, high = (
                float(x)
                for x in stats.t.interval(
                    CONFIDENCE, len(gaps) - 1, loc=gap, scale=spread / math.sqrt(len(gaps))
                )
            )
        else:
            low = high = gap
    return Effect(
        factor,
        level_,
        len(values),
        float(values.mean()) if len(values) else math.nan,
        float(values.std(ddof=1)) if len(values) > 1 else math.nan,
        tuple(seeds),
        c,
        p_holm,
        verdict,
        needed,
        tuple(sorted(arm.trials)),
        tuple(sorted(arm.stopped, key=lambda s: (str(type(s.seed)), s.seed))),
        stopped_p,
        gap,
        low,
        high,
        float(np.mean(arm.text)) if arm.text else math.nan,
    )


def _unigram_remark(row: Effect, base: Effect) -> str:
    """What a "better" or "worse" does not say by itself: that one side learned nothing from its
    context beyond its own unigram (its gap's interval reaches 0), so the difference is in the
    unigrams, i.e. in what a token is, not in what was learned."""
    flat = [
        name
        for name, e in (("this arm", row), ("the baseline", base))
        if not math.isnan(e.gap) and (e.gap <= 0 or (not math.isnan(e.gap_low) and e.gap_low <= 0))
    ]
    if not flat:
        return ""
    return (
        f"; but {' and '.join(flat)} did not beat {'their' if len(flat) > 1 else 'its'} own "
        "unigram (gap to unigram <= 0 within its interval): the difference is the unigram's, "
        "not learned from context"
    )


def _stopped_p(arm: _Arm, base: _Arm) -> float:
    """Fisher's exact test (``scipy.stats.fisher_exact``) of the arm's stopped seeds against the
    baseline's: is it stopped more (or less) often than the baseline? NaN when neither was."""
    from scipy import stats

    a, b = len(arm.stopped), len(base.stopped)
    if a == b == 0:
        return math.nan
    table = [[a, len(arm.trials) - a], [b, len(base.trials) - b]]
    return float(stats.fisher_exact(np.asarray(table)).pvalue)


def _left_out(arm: _Arm, base: _Arm, c: Comparison) -> str:
    """Which seeds the paired test left out, and why (stopped on a side, or not run there)."""
    if c.test != "paired t" or not c.unpaired:
        return ""
    why = []
    for seed in c.unpaired:
        here = {s.seed: s.outcome for s in arm.stopped}
        there = {s.seed: s.outcome for s in base.stopped}
        if seed in here:
            why.append(f"seed {seed}: {here[seed]} here")
        elif seed in there:
            why.append(f"seed {seed}: {there[seed]} in the baseline")
        else:
            side = "here" if seed not in arm.values else "in the baseline"
            why.append(f"seed {seed}: not run {side}")
    return "; ".join(why)


def _stopped_text(stopped: Sequence[Stopped]) -> str:
    """``unigram_collapse: seeds 0, 1``: what happened to a configuration's stopped seeds."""
    by: dict[str, list[str]] = {}
    for s in sorted(stopped, key=lambda s: (str(type(s.seed)), s.seed)):
        by.setdefault(s.outcome, []).append("?" if s.seed is None else str(s.seed))
    return "; ".join(f"{o}: seed{'s' if len(v) > 1 else ''} {', '.join(v)}" for o, v in by.items())


def text_warning(trials: pd.DataFrame) -> str:
    """When the trials' vocabularies differ (tokenizer, size) and they read unequal amounts of
    text: one line with each vocabulary's mean bytes of training text, and what to do (the
    effects table and the report say it beside their figures)."""
    from sweeps.spec.designs import VOCABULARY_FIELDS

    finished = _finished(trials)
    keys = [k for k in VOCABULARY_FIELDS if k in finished]
    text: dict[str, list[float]] = {}
    for _, row in finished.iterrows():
        value = _text_bytes(row)
        if value and keys:  # a trial that trained nothing read no text
            name = " ".join(
                f"{k}={plain_value(row[k])}" for k in keys if plain_value(row[k]) is not None
            )
            text.setdefault(name, []).append(value)
    means = {k: float(np.mean(v)) for k, v in text.items()}
    if len(means) < 2 or max(means.values()) <= UNEQUAL_TEXT * min(means.values()):
        return ""
    shown = ", ".join(f"{k}: {human_count(v)}B" for k, v in means.items())
    ratio = max(means.values()) / min(means.values())
    return (
        f"unequal text: the vocabularies trained on {ratio:.1f}x different amounts of "
        f"text ({shown}); a difference may be the text, not the vocabulary: compare at "
        "equal text with max_bytes (an [ablation] that varies the vocabulary does by "
        "default) or at equal compute with max_flops"
    )


def _verdict(
    c: Comparison,
    p_holm: float,
    n: int,
    n_base: int,
    level: float,
    m: int,
    direction: str,
    left_out: str = "",
) -> tuple[str, int | None]:
    """(plain verdict, seeds per arm that would resolve the measured difference)."""
    unpaired = ""
    if c.unpaired:
        shown = ", ".join(str(s) for s in c.unpaired)
        unpaired = (
            (
                f"; left out of the pairs: {left_out}"
                if left_out
                else f"; unpaired seeds {shown} left out"
            )
            if c.test == "paired t"
            else f"; too few shared seeds, compared unpaired (seeds {shown})"
        )
    if n == 0:
        return "no value to compare: every seed stopped (named in stopped)", None
    if c.test == "none":
        if c.n_pairs >= 2:
            return (
                f"cannot tell: the {c.n_pairs} paired differences are identical (no spread "
                f"to test against){unpaired}",
                None,
            )
        return (
            f"cannot tell: n = {n} here and {n_base} for the baseline; a test needs at "
            f"least 2 seeds on each side{unpaired}",
            None,
        )
    if p_holm < level:
        lower_is_better = direction == "minimize"
        better = (c.diff < 0) == lower_is_better
        return ("better" if better else "worse") + unpaired, None
    arm = min(n, n_base) if c.test == "Welch t" else c.n_pairs
    # Holm compares the smallest p with level / m: plan for that worst case.
    needed = seeds_needed(c.diff, c.spread, level / m, paired=c.test == "paired t")
    x = f"{abs(c.diff):.3g}"
    if needed is None:
        advice = (
            f"no practical number of seeds (over {MAX_SEEDS:,} per arm) would resolve "
            f"a difference of {x} at the measured spread"
        )
    else:
        advice = (
            f"about {needed:,} seeds per arm would resolve a difference of {x} at the "
            "measured spread"
        )
    return f"cannot tell apart with n = {arm}; {advice}{unpaired}", needed


# --- text ------------------------------------------------------------------------------------


def _num(value: float, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _stopped_cell(e: Effect) -> str:
    if not e.stopped:
        return "-"
    text = ", ".join(f"seed {s.seed}: {s.outcome}" for s in e.stopped)
    if e.comparison is not None and not math.isnan(e.stopped_p):
        text += f" (p {_p(e.stopped_p)} vs baseline)"
    return text


def _gap_cell(e: Effect) -> str:
    if math.isnan(e.gap):
        return "-"
    ci = "" if math.isnan(e.gap_low) else f" [{e.gap_low:+.3f}, {e.gap_high:+.3f}]"
    return f"{e.gap:+.3f}{ci}"


def table_rows(result: Effects) -> list[dict[str, str]]:
    """The effects table as text cells (terminal, Markdown and the report share it)."""
    pct = f"{CONFIDENCE:.0%}"
    out = []
    has_gap = any(not math.isnan(e.gap) for e in result.rows)
    has_text = any(not math.isnan(e.text_bytes) for e in result.rows)
    for e in result.rows:
        c = e.comparison
        sd = "" if math.isnan(e.sd) else f" ± {_num(e.sd)}"
        row = {
            "factor": e.factor,
            "level": e.level,
            "n": str(e.n),
            f"{result.metric} mean ± sd": f"{_num(e.mean)}{sd}",
            "stopped": _stopped_cell(e),
        }
        if has_gap:
            row[f"gap to unigram [{pct} CI]"] = _gap_cell(e)
        if has_text:
            row["text"] = "-" if math.isnan(e.text_bytes) else f"{human_count(e.text_bytes)}B"
        if c is None:
            row.update({f"diff [{pct} CI]": "-", "pairs": "-", "p (Holm)": "-", "verdict": "-"})
        else:
            ci = "" if math.isnan(c.low) else f" [{c.low:+.3f}, {c.high:+.3f}]"
            diff = "-" if math.isnan(c.diff) else f"{c.diff:+.3f}{ci}"
            row.update(
                {
                    f"diff [{pct} CI]": diff,
                    "pairs": str(c.n_pairs) if c.test == "paired t" else c.test,
                    "p (Holm)": _p(e.p_holm),
                    "verdict": e.verdict,
                }
            )
        out.append(row)
    return out


def markdown(result: Effects) -> str:
    """A GitHub Markdown table, then lines saying how it was computed."""
    rows = table_rows(result)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r[h].replace("|", "\\|") for h in head) + " |" for r in rows]
    lines.append("")
    lines += footer_lines(result)
    return "\n".join(lines) + "\n"


def footer_lines(result: Effects) -> list[str]:
    """How the table was computed (the number of tests Holm's correction counted), how stopped
    seeds were counted, what the gap is, and the unequal-text warning when it applies."""
    m = result.n_tests
    tests = f"across the {m} test{'s' if m != 1 else ''} run" if m else "(no test could run)"
    lines = [
        f"Differences are each level minus the baseline, paired by seed, with "
        f"{CONFIDENCE:.0%} t intervals; p-values from a paired t-test "
        f"(`scipy.stats.ttest_rel`), Holm-corrected {tests}; verdicts at level "
        f"{result.level:g} ({result.direction} {result.metric})."
    ]
    if result.stopped_mode == "apart":
        lines.append(
            "Stopped seeds are results, not missing data: each is named with its "
            "outcome, left out of the paired test, and each arm's share of them is "
            "tested against the baseline's (Fisher's exact test, "
            "`scipy.stats.fisher_exact`, uncorrected); `--stopped as-value` compares "
            "them on their last evaluation instead."
        )
    else:
        lines.append(
            "Stopped seeds are compared on their last evaluation (`--stopped "
            "as-value`): a value before the end of its budget."
        )
    if any(not math.isnan(e.gap) for e in result.rows):
        lines.append(
            f"Gap to unigram: the arm's own unigram baseline's {result.metric} minus "
            "its own (what it learned from context beyond the token frequencies), so "
            '"better" can be told from "the unigram got easier".'
        )
    if result.text_warning:
        lines.append(f"Warning: {result.text_warning}.")
    return lines


# --- from a database ---------------------------------------------------------------------------


def study_effects(
    storage: Any,
    name: str,
    *,
    baseline: str | None = None,
    metric: str | None = None,
    level: float = 0.05,
    stopped: str = "apart",
) -> Effects:
    """``effects`` of a stored study: the baseline is ``--baseline`` (``FIELD=VALUE,...``),
    else the ``[ablation]`` spec's baseline; the metric the first objective, else val_bpb."""
    if not 0.0 < level < 1.0:
        raise SweepsError(f"--level must be between 0 and 1, got {level}")
    wanted = parse_baseline(baseline) if baseline is not None else None
    data = results.load(storage, name)
    if wanted is None:
        wanted = spec_baseline(data.user_attrs.get(rc.STUDY_SPEC))
        if wanted is None:
            raise SweepsError(
                f"study {name!r} is not an [ablation] study; name its baseline "
                "with --baseline FIELD=VALUE, e.g. --baseline d_ff=256"
            )
    column, direction = metric_of(data, metric)
    return effects(
        data.trials,
        study=name,
        baseline=wanted,
        metric=column,
        direction=direction,
        level=level,
        stopped=stopped,
    )
