"""Benchmark: how much compute each search strategy needs to reach a good configuration.

Every strategy (the ``STRATEGIES`` table below: a sampler and a pruner) runs a real study through
``sweeps.workers.run_workers`` on the real ``history.stackexchange.com`` dump beside the project
(``../shared/data/stackexchange/history.Posts.xml``, prepared once into a temporary directory),
with the same search space, the same per-trial token budget, the same number of trials (twice
that for the halving strategies: see ``STRATEGIES``) and the same seeds, rep by rep (every
strategy of a rep runs before the next rep: a load that drifts
touches them alike). The space: lr over 1e-4 .. 3e-1 (log; the high end collapses or diverges),
d_model, n_layers, d_ff, batch_size and warmup; a BPE tokenizer of 1024 ids, built once, so no
trial builds a token cache; seq_len 32. Each trial trains 36,864 tokens (``--tokens``): small
models early in training, where the best ones are those that leave the unigram plateau first
(val_bpb from ~3.0, the unigram's, down to ~2.78). The project's own rules apply to every
strategy (memory, collapse, divergence: the default ``[limits]``); collapse is judged only after
200 optimizer steps, which only batch_size 4 reaches (288 steps; 8 and 16 run unjudged:
``under_trained``), and only once the learning rate summed over the steps reaches
``min_lr_sum`` (a low lr at batch_size 4 never does: it runs unjudged too); a very high lr at
batch_size 4 is then often told ``unigram_collapse`` (context-free at step 224).

Per strategy and rep, in the order trials ended (``datetime_complete``; trial number with one
worker), it accumulates:

- trial-seconds: each trial's ``wall_s`` (launch to end; 0 for a trial never launched). Wall
  seconds depend on the machine's load; read them only against the other rows of the same run.
- FLOPs: each trial's ``flops`` (training FLOPs of the tokens it actually trained): the same
  axis on any machine, whatever the load.
- the best val_bpb so far, of COMPLETE trials only (a pruned trial's value is at a lower
  fidelity; a collapsed or diverged one has none).

The reference is the unpruned TPE study of the same rep (``tpe``: 40 trials by default; it is
always run). ``gp``, Optuna's Gaussian-process sampler unpruned, is a second reference: another
model of the objective, measured against the first like every other strategy. For each strategy
it prints the fraction of the reference's trial-seconds (and FLOPs) spent when it first reached
the reference's best value (or "not reached", with the gap in bpb it ended at), its best value
within 10 %, 20 %, 40 % and 100 % of the reference's trial-seconds, and whether it met the
project's target: "reach the best value of an unpruned
40-trial TPE study with at most 40 % of its trial-seconds". Per rep, then the mean over reps.

Two workers by default (``--workers 2``), each trial on one thread of its own core
(``SWEEPS_NUM_THREADS=1``), all from one fork server: measured on a 2-core Xeon, a full-length
trial spends 1.4-5 s in its training loop and 2-6 s from launch to end (median ~3.5-4 s) with
two running at once, a 20-trial study takes 36-44 s, and a full run (3 reps x 9 strategies x 40
trials) about 25 minutes. One worker would double that. With two, TPE proposes while a trial
still runs (constant liar), the two workers' draws interleave and the median pruner compares
against whatever has finished, so a rerun is close to, not exactly, the same; ``--workers 1``
makes every study reproducible (trial order = number order; training is deterministic).
Seeds: rep ``r`` uses sampler seed ``1000 + r`` and training seed ``r`` in every strategy. TPE's
first 10 trials are random sampling with that seed, so the strategies of a rep start from the
same configurations (with two workers, up to the interleaving) and differ by what they do next.
For the reference's own row, "reached" is when it found its best.

Three strategies use the WSD schedule (warm-up, stable, decay) instead of cosine:
``tpe+halving+wsd`` is successive halving with its rungs read as they are (at the stable rate),
``tpe+halving+cd`` the same whose rungs are read after a cooldown branched from them (``read =
"cooldown"``): the pair separates the read from the schedule; and ``tpe-wsd-reads`` is unpruned
TPE with a cooldown read at every rung (its reads cost compute and are charged; nothing is
stopped): the reference's twin, so that what a cooldown read predicts is measured over every
trial, as a cosine mid-run read is over the reference's. After the tables, Spearman's rank
correlation between the value read at each rung and the end val_bpb, over each study's completed
trials (in a halving study only the promoted ones, a narrower range that says less).

The halving strategies use the token-based pruners (``min_tokens``, ``reduction_factor``):
rungs at min_tokens x 3**k below max_tokens, min_tokens = max_tokens / 9 (``--first-rung 9``:
two rungs; ``--first-rung 3``: one, at a third) rounded to a multiple
of 512 tokens, and the evaluations every min_tokens. A checkout without them skips those rows
(listed) unless ``--strategies`` names them, which is then an error.

    .venv/bin/python tests/bench/bench_search.py [--reps 3] [--trials 40] [--workers 2]
        [--tokens 36864] [--strategies random,tpe,tpe+median,...] [--quick] [--json OUT]
        [--keep DIR]

``--quick``: one rep of 8 trials per strategy (a smoke run of about a minute). ``--keep DIR``:
work in ``DIR`` (new) and keep it, so that ``bench_verdicts.py`` can rerun the trials a verdict
stopped (``--storage sqlite:///DIR/bench.db``, studies ``search-<strategy>-rep<r>``), and
``--reread DIR`` (with the run's ``--tokens``) prints its rank correlations (and the schedule
pairs below) again.

Where the trials took cooldown reads, the correlation line also gives the same trials' loss as
it was at the rung (under WSD, at the stable rate) and a 95 % bootstrap interval
(``scipy.stats.bootstrap``, paired) of the difference: the read against no read, on the same
trials, which two studies' correlations cannot separate from what each sampler drew. Last, the
schedule alone: the reference's and ``tpe-wsd-reads``' trials with the same parameters in a rep
(the seeded startup draws, and later ones where TPE agreed) are one configuration and seed
trained under cosine and under WSD; their paired end values (Wilcoxon's signed-rank test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from scipy import stats

from lm import outcomes
from lm.corpus import prepare
from lm.errors import SweepsError
from lm.tokens import load_tokens
from sweeps import fidelity
from sweeps import storage as st
from sweeps import workers as wk
from sweeps.launchers import make_launcher
from sweeps.spec import StudySpec, read_spec

#: Stands for the first rung's tokens in a pruner of ``STRATEGIES`` (set from ``--tokens``).
FIRST_RUNG = "<first rung>"
#: The strategies: (name, sampler, pruner table as a spec's ``[study] pruner`` would give it,
#: trials as a multiple of ``--trials``). The halving strategies stop most trials at a ninth or
#: a third of their tokens, so they get twice the trials: their curves then run on to about the
#: reference's trial-seconds instead of stopping at a third of it.
STRATEGIES: tuple[tuple[str, str, dict[str, Any], int], ...] = (
    ("random", "random", {"name": "none"}, 1),
    ("tpe", "tpe", {"name": "none"}, 1),
    # Optuna's Gaussian-process sampler, unpruned: a second reference, the other model family.
    ("gp", "gp", {"name": "none"}, 1),
    ("tpe+median", "tpe", {"name": "median"}, 1),
    (
        "tpe+halving",
        "tpe",
        {"name": "successive_halving", "min_tokens": FIRST_RUNG, "reduction_factor": 3},
        2,
    ),
    (
        "tpe+hyperband",
        "tpe",
        {"name": "hyperband", "min_tokens": FIRST_RUNG, "reduction_factor": 3},
        2,
    ),
    # Halving under WSD with its rungs read as they are: the schedule without the read.
    (
        "tpe+halving+wsd",
        "tpe",
        {"name": "successive_halving", "min_tokens": FIRST_RUNG, "reduction_factor": 3},
        2,
    ),
    # Halving whose rungs are read after a cooldown branched from them (WSD schedule).
    (
        "tpe+halving+cd",
        "tpe",
        {
            "name": "successive_halving",
            "min_tokens": FIRST_RUNG,
            "reduction_factor": 3,
            "read": "cooldown",
        },
        2,
    ),
    # Unpruned TPE under WSD with a cooldown read at every rung: the reference's twin, for the
    # rank correlation of a cooldown read with the end over every trial (no range restriction).
    ("tpe-wsd-reads", "tpe", {"name": "none"}, 1),
)
#: [fixed] keys a strategy adds: the WSD schedule, and reads placed at the rungs (``RUNGS``).
RUNGS = "<rungs>"
FIXED_OF: dict[str, dict[str, Any]] = {
    "tpe+halving+wsd": {"lr_schedule": "wsd"},
    "tpe+halving+cd": {"lr_schedule": "wsd"},
    "tpe-wsd-reads": {"lr_schedule": "wsd", "cooldown_reads": RUNGS},
}
#: The strategy every other is measured against: unpruned TPE.
REFERENCE = "tpe"
#: The project's target: the reference's best value within this share of its trial-seconds.
TARGET_SHARE = 0.40
#: Shares of the reference's trial-seconds at which each strategy's best value is shown.
SHARES = (0.10, 0.20, 0.40, 1.00)
SEED_BASE = 1000
TOKENS = 36_864  # 9 x 4096: 2-4 s of training per trial on one thread here
#: The largest micro-batch (16 x 32 tokens): rungs and evaluations are multiples of it, so
#: every trial evaluates exactly at them.
STEP_QUANTUM = 512
VOCAB = 1024
DATA = Path(__file__).resolve().parents[3] / "shared/data/stackexchange"
POSTS = "history.Posts.xml"

FIXED: dict[str, Any] = {
    "device": "cpu",
    "tokenizer": "bpe",
    "vocab_size": VOCAB,
    "n_heads": 4,
    "seq_len": 32,
    "eval_tokens": 2048,
    "sample_tokens": 0,
}
SPACE: dict[str, dict[str, Any]] = {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-1, "log": True},
    "d_model": {"choices": [32, 48, 64]},
    "n_layers": {"type": "int", "low": 1, "high": 2},
    "d_ff": {"choices": [64, 128, 256]},
    "batch_size": {"choices": [4, 8, 16]},
    "warmup_tokens": {"choices": [0, 2048, 8192]},
}


@dataclass(frozen=True)
class Budget:
    """Tokens per trial, the first rung and the evaluation period (a ninth of the budget, in
    every strategy: the rungs are multiples of it)."""

    max_tokens: int
    min_tokens: int
    eval_every: int

    def rungs(self) -> list[int]:
        """The halving rungs of this budget (reduction factor 3)."""
        out, rung = [], self.min_tokens
        while rung < self.max_tokens:
            out.append(rung)
            rung *= 3
        return out

    @classmethod
    def of(cls, tokens: int, divisor: int = 9) -> Budget:
        def whole(share: float) -> int:
            return max(STEP_QUANTUM, round(share / STEP_QUANTUM) * STEP_QUANTUM)

        every = whole(tokens / 9)
        return cls(tokens, max(every, round(whole(tokens / divisor) / every) * every), every)


def pruner_table(pruner: dict[str, Any], budget: Budget) -> dict[str, Any]:
    return {k: budget.min_tokens if v == FIRST_RUNG else v for k, v in pruner.items()}


def spec_for(
    strategy: tuple[str, str, dict[str, Any], int],
    rep: int,
    corpus: Path,
    trials: int,
    budget: Budget,
) -> StudySpec:
    name, sampler, pruner, factor = strategy
    trials *= factor
    return read_spec(
        {
            "study": {
                "name": study_name(name, rep),
                "sampler": sampler,
                "seed": SEED_BASE + rep,
                "pruner": pruner_table(pruner, budget),
                "n_trials": trials,
            },
            "corpus": {"dir": str(corpus)},
            "fixed": {
                **FIXED,
                "seed": rep,
                "max_tokens": budget.max_tokens,
                "eval_every_tokens": budget.eval_every,
                **{
                    k: budget.rungs() if v == RUNGS else v
                    for k, v in FIXED_OF.get(name, {}).items()
                },
            },
            "space": SPACE,
            "limits": {"memory_budget": "4GiB"},
        }
    )


def choose(wanted: str | None, corpus: Path, budget: Budget) -> list[tuple[str, str, dict, int]]:
    """The strategies to run, the reference first; those this checkout's spec refuses are
    skipped (said) by default, an error when ``--strategies`` names them."""
    names = [s[0] for s in STRATEGIES]
    asked = names if wanted is None else [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in asked if n not in names]
    if unknown:
        sys.exit(f"unknown strategy {', '.join(unknown)}; choose from {', '.join(names)}")
    if REFERENCE not in asked:
        print(f"(adding {REFERENCE}: every strategy is measured against it)")
    chosen = []
    for strategy in STRATEGIES:
        if strategy[0] != REFERENCE and strategy[0] not in asked:
            continue
        try:
            spec_for(strategy, 0, corpus, 2, budget)
        except SweepsError as exc:
            if wanted is not None:
                sys.exit(f"strategy {strategy[0]}: this checkout refuses its spec: {exc}")
            print(f"skipped {strategy[0]}: this checkout refuses its spec ({exc})")
            continue
        chosen.append(strategy)
    return sorted(chosen, key=lambda s: s[0] != REFERENCE)


def run_study(
    spec: StudySpec, url: str, work: Path, launcher: Any, workers: int
) -> tuple[list[optuna.trial.FrozenTrial], float]:
    """One study to its end: its finished trials and its wall-clock seconds."""
    storage = st.open_storage(url, heartbeat_interval=10, grace_period=60)
    wk.create_or_resume(spec, storage)
    study = wk.load_for_workers(spec, storage)
    started = time.perf_counter()
    results = wk.run_workers(
        spec,
        storage,
        study,
        work / spec.name,
        wk.RunOptions(n_workers=workers, poll_s=0.05),
        launcher=launcher,
    )
    wall = time.perf_counter() - started
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"study {spec.name}: {errors[0]}")
    trials = [t for t in study.get_trials(deepcopy=False) if t.state in wk.FINISHED]
    storage.engine.dispose()
    return trials, wall


def records(
    trials: list[optuna.trial.FrozenTrial], strategy: str, rep: int, workers: int
) -> list[dict[str, Any]]:
    """One record per trial, in the order the compute was spent (see the module docstring)."""

    def order(t: optuna.trial.FrozenTrial) -> tuple[float, int]:
        done = t.datetime_complete.timestamp() if t.datetime_complete else float("inf")
        return (0.0 if workers == 1 else done, t.number)

    out = []
    for t in sorted(trials, key=order):
        a = t.user_attrs
        outcome = a.get("outcome") or t.state.name.lower()
        out.append(
            {
                "strategy": strategy,
                "rep": rep,
                "number": t.number,
                "outcome": outcome,
                "wall_s": float(a.get("wall_s") or 0.0),
                "train_s": a.get("train_s"),
                "flops": float(a.get("flops") or 0.0),
                "val_bpb": a.get("val_bpb"),
                "tokens_seen": a.get("tokens_seen"),
                "reason": a.get("reason"),
                "params": t.params,
                "completed": t.datetime_complete.isoformat() if t.datetime_complete else None,
            }
        )
    return out


def metrics_rows(trial: optuna.trial.FrozenTrial) -> list[dict[str, Any]] | None:
    """The trial's ``metrics.jsonl`` rows (None when its run directory has none)."""
    path = Path(trial.user_attrs.get("run_dir", "")) / "metrics.jsonl"
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rung_read(rows: list[dict[str, Any]], rung: int, *, cooldown: bool = True) -> float | None:
    """A trial's val_bpb read at ``rung`` from its ``metrics.jsonl`` ``rows``: its cooldown read
    there when it took one (and ``cooldown``), else the loss as it was (interpolated in
    log-tokens between the evaluations either side, as the halving pruner reads it)."""
    reads = [r for r in rows if r.get("read") == "cooldown" and r["tokens"] >= rung]
    if reads and cooldown:
        return float(reads[0]["val_bpb"])
    plain = [r for r in rows if "read" not in r]
    for before, row in zip([None, *plain], plain, strict=False):
        if row["tokens"] >= rung:
            return fidelity.at_tokens(before, row, rung, "val_bpb")
    return None


