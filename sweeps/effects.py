"""Answers with error bars: replicates grouped by configuration, ablation effects with intervals,
and the ranking a confirmation study ends with.

- ``replicates``: trials that differ only in ``seed`` are one configuration; one row per
  configuration (n, mean, sd, min, max, the seeds, the trials) for any study, sampled or enqueued.
- ``effects``: per factor and level of an ablation (or against any ``--baseline``), n, mean and
  sd, the difference to the baseline paired by seed with its 95 % interval, a paired t-test's
  p-value, Holm-corrected across the study's comparisons, and a plain verdict. A seed present on
  one side only is left out of the pairs and named; with fewer than two pairs the comparison
  falls back to Welch's unpaired test, and says so.
- ``rank``: configurations by mean with intervals, and whether the best is distinguishable from
  the runner-up (``sweeps confirm``).

Every test, interval and power figure comes from ``scipy.stats``; only Holm's step-down (an
ordering over scipy's p-values) is written here. Measured on this project: seed spreads of 0.016
to 0.029 bits per byte at d_model 64, so most single-seed differences are noise; this module is
what says which are not.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lm import outcomes
from lm.errors import SweepsError
from sweeps import results

#: The confidence of every interval shown (two-sided).
CONFIDENCE = 0.95
#: The power ``seeds_needed`` plans for: the usual 80 %.
POWER = 0.8
#: Above this many seeds per arm the advice is "more than", not a number.
MAX_SEEDS = 10_000
SEED = "seed"


# --- replicates ------------------------------------------------------------------------------


def config_params(trials: pd.DataFrame) -> list[str]:
    """The parameter columns that tell configurations apart: every ``param_*`` but the seed."""
    return [c for c in trials.columns if c.startswith("param_") and c != f"param_{SEED}"]


def plain_value(value: Any) -> Any:
    """A parameter value as JSON would hold it (numpy scalars unwrapped, NaN as None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 256.0 from a float column is the enqueued 256
    return value


def params_of(row: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """The set parameters of one trial row, by name (``param_`` dropped; unset ones left out,
    as a conditional parameter is)."""
    out = {}
    for c in columns:
        v = plain_value(row[c])
        if v is not None:
            out[c.removeprefix("param_")] = v
    return out


def label(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(no parameters)"


def seeds_of(trials: pd.DataFrame) -> pd.Series:
    """Each trial's seed: the trained config's, else the sampled parameter."""
    seeds = trials[SEED] if SEED in trials else pd.Series([None] * len(trials), trials.index)
    if f"param_{SEED}" in trials:
        seeds = seeds.where(seeds.notna(), trials[f"param_{SEED}"])
    return seeds.map(plain_value)


def scored(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The trials a comparison may use: ``complete``, with a finite ``metric``."""
    if metric not in trials:
        raise SweepsError(f"metric {metric!r} is not a column of the study's trials; use one of "
                          "val_bpb, val_loss, peak_mem_bytes, wall_s, ...")
    values = pd.to_numeric(trials[metric], errors="coerce")
    keep = (trials["outcome"] == outcomes.COMPLETE) & np.isfinite(values.astype(float))
    return trials[keep]


def replicates(trials: pd.DataFrame, metric: str = "val_bpb",
               direction: str = "minimize") -> pd.DataFrame:
    """One row per configuration among the complete trials with a ``metric``: config (a label),
    params (dict), n, mean, sd (NaN with one trial), min, max, seeds and trials (lists), best
    first by ``direction``."""
    columns = ["config", "params", "n", "mean", "sd", "min", "max", "seeds", "trials"]
    done = scored(trials, metric)
    names = config_params(done)
    groups: dict[str, dict[str, Any]] = {}
    for (_, row), seed in zip(done.iterrows(), seeds_of(done), strict=True):
        params = params_of(row, names)
        key = json.dumps(params, sort_keys=True, default=str)
        group = groups.setdefault(key, {"params": params, "values": [], "seeds": [],
                                        "trials": []})
        group["values"].append(float(row[metric]))
        group["seeds"].append(seed)
        group["trials"].append(int(row["number"]))
    rows = []
    for g in groups.values():
        order = sorted(range(len(g["seeds"])), key=lambda i: (str(type(g["seeds"][i])),
                                                             g["seeds"][i]))
        g["seeds"] = [g["seeds"][i] for i in order]
        g["trials"] = [g["trials"][i] for i in order]
        values = np.asarray(g["values"])
        rows.append({"config": label(g["params"]), "params": g["params"], "n": len(values),
                     "mean": values.mean(), "sd": values.std(ddof=1) if len(values) > 1
                     else math.nan, "min": values.min(), "max": values.max(),
                     "seeds": g["seeds"], "trials": g["trials"]})
    frame = pd.DataFrame(rows, columns=columns)
    ascending = direction != "maximize"
    return frame.sort_values("mean", ascending=ascending, kind="stable").reset_index(drop=True)


# --- one comparison ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One configuration against a reference, by seed: the difference (this minus reference),
    its interval and the raw p-value of the test named in ``test``."""

    n_pairs: int
    unpaired: tuple[Any, ...]  # seeds on one side only: left out of the paired test
    test: str  # "paired t", "Welch t" or "none"
    diff: float
    low: float
    high: float
    p: float
    spread: float  # sd of the paired differences (paired), else the pooled sd of the two arms

    def __post_init__(self) -> None:
        if self.test not in ("paired t", "Welch t", "none"):
            raise ValueError(f"test must be 'paired t', 'Welch t' or 'none', got {self.test!r}")
        if self.n_pairs < 0:
            raise ValueError(f"n_pairs must be >= 0, got {self.n_pairs}")
        if not (math.isnan(self.p) or 0.0 <= self.p <= 1.0):
            raise ValueError(f"p must be in [0, 1] or NaN, got {self.p}")


def compare(values: Mapping[Any, float], reference: Mapping[Any, float],
            confidence: float = CONFIDENCE) -> Comparison:
    """``values`` against ``reference``, each by seed. Two or more shared seeds: a paired t-test
    (``scipy.stats.ttest_rel``) on the shared seeds. Otherwise, with two or more on each side,
    Welch's test (``ttest_ind(equal_var=False)``). Otherwise no test (NaN p and interval)."""
    from scipy import stats

    shared = [s for s in values if s in reference]
    unpaired = tuple(sorted({s for s in [*values, *reference] if s not in shared}, key=str))
    a = np.array([values[s] for s in shared], dtype=float)
    b = np.array([reference[s] for s in shared], dtype=float)
    if len(shared) >= 2:
        d = a - b
        if np.ptp(d) == 0.0:
            # Identical differences: scipy's t is undefined (0/0); the interval is the point.
            p = 1.0 if d[0] == 0.0 else 0.0
            return Comparison(len(shared), unpaired, "paired t", float(d[0]), float(d[0]),
                              float(d[0]), p, 0.0)
        res = stats.ttest_rel(a, b)
        ci = res.confidence_interval(confidence_level=confidence)
        return Comparison(len(shared), unpaired, "paired t", float(d.mean()), float(ci.low),
                          float(ci.high), float(res.pvalue), float(d.std(ddof=1)))
    x = np.array(list(values.values()), dtype=float)
    y = np.array(list(reference.values()), dtype=float)
    diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    if len(x) >= 2 and len(y) >= 2 and (np.ptp(x) > 0 or np.ptp(y) > 0):
        res = stats.ttest_ind(x, y, equal_var=False)
        ci = res.confidence_interval(confidence_level=confidence)
        pooled = math.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2)
        return Comparison(len(shared), tuple(sorted(set(values) | set(reference), key=str)),
                          "Welch t", diff, float(ci.low), float(ci.high), float(res.pvalue),
                          pooled)
    return Comparison(len(shared), unpaired, "none", diff, math.nan, math.nan, math.nan,
                      math.nan)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (NaN passes through and does not count): the i-th smallest
    of m p-values becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(order)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def seeds_needed(diff: float, spread: float, alpha: float, *, paired: bool,
                 power: float = POWER) -> int | None:
    """The seeds per arm a two-sided t-test at ``alpha`` needs to detect ``diff`` with
    ``power``, at the measured ``spread`` (paired: sd of the differences; unpaired: the arms'
    sd): the noncentral t distribution (``scipy.stats.nct``). None above ``MAX_SEEDS``."""
    from scipy import stats

    if not (math.isfinite(diff) and math.isfinite(spread)) or diff == 0.0:
        return None
    if spread == 0.0:
        return 2
    effect = abs(diff) / spread
    for n in range(2, MAX_SEEDS + 1):
        df = n - 1 if paired else 2 * n - 2
        nc = effect * math.sqrt(n if paired else n / 2)
        crit = stats.t.ppf(1 - alpha / 2, df)
        if stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) >= power:
            return n
    return None


# --- effects ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """One row of the effects table: a level of a factor against the baseline."""

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

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if (self.factor == "baseline") != (self.comparison is None):
            raise ValueError("the baseline row, and only it, has no comparison")

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seeds"] = list(self.seeds)
        out["trials"] = list(self.trials)
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
    #: (label, what happened to them), so a level is never dropped from a table silently.
    not_compared: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.direction not in ("minimize", "maximize"):
            raise ValueError(f"direction must be minimize or maximize, got {self.direction!r}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level}")

    def frame(self) -> pd.DataFrame:
        rows = []
        for e in self.rows:
            c = e.comparison
            rows.append({"factor": e.factor, "level": e.level, "n": e.n, "mean": e.mean,
                         "sd": e.sd, "n_pairs": c.n_pairs if c else e.n,
                         "test": c.test if c else "", "diff": c.diff if c else 0.0,
                         "low": c.low if c else math.nan, "high": c.high if c else math.nan,
                         "p": c.p if c else math.nan, "p_holm": e.p_holm,
                         "unpaired": list(c.unpaired) if c else [], "verdict": e.verdict,
                         "seeds_needed": e.seeds_needed})
        return pd.DataFrame(rows)

    def as_dict(self) -> dict[str, Any]:
        return {"study": self.study, "metric": self.metric, "direction": self.direction,
                "level": self.level, "confidence": CONFIDENCE, "baseline": self.baseline,
                "rows": [_finite(e.as_dict()) for e in self.rows],
                "not_compared": [{"config": c, "trials": what} for c, what in self.not_compared]}


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
            raise SweepsError(f"--baseline {text!r}: write FIELD=VALUE[,FIELD=VALUE], "
                              "e.g. --baseline d_ff=256")
        try:
            value = json.loads(raw.strip())
        except ValueError:
            value = raw.strip()
        out[name.strip()] = plain_value(value)
    if not out:
        raise SweepsError("--baseline is empty; write FIELD=VALUE, e.g. --baseline d_ff=256")
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def spec_baseline(spec: Any) -> dict[str, Any] | None:
    """The baseline of an ``[ablation]`` study's stored spec (every varied field at its
    baseline value), else None."""
    from sweeps.spec import read_spec

    if not isinstance(spec, dict) or "ablation" not in spec:
        return None
    parsed = read_spec(spec, source="stored spec", check_paths=False)
    ablation = parsed.ablation
    # choices() lists the baseline value first.
    return {name: plain_value(ablation.choices(name)[0]) for name, _ in ablation.vary}


def _matching(reps: pd.DataFrame, baseline: Mapping[str, Any], study: str) -> int:
    hits = [i for i, params in enumerate(reps["params"])
            if all(k in params and _same(params[k], v) for k, v in baseline.items())]
    if len(hits) == 1:
        return hits[0]
    shown = ",".join(f"{k}={v}" for k, v in baseline.items())
    if not hits:
        known = {k for p in reps["params"] for k in p}
        missing = [k for k in baseline if k not in known]
        if missing:
            raise SweepsError(f"--baseline {shown}: study {study!r} has no parameter "
                              f"{missing[0]!r} (its parameters: {', '.join(sorted(known))})")
        raise SweepsError(f"--baseline {shown} matches no complete configuration of study "
                          f"{study!r}; `sweeps trials {study}` lists them")
    raise SweepsError(f"--baseline {shown} matches {len(hits)} configurations of study "
                      f"{study!r}; name more fields, e.g. {reps['config'].iloc[hits[0]]}")


def effects(trials: pd.DataFrame, *, study: str, baseline: Mapping[str, Any],
            metric: str = "val_bpb", direction: str = "minimize",
            level: float = 0.05) -> Effects:
    """Each configuration against the one ``baseline`` names (see the module docstring)."""
    reps = replicates(trials, metric, direction)
    if reps.empty:
        raise SweepsError(f"study {study!r} has no complete trial with a {metric}; nothing to "
                          "compare yet")
    base_i = _matching(reps, baseline, study)
    done = scored(trials, metric)
    by_config = _values_by_seed(done, metric)
    base = reps.iloc[base_i]
    base_params = base["params"]
    reference = by_config[label(base_params)]
    comparisons = []
    for i, rep in reps.iterrows():
        if i == base_i:
            continue
        comparisons.append((rep, compare(by_config[rep["config"]], reference)))
    adjusted = holm([c.p for _, c in comparisons])
    m = sum(1 for c in comparisons if not math.isnan(c[1].p))
    rows = [Effect("baseline", label(base_params), int(base["n"]), float(base["mean"]),
                   float(base["sd"]), tuple(base["seeds"]), trials=tuple(base["trials"]))]
    for (rep, c), p_holm in zip(comparisons, adjusted, strict=True):
        changed = {k: v for k, v in rep["params"].items()
                   if k not in base_params or not _same(v, base_params[k])}
        changed.update({k: None for k in base_params if k not in rep["params"]})
        verdict, needed = _verdict(c, p_holm, int(rep["n"]), int(base["n"]), level,
                                   max(m, 1), direction)
        rows.append(Effect(",".join(changed), ",".join(str(v) for v in changed.values()),
                           int(rep["n"]), float(rep["mean"]), float(rep["sd"]),
                           tuple(rep["seeds"]), c, p_holm, verdict, needed,
                           tuple(rep["trials"])))
    return Effects(study, metric, direction, level, dict(baseline), tuple(rows),
                   not_compared(trials, done))


def not_compared(trials: pd.DataFrame, done: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """The configurations of finished trials none of which is in ``done`` (the scored ones),
    each with its trials' outcomes and seeds: ``("lr=0.3", "unigram_collapse: seeds 0, 1")``."""
    names = config_params(trials)
    compared = {label(params_of(row, names)) for _, row in done.iterrows()}
    found: dict[str, dict[str, list[str]]] = {}
    finished = trials[trials["outcome"].notna() & (trials["state"] != "RUNNING")] \
        if "state" in trials else trials[trials["outcome"].notna()]
    for (_, row), seed in zip(finished.iterrows(), seeds_of(finished), strict=True):
        config = label(params_of(row, names))
        if config not in compared:
            found.setdefault(config, {}).setdefault(str(row["outcome"]), []).append(
                "?" if seed is None else str(seed))
    return tuple((config, "; ".join(f"{o}: seed{'s' if len(v) > 1 else ''} {', '.join(v)}"
                                    for o, v in by.items()))
                 for config, by in found.items())


def _values_by_seed(done: pd.DataFrame, metric: str) -> dict[str, dict[Any, float]]:
    """config label -> {seed: metric}; a seed run twice for one configuration counts once (the
    later trial: a rerun replaces what it repeats)."""
    names = config_params(done)
    out: dict[str, dict[Any, float]] = {}
    for (_, row), seed in zip(done.iterrows(), seeds_of(done), strict=True):
        key = seed if seed is not None else f"trial {int(row['number'])}"
        out.setdefault(label(params_of(row, names)), {})[key] = float(row[metric])
    return out


def _verdict(c: Comparison, p_holm: float, n: int, n_base: int, level: float, m: int,
             direction: str) -> tuple[str, int | None]:
    """(plain verdict, seeds per arm that would resolve the measured difference)."""
    unpaired = ""
    if c.unpaired:
        shown = ", ".join(str(s) for s in c.unpaired)
        unpaired = (f"; unpaired seeds {shown} left out" if c.test == "paired t"
                    else f"; too few shared seeds, compared unpaired (seeds {shown})")
    if c.test == "none":
        return (f"cannot tell: n = {n} here and {n_base} for the baseline; a test needs at "
                f"least 2 seeds on each side{unpaired}", None)
    if p_holm < level:
        lower_is_better = direction == "minimize"
        better = (c.diff < 0) == lower_is_better
        return ("better" if better else "worse") + unpaired, None
    arm = min(n, n_base) if c.test == "Welch t" else c.n_pairs
    # Holm compares the smallest p with level / m: plan for that worst case.
    needed = seeds_needed(c.diff, c.spread, level / m, paired=c.test == "paired t")
    x = f"{abs(c.diff):.3g}"
    if needed is None:
        advice = (f"no practical number of seeds (over {MAX_SEEDS:,} per arm) would resolve "
                  f"a difference of {x} at the measured spread")
    else:
        advice = f"about {needed:,} seeds per arm would resolve a difference of {x} at the " \
                 "measured spread"
    return f"cannot tell apart with n = {arm}; {advice}{unpaired}", needed


# --- text ------------------------------------------------------------------------------------


def _num(value: float, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def table_rows(result: Effects) -> list[dict[str, str]]:
    """The effects table as text cells (terminal, Markdown and the report share it)."""
    pct = f"{CONFIDENCE:.0%}"
    out = []
    for e in result.rows:
        c = e.comparison
        sd = "" if math.isnan(e.sd) else f" ± {_num(e.sd)}"
        row = {"factor": e.factor, "level": e.level,
               "n": str(e.n), f"{result.metric} mean ± sd": f"{_num(e.mean)}{sd}"}
        if c is None:
            row.update({f"diff [{pct} CI]": "-", "pairs": "-", "p (Holm)": "-", "verdict": "-"})
        else:
            ci = "" if math.isnan(c.low) else f" [{c.low:+.3f}, {c.high:+.3f}]"
            row.update({f"diff [{pct} CI]": f"{c.diff:+.3f}{ci}",
                        "pairs": str(c.n_pairs) if c.test == "paired t" else c.test,
                        "p (Holm)": _p(e.p_holm), "verdict": e.verdict})
        out.append(row)
    return out


def markdown(result: Effects) -> str:
    """A GitHub Markdown table, then one line saying how it was computed."""
    rows = table_rows(result)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r[h].replace("|", "\\|") for h in head) + " |" for r in rows]
    lines.append("")
    lines.append(f"Differences are each level minus the baseline, paired by seed, with "
                 f"{CONFIDENCE:.0%} t intervals; p-values from a paired t-test "
                 f"(`scipy.stats.ttest_rel`), Holm-corrected across the {len(rows) - 1} "
                 f"comparisons; verdicts at level {result.level:g} ({result.direction} "
                 f"{result.metric}).")
    lines += stopped_lines(result)
    return "\n".join(lines) + "\n"


def stopped_lines(result: Effects) -> list[str]:
    """What ``not_compared`` holds, as text: none of these trials has a value to compare."""
    if not result.not_compared:
        return []
    return ["", "Not compared (no complete trial, so no value at the end of its budget):", *(
        f"- {config}: {what}" for config, what in result.not_compared)]


# --- ranking (confirm) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranking:
    """Configurations by mean, each with its interval, and best against runner-up."""

    metric: str
    direction: str
    level: float
    rows: pd.DataFrame  # replicates() plus low, high (interval of the mean)
    comparison: Comparison | None  # runner-up minus best, by seed
    distinguishable: bool | None  # None: fewer than two configurations, or no test possible

    def sentence(self) -> str:
        if len(self.rows) < 2:
            return "only one configuration has results; nothing to rank against"
        best, second = self.rows.iloc[0], self.rows.iloc[1]
        c = self.comparison
        if c is None or c.test == "none":
            return (f"the best ({best['config']}) cannot be tested against the runner-up "
                    f"({second['config']}): fewer than 2 seeds on a side")
        verb = "is" if self.distinguishable else "is not"
        return (f"the best ({best['config']}, {best['mean']:.4f}) {verb} distinguishable from "
                f"the runner-up ({second['config']}, {second['mean']:.4f}) at level "
                f"{self.level:g}: difference {c.diff:+.4f} [{c.low:+.4f}, {c.high:+.4f}], "
                f"p = {c.p:.3g} ({c.test}, n = {c.n_pairs or len(best['seeds'])})")


def rank(trials: pd.DataFrame, *, metric: str = "val_bpb", direction: str = "minimize",
         level: float = 0.05) -> Ranking:
    """The configurations of ``trials`` by mean, with t intervals of each mean
    (``scipy.stats.t.interval``), and the best compared with the runner-up by seed."""
    from scipy import stats

    if not 0.0 < level < 1.0:
        raise SweepsError(f"--level must be between 0 and 1, got {level}")
    reps = replicates(trials, metric, direction)
    lows, highs = [], []
    for _, r in reps.iterrows():
        if r["n"] >= 2 and r["sd"] > 0:
            low, high = stats.t.interval(CONFIDENCE, r["n"] - 1, loc=r["mean"],
                                         scale=r["sd"] / math.sqrt(r["n"]))
        else:
            low = high = r["mean"] if r["n"] >= 2 else math.nan
        lows.append(float(low))
        highs.append(float(high))
    reps = reps.assign(low=lows, high=highs)
    if len(reps) < 2:
        return Ranking(metric, direction, level, reps, None, None)
    by_config = _values_by_seed(scored(trials, metric), metric)
    c = compare(by_config[reps["config"].iloc[1]], by_config[reps["config"].iloc[0]])
    decided = None if c.test == "none" else bool(c.p < level)
    return Ranking(metric, direction, level, reps, c, decided)


# --- from a database ---------------------------------------------------------------------------

#: Objective names whose trial column has another name.
_COLUMN = {"peak_mem": "peak_mem_bytes", "params": "params_total"}


def metric_of(data: Any, metric: str | None) -> tuple[str, str]:
    """(trial column, direction): ``metric``, else the study's first objective."""
    from sweeps.spec.values import METRICS

    names = [_COLUMN.get(o, o) for o in data.objectives]
    if metric is None:
        metric = names[0] if names and names[0] in data.trials else "val_bpb"
    metric = _COLUMN.get(metric, metric)
    if metric in names and len(data.directions) == len(names):
        return metric, data.directions[names.index(metric)]
    by_column = {_COLUMN.get(k, k): v for k, v in METRICS.items()}
    return metric, by_column.get(metric, "maximize" if metric == "accuracy" else "minimize")


def study_effects(storage: Any, name: str, *, baseline: str | None = None,
                  metric: str | None = None, level: float = 0.05) -> Effects:
    """``effects`` of a stored study: the baseline is ``--baseline`` (``FIELD=VALUE,...``),
    else the ``[ablation]`` spec's baseline; the metric the first objective, else val_bpb."""
    if not 0.0 < level < 1.0:
        raise SweepsError(f"--level must be between 0 and 1, got {level}")
    wanted = parse_baseline(baseline) if baseline is not None else None
    data = results.load(storage, name)
    if wanted is None:
        wanted = spec_baseline(data.user_attrs.get("spec"))
        if wanted is None:
            raise SweepsError(f"study {name!r} is not an [ablation] study; name its baseline "
                              "with --baseline FIELD=VALUE, e.g. --baseline d_ff=256")
    column, direction = metric_of(data, metric)
    return effects(data.trials, study=name, baseline=wanted, metric=column,
                   direction=direction, level=level)


def replicates_frame(storage: Any, study_name: str, metric: str = "val_bpb") -> pd.DataFrame:
    """One row per configuration of a stored study (``replicates``): n, mean, sd, min, max of
    ``metric``, the seeds and the trials."""
    data = results.load(storage, study_name)
    column, direction = metric_of(data, metric)
    return replicates(data.trials, column, direction)