@dataclass(frozen=True)
class RankCorrelation:
    """Spearman's rho between the value read at a rung and the end val_bpb, over ``n`` trials
    that completed; where the trials took cooldown reads, also the rho of the same trials' loss
    as it was at the rung (under WSD: at the stable rate) and a 95 % bootstrap interval of the
    difference (paired: the same trials resampled for both)."""

    rung: int
    rho: float
    n: int
    plain: float | None = None
    diff_ci: tuple[float, float] | None = None

    def text(self) -> str:
        out = f"rung {self.rung:,}: {self.rho:+.2f}"
        if self.plain is not None and self.diff_ci is not None:
            lo, hi = self.diff_ci
            out += (
                f" (as it was {self.plain:+.2f}; difference {self.rho - self.plain:+.2f}, "
                f"95% CI {lo:+.2f} .. {hi:+.2f})"
            )
        return out + f" (n {self.n})"


def rank_correlations(
    trials: list[optuna.trial.FrozenTrial], budget: Budget
) -> list[RankCorrelation]:
    """Per rung, what the value read there predicts of the end, over the trials that completed
    their budget (``RankCorrelation``)."""
    out = []
    done = [
        (rows, t.user_attrs["val_bpb"])
        for t in trials
        if t.user_attrs.get("outcome") == outcomes.COMPLETE
        and isinstance(t.user_attrs.get("val_bpb"), float)
        and (rows := metrics_rows(t)) is not None
    ]
    for rung in budget.rungs():
        triples = [
            (v, p, end)
            for rows, end in done
            if (v := rung_read(rows, rung)) is not None
            and (p := rung_read(rows, rung, cooldown=False)) is not None
        ]
        if len(triples) < 3:
            continue
        read, plain, end = ([x[i] for x in triples] for i in range(3))
        rho = float(stats.spearmanr(read, end).statistic)
        if read == plain:  # no cooldown reads: nothing to compare
            out.append(RankCorrelation(rung, rho, len(triples)))
            continue

        def gain(a: Any, b: Any, c: Any) -> float:
            return float(stats.spearmanr(a, c).statistic - stats.spearmanr(b, c).statistic)

        ci = stats.bootstrap(
            (read, plain, end),
            gain,
            paired=True,
            vectorized=False,
            n_resamples=2000,
            random_state=0,
        ).confidence_interval
        out.append(
            RankCorrelation(
                rung,
                rho,
                len(triples),
                float(stats.spearmanr(plain, end).statistic),
                (float(ci.low), float(ci.high)),
            )
        )
    return out


def curve(recs: list[dict[str, Any]]) -> list[tuple[float, float, float]]:
    """(cumulative trial-seconds, cumulative FLOPs, best complete val_bpb so far) after each
    trial; the best is inf until a trial completes."""
    out, seconds, flops, best = [], 0.0, 0.0, float("inf")
    for r in recs:
        seconds += r["wall_s"]
        flops += r["flops"]
        if r["outcome"] == outcomes.COMPLETE and isinstance(r["val_bpb"], (int, float)):
            best = min(best, float(r["val_bpb"]))
        out.append((seconds, flops, best))
    return out


def compare(recs: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, Any]:
    """One strategy's rep against the reference's rep."""
    mine, theirs = curve(recs), curve(ref)
    ref_s, ref_flops, ref_best = theirs[-1] if theirs else (0.0, 0.0, float("inf"))
    final = mine[-1] if mine else (0.0, 0.0, float("inf"))
    reached = next(((s, f) for s, f, b in mine if b <= ref_best), None)
    out: dict[str, Any] = {
        "best": final[2],
        "seconds": final[0],
        "flops": final[1],
        "ref_best": ref_best,
        "ref_seconds": ref_s,
        "ref_flops": ref_flops,
        "reached_s": None if reached is None or not ref_s else reached[0] / ref_s,
        "reached_flops": None if reached is None or not ref_flops else reached[1] / ref_flops,
        "gap": final[2] - ref_best,
        "at": [
            min((b for s, _, b in mine if s <= share * ref_s), default=float("inf"))
            for share in SHARES
        ],
        "outcomes": Counter(r["outcome"] for r in recs),
        "full_s": [r["wall_s"] for r in recs if r["outcome"] == outcomes.COMPLETE],
    }
    out["met"] = out["reached_s"] is not None and out["reached_s"] <= TARGET_SHARE
    return out


def fmt_bpb(value: float) -> str:
    return f"{value:.4f}" if value != float("inf") else "-"


def fmt_reached(c: dict[str, Any]) -> str:
    if c["reached_s"] is None:
        return f"not reached (+{c['gap']:.4f})" if c["gap"] != float("inf") else "not reached"
    return f"{c['reached_s']:.0%} s / {c['reached_flops']:.0%} FLOPs"


def print_rep(rep: int, rows: dict[str, dict[str, Any]], walls: dict[str, float]) -> None:
    ref = rows[REFERENCE]
    print(
        f"\nrep {rep} (sampler seed {SEED_BASE + rep}, training seed {rep}): reference "
        f"{REFERENCE} best {fmt_bpb(ref['ref_best'])} bpb, {ref['ref_seconds']:.1f} "
        f"trial-s, {ref['ref_flops']:.3g} FLOPs"
    )
    shares = " ".join(f"{s:>7.0%}" for s in SHARES)
    print(
        f"  {'strategy':<14} {'best':>7} {'trial-s':>8} {'FLOPs':>9} {'study wall':>10}  "
        f"{'reached the reference at':<28} best at {shares}   target"
    )
    for name, c in rows.items():
        at = " ".join(f"{fmt_bpb(b):>7}" for b in c["at"])
        print(
            f"  {name:<14} {fmt_bpb(c['best']):>7} {c['seconds']:>8.1f} {c['flops']:>9.3g} "
            f"{walls[name]:>9.1f}s  {fmt_reached(c):<28}         {at}   "
            f"{'met' if c['met'] else 'no'}"
        )


def mean(values: list[float], *, strict: bool = False) -> float:
    """The mean of the finite values (``strict``: inf when any is inf, i.e. missing)."""
    finite = [v for v in values if v != float("inf")]
    if not finite or (strict and len(finite) < len(values)):
        return float("inf")
    return statistics.fmean(finite)


def print_summary(by_rep: list[dict[str, dict[str, Any]]]) -> None:
    """The mean over reps of every strategy, and the target's verdict per rep."""
    n = len(by_rep)
    print(
        f"\nmean over {n} rep(s) ('best at': '-' unless every rep had a complete trial by "
        "then; 'reached': over the reps that reached the reference); target: the "
        f"reference's best within {TARGET_SHARE:.0%} of its trial-seconds, per rep"
    )
    shares = " ".join(f"{s:>7.0%}" for s in SHARES)
    print(
        f"  {'strategy':<14} {'best':>7} {'trial-s':>8} {'FLOPs':>9} {'s/full trial':>12}  "
        f"{'reached (reps) at':<30} best at {shares}   target met   outcomes (all reps)"
    )
    for name in by_rep[0]:
        cs = [rows[name] for rows in by_rep]
        hit = [c for c in cs if c["reached_s"] is not None]
        reached = (
            (
                f"{len(hit)}/{n}: {mean([c['reached_s'] for c in hit]):.0%} s / "
                f"{mean([c['reached_flops'] for c in hit]):.0%} FLOPs"
            )
            if hit
            else f"0/{n} (gap +{mean([c['gap'] for c in cs]):.4f})"
        )
        at = " ".join(
            f"{fmt_bpb(mean([c['at'][i] for c in cs], strict=True)):>7}" for i in range(len(SHARES))
        )
        full = [s for c in cs for s in c["full_s"]]
        per_trial = f"{statistics.median(full):.2f}s" if full else "-"
        met = "".join("Y" if c["met"] else "n" for c in cs)
        counts = sum((c["outcomes"] for c in cs), Counter())
        shown = ", ".join(f"{o} {counts[o]}" for o in outcomes.ENDINGS if counts[o])
        print(
            f"  {name:<14} {fmt_bpb(mean([c['best'] for c in cs])):>7} "
            f"{mean([c['seconds'] for c in cs]):>8.1f} {mean([c['flops'] for c in cs]):>9.3g} "
            f"{per_trial:>12}  {reached:<30}         {at}   {met:<10}   {shown}"
        )


def print_correlations(corr: dict[str, list[list[RankCorrelation]]]) -> None:
    """What a rung read predicts: Spearman's rho between each rung's value and the end, over
    the trials that completed (in a halving study only the promoted ones: a narrower range).
    Under cooldown reads, beside it the same trials' loss as it was at the rung."""
    print(
        "\nrank correlation of the value read at a rung with the end val_bpb (Spearman's rho, "
        "completed trials; one line per rep)"
    )
    for name, reps in corr.items():
        read = (
            "cooldown"
            if any(c.plain is not None for rows in reps for c in rows)
            else f"{FIXED_OF.get(name, {}).get('lr_schedule', 'cosine')}, as it is"
        )
        for rep, rows in enumerate(reps):
            cells = ", ".join(c.text() for c in rows) or "-"
            print(f"  {name:<14} rep {rep} [{read}] {cells}")


def print_schedule_pairs(recs: list[dict[str, Any]]) -> None:
    """The schedule alone: trials of the reference (cosine) and of its WSD twin
    (``tpe-wsd-reads``, whose reads do not change how a trial ends) with the same parameters in
    the same rep (the seeded startup draws, and TPE's where they agree) are the same
    configuration and seed trained under the two schedules. Their end val_bpb, paired
    (Wilcoxon's signed-rank test)."""
    twin = "tpe-wsd-reads"

    def key(r: dict[str, Any]) -> str:
        return json.dumps([r["rep"], r["params"]], sort_keys=True)

    cosine = {
        key(r): r for r in recs if r["strategy"] == REFERENCE and r["outcome"] == outcomes.COMPLETE
    }
    diffs = [
        r["val_bpb"] - cosine[key(r)]["val_bpb"]
        for r in recs
        if r["strategy"] == twin and r["outcome"] == outcomes.COMPLETE and key(r) in cosine
    ]
    if len(diffs) < 6:
        return
    test = stats.wilcoxon(diffs)
    print(
        f"\nthe same configuration and seed under WSD and under cosine ({twin} against "
        f"{REFERENCE}, {len(diffs)} pairs): WSD ends lower in {sum(d < 0 for d in diffs)}; "
        f"median difference {statistics.median(diffs):+.4f} bpb (range {min(diffs):+.4f} .. "
        f"{max(diffs):+.4f}); Wilcoxon p = {test.pvalue:.2g}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--trials", type=int, default=None, help="trials per study (default 40)")
    parser.add_argument("--workers", type=int, default=2, help="trials at once (default 2)")
    parser.add_argument("--tokens", type=int, default=TOKENS, help="training tokens per trial")
    parser.add_argument(
        "--strategies",
        default=None,
        help="comma-separated names (default: every one this checkout runs)",
    )
    parser.add_argument(
        "--first-rung",
        type=int,
        default=9,
        help="the halving strategies' first rung: max_tokens / this (default 9)",
    )
    parser.add_argument("--quick", action="store_true", help="one rep of 8 trials")
    parser.add_argument("--json", type=Path, default=None, help="write every trial record here")
    parser.add_argument(
        "--reread",
        type=Path,
        default=None,
        help="run nothing: print the rank correlations of the studies a run "
        "with --keep kept in this directory (give its --tokens)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="work in this new directory and keep it (the studies' database "
        "bench.db and run directories, for bench_verdicts)",
    )
    args = parser.parse_args()
    args.reps = args.reps or (1 if args.quick else 3)
    args.trials = args.trials or (8 if args.quick else 40)
    if args.reps < 1 or args.trials < 1 or args.workers < 1:
        parser.error("--reps, --trials and --workers must be at least 1")
    if args.first_rung < 2:
        parser.error("--first-rung must be at least 2 (a rung before the end)")
    if args.tokens < 2 * STEP_QUANTUM:
        parser.error(f"--tokens must be at least {2 * STEP_QUANTUM}")
    return args


def prepare_data(work: Path) -> Path:
    """The corpus in ``work`` and its token cache, built once, outside every timing."""
    source = DATA / POSTS
    if not source.is_file():
        sys.exit(
            f"{source} is missing: this benchmark reads the real history.stackexchange.com "
            "dump beside the repository (../shared/data/stackexchange)"
        )
    corpus = work / "corpus"
    manifest = prepare(corpus, sources=[str(source)])
    cache = load_tokens(corpus, "bpe", VOCAB)
    print(
        f"corpus: {source} -> {manifest['train_bytes']:,} training bytes, "
        f"{len(cache.train):,} training tokens (BPE {VOCAB})"
    )
    return corpus


def study_name(strategy: str, rep: int) -> str:
    return f"search-{strategy.replace('+', '-')}-rep{rep}"


def reread(kept: Path, budget: Budget) -> None:
    """The rank correlations of a kept run's studies (``--reread``), from its database."""
    storage = st.open_storage(f"sqlite:///{kept.resolve() / 'bench.db'}")
    names = set(optuna.get_all_study_names(storage))
    corr: dict[str, list[list[RankCorrelation]]] = {}
    recs: list[dict[str, Any]] = []
    for strategy, *_ in STRATEGIES:
        rep = 0
        while study_name(strategy, rep) in names:
            study = optuna.load_study(study_name=study_name(strategy, rep), storage=storage)
            trials = [t for t in study.get_trials(deepcopy=False) if t.state in wk.FINISHED]
            corr.setdefault(strategy, []).append(rank_correlations(trials, budget))
            recs += records(trials, strategy, rep, workers=2)
            rep += 1
    if not corr:
        sys.exit(f"{kept}: no study of this benchmark in {kept / 'bench.db'}")
    print_correlations(corr)
    print_schedule_pairs(recs)


def main() -> None:
    args = parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.reread is not None:
        reread(args.reread, Budget.of(args.tokens, args.first_rung))
        return
    os.environ.setdefault("SWEEPS_NUM_THREADS", "1")
    budget = Budget.of(args.tokens, args.first_rung)
    all_records: list[dict[str, Any]] = []
    by_rep: list[dict[str, dict[str, Any]]] = []
    corr: dict[str, list[list[RankCorrelation]]] = {s[0]: [] for s in STRATEGIES}
    started = time.perf_counter()
    if args.keep is not None:
        args.keep.mkdir(parents=True)  # a new directory: its studies must not resume old ones
    with (
        contextlib.nullcontext(str(args.keep))
        if args.keep is not None
        else tempfile.TemporaryDirectory(prefix="sweeps-bench-search-")
    ) as tmp:
        work = Path(tmp).resolve()
        corpus = prepare_data(work)
        chosen = choose(args.strategies, corpus, budget)
        print(
            f"{len(chosen)} strategies x {args.reps} rep(s) x {args.trials} trials of "
            f"{budget.max_tokens:,} tokens (evaluated every {budget.eval_every:,}; first rung "
            f"{budget.min_tokens:,}), {args.workers} worker(s) of "
            f"{os.environ['SWEEPS_NUM_THREADS']} thread(s), {os.cpu_count()} cores"
        )
        launcher = make_launcher("fork")  # one fork server for every study
        try:
            for rep in range(args.reps):
                recs, walls = {}, {}
                for strategy in chosen:
                    spec = spec_for(strategy, rep, corpus, args.trials, budget)
                    trials, walls[strategy[0]] = run_study(
                        spec, f"sqlite:///{work / 'bench.db'}", work, launcher, args.workers
                    )
                    recs[strategy[0]] = records(trials, strategy[0], rep, args.workers)
                    all_records += recs[strategy[0]]
                    corr[strategy[0]].append(rank_correlations(trials, budget))
                rows = {name: compare(r, recs[REFERENCE]) for name, r in recs.items()}
                print_rep(rep, rows, walls)
                by_rep.append(rows)
        finally:
            with contextlib.suppress(Exception):
                launcher.close()
    print_summary(by_rep)
    print_correlations(corr)
    print_schedule_pairs(all_records)
    print(f"\ntotal wall {time.perf_counter() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "space": SPACE,
                    "fixed": FIXED,
                    "records": all_records,
                },
                indent=1,
            )
        )
        print(f"records: {args.json}")


if __name__ == "__main__":
    main()
